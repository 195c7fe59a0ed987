"""Ownership: which hosts this frontier answers for, and making their rows consistent
when it takes them over.

- :meth:`Ownership.assign`: the bus moved partitions (cluster mode); hosts no longer
  owned are forgotten, the ones newly owned recovered.
- :meth:`Ownership.recover`: after a stop, crash or owner change, URLs whose fetch may
  have been lost are queued again, their hosts rest, stored pages not yet parsed are
  handed to the parser again, and every owned host with queued URLs is scheduled.
- refreshes of owned hosts: stored pages whose refresh time has come are queued again,
  at start, at a takeover, and every ``refresh.check_interval`` while the crawl runs.

Ownership changes hold the ownership gate exclusively: they wait for every handler and
dispatch in progress and keep new ones out until they are done.
"""

from __future__ import annotations

import asyncio
import logging

from common.messages import Topic, UrlStatus
from common.politeness import politeness_key
from common.ports import HostState, UrlState
from frontier.control import Operator
from frontier.dispatch import Dispatcher
from frontier.hosts import HostTable
from frontier.policy import (
    due_buckets,
    politeness_delay,
    refresh_at,
    refresh_priority,
    refreshed,
    replay_result,
)
from frontier.state import Context

log = logging.getLogger(__name__)


class Ownership:
    """Takes hosts over (assign, recover) and queues their due refreshes."""

    def __init__(self, ctx: Context, hosts: HostTable, dispatcher: Dispatcher,
                 operator: Operator) -> None:
        self.ctx = ctx
        self.hosts = hosts
        self.dispatcher = dispatcher
        self.operator = operator
        self.next_refresh_check: float | None = None
        self.refresh_task: asyncio.Task[None] | None = None

    async def assign(self, partitions: frozenset[int]) -> None:
        """The bus moved partitions (cluster mode): forget hosts no longer owned and
        recover the ones newly owned. Requests this instance dispatched are still
        tracked, so a revoke followed by the same assignment loses nothing."""
        log.info("frontier assigned partitions %s", sorted(partitions))
        async with self.hosts.gate.exclusive():
            self.hosts.owned = frozenset(partitions)
            # rows kept for the hosts owned until now may have another writer meanwhile
            self.ctx.store.forget_cached()
            if not partitions:
                # a revocation: dispatch nothing until the next assignment, which may
                # give back the same partitions with their requests still in flight
                return
            gone = self.hosts.drop_unowned()
            self.dispatcher.outstanding = max(0, self.dispatcher.outstanding - gone)
        await self.recover()

    async def recover(self, *, replay: bool = True) -> None:
        """Make the store consistent after a stop, crash or owner change, then schedule
        the owned hosts.

        A dispatch leaves its row QUEUED in the store (frontier.dispatch), so a request
        in flight when its frontier stopped or died needs no repair: its row is queued
        and fetched again. Its host must still rest: in cluster mode a fetcher may
        still be working on the old task, so the host waits out the lease its old
        owner stored (frontier.hosts); in embedded mode the old process and its
        requests are gone, so at start every host with queued rows (a resumed crawl)
        rests a full delay from now. IN_FLIGHT rows (written by earlier versions, which
        marked a row at dispatch) that this instance did not dispatch go back to
        QUEUED, their hosts resting the same way. FETCHED
        rows (stored but not yet parsed or deduplicated) are handed to the parser again
        (unless ``replay`` is False: the watchdog's recovery, see
        :meth:`frontier.dispatch.Dispatcher.check_stall`).
        """
        ctx, hosts, store = self.ctx, self.hosts, self.ctx.store
        now = ctx.clock()
        await self.operator.refresh()
        async with hosts.gate.exclusive():
            rows = [r for r in await store.urls_with_status(UrlStatus.IN_FLIGHT,
                                                            10_000_000)
                    if hosts.owns(r.host) and not hosts.dispatched_here(r.host)]
            if rows:
                for r in rows:
                    r.status = UrlStatus.QUEUED
                await store.put_urls(rows)
                for host in {r.host for r in rows}:
                    slot = await hosts.slot(host)
                    await hosts.settle(host, slot)
                    rest = now + politeness_delay(slot.state, ctx.settings.politeness,
                                                  ctx.delay_overrides)
                    if ctx.embedded:
                        slot.state.lease_until = 0.0
                        slot.foreign_lease = 0.0
                    slot.state.next_allowed_at = max(slot.state.next_allowed_at, rest)
                    await store.put_host(slot.state)
                    if hosts.keys.mode == "domain":  # its siblings rest with it
                        hosts.keys.join(host, slot, politeness_key(host, "domain"))
                ctx.counters.refetched += len(rows)
            if replay:
                await self._queue_refreshes(now)
            # embedded mode's start: the rows queued are an earlier run's
            resumed = ctx.embedded and replay
            for host in await store.hosts_with_status(UrlStatus.QUEUED):
                if hosts.owns(host):
                    slot = await hosts.slot(host)
                    if resumed and slot.in_flight == 0:
                        # a request of the earlier run may have been in flight at its end
                        slot.state.next_allowed_at = max(
                            slot.state.next_allowed_at,
                            now + politeness_delay(slot.state, ctx.settings.politeness,
                                                   ctx.delay_overrides))
                        if hosts.keys.mode == "domain":  # its siblings rest with it
                            hosts.keys.join(host, slot, politeness_key(host, "domain"))
                    hosts.schedule(host, slot, slot.state.next_allowed_at)
        if not replay:
            ctx.wake.set()
            return
        fetched = [r for r in await store.urls_with_status(UrlStatus.FETCHED, 1_000_000)
                   if hosts.owns(r.host)]
        for r in fetched:
            await ctx.bus.publish(Topic.FETCHED, r.host, replay_result(r))
        ctx.wake.set()

    # ------------------------------------------------------------------ refreshes

    async def _queue_refreshes(self, now: float) -> None:
        """Queue again the stored pages of owned hosts whose refresh time has come (see
        :func:`frontier.policy.refresh_at`); each is fetched with its validators. Run
        when the frontier starts or takes over hosts (under the ownership gate), and
        every ``refresh.check_interval`` while it runs (:meth:`check_refreshes`)."""
        if self.ctx.settings.crawl.recrawl_interval <= 0:
            return
        await self._refresh_owned(now, lock=False)

    async def _refresh_owned(self, now: float, *, lock: bool) -> int:
        """Queue the due refreshes of every owned host and note what is due when;
        ``lock``: each host under the ownership gate (shared) and its own lock, for a
        look while the crawl runs (at start and takeover the caller holds the gate)."""
        hosts = self.hosts
        times: list[float | None] = []
        queued = 0
        for host in await self.ctx.store.hosts_with_status(UrlStatus.DONE):
            if not hosts.owns(host):
                continue
            if not lock:
                queued += await self._refresh_host(host, now, times)
                continue
            async with hosts.gate.shared(), hosts.locks.hold(host):
                if hosts.owns(host):
                    queued += await self._refresh_host(host, now, times)
        self._note_due(times, queued, now)
        return queued

    async def check_refreshes(self, now: float | None = None) -> int:
        """Queue the stored pages whose refresh time has come while the crawl runs, each
        host under its lock (so no handler or dispatch of that host interleaves), and
        wake the hosts. Returns how many were queued."""
        if self.ctx.settings.crawl.recrawl_interval <= 0 or self.dispatcher.budget_spent:
            return 0
        now = self.ctx.clock() if now is None else now
        queued = await self._refresh_owned(now, lock=True)
        self.ctx.counters.refresh_checks += 1
        if queued:
            self.ctx.wake.set()
        return queued

    async def _refresh_host(self, host: str, now: float, times: list[float | None]) -> int:
        """Queue the due stored pages of one host; the refresh times of the others go
        into ``times``. Hosts that are blocked or used up their page cap (which counts
        fetches) are left alone: dispatching would reject their stored pages."""
        ctx, store = self.ctx, self.ctx.store
        slot = self.hosts.slots.get(host)
        state = (slot.state if slot is not None
                 else await store.get_host(host) or HostState(host=host))
        if state.blocked or state.page_count >= ctx.rules.page_cap(host, state):
            return 0
        interval = ctx.settings.crawl.recrawl_interval
        priority = refresh_priority(ctx.settings)
        due: list[UrlState] = []
        for r in await store.urls_with_status(UrlStatus.DONE, 10_000_000, host):
            at = refresh_at(r, interval)
            if at is not None and at <= now:
                due.append(refreshed(r, now, priority))
            else:
                times.append(at)
        if not due:
            return 0
        await store.put_urls(due)
        ctx.counters.refreshed += len(due)
        ctx.metrics.refreshes_queued.inc(len(due))
        slot = await self.hosts.slot(host)
        if not slot.head:
            slot.refresh_next = True
        self.hosts.schedule(host, slot, now)
        return len(due)

    def _note_due(self, times: list[float | None], queued: int, now: float) -> None:
        due = due_buckets(times, now)
        due["now"] += queued
        self.ctx.counters.refresh_due = due
        for name, n in due.items():
            self.ctx.metrics.refresh_due.labels(name).set(n)

    def start_refresh_check(self) -> None:
        """Start a look for due refreshes (:meth:`check_refreshes`) in the background
        when ``refresh.check_interval`` of the crawl's clock has passed since the last
        one (the first one interval after start: recover looked at start)."""
        settings = self.ctx.settings
        if settings.crawl.recrawl_interval <= 0 or self.operator.paused:
            return
        now = self.ctx.clock()
        if self.next_refresh_check is None:
            self.next_refresh_check = now + settings.refresh.check_interval
            return
        if now < self.next_refresh_check or (self.refresh_task is not None
                                             and not self.refresh_task.done()):
            return
        self.next_refresh_check = now + settings.refresh.check_interval

        async def look() -> None:
            try:
                await self.check_refreshes(now)
            except Exception as exc:  # the next look tries again
                log.warning("frontier: looking for due refreshes failed: %r", exc)

        self.refresh_task = asyncio.create_task(look(), name="frontier-refreshes")
