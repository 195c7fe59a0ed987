"""The robots.txt cache: one answer per origin, in memory in front of the state store.

:meth:`RobotsCache.get` returns a :class:`RobotsDecision` for an origin
(``scheme://host[:port]``, see :func:`common.urls.origin`):

1. a fresh answer in memory is used as it is;
2. else a fresh :class:`~common.ports.RobotsRecord` in the store (another fetcher, or
   before a restart) is parsed and kept in memory;
3. else robots.txt is fetched (redirects followed, each hop through the SSRF guard),
   turned into an answer by :func:`common.robots.decide_from_status` and written to the
   store: 2xx -> the file's rules, 3xx/4xx -> allow all, for ``robots_cache_ttl``;
   5xx, 429, timeout, network, DNS or SSRF failure -> disallow all, for the retry
   back-off of the attempt that met it (``politeness.backoff_base`` doubled for each
   attempt of the URL before, :func:`common.politeness.retry_backoff`) and at most
   ``robots_error_retry`` seconds, so it is fetched again when that URL is tried again
   (fail closed).

Concurrent calls for one origin share a single fetch. Every call that waited on a
fetch gets ``fetched=True``: a request just reached the host, so the caller waits the
politeness delay before its page request. Only the call that started the fetch gets
the :class:`~fetcher.http.RobotsResponse` (to archive it once).

Times are wall-clock seconds (records are shared between processes).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from common import urls
from common.adapters.handling import while_down
from common.clock import wall_clock
from common.messages import FetchOutcome
from common.politeness import retry_backoff
from common.ports import RobotsRecord, StateStore
from common.robots import RobotsAnswer, RobotsBasis, decide_from_status
from common.settings import Settings
from fetcher.http import RobotsResponse

Clock = Callable[[], float]

log = logging.getLogger(__name__)


class RobotsFetcher(Protocol):
    async def fetch_robots(self, origin: str) -> RobotsResponse: ...


@dataclass(frozen=True, slots=True)
class RobotsDecision:
    """The robots.txt answer for one origin, as one call obtained it."""

    origin: str
    answer: RobotsAnswer
    status: int  # HTTP status robots.txt answered with; 0 when no response came
    fetched_at: float
    expires_at: float
    product_token: str
    max_crawl_delay: float
    fetched: bool = False  # a robots.txt request reached the host during this call
    response: RobotsResponse | None = None  # the fetch this call made (archive it)
    outcome: FetchOutcome | None = None  # the robots fetch's outcome, when fetched now
    error: str | None = None

    def allowed(self, url: str) -> bool:
        """Whether the crawler may fetch ``url`` (False for everything but /robots.txt
        while robots.txt is unavailable)."""
        return self.answer.policy.allowed(url, self.product_token)

    @property
    def available(self) -> bool:
        """False when robots.txt could not be read (5xx, 429, timeout, network error)."""
        return self.answer.available

    @property
    def basis(self) -> RobotsBasis:
        return self.answer.basis

    @property
    def crawl_delay(self) -> float | None:
        """Crawl-delay for our product token, capped at ``politeness.max_crawl_delay``."""
        delay = self.answer.policy.crawl_delay(self.product_token)
        return None if delay is None else min(delay, self.max_crawl_delay)

    def sitemaps(self) -> list[str]:
        return self.answer.policy.sitemaps()


@dataclass(frozen=True, slots=True)
class _Entry:
    record: RobotsRecord
    answer: RobotsAnswer


@dataclass(frozen=True, slots=True)
class RobotsCacheStats:
    memory_hits: int
    store_hits: int
    fetches: int
    shared: int  # calls that joined a fetch already in flight
    size: int


class RobotsCache:
    """robots.txt answers per origin: memory, then store, then a fetch."""

    def __init__(self, store: StateStore, fetcher: RobotsFetcher, settings: Settings, *,
                 clock: Clock | None = None, max_entries: int = 10_000) -> None:
        self._store = store
        self._fetcher = fetcher
        self._settings = settings
        self._clock = clock if clock is not None else wall_clock(settings)
        self._max_entries = max_entries
        self._ttl = settings.fetcher.robots_cache_ttl
        self._error_ttl = settings.fetcher.robots_error_retry
        self._max_bytes = settings.fetcher.robots_max_bytes
        self._token = settings.crawl.user_agent_product
        self._max_delay = settings.politeness.max_crawl_delay
        self._memory: OrderedDict[str, _Entry] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[tuple[_Entry, RobotsResponse | None]]] = {}
        self._memory_hits = self._store_hits = self._fetches = self._shared = 0

    @property
    def stats(self) -> RobotsCacheStats:
        return RobotsCacheStats(self._memory_hits, self._store_hits, self._fetches,
                                self._shared, len(self._memory))

    async def for_url(self, url: str, *, attempt: int = 1) -> RobotsDecision:
        """The decision for the origin of ``url``; raises ``ValueError`` for a URL that
        is not http(s). ``attempt``: which try of ``url`` asks (1 for the first)."""
        return await self.get(urls.origin(url), attempt=attempt)

    async def get(self, origin: str, *, attempt: int = 1) -> RobotsDecision:
        """``attempt``: the try of the URL that asks; a failure met now is remembered for
        that try's back-off (at most ``robots_error_retry``)."""
        cached = self._fresh(origin)
        if cached is not None:
            self._memory_hits += 1
            return self._decision(cached)
        task = self._inflight.get(origin)
        leader = task is None
        if task is None:
            task = asyncio.ensure_future(self._load(origin, attempt))
            self._inflight[origin] = task
            task.add_done_callback(lambda t: self._load_done(origin, t))
        else:
            self._shared += 1
        # A cancelled caller does not cancel the fetch others wait for.
        entry, response = await asyncio.shield(task)
        if response is None:
            return self._decision(entry)
        return self._decision(entry, fetch=response, archive=leader)

    def invalidate(self, origin: str) -> None:
        """Forget the in-memory answer (the store's copy stays until it expires)."""
        self._memory.pop(origin, None)

    def _fresh(self, origin: str) -> _Entry | None:
        entry = self._memory.get(origin)
        if entry is None:
            return None
        if entry.record.expires_at <= self._clock():
            del self._memory[origin]
            return None
        self._memory.move_to_end(origin)
        return entry

    def _load_done(self, origin: str, task: asyncio.Future[tuple[_Entry,
                                                                 RobotsResponse | None]]) -> None:
        if self._inflight.get(origin) is task:
            del self._inflight[origin]
        if not task.cancelled():
            task.exception()  # retrieved here; the waiters re-raise it

    async def _load(self, origin: str, attempt: int) -> tuple[_Entry, RobotsResponse | None]:
        stored = await self._store.get_robots(origin)
        if stored is not None and stored.expires_at > self._clock():
            self._store_hits += 1
            status = stored.status or None
            entry = _Entry(stored, decide_from_status(status, stored.body,
                                                      max_bytes=self._max_bytes))
            self._remember(origin, entry)
            return entry, None
        self._fetches += 1
        response = await self._fetcher.fetch_robots(origin)
        answer = decide_from_status(response.status, response.body,
                                    max_bytes=self._max_bytes)
        now = self._clock()
        if answer.available:
            ttl = self._ttl
        else:
            ttl = self._error_period(attempt)
            log.info("robots.txt of %s unavailable (%s): its URLs wait %g s", origin,
                     response.error or f"status {response.status or 0}", ttl)
        record = RobotsRecord(origin=origin, status=response.status or 0,
                              body=response.body[:self._max_bytes], fetched_at=now,
                              expires_at=now + ttl)
        # robots.txt was fetched: keep the answer through a store outage rather than
        # fetch it again
        await while_down(lambda: self._store.put_robots(record), f"storing {origin}/robots.txt")
        entry = _Entry(record, answer)
        self._remember(origin, entry)
        return entry, response

    def _error_period(self, attempt: int) -> float:
        """How long a failure met by the ``attempt``-th try of a URL is remembered: that
        try's retry back-off, at most ``robots_error_retry``. The URL comes again when it
        runs out and asks again; a try of another URL meanwhile waits for it too
        (frontier.policy.apply_result)."""
        pol = self._settings.politeness
        return min(self._error_ttl, retry_backoff(attempt, pol.backoff_base, pol.backoff_max))

    def _remember(self, origin: str, entry: _Entry) -> None:
        if entry.record.expires_at <= self._clock():
            return
        self._memory[origin] = entry
        self._memory.move_to_end(origin)
        while len(self._memory) > self._max_entries:
            self._memory.popitem(last=False)

    def _decision(self, entry: _Entry, *, fetch: RobotsResponse | None = None,
                  archive: bool = False) -> RobotsDecision:
        """``fetch``: the robots.txt fetch this call waited on; ``archive``: this call
        started it (and gets the response to archive)."""
        return RobotsDecision(
            origin=entry.record.origin, answer=entry.answer, status=entry.record.status,
            fetched_at=entry.record.fetched_at, expires_at=entry.record.expires_at,
            product_token=self._token, max_crawl_delay=self._max_delay,
            fetched=fetch is not None, response=fetch if archive else None,
            outcome=fetch.outcome if fetch is not None else None,
            error=fetch.error if fetch is not None else None)
