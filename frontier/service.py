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
  flight (:class:`~frontier.state.KeyGroup`); a due host whose key is busy waits in the
  key's line and the place that frees next goes to the first host in it
  (docs/politeness.md).

:class:`Frontier` wires the parts, each a small object holding its own state:

- frontier.hosts: the host table (slots, per-host locks, the ownership gate, the timer
  heap, which hosts are owned) and frontier.keys, the politeness-key groups;
- frontier.dispatch: the ready heaps, the dispatch tasks, the page budget and the
  stall watchdog;
- frontier.ownership: assign, recover and the refreshes of owned hosts;
- frontier.control: the operator's switches and host changes;
- frontier.intake and frontier.results: the handlers of discovered URLs, and of fetch
  results and verdicts.

This module routes each message to its handler under the ownership gate (shared) and
the lock of the host it is about, and runs the dispatch loop. Many hosts are worked on
at once, each by one coroutine at a time; ownership changes hold the gate exclusively
(frontier.ownership). Every decision is made by the pure functions of frontier.policy;
the parts only move rows in and out of the store and messages on and off the bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from common import urls
from common.clock import wall_clock
from common.keyedlock import KeyedLock
from common.messages import (
    Discovered,
    FetchResult,
    HostControl,
    StatusUpdate,
    UrlStatus,
)
from common.metrics import Metrics
from common.politeness import key_mode
from common.ports import Bus, CrawlControl, Delivery, HostState, ScopeRules, StateStore
from common.settings import Settings, parse_host_map
from frontier.control import Operator
from frontier.dispatch import Dispatcher
from frontier.gate import OwnershipGate
from frontier.hosts import HostTable
from frontier.intake import Intake
from frontier.keys import KeyGroups
from frontier.ownership import Ownership
from frontier.policy import TrapRules
from frontier.results import Results
from frontier.scope import SeedRegistry
from frontier.seeds import publish_batch, seed_batch
from frontier.seen import SeenFilter
from frontier.state import Context, FrontierCounters, HostSlot, KeyGroup, Resolve

__all__ = ["Frontier", "FrontierCounters", "HostLocks", "HostSlot", "KeyGroup",
           "OwnershipGate", "Resolve"]

log = logging.getLogger(__name__)

HostLocks = KeyedLock  # one lock per host (common.keyedlock)

STOP_GRACE = 10.0  # seconds run() waits for dispatches in progress when stopped
FEW_HOSTS = 5  # the status line shows every host's state when at most this many remain


