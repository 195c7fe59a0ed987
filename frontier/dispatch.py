"""Dispatch: from due hosts to fetch tasks on the bus.

Mercator's front queues: a host whose timer (frontier.hosts) expired waits in a ready
heap ordered by the priority of its head, so higher-priority work goes out first when
fetch capacity is short, and breadth-first order holds within a priority. Hosts whose
next URL is a refresh wait in a heap of their own, and the refresh budget
(:func:`frontier.policy.take_refresh`) shares the slots between the two kinds.

:meth:`Dispatcher.dispatch` does not wait on the store: it moves due hosts to the ready
heaps and starts each ready host's dispatch as a task of its own (at most
:data:`~frontier.state.DISPATCH_TASKS` at once), counting it in the outstanding
requests before it starts. The page budget (``crawl.max_pages``) and the stall
watchdog (:meth:`Dispatcher.check_stall`) live here too.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable

from common.messages import FetchTask, Reason, TaskKind, Topic, UrlStatus
from common.politeness import task_route
from common.scope import limits
from frontier.control import Operator
from frontier.hosts import HostTable
from frontier.policy import (
    first_sitemap_fetch,
    is_refresh,
    path_blocked,
    politeness_delay,
    refresh_priority,
    sitemap_files_refusal,
    take_refresh,
)
from frontier.scope import SeedRegistry
from frontier.state import DISPATCH_TASKS, HEAD_SIZE, Context, HostSlot, KeyGroup

log = logging.getLogger(__name__)

DISPATCH_RETRY = 1.0  # seconds before a host whose dispatch failed is tried again


class Dispatcher:
    """The ready heaps, the dispatch tasks and the count of outstanding requests."""

    def __init__(self, ctx: Context, hosts: HostTable, operator: Operator,
                 seed_roots: SeedRegistry, recover: Callable[[], Awaitable[None]]) -> None:
        self.ctx = ctx
        self.hosts = hosts
        self.operator = operator
        self.seed_roots = seed_roots
        self._recover = recover  # the stall watchdog's recovery (frontier.ownership)
        self.max_outstanding = max(1, ctx.settings.fetcher.concurrency * 2)
        self.ready: list[tuple[int, int, str]] = []  # hosts whose next URL is new
        self.ready_refresh: list[tuple[int, int, str]] = []  # ... is a refresh
        self._seq = itertools.count()  # ties within a priority: the longest waiting
        # slots given while both kinds waited, and how many of them to refreshes
        self._contended = self._contended_refreshes = 0
        self.outstanding = 0  # requests in flight plus dispatches in progress
        self.dispatching = 0  # dispatch tasks started and not finished
        self.tasks: set[asyncio.Task[None]] = set()
        self.budget_spent = False
        self._stall_since: float | None = None  # first check that saw a stall, if any
        self._recovering = False

    # ------------------------------------------------------------------ ready heaps

    def push_ready(self, host: str, slot: HostSlot) -> None:
        """Put a ready host in the ready heap of its next URL's kind (new or refresh),
        ordered by that URL's priority."""
        refreshing = slot.refreshing()
        if slot.head:
            prio = slot.head[0].priority
        else:  # its head is read at dispatch: the level its queued rows are likely at
            prio = refresh_priority(self.ctx.settings) if refreshing else 0
        heap = self.ready_refresh if refreshing else self.ready
        heapq.heappush(heap, (prio, next(self._seq), host))

    def _live_top(self, heap: list[tuple[int, int, str]]) -> bool:
        """Drop entries of hosts no longer ready from the top of ``heap``; True when a
        ready host is left on top."""
        while heap:
            slot = self.hosts.slots.get(heap[0][2])
            if slot is not None and slot.ready:
                return True
            heapq.heappop(heap)
        return False

    def pop_ready(self) -> str | None:
        """The next ready host to dispatch. With hosts of both kinds ready, the refresh
        budget (:func:`frontier.policy.take_refresh`, ``refresh.share``) decides which
        kind gets the slot, counted over the slots given while both waited (the count
        starts again whenever only one kind waits); otherwise the kind that waits takes
        it. Within a kind, the best priority first, then the longest waiting."""
        new, old = self._live_top(self.ready), self._live_top(self.ready_refresh)
        if new and old:
            refresh = take_refresh(self._contended_refreshes, self._contended,
                                   self.ctx.settings.refresh.share)
            self._contended += 1
            self._contended_refreshes += refresh
        else:
            self._contended = self._contended_refreshes = 0
            if not (new or old):
                return None
            refresh = old
        return heapq.heappop(self.ready_refresh if refresh else self.ready)[2]

    def may_start(self) -> bool:
        """Room for one more dispatch: fetch capacity, dispatch tasks and page budget."""
        if self.outstanding >= self.max_outstanding or self.dispatching >= DISPATCH_TASKS:
            return False
        cap = self.ctx.settings.crawl.max_pages
        return not (cap and self.ctx.counters.dispatched + self.dispatching >= cap
                    and self.dispatching)

    def idle(self) -> bool:
        """Nothing queued that can ever become due in this run, and nothing in flight."""
        return (not self.hosts.timer and not self.ready and not self.ready_refresh
                and self.outstanding == 0 and not self.hosts.keys.waiting_keys)

    def request_over(self) -> None:
        """A request this instance sent is over: its unit of fetch capacity is free."""
        self.outstanding = max(0, self.outstanding - 1)

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, now: float) -> None:
        """Move due hosts to the ready heap and start the dispatch of ready hosts, best
        priority first, while there is room. Does not wait: each dispatch is a task."""
        if self.operator.paused:
            return
        hosts = self.hosts
        while hosts.timer and hosts.timer[0][0] <= now:
            at, _, host = heapq.heappop(hosts.timer)
            slot = hosts.slots.get(host)
            if slot is None or slot.wake_at != at:
                continue
            slot.wake_at = None
            rest_until = slot.rest_until()
            if rest_until > now:
                hosts.schedule(host, slot, rest_until)
                continue
            slot.ready = True
            if slot.due_since is None:
                slot.due_since = now
            self.push_ready(host, slot)
        while (self.ready or self.ready_refresh) and self.may_start():
            if self._budget_exhausted():
                return
            picked = self.pop_ready()
            if picked is None:
                break
            host, slot = picked, hosts.slots[picked]
            if not hosts.owns(host):
                slot.ready = False
                slot.due_since = None
                continue
            # slot.ready stays set until the task holds the host: nothing schedules the
            # host meanwhile. The task counts as outstanding from now on, so capacity is
            # never overcommitted while tasks wait for their hosts.
            self.outstanding += 1
            self.dispatching += 1
            task = asyncio.create_task(self._dispatch_one(host, slot),
                                       name=f"frontier-dispatch:{host}")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _dispatch_one(self, host: str, slot: HostSlot) -> None:
        """One ready host's dispatch, under its lock; gives back the outstanding unit
        taken for it unless a request went out."""
        hosts, settings = self.hosts, self.ctx.settings
        dispatched = False
        key: str | None = None  # the politeness key, other than the host (see KeyGroup)
        group: KeyGroup | None = None
        try:
            async with hosts.gate.shared(), hosts.locks.hold(host):
                if hosts.slots.get(host) is not slot or not slot.ready:
                    return  # dropped by an ownership change or the page budget meanwhile
                slot.ready = False
                if not hosts.owns(host):
                    return
                if self.operator.paused:
                    slot.ready = True
                    self.push_ready(host, slot)
                    return
                now = self.ctx.clock()
                rest_until = slot.rest_until()
                if rest_until > now:  # a result or an operator moved the timer meanwhile
                    hosts.schedule(host, slot, rest_until)
                    return
                if slot.in_flight >= settings.politeness.max_in_flight_per_host:
                    return  # the next result schedules the host again
                if hosts.keys.mode != "host":
                    key = await hosts.keys.key_of(host, slot)
                    group = hosts.keys.groups[key]
                    now = self.ctx.clock()
                    if group.in_flight >= settings.politeness.max_in_flight_per_host:
                        # the key's next free place goes to the first host waiting
                        hosts.keys.wait(key, host)
                        return
                    if group.next_allowed_at > now:
                        hosts.schedule(host, slot, group.next_allowed_at)
                        return
                    group.reserved += 1
                try:
                    # a store or bus call that never answers must not hold the host (and
                    # a unit of fetch capacity) for ever
                    limit = settings.crawl.stall_seconds / 2 or None
                    async with asyncio.timeout(limit):
                        dispatched = await self._dispatch_host(host, slot, now, key)
                except Exception as exc:  # a store or bus failure must not stop dispatching
                    log.warning("frontier: dispatching host %s failed (%r); trying again "
                                "in %g s", host, exc, DISPATCH_RETRY)
                    if hosts.slots.get(host) is slot:
                        hosts.schedule(host, slot, self.ctx.clock() + DISPATCH_RETRY)
                finally:
                    if group is not None:
                        group.reserved -= 1
        finally:
            slot.due_since = None
            self.dispatching -= 1
            if not dispatched:
                self.outstanding = max(0, self.outstanding - 1)
            if key is not None:
                hosts.wake_waiting(key)
            self.ctx.wake.set()

    def _budget_exhausted(self) -> bool:
        cap = self.ctx.settings.crawl.max_pages
        if cap and self.ctx.counters.dispatched >= cap:
            if not self.budget_spent:
                log.info("page budget of %d reached; no more dispatches this run", cap)
            self.budget_spent = True
            self.ready.clear()
            self.ready_refresh.clear()
            self.hosts.unschedule_all()
            self.hosts.keys.stop_waiting()  # nobody waits for a place any more
            return True
        return False

    async def _dispatch_host(self, host: str, slot: HostSlot, now: float,
                             key: str | None = None) -> bool:
        """Send the host's next URL to the fetchers, or close, reschedule or forget the
        host. True when a request went out: the outstanding unit taken for this
        dispatch is then that request's. The caller holds the host's lock and, with a
        politeness ``key`` other than the host, a place of the key's group."""
        ctx, hosts, store = self.ctx, self.hosts, self.ctx.store
        state = await hosts.settle(host, slot)
        cap = ctx.rules.page_cap(host, state)
        if state.page_count + slot.in_flight >= cap or state.blocked:
            if slot.in_flight == 0:
                await self._close_host(host, slot, Reason.BLOCKED if state.blocked
                                       else Reason.HOST_CAP)
            return False
        if not slot.head:
            # rows in flight here are still QUEUED in the store: read past them
            flying = slot.flying_urls()
            due = await store.due_urls(host, now, HEAD_SIZE + len(flying))
            slot.head.extend(r for r in due if r.url not in flying)
        if not slot.head:
            if slot.flying:
                return False  # the next result schedules the host again
            nxt = await store.next_due_time(host)
            if nxt is not None:
                hosts.schedule(host, slot, nxt)
            elif slot.in_flight == 0:
                del hosts.slots[host]  # idle: its row is in the store
            return False
        row = slot.head.popleft()
        # the operator's patterns and scope may have changed since the row was queued
        refused: Reason | None = None
        detail = row.detail
        blocked_paths, scope = self.operator.blocked_paths, self.operator.scope
        spent = sitemap_files_refusal(row, state, ctx.settings.sitemaps.max_files_per_host)
        if spent is not None:
            refused, detail = spent
        elif blocked_paths and path_blocked(row.url, blocked_paths):
            refused = Reason.BLOCKED
        elif limits(scope) and not (row.depth == 0 and row.hops == 0):  # not a seed
            try:
                why = await self.seed_roots.verdict(row.url, host, scope)
            except BaseException:
                slot.head.appendleft(row)
                raise
            if why is not None:
                refused, detail = Reason.OUT_OF_SCOPE, f"out of scope: {why}"
        if refused is not None:
            before = row.detail
            row.status, row.reason, row.detail = UrlStatus.REJECTED, refused, detail
            try:
                await store.put_url(row)
            except BaseException:
                row.status, row.reason, row.detail = UrlStatus.QUEUED, None, before
                slot.head.appendleft(row)
                raise
            ctx.counters.rejected[refused.value] += 1
            ctx.metrics.count_rejected(refused, 1)
            hosts.schedule(host, slot, now)
            return False
        if first_sitemap_fetch(row):  # written with the result (or a lease renewal)
            state.sitemap_files += 1
        # In flight in memory only: the store keeps the row QUEUED until the result
        # writes its outcome (one write per page, not two). Should this process die, the
        # row is simply queued again; a late result of this task finds no task of its
        # id here and counts as stale (frontier.results).
        row.status = UrlStatus.IN_FLIGHT
        row.attempts += 1
        task_id = uuid.uuid4().hex
        slot.tasks.add(task_id)
        slot.flying[task_id] = row
        # The longest this request can run: robots.txt and the page (each bounded by
        # the total timeout) and the rest between them.
        delay = politeness_delay(state, ctx.settings.politeness, ctx.delay_overrides)
        span = (2 * ctx.settings.fetcher.total_timeout + delay
                + ctx.settings.politeness.max_crawl_delay)
        maybe_out = False  # whether the task may have reached the bus
        try:
            if not ctx.embedded:
                # a later owner waits out the stored lease (a period of requests, not
                # one: written about once every half span while the host is crawled)
                await hosts.renew_lease(host, slot, now, span)
            task = FetchTask(task_id=task_id, url=row.url, host=host, depth=row.depth,
                             priority=row.priority, attempt=row.attempts, hops=row.hops,
                             etag=row.etag, last_modified=row.last_modified,
                             previous_fetch_at=row.last_fetch_at,
                             previous_record=row.record, delay=delay, issued_at=now,
                             kind=row.kind or TaskKind.PAGE,
                             source=row.source if row.kind is TaskKind.SITEMAP else None,
                             politeness_key=key)
            if key is not None:
                # counted before the publish: its result may arrive before it returns
                hosts.keys.add_task(key, task_id)
            # with ip keying the task goes by its address, so that one fetcher (the
            # consumer of the address's partition) holds the address's gate whichever
            # frontier owns the host; otherwise by the host, on the host's partition
            maybe_out = True
            await ctx.bus.publish(Topic.FETCH, task_route(host, key, hosts.keys.mode), task)
        except BaseException:
            # The task may have gone out or not. Its id is forgotten, so a late result
            # of it is a stale one, and the row goes back to the head; with nothing in
            # flight here the host waits as long as the request could run.
            slot.tasks.discard(task_id)
            slot.flying.pop(task_id, None)
            if maybe_out:
                slot.foreign_lease = max(slot.foreign_lease, now + span)
            if key is not None:
                hosts.keys.forget_task(task_id)
                if maybe_out:
                    group = hosts.keys.groups[key]  # it rests as the host does
                    group.next_allowed_at = max(group.next_allowed_at, now + span)
            row.status = UrlStatus.QUEUED
            row.attempts -= 1
            slot.head.appendleft(row)
            raise
        ctx.counters.dispatched += 1
        if is_refresh(row):
            ctx.counters.dispatched_refresh += 1
            ctx.metrics.dispatched.labels("refresh").inc()
        else:
            ctx.counters.dispatched_new += 1
            ctx.metrics.dispatched.labels("new").inc()
        if not slot.head:
            slot.refresh_next = False  # the next head read from the store says
        if slot.in_flight < ctx.settings.politeness.max_in_flight_per_host:
            hosts.schedule(host, slot, now)
        return True

    async def _close_host(self, host: str, slot: HostSlot, reason: Reason) -> None:
        """Reject every queued URL of a host that reached its cap or was blocked (called
        by the dispatch, after :meth:`HostTable.settle`)."""
        ctx, store = self.ctx, self.ctx.store
        if reason is Reason.HOST_CAP and not slot.state.capped:
            slot.state.capped = True
            await store.put_host(slot.state)
        pending = list(slot.head)
        slot.head.clear()
        while True:
            rows = pending or await store.urls_with_status(UrlStatus.QUEUED, 500, host)
            pending = []
            if not rows:
                break
            for r in rows:
                r.status = UrlStatus.REJECTED
                r.reason = reason
            await store.put_urls(rows)
            ctx.counters.rejected[reason.value] += len(rows)
            ctx.metrics.count_rejected(reason, len(rows))
        del self.hosts.slots[host]

    # ------------------------------------------------------------------ stall watchdog

    def oldest_due(self, now: float | None = None) -> float:
        """Seconds the oldest due host has waited without a request going out, counted
        from when its timer moved it to the ready heap until its dispatch is over (0
        when none waits). O(hosts in memory)."""
        now = self.ctx.clock() if now is None else now
        since = [s.due_since for s in self.hosts.slots.values() if s.due_since is not None]
        return max(0.0, now - min(since)) if since else 0.0

    def _actual_outstanding(self) -> int:
        """Requests the hosts have in flight plus dispatches in progress: at least the
        true count (a dispatch that has just sent its request counts twice until it
        ends), so a counter above it has leaked."""
        return sum(s.in_flight for s in self.hosts.slots.values()) + self.dispatching

    async def check_stall(self) -> bool:
        """The watchdog (called by the run loop about once a second): set the
        oldest-due gauge and, when a due host has waited ``crawl.stall_seconds``
        although there is room to dispatch it (or the outstanding count is above the
        requests the hosts have in flight and the dispatches in progress: leaked
        capacity) and nothing explains it (paused, page budget spent), log the state
        and recover: re-count the outstanding requests, rebuild the timer, and
        reschedule every owned host with queued URLs from the store. True when it
        recovered."""
        now = self.ctx.clock()
        age = self.oldest_due(now)
        self.ctx.metrics.oldest_due.set(age)
        limit = self.ctx.settings.crawl.stall_seconds
        if not limit or self.operator.paused or self.budget_spent or self._recovering:
            self._stall_since = None
            return False
        actual = self._actual_outstanding()
        room = (self.outstanding < self.max_outstanding
                and self.dispatching < DISPATCH_TASKS)
        drift = self.outstanding > actual  # leaked: capacity counted that nothing uses
        if not (drift or (age > limit and room)):
            self._stall_since = None
            return False
        if self._stall_since is None:  # a count can disagree for a moment; wait
            self._stall_since = now
        if drift and age <= limit and now - self._stall_since <= limit:
            return False
        self._stall_since = None
        log.warning("frontier: stalled (oldest due host waiting %.0f s, outstanding %d, "
                    "in flight and dispatching %d); recovering. State: %s",
                    age, self.outstanding, actual, self.describe())
        self.ctx.metrics.stalls.inc()
        self._recovering = True
        try:
            async with self.hosts.gate.exclusive():
                # no dispatch is in progress now (those waiting for the gate are
                # counted, and give their unit back: their slot is no longer ready);
                # every slot's ready flag and timer entry are rebuilt from the slot
                self.outstanding = self._actual_outstanding()
                self.ready.clear()
                self.ready_refresh.clear()
                self.hosts.unschedule_all()
                for host, slot in self.hosts.slots.items():
                    self.hosts.schedule(host, slot, slot.state.next_allowed_at)
            await self._recover()
        except Exception as exc:  # the next check tries again
            log.warning("frontier: recovering from a stall failed: %r", exc)
        finally:
            self._recovering = False
        return True

    def describe(self) -> str:
        """The in-memory scheduling state, for diagnostics."""
        hosts, now = self.hosts, self.ctx.clock()
        return (f"owned={'all' if hosts.owned is None else sorted(hosts.owned)} "
                f"outstanding={self.outstanding} dispatching={self.dispatching} "
                f"timer={len(hosts.timer)} "
                f"ready={len(self.ready)}+{len(self.ready_refresh)} refreshing "
                f"hosts: {hosts.describe(now)}")
