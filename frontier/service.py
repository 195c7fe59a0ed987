"""The frontier stage: owns its hosts' url_state and politeness timers.

Mercator's two layers, with only the heads in memory:

- back queues: one per host; its head (a few URLs) is loaded from the StateStore in
  (priority, depth, discovery) order, the rest stays in the store;
- a min-heap of (next allowed time, host): a host becomes ready when its politeness
  timer expires; ready hosts wait in a second heap ordered by the priority of their
  head (the front queues), so higher-priority work goes out first when fetch capacity
  is short, and breadth-first order holds within a priority;
- with ``CRAWLER_POLITENESS_KEY`` domain or ip, a third layer: the hosts of one key
  (registered domain, resolved address) share one rest and one set of places in
  flight (:class:`KeyGroup`); a due host whose key is busy waits in the key's line and
  the place that frees next goes to the first host in it (docs/politeness.md).

Many hosts are worked on at once, each by one coroutine at a time: a handler (topics
discovered, fetched, status, control), a host's dispatch and an operator change take
that host's lock (:class:`HostLocks`) around everything they read or change of its
slot, so no two interleave around a store call. The dispatch loop itself does not wait
on the store: it moves due hosts from the timer heap to the ready heap and starts each
ready host's dispatch as a task of its own (at most :data:`DISPATCH_TASKS` at once),
counting it in the outstanding requests before it starts. Ownership changes (assign,
recover) hold :class:`OwnershipGate` exclusively: they wait for every handler and
dispatch in progress and keep new ones out until they are done. Every decision is made
by the pure functions of frontier.policy; this module only moves rows in and out of the
store and messages on and off the bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import msgspec

from common import urls
from common.clock import wall_clock
from common.messages import (
    Discovered,
    FetchOutcome,
    FetchResult,
    FetchTask,
    HostControl,
    Link,
    LinkKind,
    NearIndex,
    Reason,
    StatusUpdate,
    TaskKind,
    Topic,
    UrlStatus,
)
from common.metrics import Metrics
from common.patterns import OperatorPattern, PatternError, compile_operator_pattern
from common.politeness import key_mode, politeness_key, split_host_key, task_route
from common.ports import (
    Bus,
    CrawlControl,
    Delivery,
    HostState,
    ScopeRules,
    StateStore,
    UrlState,
)
from common.scope import checked_rules, limits, rules_from_settings, seed_root
from common.settings import Settings, parse_host_map
from frontier.policy import (
    NO_REQUEST_OUTCOMES,
    TrapRules,
    apply_host_control,
    apply_result,
    due_buckets,
    first_revisit_interval,
    first_sitemap_fetch,
    head_outranked,
    is_refresh,
    listed_change,
    path_blocked,
    politeness_delay,
    refresh_at,
    refresh_priority,
    refreshed,
    sitemap_files_refusal,
    sitemap_links,
    sitemap_reason,
    take_refresh,
    trap_reason,
)
from frontier.scope import SeedRegistry
from frontier.seeds import publish_batch, seed_batch
from frontier.seen import SeenFilter

log = logging.getLogger(__name__)

HEAD_SIZE = 8
EARLY_VERDICTS = 10_000  # verdicts kept for rows whose fetch result has not arrived
DISPATCH_TASKS = 32  # host dispatches in progress at once
DISPATCH_RETRY = 1.0  # seconds before a host whose dispatch failed is tried again
STOP_GRACE = 10.0  # seconds run() waits for dispatches in progress when stopped
FEW_HOSTS = 5  # the status line shows every host's state when at most this many remain


@dataclass(eq=False, slots=True)
class _HeldLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # holding it or waiting for it


class HostLocks:
    """One asyncio lock per host, made on first use and dropped when nobody holds or
    waits for it any more, so memory follows the hosts being worked on."""

    def __init__(self) -> None:
        self._locks: dict[str, _HeldLock] = {}

    @asynccontextmanager
    async def hold(self, host: str) -> AsyncIterator[None]:
        held = self._locks.get(host)
        if held is None:
            held = self._locks[host] = _HeldLock()
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0 and self._locks.get(host) is held:
                del self._locks[host]

    def locked(self, host: str) -> bool:
        held = self._locks.get(host)
        return held is not None and held.lock.locked()

    def __len__(self) -> int:
        return len(self._locks)


class OwnershipGate:
    """Shared or exclusive: handlers and dispatches hold it shared, many at once; an
    ownership change holds it exclusively. An exclusive holder waits until the shared
    holders are done, and while it waits or holds, new shared holders wait behind it
    (so a steady flow of messages cannot starve a rebalance). Not reentrant: a holder
    never asks again."""

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._writers = 0  # exclusive holders, waiting or holding
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def shared_holders(self) -> int:
        return self._shared

    @property
    def exclusive_held(self) -> bool:
        return self._exclusive

    def _notify(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        await self._until(lambda: self._writers == 0)
        self._shared += 1
        try:
            yield
        finally:
            self._shared -= 1
            if self._shared == 0:
                self._notify()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        self._writers += 1
        try:
            await self._until(lambda: not self._exclusive and self._shared == 0)
        except BaseException:
            self._writers -= 1
            self._notify()
            raise
        self._exclusive = True
        try:
            yield
        finally:
            self._exclusive = False
            self._writers -= 1
            self._notify()


@dataclass(slots=True)
class HostSlot:
    """A host the frontier is working on: its row, its queue head, its in-flight count."""

    state: HostState
    head: deque[UrlState] = field(default_factory=deque)
    tasks: set[str] = field(default_factory=set)  # ids of tasks this instance dispatched
    wake_at: float | None = None  # time of its live timer-heap entry
    ready: bool = False  # in the ready heap, or its dispatch task has not begun yet
    due_since: float | None = None  # when it became ready, until its dispatch is over
    refresh_next: bool = False  # refreshes were queued while its head was empty
    # a write of its row failed: it may have been applied all the same, so the row in
    # memory may be behind the stored one (its page count); read before writing it again
    suspect: bool = False
    # pages of the host stored without a verdict while a cluster renders: the host
    # rests until their verdicts arrive (the render service's requests are the host's
    # too), at most until hold_until
    awaiting: set[str] = field(default_factory=set)
    hold_until: float = 0.0

    def rest_until(self) -> float:
        """When the host may be fetched again: its politeness timer, a hold for a
        verdict, and with nothing in flight here the lease of an earlier owner."""
        at = max(self.state.next_allowed_at, self.hold_until)
        return max(at, self.state.lease_until) if self.in_flight == 0 else at

    def refreshing(self) -> bool:
        """Whether the host's next URL is a refresh (its head's first row; with an empty
        head, whether refreshes were queued for it since)."""
        return is_refresh(self.head[0]) if self.head else self.refresh_next

    @property
    def in_flight(self) -> int:
        return len(self.tasks)


@dataclass(slots=True)
class KeyGroup:
    """The hosts that share a politeness key (``CRAWLER_POLITENESS_KEY`` domain or ip):
    one gap and ``max_in_flight_per_host`` requests in flight for all of them. Kept in
    memory only; each result's rest is also written to its host's row, so a group
    joined again (after a restart or a takeover) starts from the latest of its hosts'
    rests (:meth:`Frontier._join`)."""

    next_allowed_at: float = 0.0
    tasks: set[str] = field(default_factory=set)  # ids of its requests in flight
    reserved: int = 0  # dispatches in progress that hold one of its places
    # hosts that found it busy, in order; the next place goes to the first
    waiting: dict[str, None] = field(default_factory=dict)

    @property
    def in_flight(self) -> int:
        return len(self.tasks) + self.reserved


Resolve = Callable[[str, int | None], Awaitable[Sequence[str]]]
"""A host name (and port) -> its addresses, as :meth:`fetcher.dns.Resolver.resolve`."""


@dataclass(slots=True)
class FrontierCounters:
    """Per-run counters for things that leave no row in url_state."""

    seen_skipped: int = 0  # the seen filter said "probably known"
    known: int = 0  # the exact state already held the URL
    invalid: int = 0  # not a URL that can be crawled; no host to record it under
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    dispatched: int = 0
    stale_results: int = 0  # duplicate deliveries of results already applied
    refetched: int = 0  # URLs handed out again after a crash or lost task
    refreshed: int = 0  # stored pages queued again for a refresh
    dispatched_new: int = 0  # fetch tasks of pages never stored
    dispatched_refresh: int = 0  # fetch tasks of stored pages (refreshes)
    refresh_due: dict[str, int] = field(default_factory=dict)  # as of the last look
    refresh_checks: int = 0  # looks for due refreshes while running, finished


class Frontier:
    def __init__(self, settings: Settings, bus: Bus, store: StateStore, *,
                 clock: Callable[[], float] | None = None,
                 embedded: bool = True,
                 seen_capacity: int = 1_000_000,
                 metrics: Metrics | None = None,
                 resolve: Resolve | None = None) -> None:
        self.settings = settings
        self.bus = bus
        self.store = store
        # the crawl's clock (common.clock): the wall clock, or one a test moves
        self.clock = clock if clock is not None else wall_clock(settings)
        self.embedded = embedded
        # A cluster that renders: a page stored without its verdict may be loading in a
        # render service, whose scripts' requests go to the same host; the host rests
        # until the verdict, at most this long (a render and its one retry)
        self.verdict_hold = (2 * settings.render.page_timeout
                             if settings.render.enabled and not embedded else 0.0)
        # Embedded: one process owns every host. Cluster: the hosts of the partitions
        # the bus assigned to this instance (see assign()).
        self._owned: frozenset[int] | None = None
        self.rules = TrapRules.from_settings(settings.traps)
        self.tracking = urls.TrackingRules.from_settings(settings.urls)
        self.delay_overrides = parse_host_map(settings.politeness.host_delay_overrides,
                                              "CRAWLER_POLITENESS_HOST_DELAY_OVERRIDES", float)
        self.seen = SeenFilter(capacity=seen_capacity, error_rate=0.01)
        self.counters = FrontierCounters()
        self.metrics = (metrics or Metrics.create(roles=(), process=False)).frontier
        self.max_outstanding = max(1, settings.fetcher.concurrency * 2)
        self.paused = False
        self.control = CrawlControl()
        self._blocked_paths: tuple[OperatorPattern, ...] = ()
        # crawl scope: the settings' rules unless the operator's control row has others
        self.settings_scope = rules_from_settings(settings.scope)
        self.scope: ScopeRules = self.settings_scope
        self.seed_roots = SeedRegistry(store, complete=embedded)
        self._slots: dict[str, HostSlot] = {}
        self._early: OrderedDict[tuple[str, str], StatusUpdate] = OrderedDict()
        self._timer: list[tuple[float, int, str]] = []
        self._ready: list[tuple[int, int, str]] = []  # hosts whose next URL is new
        self._ready_refresh: list[tuple[int, int, str]] = []  # ... is a refresh
        # slots given while both kinds waited, and how many of them to refreshes
        self._contended = self._contended_refreshes = 0
        self._next_refresh_check: float | None = None
        self._refresh_task: asyncio.Task[None] | None = None
        self._seq = itertools.count()
        self._outstanding = 0  # requests in flight plus dispatches in progress
        self._dispatching = 0  # dispatch tasks started and not finished
        self._dispatch_tasks: set[asyncio.Task[None]] = set()
        self._hosts = HostLocks()
        self._gate = OwnershipGate()
        self._wake = asyncio.Event()
        self._stopped = False
        self._budget_spent = False
        self._stall_since: float | None = None  # first check that saw a stall, if any
        self._recovering = False
        # politeness keys (common.politeness): with ``host`` each host is its own queue
        # and none of this is used
        self.key_mode = key_mode(settings.politeness.key)
        if self.key_mode == "ip" and resolve is None:
            from fetcher.dns import Resolver  # the fetcher's DNS settings and cache rules

            resolve = Resolver.from_settings(settings.fetcher).resolve
        self._resolve = resolve
        self._groups: dict[str, KeyGroup] = {}
        self._host_keys: dict[str, str] = {}  # host -> the key it was last counted under
        self._task_keys: dict[str, str] = {}  # id of a request in flight -> its key
        self._waiting_keys: set[str] = set()  # keys with hosts waiting for a place
        self.key_moves = 0  # hosts whose ip key changed with a new DNS answer

    # ------------------------------------------------------------------ ownership

    def owns(self, host: str) -> bool:
        if self._owned is None:
            return True
        return self.bus.partition_of(Topic.DISCOVERED, host) in self._owned

    async def assign(self, partitions: frozenset[int]) -> None:
        """The bus moved partitions (cluster mode): forget hosts no longer owned and
        recover the ones newly owned. Requests this instance dispatched are still
        tracked, so a revoke followed by the same assignment loses nothing."""
        log.info("frontier assigned partitions %s", sorted(partitions))
        async with self._gate.exclusive():
            self._owned = frozenset(partitions)
            # rows kept for the hosts owned until now may have another writer meanwhile
            self.store.forget_cached()
            if not partitions:
                # a revocation: dispatch nothing until the next assignment, which may
                # give back the same partitions with their requests still in flight
                return
            for host in [h for h in self._slots if not self.owns(h)]:
                slot = self._slots.pop(host)
                self._outstanding = max(0, self._outstanding - slot.in_flight)
                self._leave(host, slot)
        await self.recover()

    # ------------------------------------------------------------------ lifecycle

    async def recover(self, *, replay: bool = True) -> None:
        """Make the store consistent after a stop, crash or owner change, then schedule
        the owned hosts.

        IN_FLIGHT rows that this instance did not dispatch go back to QUEUED (their
        fetch may have been lost: delivery is at least once). Their hosts rest: in
        embedded mode the old process and its requests are gone, so a full delay from
        now is enough; in cluster mode a fetcher may still be working on the old task,
        so the host also waits out the lease its old owner stored at dispatch. FETCHED
        rows (stored but not yet parsed or deduplicated) are handed to the parser again
        (unless ``replay`` is False: the watchdog's recovery, see :meth:`check_stall`).
        """
        now = self.clock()
        await self.refresh_control()
        async with self._gate.exclusive():
            rows = [r for r in await self.store.urls_with_status(UrlStatus.IN_FLIGHT,
                                                                 10_000_000)
                    if self.owns(r.host) and not self._dispatched_here(r.host)]
            if rows:
                for r in rows:
                    r.status = UrlStatus.QUEUED
                await self.store.put_urls(rows)
                for host in {r.host for r in rows}:
                    slot = await self._slot(host)
                    await self._settle(host, slot)
                    rest = now + politeness_delay(slot.state, self.settings.politeness,
                                                  self.delay_overrides)
                    if self.embedded:
                        slot.state.lease_until = 0.0
                    slot.state.next_allowed_at = max(slot.state.next_allowed_at, rest)
                    await self.store.put_host(slot.state)
                    if self.key_mode == "domain":  # its siblings rest with it
                        self._join(host, slot, politeness_key(host, "domain"))
                self.counters.refetched += len(rows)
            if replay:
                await self._queue_refreshes(now)
            for host in await self.store.hosts_with_status(UrlStatus.QUEUED):
                if self.owns(host):
                    slot = await self._slot(host)
                    self._schedule(host, slot, slot.state.next_allowed_at)
        if not replay:
            self._wake.set()
            return
        fetched = [r for r in await self.store.urls_with_status(UrlStatus.FETCHED, 1_000_000)
                   if self.owns(r.host)]
        for r in fetched:
            await self.bus.publish(Topic.FETCHED, r.host, _replay_result(r))
        self._wake.set()

    async def _queue_refreshes(self, now: float) -> None:
        """Queue again the stored pages of owned hosts whose refresh time has come (see
        :func:`frontier.policy.refresh_at`); each is fetched with its validators. Run
        when the frontier starts or takes over hosts (under the ownership gate), and
        every ``refresh.check_interval`` while it runs (:meth:`check_refreshes`)."""
        if self.settings.crawl.recrawl_interval <= 0:
            return
        await self._refresh_owned(now, lock=False)

    async def _refresh_owned(self, now: float, *, lock: bool) -> int:
        """Queue the due refreshes of every owned host and note what is due when;
        ``lock``: each host under the ownership gate (shared) and its own lock, for a
        look while the crawl runs (at start and takeover the caller holds the gate)."""
        times: list[float | None] = []
        queued = 0
        for host in await self.store.hosts_with_status(UrlStatus.DONE):
            if not self.owns(host):
                continue
            if not lock:
                queued += await self._refresh_host(host, now, times)
                continue
            async with self._gate.shared(), self._hosts.hold(host):
                if self.owns(host):
                    queued += await self._refresh_host(host, now, times)
        self._note_due(times, queued, now)
        return queued

    async def check_refreshes(self, now: float | None = None) -> int:
        """Queue the stored pages whose refresh time has come while the crawl runs, each
        host under its lock (so no handler or dispatch of that host interleaves), and
        wake the hosts. Returns how many were queued."""
        if self.settings.crawl.recrawl_interval <= 0 or self._budget_spent:
            return 0
        now = self.clock() if now is None else now
        queued = await self._refresh_owned(now, lock=True)
        self.counters.refresh_checks += 1
        if queued:
            self._wake.set()
        return queued

    async def _refresh_host(self, host: str, now: float, times: list[float | None]) -> int:
        """Queue the due stored pages of one host; the refresh times of the others go
        into ``times``. Hosts that are blocked or used up their page cap (which counts
        fetches) are left alone: dispatching would reject their stored pages."""
        slot = self._slots.get(host)
        state = (slot.state if slot is not None
                 else await self.store.get_host(host) or HostState(host=host))
        if state.blocked or state.page_count >= self.rules.page_cap(host, state):
            return 0
        interval = self.settings.crawl.recrawl_interval
        priority = refresh_priority(self.settings)
        due: list[UrlState] = []
        for r in await self.store.urls_with_status(UrlStatus.DONE, 10_000_000, host):
            at = refresh_at(r, interval)
            if at is not None and at <= now:
                due.append(refreshed(r, now, priority))
            else:
                times.append(at)
        if not due:
            return 0
        await self.store.put_urls(due)
        self.counters.refreshed += len(due)
        self.metrics.refreshes_queued.inc(len(due))
        slot = await self._slot(host)
        if not slot.head:
            slot.refresh_next = True
        self._schedule(host, slot, now)
        return len(due)

    def _note_due(self, times: list[float | None], queued: int, now: float) -> None:
        due = due_buckets(times, now)
        due["now"] += queued
        self.counters.refresh_due = due
        for name, n in due.items():
            self.metrics.refresh_due.labels(name).set(n)

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    # ------------------------------------------------------------------ seeds

    async def seed(self, seed_urls: Iterable[str], priority: int | None = None) -> int:
        """Offer seed URLs (through the bus, so each reaches its host's owner)."""
        prio = self.settings.crawl.seed_priority if priority is None else priority
        batch = seed_batch(seed_urls, prio, self.tracking)
        await publish_batch(self.bus, batch)
        for raw, why in batch.rejected:
            log.warning("seed %r is not a crawlable URL: %s", raw[:500], why)
        return batch.count

    # ------------------------------------------------------------------ handlers

    async def handle(self, delivery: Delivery) -> None:
        msg = delivery.message
        async with self._gate.shared():
            if isinstance(msg, Discovered):
                # takes the lock of each host it schedules
                await self._on_discovered(msg, retry=delivery.calls > 1
                                          or delivery.attempt > 1)
            elif isinstance(msg, FetchResult):
                async with self._hosts.hold(msg.task.host):
                    await self._on_result(msg, retry=delivery.calls > 1
                                          or delivery.attempt > 1)
            elif isinstance(msg, StatusUpdate):
                async with self._hosts.hold(msg.host):
                    await self._on_status(msg)
            elif isinstance(msg, HostControl):
                async with self._hosts.hold(msg.host):
                    await self._on_host_control(msg)
            else:
                raise TypeError(f"frontier cannot handle {type(msg).__name__}")
        self._wake.set()

    async def _on_discovered(self, msg: Discovered, *, retry: bool = False) -> None:
        """Store the new URLs of owned hosts and schedule their hosts; forward the rest.

        A ``retry`` (the bus delivering the message again after this handler raised)
        may find its URLs stored and marked seen by the failed attempt, whose hosts
        were perhaps never scheduled: it skips neither the seen filter nor the URLs the
        store already holds, and schedules every host with a URL queued by it."""
        now = self.clock()
        rows: list[UrlState] = []
        forward: dict[str, list[Link]] = {}
        states: dict[str, HostState | None] = {}  # host rows read for this message
        taken: set[str] = set()  # URLs of this message already in ``rows``
        self.metrics.urls_discovered.inc(len(msg.links))
        if any(link.depth == 0 for link in msg.links):
            await self._record_seeds(msg.links)
        reread: set[str] = set()  # domains whose seed roots were read again (cluster)
        for link in msg.links:
            try:
                url = urls.canonicalize(link.url, tracking=self.tracking)
                host = urls.host_key(url)
            except urls.UrlError:
                self.counters.invalid += 1
                continue
            if not self.owns(host):
                forward.setdefault(host, []).append(msgspec.structs.replace(link, url=url))
                continue
            if url in taken:
                continue
            # a sitemap's lastmod for a known URL is news: it goes on to the store
            if url in self.seen and not retry and link.lastmod is None:
                self.counters.seen_skipped += 1
                self.metrics.seen_filter_skips.inc()
                continue
            taken.add(url)
            row = UrlState(host=host, url=url, depth=link.depth, priority=link.priority,
                           hops=link.hops, source=link.source, discovered_at=now,
                           kind=TaskKind.SITEMAP if link.kind is LinkKind.SITEMAP else None,
                           lastmod=link.lastmod,
                           revisit_interval=first_revisit_interval(
                               link.changefreq, self.settings.crawl.recrawl_interval,
                               self.settings.refresh))
            reason = (sitemap_reason(link, self.settings)
                      or trap_reason(url, host, link.depth, self.rules, self._blocked_paths))
            if reason is None and link.kind is not LinkKind.SEED and limits(self.scope):
                why = await self.seed_roots.verdict(url, host, self.scope, reread)
                if why is not None:
                    reason, row.detail = Reason.OUT_OF_SCOPE, f"out of scope: {why}"
            if reason is None:
                # read without the host's lock: a host capped or blocked meanwhile is
                # caught again when it is dispatched
                slot = self._slots.get(host)
                if slot is not None:
                    state: HostState | None = slot.state
                elif host in states:
                    state = states[host]
                else:
                    state = states[host] = await self.store.get_host(host)
                if state is not None and (state.capped or state.blocked):
                    reason = Reason.HOST_CAP if state.capped else Reason.BLOCKED
            if reason is not None:
                row.status = UrlStatus.REJECTED
                row.reason = reason
            rows.append(row)
        inserted = await self.store.add_urls(rows) if rows else []
        # only now, with the rows stored: a failed store call retries this message, and
        # a URL marked seen before that would be skipped by the retry and lost
        for row in rows:
            self.seen.add(row.url)
        self.counters.known += len(rows) - len(inserted)
        queued: dict[str, float] = {}
        best: dict[str, int] = {}  # the highest priority (lowest level) queued per host
        if len(inserted) < len(rows):
            await self._listed_again(rows, inserted, now, queued)
        for row in inserted:
            if row.status is UrlStatus.QUEUED:
                self.counters.accepted += 1
                self.metrics.urls_accepted.inc()
                due = queued.get(row.host)
                queued[row.host] = row.next_fetch_at if due is None else min(
                    due, row.next_fetch_at)
                best[row.host] = min(best.get(row.host, row.priority), row.priority)
            elif row.reason is not None:
                self.counters.rejected[row.reason.value] += 1
                self.metrics.count_rejected(row.reason)
        if retry:  # URLs stored by the failed attempt, whose hosts it may not have woken
            for row in rows:
                if row.status is UrlStatus.QUEUED and row.host not in queued:
                    queued[row.host] = now
        for host, due in queued.items():
            async with self._hosts.hold(host):
                slot = await self._slot(host)
                if head_outranked(slot.head, best.get(host)):
                    slot.head.clear()  # still queued in the store: read again in order
                self._schedule(host, slot, max(slot.state.next_allowed_at, due))
        for host, links in forward.items():
            await self.bus.publish(Topic.DISCOVERED, host, Discovered(host=host, links=links))

    async def _listed_again(self, rows: list[UrlState], inserted: list[UrlState],
                            now: float, queued: dict[str, float]) -> None:
        """URLs a sitemap listed with a lastmod that the store already held: a stored
        page changed since its fetch is queued for a refresh (its host goes into
        ``queued``); otherwise the lastmod is recorded, whatever the row's status (see
        ``listed_change``)."""
        new = {(r.host, r.url) for r in inserted}
        for row in rows:
            if row.lastmod is None or (row.host, row.url) in new:
                continue
            async with self._hosts.hold(row.host):
                # under the host's lock: no dispatch or result writes the row meanwhile
                stored = await self.store.get_url(row.host, row.url)
                changed = None if stored is None else listed_change(
                    stored, row.lastmod, now, refresh_priority(self.settings))
                if changed is None:
                    continue
                await self.store.put_url(changed)
                slot = self._slots.get(row.host)
                for held in slot.head if slot is not None else ():
                    if held.url == row.url:  # the queue head's copy is written at dispatch
                        held.lastmod = changed.lastmod
            if (changed.status is UrlStatus.QUEUED and stored is not None
                    and stored.status is not UrlStatus.QUEUED):
                self.counters.refreshed += 1  # a stored page its sitemap says changed
                self.metrics.refreshes_queued.inc()
                slot = self._slots.get(row.host)
                if slot is not None and not slot.head:
                    slot.refresh_next = True
                queued[row.host] = now

    async def _record_seeds(self, links: Iterable[Link]) -> None:
        """Record the seed roots of the depth-0 links of owned hosts (seeds and their
        redirect targets), before their rows are stored: so before any link found on
        them can be judged against the crawl scope."""
        roots = []
        for link in links:
            if link.depth != 0:
                continue
            try:
                url = urls.canonicalize(link.url, tracking=self.tracking)
                if self.owns(urls.host_key(url)):
                    roots.append(seed_root(url))
            except urls.UrlError:
                continue
        await self.seed_roots.add(roots)

    async def _on_result(self, result: FetchResult, *, retry: bool = False) -> None:
        task = result.task
        key = self._forget_task(task.task_id)
        if key is None and self.key_mode == "domain":
            key = politeness_key(task.host, "domain")  # a task of an earlier owner or run
        elif key is None and self.key_mode == "ip":
            key = self._host_keys.get(task.host)  # the host's address as known here, if any
        try:
            await self._apply_fetch_result(result, retry=retry)
        finally:
            if key is not None:
                # the key rests as the host does after this request, and its next
                # place goes to the first host waiting
                slot = self._slots.get(task.host)
                if slot is not None:
                    group = self._group(key)
                    group.next_allowed_at = max(group.next_allowed_at,
                                                slot.state.next_allowed_at)
                self._wake_waiting(key)

    async def _apply_fetch_result(self, result: FetchResult, *, retry: bool) -> None:
        task = result.task
        slot = self._slots.get(task.host)
        if slot is not None:
            # after a failed attempt, whose write may have been applied although it
            # reported a failure (the URL's row then shows it as a stale result): the
            # host's row as stored, not as remembered, so its page count is not written
            # back short
            slot.suspect = slot.suspect or retry
            await self._settle(task.host, slot)
        if slot is not None and task.task_id in slot.tasks:
            # our own request is over, whatever the row says now
            slot.tasks.discard(task.task_id)
            self._outstanding = max(0, self._outstanding - 1)
        row = await self.store.get_url(task.host, task.url)
        now = self.clock()
        if row is None or row.status is not UrlStatus.IN_FLIGHT or row.attempts != task.attempt:
            # a repeated delivery, or a task an earlier owner handed out: the URL's row
            # has moved on, but a request that reached the host still counts for its rest
            self.counters.stale_results += 1
            if result.fetched_at and (result.robots_fetched
                                      or result.outcome not in NO_REQUEST_OUTCOMES):
                slot = slot or await self._slot(task.host)  # settled above, or just read
                rest = result.fetched_at + politeness_delay(
                    slot.state, self.settings.politeness, self.delay_overrides)
                if rest > slot.state.next_allowed_at:
                    slot.state.next_allowed_at = rest
                    await self.store.put_host(slot.state)
            if slot is not None:
                self._schedule(task.host, slot, slot.state.next_allowed_at)
            if result.sitemaps:  # the robots.txt it read is not read again for a while
                await self._publish_links(sitemap_links(result.sitemaps, task.url,
                                                        self.settings))
            return
        slot = slot or await self._slot(task.host)
        effect = apply_result(result, row, slot.state, self.settings, now, self.delay_overrides)
        # the page's verdict, when it came with the result (the fetcher judged it) or
        # before it (topic status overtook topic fetched): applied in the same write
        verdict = result.verdict or self._early.get((task.host, task.url))
        index: NearIndex | None = None
        if (verdict is not None and effect.row.status is UrlStatus.FETCHED
                and verdict.content_hash == effect.row.content_hash):
            _with_verdict(effect.row, verdict)
            # a unique page's near-duplicate index entries, left by the fetcher that
            # judged it: in the same write (one store statement less per page)
            index = verdict.index if effect.row.simhash is not None else None
        # one write: a crash between the two would apply the result to the URL and not
        # to its host (a page not counted toward the host's cap and the crawl's figures)
        try:
            await self.store.put_url_and_host(effect.row, effect.host, index=index)
        except BaseException:
            # applied or not: until the row is read back, no write of the host row from
            # memory (a dispatch's lease) may put back the page count it had before
            slot.suspect = True
            raise
        self._early.pop((task.host, task.url), None)
        slot.state = effect.host
        if self.verdict_hold and effect.row.status is UrlStatus.FETCHED:
            slot.awaiting.add(task.url)
            slot.hold_until = max(slot.hold_until, now + self.verdict_hold)
        if effect.row.status is UrlStatus.REJECTED and effect.row.reason is not None:
            self.counters.rejected[effect.row.reason.value] += 1
            self.metrics.count_rejected(effect.row.reason)
        if effect.retry:
            self.metrics.count_retry(result.outcome)
        if effect.dead:
            self.metrics.dead_urls.inc()
        if effect.follow:
            await self._publish_links(effect.follow)
        self._schedule(task.host, slot, slot.state.next_allowed_at)

    async def _publish_links(self, follow: list[Link]) -> None:
        """Offer links (redirect targets, sitemaps robots.txt named) to their owners."""
        by_host: dict[str, list[Link]] = {}
        for link in follow:
            try:
                target = urls.canonicalize(link.url, tracking=self.tracking)
                by_host.setdefault(urls.host_key(target), []).append(
                    msgspec.structs.replace(link, url=target))
            except urls.UrlError:
                self.counters.invalid += 1
        for host, links in by_host.items():
            await self.bus.publish(Topic.DISCOVERED, host, Discovered(host=host, links=links))

    async def _on_status(self, msg: StatusUpdate) -> None:
        slot = self._slots.get(msg.host)
        if slot is not None and msg.url in slot.awaiting:
            # the page's last stage is done (its render service's requests too): the
            # host rests its delay from now
            slot.awaiting.discard(msg.url)
            if not slot.awaiting:
                slot.hold_until = self.clock() + politeness_delay(
                    slot.state, self.settings.politeness, self.delay_overrides)
                self._schedule(msg.host, slot, slot.rest_until())
        row = await self.store.get_url(msg.host, msg.url)
        if row is not None and row.status is UrlStatus.IN_FLIGHT:
            # The verdict can overtake its own fetch result (different topics, and a new
            # owner may be working through a backlog of results): keep it until the
            # result makes the row FETCHED, then apply it if it is about the same body.
            self._early[(msg.host, msg.url)] = msg
            while len(self._early) > EARLY_VERDICTS:
                self._early.popitem(last=False)
            return
        if row is None or row.status is not UrlStatus.FETCHED:
            # only a stored page awaits a verdict; a queued row gets one when its next
            # fetch is parsed
            return
        await self._apply_verdict(row, msg)

    async def _apply_verdict(self, row: UrlState, msg: StatusUpdate) -> None:
        _with_verdict(row, msg)
        if msg.index is not None and row.simhash is not None:
            # index entries a stage left to the frontier (not sent apart from a result
            # today): written before the row is closed, so a retry writes them again
            await self.store.add_simhash(msg.index.keys, row.url, row.simhash,
                                         msg.index.sketch)
        await self.store.put_url(row)

    # ------------------------------------------------------------------ scheduling

    async def _slot(self, host: str) -> HostSlot:
        slot = self._slots.get(host)
        if slot is None:
            state = await self.store.get_host(host) or HostState(host=host)
            slot = HostSlot(state=state)
            self._slots[host] = slot
            if self.key_mode == "domain":
                # known from the name: joined at once, so its rest and lease (a request
                # of an earlier owner) count for its siblings before any of them goes
                self._join(host, slot, politeness_key(host, "domain"))
        return slot

    async def _settle(self, host: str, slot: HostSlot) -> HostState:
        """The host's row, read back after a failed write of it (see
        :attr:`HostSlot.suspect`), keeping this process's timers where they are later.
        The caller holds the host's lock."""
        if slot.suspect:
            stored = await self.store.get_host(host)
            if stored is not None:
                stored.next_allowed_at = max(stored.next_allowed_at,
                                             slot.state.next_allowed_at)
                stored.lease_until = max(stored.lease_until, slot.state.lease_until)
                slot.state = stored
            slot.suspect = False
        return slot.state

    # ------------------------------------------------------------------ politeness keys

    async def _key_of(self, host: str, slot: HostSlot) -> str:
        """The politeness key of an owned host, joining its group. With ``ip`` the
        host's name is resolved (the resolver caches the answer for its TTL, so this is
        a look-up in memory most of the time); a host whose answer changed moves to
        the new address's group, carrying its own rest, while requests it already has
        in flight stay counted under the old key. A name that does not resolve is its
        own key (its fetch records the DNS failure)."""
        if self.key_mode == "domain":
            key = politeness_key(host, "domain")
        else:
            addresses: Sequence[str] = ()
            name, port = split_host_key(host)
            # a host key without a port is on a default port: 80 or 443 (a fixed answer,
            # CRAWLER_FETCHER_RESOLVE, may name either)
            for each in (port,) if port is not None else (80, 443):
                try:
                    assert self._resolve is not None
                    addresses = await self._resolve(name, each)
                    break
                except Exception as exc:  # any failure: the host's own key
                    log.debug("frontier: %s does not resolve (%r); its own politeness "
                              "key", host, exc)
            key = politeness_key(host, "ip", addresses)
        old = self._host_keys.get(host)
        if old != key or key not in self._groups:
            if old is not None and old != key:
                self.key_moves += 1
                self.metrics.key_moves.inc()
                log.info("frontier: host %s now resolves to politeness key %s (was %s)",
                         host, key, old)
                self._leave(host, None)
            self._join(host, slot, key)
        return key

    def _join(self, host: str, slot: HostSlot, key: str) -> None:
        """Count ``host`` under ``key``: the group starts no earlier than the host's own
        rest (and in cluster mode, with nothing in flight here, its lease: a request an
        earlier owner may still have out; in embedded mode an earlier process and its
        requests are gone)."""
        self._host_keys[host] = key
        group = self._group(key)
        rest = slot.state.next_allowed_at
        if slot.in_flight == 0 and not self.embedded:
            rest = max(rest, slot.state.lease_until)
        group.next_allowed_at = max(group.next_allowed_at, rest)

    def _group(self, key: str) -> KeyGroup:
        """The group of ``key``, made when it has none."""
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = KeyGroup()
        return group

    def _leave(self, host: str, slot: HostSlot | None) -> None:
        """Stop counting ``host`` under its key (it moved, or another frontier owns it
        now); with ``slot``, its requests in flight leave the key's count too."""
        key = self._host_keys.pop(host, None)
        if key is None:
            return
        group = self._groups.get(key)
        if group is not None:
            group.waiting.pop(host, None)
            if not group.waiting:
                self._waiting_keys.discard(key)
        for task_id in slot.tasks if slot is not None else ():
            self._forget_task(task_id)

    def _forget_task(self, task_id: str) -> str | None:
        """A request is over (or never went out): its key's place is free again.
        Returns the key it was counted under, if any."""
        key = self._task_keys.pop(task_id, None)
        if key is not None and (group := self._groups.get(key)) is not None:
            group.tasks.discard(task_id)
        return key

    def _wake_waiting(self, key: str) -> None:
        """Schedule the first host waiting for a place of ``key``, if one is free."""
        group = self._groups.get(key)
        if group is None:
            self._waiting_keys.discard(key)
            return
        while group.waiting and group.in_flight < self.settings.politeness.max_in_flight_per_host:
            host = next(iter(group.waiting))
            del group.waiting[host]
            slot = self._slots.get(host)
            if slot is not None and not slot.ready and self.owns(host):
                self._schedule(host, slot, group.next_allowed_at)
                break
        if not group.waiting:
            self._waiting_keys.discard(key)

    def _tend_groups(self) -> None:
        """About once a second: wake a waiting host of every key with nothing in flight
        (a safety net: each place that frees wakes one already), and forget the groups
        with nothing in flight, nobody waiting and their rest over."""
        for key in list(self._waiting_keys):
            self._wake_waiting(key)
        now = self.clock()
        idle = [k for k, g in self._groups.items()
                if not g.tasks and not g.reserved and not g.waiting
                and g.next_allowed_at <= now]
        if len(idle) > 1000:
            for k in idle:
                del self._groups[k]
            keep = set(self._groups)
            self._host_keys = {h: k for h, k in self._host_keys.items() if k in keep}

    def _schedule(self, host: str, slot: HostSlot, at: float) -> None:
        if slot.in_flight >= self.settings.politeness.max_in_flight_per_host or slot.ready:
            return
        at = max(at, slot.rest_until())
        if slot.wake_at is not None and slot.wake_at <= at:
            return
        slot.wake_at = at
        heapq.heappush(self._timer, (at, next(self._seq), host))

    def idle(self) -> bool:
        """Nothing queued that can ever become due in this run, and nothing in flight."""
        return (not self._timer and not self._ready and not self._ready_refresh
                and self._outstanding == 0 and not self._waiting_keys)

    def next_wake(self) -> float | None:
        return self._timer[0][0] if self._timer else None

    @property
    def outstanding(self) -> int:
        return self._outstanding

    async def run(self) -> None:
        """Dispatch due URLs until :meth:`stop`."""
        last_status = last_check = 0.0
        try:
            while not self._stopped:
                self.metrics.active_hosts.set(len(self._slots))
                self.metrics.in_flight_urls.set(self._outstanding)
                if self.key_mode != "host":
                    self.metrics.key_waiting.set(sum(
                        len(self._groups[k].waiting) for k in self._waiting_keys
                        if k in self._groups))
                self.metrics.owned_partitions.set(0 if self._owned is None
                                                  else len(self._owned))
                if time.monotonic() - last_status > 10:
                    last_status = time.monotonic()
                    with contextlib.suppress(Exception):  # a gauge must not stop dispatching
                        counts = await self.store.count_urls()
                        self.metrics.queued_urls.set(
                            sum(n for (st, _), n in counts.items() if st == UrlStatus.QUEUED))
                    log.info("frontier: owned %s, %d hosts in memory, %d timed, %d ready, "
                             "%d outstanding, %d dispatching, %d dispatched, "
                             "%d stale results",
                             "all" if self._owned is None else sorted(self._owned),
                             len(self._slots), len(self._timer),
                             len(self._ready) + len(self._ready_refresh),
                             self._outstanding, self._dispatching, self.counters.dispatched,
                             self.counters.stale_results)
                    if 0 < len(self._slots) <= FEW_HOSTS:  # the last hosts of a crawl
                        log.info("frontier: %s", self.describe())
                if time.monotonic() - last_check >= 1.0:
                    last_check = time.monotonic()
                    await self.check_stall()
                    if self.key_mode != "host":
                        self._tend_groups()
                self._start_refresh_check()
                self._wake.clear()
                self._dispatch(self.clock())
                if self._stopped:
                    break
                timeout: float | None = None
                if self._timer and not self.paused:
                    timeout = max(0.0, self._timer[0][0] - self.clock())
                if ((self._ready or self._ready_refresh) and self._may_start()
                        and not self.paused):
                    timeout = 0.0
                if self.settings.crawl.stall_seconds or self._next_refresh_check:
                    # the watchdog and the look for due refreshes: about every second
                    # (or every refresh.check_interval, if shorter)
                    wake = (min(1.0, self.settings.refresh.check_interval)
                            if self._next_refresh_check else 1.0)
                    timeout = wake if timeout is None else min(timeout, wake)
                if self._waiting_keys:  # hosts waiting for a key's place: tended each second
                    timeout = 1.0 if timeout is None else min(timeout, 1.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            if self._dispatch_tasks:
                await asyncio.wait(self._dispatch_tasks, timeout=STOP_GRACE)
        finally:
            if self._refresh_task is not None:
                self._refresh_task.cancel()
                with contextlib.suppress(BaseException):
                    await self._refresh_task
            left = list(self._dispatch_tasks)
            for task in left:
                task.cancel()
            if left:
                await asyncio.gather(*left, return_exceptions=True)

    def _start_refresh_check(self) -> None:
        """Start a look for due refreshes (:meth:`check_refreshes`) in the background
        when ``refresh.check_interval`` of the crawl's clock has passed since the last
        one (the first one interval after start: recover looked at start)."""
        if self.settings.crawl.recrawl_interval <= 0 or self.paused:
            return
        now = self.clock()
        if self._next_refresh_check is None:
            self._next_refresh_check = now + self.settings.refresh.check_interval
            return
        if now < self._next_refresh_check or (self._refresh_task is not None
                                              and not self._refresh_task.done()):
            return
        self._next_refresh_check = now + self.settings.refresh.check_interval

        async def look() -> None:
            try:
                await self.check_refreshes(now)
            except Exception as exc:  # the next look tries again
                log.warning("frontier: looking for due refreshes failed: %r", exc)

        self._refresh_task = asyncio.create_task(look(), name="frontier-refreshes")

    def oldest_due(self, now: float | None = None) -> float:
        """Seconds the oldest due host has waited without a request going out, counted
        from when its timer moved it to the ready heap until its dispatch is over (0
        when none waits). O(hosts in memory)."""
        now = self.clock() if now is None else now
        since = [s.due_since for s in self._slots.values() if s.due_since is not None]
        return max(0.0, now - min(since)) if since else 0.0

    def _actual_outstanding(self) -> int:
        """Requests the hosts have in flight plus dispatches in progress: at least the
        true count (a dispatch that has just sent its request counts twice until it
        ends), so a counter above it has leaked."""
        return sum(s.in_flight for s in self._slots.values()) + self._dispatching

    async def check_stall(self) -> bool:
        """The watchdog (called by :meth:`run` about once a second): set the oldest-due
        gauge and, when a due host has waited ``crawl.stall_seconds`` although there is
        room to dispatch it (or the outstanding count is above the requests the hosts
        have in flight and the dispatches in progress: leaked capacity) and nothing
        explains it (paused, page budget spent), log the state and recover: re-count
        the outstanding requests, rebuild the timer, and reschedule every owned host
        with queued URLs from the store. True when it recovered."""
        now = self.clock()
        age = self.oldest_due(now)
        self.metrics.oldest_due.set(age)
        limit = self.settings.crawl.stall_seconds
        if not limit or self.paused or self._budget_spent or self._recovering:
            self._stall_since = None
            return False
        actual = self._actual_outstanding()
        room = (self._outstanding < self.max_outstanding
                and self._dispatching < DISPATCH_TASKS)
        drift = self._outstanding > actual  # leaked: capacity counted that nothing uses
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
                    age, self._outstanding, actual, self.describe())
        self.metrics.stalls.inc()
        self._recovering = True
        try:
            async with self._gate.exclusive():
                # no dispatch is in progress now (those waiting for the gate are
                # counted, and give their unit back: their slot is no longer ready);
                # every slot's ready flag and timer entry are rebuilt from the slot
                self._outstanding = self._actual_outstanding()
                self._ready.clear()
                self._ready_refresh.clear()
                self._timer.clear()
                for host, slot in self._slots.items():
                    slot.ready, slot.wake_at, slot.due_since = False, None, None
                    self._schedule(host, slot, slot.state.next_allowed_at)
            await self.recover(replay=False)
        except Exception as exc:  # the next check tries again
            log.warning("frontier: recovering from a stall failed: %r", exc)
        finally:
            self._recovering = False
        return True

    def _may_start(self) -> bool:
        """Room for one more dispatch: fetch capacity, dispatch tasks and page budget."""
        if self._outstanding >= self.max_outstanding or self._dispatching >= DISPATCH_TASKS:
            return False
        cap = self.settings.crawl.max_pages
        return not (cap and self.counters.dispatched + self._dispatching >= cap
                    and self._dispatching)

    def _push_ready(self, host: str, slot: HostSlot) -> None:
        """Put a ready host in the ready heap of its next URL's kind (new or refresh),
        ordered by that URL's priority."""
        refreshing = slot.refreshing()
        if slot.head:
            prio = slot.head[0].priority
        else:  # its head is read at dispatch: the level its queued rows are likely at
            prio = refresh_priority(self.settings) if refreshing else 0
        heap = self._ready_refresh if refreshing else self._ready
        heapq.heappush(heap, (prio, next(self._seq), host))

    def _live_top(self, heap: list[tuple[int, int, str]]) -> bool:
        """Drop entries of hosts no longer ready from the top of ``heap``; True when a
        ready host is left on top."""
        while heap:
            slot = self._slots.get(heap[0][2])
            if slot is not None and slot.ready:
                return True
            heapq.heappop(heap)
        return False

    def _pop_ready(self) -> str | None:
        """The next ready host to dispatch. With hosts of both kinds ready, the refresh
        budget (:func:`frontier.policy.take_refresh`, ``refresh.share``) decides which
        kind gets the slot, counted over the slots given while both waited (the count
        starts again whenever only one kind waits); otherwise the kind that waits takes
        it. Within a kind, the best priority first, then the longest waiting."""
        new, old = self._live_top(self._ready), self._live_top(self._ready_refresh)
        if new and old:
            refresh = take_refresh(self._contended_refreshes, self._contended,
                                   self.settings.refresh.share)
            self._contended += 1
            self._contended_refreshes += refresh
        else:
            self._contended = self._contended_refreshes = 0
            if not (new or old):
                return None
            refresh = old
        return heapq.heappop(self._ready_refresh if refresh else self._ready)[2]

    def _dispatch(self, now: float) -> None:
        """Move due hosts to the ready heap and start the dispatch of ready hosts, best
        priority first, while there is room. Does not wait: each dispatch is a task."""
        if self.paused:
            return
        while self._timer and self._timer[0][0] <= now:
            at, _, host = heapq.heappop(self._timer)
            slot = self._slots.get(host)
            if slot is None or slot.wake_at != at:
                continue
            slot.wake_at = None
            rest_until = slot.rest_until()
            if rest_until > now:
                self._schedule(host, slot, rest_until)
                continue
            slot.ready = True
            if slot.due_since is None:
                slot.due_since = now
            self._push_ready(host, slot)
        while (self._ready or self._ready_refresh) and self._may_start():
            if self._budget_exhausted():
                return
            picked = self._pop_ready()
            if picked is None:
                break
            host, slot = picked, self._slots[picked]
            if not self.owns(host):
                slot.ready = False
                slot.due_since = None
                continue
            # slot.ready stays set until the task holds the host: nothing schedules the
            # host meanwhile. The task counts as outstanding from now on, so capacity is
            # never overcommitted while tasks wait for their hosts.
            self._outstanding += 1
            self._dispatching += 1
            task = asyncio.create_task(self._dispatch_one(host, slot),
                                       name=f"frontier-dispatch:{host}")
            self._dispatch_tasks.add(task)
            task.add_done_callback(self._dispatch_tasks.discard)

    async def _dispatch_one(self, host: str, slot: HostSlot) -> None:
        """One ready host's dispatch, under its lock; gives back the outstanding unit
        taken for it unless a request went out."""
        dispatched = False
        key: str | None = None  # the politeness key, other than the host (see KeyGroup)
        group: KeyGroup | None = None
        try:
            async with self._gate.shared(), self._hosts.hold(host):
                if self._slots.get(host) is not slot or not slot.ready:
                    return  # dropped by an ownership change or the page budget meanwhile
                slot.ready = False
                if not self.owns(host):
                    return
                if self.paused:
                    slot.ready = True
                    self._push_ready(host, slot)
                    return
                now = self.clock()
                rest_until = slot.rest_until()
                if rest_until > now:  # a result or an operator moved the timer meanwhile
                    self._schedule(host, slot, rest_until)
                    return
                if slot.in_flight >= self.settings.politeness.max_in_flight_per_host:
                    return  # the next result schedules the host again
                if self.key_mode != "host":
                    key = await self._key_of(host, slot)
                    group = self._groups[key]
                    now = self.clock()
                    if group.in_flight >= self.settings.politeness.max_in_flight_per_host:
                        # the key's next free place goes to the first host waiting
                        group.waiting[host] = None
                        self._waiting_keys.add(key)
                        return
                    if group.next_allowed_at > now:
                        self._schedule(host, slot, group.next_allowed_at)
                        return
                    group.reserved += 1
                try:
                    # a store or bus call that never answers must not hold the host (and
                    # a unit of fetch capacity) for ever
                    limit = self.settings.crawl.stall_seconds / 2 or None
                    async with asyncio.timeout(limit):
                        dispatched = await self._dispatch_host(host, slot, now, key)
                except Exception as exc:  # a store or bus failure must not stop dispatching
                    log.warning("frontier: dispatching host %s failed (%r); trying again "
                                "in %g s", host, exc, DISPATCH_RETRY)
                    if self._slots.get(host) is slot:
                        self._schedule(host, slot, self.clock() + DISPATCH_RETRY)
                finally:
                    if group is not None:
                        group.reserved -= 1
        finally:
            slot.due_since = None
            self._dispatching -= 1
            if not dispatched:
                self._outstanding = max(0, self._outstanding - 1)
            if key is not None:
                self._wake_waiting(key)
            self._wake.set()

    def _budget_exhausted(self) -> bool:
        cap = self.settings.crawl.max_pages
        if cap and self.counters.dispatched >= cap:
            if not self._budget_spent:
                log.info("page budget of %d reached; no more dispatches this run", cap)
            self._budget_spent = True
            self._ready.clear()
            self._ready_refresh.clear()
            self._timer.clear()
            for slot in self._slots.values():
                slot.ready = False
                slot.wake_at = None
                slot.due_since = None
            for group in self._groups.values():  # nobody waits for a place any more
                group.waiting.clear()
            self._waiting_keys.clear()
            return True
        return False

    async def _dispatch_host(self, host: str, slot: HostSlot, now: float,
                             key: str | None = None) -> bool:
        """Send the host's next URL to the fetchers, or close, reschedule or forget the
        host. True when a request went out: the outstanding unit taken for this
        dispatch is then that request's. The caller holds the host's lock and, with a
        politeness ``key`` other than the host, a place of the key's group."""
        state = await self._settle(host, slot)
        cap = self.rules.page_cap(host, state)
        if state.page_count + slot.in_flight >= cap or state.blocked:
            if slot.in_flight == 0:
                await self._close_host(host, slot, Reason.BLOCKED if state.blocked
                                       else Reason.HOST_CAP)
            return False
        if not slot.head:
            slot.head.extend(await self.store.due_urls(host, now, HEAD_SIZE))
        if not slot.head:
            nxt = await self.store.next_due_time(host)
            if nxt is not None:
                self._schedule(host, slot, nxt)
            elif slot.in_flight == 0:
                del self._slots[host]  # idle: its row is in the store
            return False
        row = slot.head.popleft()
        # the operator's patterns and scope may have changed since the row was queued
        refused: Reason | None = None
        detail = row.detail
        spent = sitemap_files_refusal(row, state, self.settings.sitemaps.max_files_per_host)
        if spent is not None:
            refused, detail = spent
        elif self._blocked_paths and path_blocked(row.url, self._blocked_paths):
            refused = Reason.BLOCKED
        elif limits(self.scope) and not (row.depth == 0 and row.hops == 0):  # not a seed
            try:
                why = await self.seed_roots.verdict(row.url, host, self.scope)
            except BaseException:
                slot.head.appendleft(row)
                raise
            if why is not None:
                refused, detail = Reason.OUT_OF_SCOPE, f"out of scope: {why}"
        if refused is not None:
            before = row.detail
            row.status, row.reason, row.detail = UrlStatus.REJECTED, refused, detail
            try:
                await self.store.put_url(row)
            except BaseException:
                row.status, row.reason, row.detail = UrlStatus.QUEUED, None, before
                slot.head.appendleft(row)
                raise
            self.counters.rejected[refused.value] += 1
            self.metrics.count_rejected(refused, 1)
            self._schedule(host, slot, now)
            return False
        if first_sitemap_fetch(row):  # written with the row (cluster) or the result
            state.sitemap_files += 1
        row.status = UrlStatus.IN_FLIGHT
        row.attempts += 1
        task_id = uuid.uuid4().hex
        slot.tasks.add(task_id)
        try:
            delay = politeness_delay(state, self.settings.politeness, self.delay_overrides)
            # The longest this request can run: robots.txt and the page (each bounded by
            # the total timeout) and the rest between them. A new owner waits it out.
            fs = self.settings.fetcher
            lease_before = state.lease_until
            state.lease_until = max(state.lease_until, now + 2 * fs.total_timeout + delay
                                    + self.settings.politeness.max_crawl_delay)
            try:
                if self.embedded:
                    # embedded mode drops the lease on recovery, so the host row is
                    # written with the fetch result instead (one write less per page)
                    await self.store.put_url(row)
                else:
                    # the lease is for a later owner: in the same write as the row
                    await self.store.put_url_and_host(row, state)
            except BaseException:
                state.lease_until = lease_before  # no request can have gone out
                raise
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
                self._groups[key].tasks.add(task_id)
                self._task_keys[task_id] = key
            # with ip keying the task goes by its address, so that one fetcher (the
            # consumer of the address's partition) holds the address's gate whichever
            # frontier owns the host; otherwise by the host, on the host's partition
            await self.bus.publish(Topic.FETCH, task_route(host, key, self.key_mode), task)
        except BaseException:
            # The task may have gone out or not. The row goes back to the head with its
            # attempt still counted, so a late result of this task is a stale one; with
            # nothing in flight here the host waits out the lease set above.
            slot.tasks.discard(task_id)
            if key is not None:
                self._forget_task(task_id)
                group = self._groups[key]  # it rests as the host does
                group.next_allowed_at = max(group.next_allowed_at, state.lease_until)
            row.status = UrlStatus.QUEUED
            slot.head.appendleft(row)
            raise
        self.counters.dispatched += 1
        if is_refresh(row):
            self.counters.dispatched_refresh += 1
            self.metrics.dispatched.labels("refresh").inc()
        else:
            self.counters.dispatched_new += 1
            self.metrics.dispatched.labels("new").inc()
        if not slot.head:
            slot.refresh_next = False  # the next head read from the store says
        if slot.in_flight < self.settings.politeness.max_in_flight_per_host:
            self._schedule(host, slot, now)
        return True

    async def _close_host(self, host: str, slot: HostSlot, reason: Reason) -> None:
        """Reject every queued URL of a host that reached its cap or was blocked (called
        by the dispatch, after :meth:`_settle`)."""
        if reason is Reason.HOST_CAP and not slot.state.capped:
            slot.state.capped = True
            await self.store.put_host(slot.state)
        pending = list(slot.head)
        slot.head.clear()
        while True:
            rows = pending or await self.store.urls_with_status(UrlStatus.QUEUED, 500, host)
            pending = []
            if not rows:
                break
            for r in rows:
                r.status = UrlStatus.REJECTED
                r.reason = reason
            await self.store.put_urls(rows)
            self.counters.rejected[reason.value] += len(rows)
            self.metrics.count_rejected(reason, len(rows))
        del self._slots[host]

    def describe(self) -> str:
        """The in-memory scheduling state, for diagnostics."""
        now = self.clock()
        hosts = ", ".join(
            f"{h}(in_flight={s.in_flight} ready={s.ready} head={len(s.head)} "
            f"wake={None if s.wake_at is None else round(s.wake_at - now, 1)} "
            f"next={round(s.state.next_allowed_at - now, 1)} "
            f"lease={round(s.state.lease_until - now, 1)})"
            for h, s in sorted(self._slots.items()))
        return (f"owned={'all' if self._owned is None else sorted(self._owned)} "
                f"outstanding={self._outstanding} dispatching={self._dispatching} "
                f"timer={len(self._timer)} "
                f"ready={len(self._ready)}+{len(self._ready_refresh)} refreshing "
                f"hosts: {hosts}")

    def _dispatched_here(self, host: str) -> bool:
        slot = self._slots.get(host)
        return slot is not None and slot.in_flight > 0

    # ------------------------------------------------------------------ operator

    def pause(self) -> None:
        """Dispatch nothing until :meth:`resume` (requests in flight finish)."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._wake.set()

    async def set_host(self, change: HostControl) -> HostState:
        """Apply an operator's change to one host at once (embedded mode's API)."""
        async with self._gate.shared(), self._hosts.hold(change.host):
            state = await self._set_host(change)
        self._wake.set()
        return state

    async def _on_host_control(self, msg: HostControl) -> None:
        if not self.owns(msg.host):
            # the partition moved away meanwhile: the row is the new owner's to load
            old = await self.store.get_host(msg.host) or HostState(host=msg.host)
            await self.store.put_host(apply_host_control(old, msg))
            return
        state = await self._set_host(msg)
        log.info("frontier: host %s changed by the operator: delay override %s, "
                 "blocked %s, max pages %s", msg.host, state.delay_override, state.blocked,
                 state.max_pages)

    async def _set_host(self, change: HostControl) -> HostState:
        slot = await self._slot(change.host)
        state = apply_host_control(await self._settle(change.host, slot), change)
        slot.state = state
        await self.store.put_host(state)
        self._schedule(change.host, slot, state.next_allowed_at)
        return state

    def apply_control(self, control: CrawlControl, *, pause: bool = True) -> None:
        """Take the operator's crawl-wide switches: blocked path patterns, the crawl
        scope (None: the settings' one) and, unless ``pause`` is False (embedded mode
        starting up), the pause switch. A pattern that RE2 cannot run, or a scope that
        does not check, is skipped with an error (the API refuses both; this guards
        against a row written by other means or by an older version)."""
        if control.blocked_paths != self.control.blocked_paths:
            compiled: list[OperatorPattern] = []
            for pattern in control.blocked_paths:
                try:
                    compiled.append(compile_operator_pattern(pattern))
                except PatternError as exc:
                    log.error("frontier: blocked path pattern ignored: %s", exc)
            self._blocked_paths = tuple(compiled)
            log.info("frontier: blocked path patterns now %s", control.blocked_paths)
        if control.scope != self.control.scope:
            self.scope = self.settings_scope
            if control.scope is not None:
                try:
                    self.scope = checked_rules(**msgspec.structs.asdict(control.scope))
                except (ValueError, TypeError) as exc:
                    log.error("frontier: the operator's crawl scope ignored: %s", exc)
            log.info("frontier: crawl scope now %s (%s)", self.scope,
                     "the settings'" if self.scope is self.settings_scope
                     else "the operator's")
        self.control = control
        if pause and control.paused != self.paused:
            if control.paused:
                self.pause()
            else:
                self.resume()
            log.info("frontier: crawl %s by the operator",
                     "paused" if control.paused else "resumed")

    async def refresh_control(self) -> None:
        """Read the control row and apply it (pause only in cluster mode)."""
        self.apply_control(await self.store.get_control(), pause=not self.embedded)

    async def watch_control(self, interval: float) -> None:
        """Cluster mode: follow the control row (every frontier reads it)."""
        while not self._stopped:
            try:
                await self.refresh_control()
            except Exception as exc:  # a store hiccup must not stop the frontier
                log.warning("frontier: reading the control row failed: %s", exc)
            await asyncio.sleep(interval)


def _with_verdict(row: UrlState, msg: StatusUpdate) -> None:
    """Close a stored page's row with a later stage's verdict."""
    row.status = msg.status
    row.reason = msg.reason
    if msg.duplicate_of is not None:
        row.duplicate_of = msg.duplicate_of
    if msg.simhash is not None:
        row.simhash = msg.simhash
    if msg.detail is not None:
        row.detail = msg.detail


def _replay_result(row: UrlState) -> FetchResult:
    """A FetchResult rebuilt from a FETCHED row, to hand it to the parser again."""
    task = FetchTask(task_id="replay", url=row.url, host=row.host, depth=row.depth,
                     priority=row.priority, attempt=row.attempts, hops=row.hops,
                     kind=row.kind or TaskKind.PAGE,
                     source=row.source if row.kind is TaskKind.SITEMAP else None)
    return FetchResult(task=task, outcome=FetchOutcome.OK, status=row.http_status or 200,
                       fetched_at=row.last_fetch_at or 0.0, record=row.record,
                       content_hash=row.content_hash, duplicate_of=row.duplicate_of,
                       etag=row.etag, last_modified=row.last_modified)