class Frontier:
    """One frontier: the whole crawl's (embedded mode) or the hosts of the partitions
    the bus assigned to it (cluster mode)."""

    def __init__(self, settings: Settings, bus: Bus, store: StateStore, *,
                 clock: Callable[[], float] | None = None,
                 embedded: bool = True,
                 seen_capacity: int = 1_000_000,
                 metrics: Metrics | None = None,
                 resolve: Resolve | None = None) -> None:
        """``resolve``: with ``CRAWLER_POLITENESS_KEY=ip``, the name resolution hosts
        are keyed by (the fetcher's resolver); required then, unused otherwise."""
        self.settings = settings
        self.bus = bus
        self.store = store
        # the crawl's clock (common.clock): the wall clock, or one a test moves
        self.clock = clock if clock is not None else wall_clock(settings)
        self.embedded = embedded
        self.rules = TrapRules.from_settings(settings.traps)
        self.tracking = urls.TrackingRules.from_settings(settings.urls)
        self.delay_overrides = parse_host_map(settings.politeness.host_delay_overrides,
                                              "CRAWLER_POLITENESS_HOST_DELAY_OVERRIDES", float)
        self.seen = SeenFilter(capacity=seen_capacity, error_rate=0.01)
        self.counters = FrontierCounters()
        self.metrics = (metrics or Metrics.create(roles=(), process=False)).frontier
        self.seed_roots = SeedRegistry(store, complete=embedded)
        self._stopped = False
        ctx = Context(settings=settings, bus=bus, store=store, clock=self.clock,
                      embedded=embedded, rules=self.rules, tracking=self.tracking,
                      delay_overrides=self.delay_overrides, counters=self.counters,
                      metrics=self.metrics, wake=asyncio.Event())
        self._ctx = ctx
        # politeness keys (common.politeness): with ``host`` each host is its own queue
        self.key_mode = key_mode(settings.politeness.key)
        self.keys = KeyGroups(self.key_mode, resolve, self.metrics, embedded=embedded)
        self.hosts = HostTable(ctx, self.keys)
        self.operator = Operator(ctx, self.hosts)
        self.dispatcher = Dispatcher(ctx, self.hosts, self.operator, self.seed_roots,
                                     recover=lambda: self.ownership.recover(replay=False))
        self.ownership = Ownership(ctx, self.hosts, self.dispatcher, self.operator)
        self.intake = Intake(ctx, self.hosts, self.operator, self.seed_roots, self.seen)
        self.results = Results(ctx, self.hosts, self.dispatcher)

    # ------------------------------------------------------------------ messages

    async def handle(self, delivery: Delivery) -> None:
        """One message of topics discovered, fetched, status or control: under the
        ownership gate (shared) and, for a message about one host, that host's lock."""
        msg = delivery.message
        gate, locks = self.hosts.gate, self.hosts.locks
        async with gate.shared():
            if isinstance(msg, Discovered):
                # takes the lock of each host it schedules
                await self.intake.on_discovered(msg, retry=delivery.calls > 1
                                                or delivery.attempt > 1)
            elif isinstance(msg, FetchResult):
                async with locks.hold(msg.task.host):
                    await self.results.on_result(msg, retry=delivery.calls > 1
                                                 or delivery.attempt > 1)
            elif isinstance(msg, StatusUpdate):
                async with locks.hold(msg.host):
                    await self.results.on_status(msg)
            elif isinstance(msg, HostControl):
                async with locks.hold(msg.host):
                    await self.operator.on_host_control(msg)
            else:
                raise TypeError(f"frontier cannot handle {type(msg).__name__}")
        self._ctx.wake.set()

    async def seed(self, seed_urls: Iterable[str], priority: int | None = None) -> int:
        """Offer seed URLs (through the bus, so each reaches its host's owner)."""
        prio = self.settings.crawl.seed_priority if priority is None else priority
        batch = seed_batch(seed_urls, prio, self.tracking)
        await publish_batch(self.bus, batch)
        for raw, why in batch.rejected:
            log.warning("seed %r is not a crawlable URL: %s", raw[:500], why)
        return batch.count

    # ------------------------------------------------------------------ ownership

    def owns(self, host: str) -> bool:
        return self.hosts.owns(host)

    async def assign(self, partitions: frozenset[int]) -> None:
        """The bus moved partitions (cluster mode); see
        :meth:`frontier.ownership.Ownership.assign`."""
        await self.ownership.assign(partitions)

    def in_flight(self) -> int:
        """Requests this instance has in flight (their rows are QUEUED in the store)."""
        return sum(len(slot.flying) for slot in self.hosts.slots.values())

    async def recover(self, *, replay: bool = True) -> None:
        """Make the store consistent and schedule the owned hosts; see
        :meth:`frontier.ownership.Ownership.recover`."""
        await self.ownership.recover(replay=replay)

    async def check_refreshes(self, now: float | None = None) -> int:
        """Queue the stored pages whose refresh time has come; how many."""
        return await self.ownership.check_refreshes(now)

    # ------------------------------------------------------------------ operator

    @property
    def paused(self) -> bool:
        return self.operator.paused

    @property
    def control(self) -> CrawlControl:
        return self.operator.control

    @property
    def scope(self) -> ScopeRules:
        return self.operator.scope

    @property
    def settings_scope(self) -> ScopeRules:
        return self.operator.settings_scope

    def pause(self) -> None:
        """Dispatch nothing until :meth:`resume` (requests in flight finish)."""
        self.operator.pause()

    def resume(self) -> None:
        self.operator.resume()

    async def set_host(self, change: HostControl) -> HostState:
        """Apply an operator's change to one host at once (embedded mode's API)."""
        return await self.operator.set_host(change)

    def apply_control(self, control: CrawlControl, *, pause: bool = True) -> None:
        """Take the operator's crawl-wide switches; see
        :meth:`frontier.control.Operator.apply`."""
        self.operator.apply(control, pause=pause)

    async def refresh_control(self) -> None:
        """Read the control row and apply it (pause only in cluster mode)."""
        await self.operator.refresh()

    async def watch_control(self, interval: float) -> None:
        """Cluster mode: follow the control row (every frontier reads it)."""
        await self.operator.watch(interval, lambda: self._stopped)

    # ------------------------------------------------------------------ dispatch

    @property
    def verdict_hold(self) -> float:
        return self.results.verdict_hold

    @property
    def key_moves(self) -> int:
        """Hosts whose ip key changed with a new DNS answer."""
        return self.keys.moves

    @property
    def max_outstanding(self) -> int:
        return self.dispatcher.max_outstanding

    @max_outstanding.setter
    def max_outstanding(self, value: int) -> None:
        self.dispatcher.max_outstanding = value

    @property
    def outstanding(self) -> int:
        return self.dispatcher.outstanding

    def idle(self) -> bool:
        """Nothing queued that can ever become due in this run, and nothing in flight."""
        return self.dispatcher.idle()

    def next_wake(self) -> float | None:
        timer = self.hosts.timer
        return timer[0][0] if timer else None

    def oldest_due(self, now: float | None = None) -> float:
        """Seconds the oldest due host has waited without a request going out."""
        return self.dispatcher.oldest_due(now)

    async def check_stall(self) -> bool:
        """The watchdog; see :meth:`frontier.dispatch.Dispatcher.check_stall`."""
        return await self.dispatcher.check_stall()

    def describe(self) -> str:
        """The in-memory scheduling state, for diagnostics."""
        return self.dispatcher.describe()

    async def stop(self) -> None:
        self._stopped = True
        self._ctx.wake.set()

    async def run(self) -> None:
        """Dispatch due URLs until :meth:`stop`."""
        hosts, dispatcher, ownership = self.hosts, self.dispatcher, self.ownership
        wake, metrics = self._ctx.wake, self.metrics
        last_status = last_check = 0.0
        try:
            while not self._stopped:
                metrics.active_hosts.set(len(hosts.slots))
                metrics.in_flight_urls.set(dispatcher.outstanding)
                if self.key_mode != "host":
                    metrics.key_waiting.set(self.keys.waiting_hosts())
                metrics.owned_partitions.set(0 if hosts.owned is None else len(hosts.owned))
                if time.monotonic() - last_status > 10:
                    last_status = time.monotonic()
                    await self._log_status()
                if time.monotonic() - last_check >= 1.0:
                    last_check = time.monotonic()
                    await dispatcher.check_stall()
                    if self.key_mode != "host":
                        hosts.tend_groups()
                ownership.start_refresh_check()
                wake.clear()
                dispatcher.dispatch(self.clock())
                if self._stopped:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=self._wait_timeout())
            if dispatcher.tasks:
                await asyncio.wait(dispatcher.tasks, timeout=STOP_GRACE)
            if not self._ctx.embedded:
                released = await hosts.release_leases(self.clock())
                if released:
                    log.info("frontier stopping: ended %d host leases", released)
        finally:
            if ownership.refresh_task is not None:
                ownership.refresh_task.cancel()
                with contextlib.suppress(BaseException):
                    await ownership.refresh_task
            left = list(dispatcher.tasks)
            for task in left:
                task.cancel()
            if left:
                await asyncio.gather(*left, return_exceptions=True)

    def _wait_timeout(self) -> float | None:
        """How long the loop may sleep unless woken: until the next timer, not at all
        with a ready host and room for it, about a second for the watchdog, the look for
        due refreshes and hosts waiting for a key's place; None: until woken."""
        hosts, dispatcher = self.hosts, self.dispatcher
        paused = self.operator.paused
        timeout: float | None = None
        if hosts.timer and not paused:
            timeout = max(0.0, hosts.timer[0][0] - self.clock())
        if ((dispatcher.ready or dispatcher.ready_refresh) and dispatcher.may_start()
                and not paused):
            timeout = 0.0
        next_refresh_check = self.ownership.next_refresh_check
        if self.settings.crawl.stall_seconds or next_refresh_check:
            # the watchdog and the look for due refreshes: about every second
            # (or every refresh.check_interval, if shorter)
            wake = (min(1.0, self.settings.refresh.check_interval)
                    if next_refresh_check else 1.0)
            timeout = wake if timeout is None else min(timeout, wake)
        if hosts.keys.waiting_keys:  # hosts waiting for a key's place: tended each second
            timeout = 1.0 if timeout is None else min(timeout, 1.0)
        return timeout

    async def _log_status(self) -> None:
        """The status line (every 10 s of the loop) and the queued-URLs gauge."""
        hosts, dispatcher = self.hosts, self.dispatcher
        with contextlib.suppress(Exception):  # a gauge must not stop dispatching
            counts = await self.store.count_urls()
            self.metrics.queued_urls.set(
                sum(n for (st, _), n in counts.items() if st == UrlStatus.QUEUED))
        log.info("frontier: owned %s, %d hosts in memory, %d timed, %d ready, "
                 "%d outstanding, %d dispatching, %d dispatched, "
                 "%d stale results",
                 "all" if hosts.owned is None else sorted(hosts.owned),
                 len(hosts.slots), len(hosts.timer),
                 len(dispatcher.ready) + len(dispatcher.ready_refresh),
                 dispatcher.outstanding, dispatcher.dispatching,
                 self.counters.dispatched, self.counters.stale_results)
        if 0 < len(hosts.slots) <= FEW_HOSTS:  # the last hosts of a crawl
            log.info("frontier: %s", self.describe())
