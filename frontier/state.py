"""What the frontier's parts share: the record of a host being worked on
(:class:`HostSlot`), of a politeness key's hosts (:class:`KeyGroup`), the run's
counters (:class:`FrontierCounters`) and the context every part is built with
(:class:`Context`: settings, ports, clock, rules). Data only; no I/O."""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from common import urls
from common.metrics import FrontierMetrics
from common.ports import Bus, HostState, StateStore, UrlState
from common.settings import Settings
from frontier.policy import TrapRules, is_refresh

HEAD_SIZE = 8  # URLs of a host's queue read from the store at a time
DISPATCH_TASKS = 32  # host dispatches in progress at once

Resolve = Callable[[str, int | None], Awaitable[Sequence[str]]]
"""A host name (and port) -> its addresses; a failure raises. With
``CRAWLER_POLITENESS_KEY=ip`` whoever builds the frontier passes the fetcher's resolver
(its DNS settings and cache), so the address keyed is the one the fetcher connects to."""


@dataclass(slots=True)
class HostSlot:
    """A host the frontier is working on: its row, its queue head, its in-flight count."""

    state: HostState
    head: deque[UrlState] = field(default_factory=deque)
    tasks: set[str] = field(default_factory=set)  # ids of tasks this instance dispatched
    # the rows of those tasks, by task id: IN_FLIGHT in memory only (the store keeps
    # them QUEUED until their result is written; see frontier.dispatch)
    flying: dict[str, UrlState] = field(default_factory=dict)
    # a request an earlier owner (or a dispatch whose publish failed) may still have
    # out runs until then: with nothing in flight here the host waits it out
    foreign_lease: float = 0.0
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
        return max(at, self.foreign_lease) if self.in_flight == 0 else at

    def flying_urls(self) -> set[str]:
        """URLs of the requests in flight here."""
        return {row.url for row in self.flying.values()}

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
    rests (:meth:`frontier.keys.KeyGroups.join`)."""

    next_allowed_at: float = 0.0
    tasks: set[str] = field(default_factory=set)  # ids of its requests in flight
    reserved: int = 0  # dispatches in progress that hold one of its places
    # hosts that found it busy, in order; the next place goes to the first
    waiting: dict[str, None] = field(default_factory=dict)

    @property
    def in_flight(self) -> int:
        return len(self.tasks) + self.reserved


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
    readmitted: int = 0  # URLs rejected for depth, queued when found on a shorter path
    dispatched_new: int = 0  # fetch tasks of pages never stored
    dispatched_refresh: int = 0  # fetch tasks of stored pages (refreshes)
    refresh_due: dict[str, int] = field(default_factory=dict)  # as of the last look
    refresh_checks: int = 0  # looks for due refreshes while running, finished


@dataclass(frozen=True, slots=True, eq=False)
class Context:
    """What every part of one frontier reads: settings and rules made from them, the
    bus and the store, the crawl's clock, the run's counters and metrics, and the event
    that wakes the dispatch loop (set whenever something may have become due)."""

    settings: Settings
    bus: Bus
    store: StateStore
    clock: Callable[[], float]
    embedded: bool  # one process owns every host (else: a cluster frontier)
    rules: TrapRules
    tracking: urls.TrackingRules
    delay_overrides: dict[str, float]
    counters: FrontierCounters
    metrics: FrontierMetrics
    wake: asyncio.Event
