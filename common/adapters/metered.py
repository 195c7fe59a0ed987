"""A :class:`~common.ports.StateStore` that times every call of another one.

:class:`MeteredStateStore` wraps any state store (SQLite, Cassandra) and records each
call in :class:`~common.metrics.StoreMetrics`: its duration in
``crawler_store_request_duration_seconds{operation=<method>}`` and, when it raises,
one more ``crawler_store_request_errors_total{operation=<method>}``. The operation
label is the method name, one of :data:`~common.metrics.STORE_OPERATIONS`. Results and
exceptions pass through unchanged::

    store = MeteredStateStore(SqliteStateStore(path), metrics.store)
"""

from __future__ import annotations

from collections.abc import Sequence

from common.messages import NearIndex, RecordPointer, UrlStatus
from common.metrics import StoreMetrics
from common.ports import (
    CrawlControl,
    HostState,
    RobotsRecord,
    SeedRoot,
    StateStore,
    UrlState,
)

__all__ = ["MeteredStateStore"]


class MeteredStateStore:
    """:class:`~common.ports.StateStore` delegating to ``inner`` and timing each call."""

    def __init__(self, inner: StateStore, metrics: StoreMetrics) -> None:
        self._inner = inner
        self._metrics = metrics

    def forget_cached(self) -> None:
        self._inner.forget_cached()

    @property
    def inner(self) -> StateStore:
        """The wrapped store."""
        return self._inner

    def __repr__(self) -> str:
        return f"MeteredStateStore({self._inner!r})"

    async def __aenter__(self) -> MeteredStateStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        with self._metrics.time("open"):
            await self._inner.open()

    async def close(self) -> None:
        with self._metrics.time("close"):
            await self._inner.close()

    # url_state
    async def add_urls(self, rows: Sequence[UrlState]) -> list[UrlState]:
        with self._metrics.time("add_urls"):
            return await self._inner.add_urls(rows)

    async def get_url(self, host: str, url: str) -> UrlState | None:
        with self._metrics.time("get_url"):
            return await self._inner.get_url(host, url)

    async def put_url(self, row: UrlState) -> None:
        with self._metrics.time("put_url"):
            await self._inner.put_url(row)

    async def put_urls(self, rows: Sequence[UrlState]) -> None:
        with self._metrics.time("put_urls"):
            await self._inner.put_urls(rows)

    async def due_urls(self, host: str, now: float, limit: int) -> list[UrlState]:
        with self._metrics.time("due_urls"):
            return await self._inner.due_urls(host, now, limit)

    async def next_due_time(self, host: str) -> float | None:
        with self._metrics.time("next_due_time"):
            return await self._inner.next_due_time(host)

    async def urls_with_status(self, status: UrlStatus, limit: int,
                               host: str | None = None) -> list[UrlState]:
        with self._metrics.time("urls_with_status"):
            return await self._inner.urls_with_status(status, limit, host)

    async def hosts_with_status(self, status: UrlStatus) -> list[str]:
        with self._metrics.time("hosts_with_status"):
            return await self._inner.hosts_with_status(status)

    async def count_urls(self) -> dict[tuple[str, str], int]:
        with self._metrics.time("count_urls"):
            return await self._inner.count_urls()

    # hosts
    async def get_host(self, host: str) -> HostState | None:
        with self._metrics.time("get_host"):
            return await self._inner.get_host(host)

    async def put_url_and_host(self, row: UrlState, host: HostState, *,
                               index: NearIndex | None = None) -> None:
        with self._metrics.time("put_url_and_host"):
            await self._inner.put_url_and_host(row, host, index=index)

    async def put_host(self, row: HostState) -> None:
        with self._metrics.time("put_host"):
            await self._inner.put_host(row)

    async def list_hosts(self) -> list[HostState]:
        with self._metrics.time("list_hosts"):
            return await self._inner.list_hosts()

    # crawl-wide operator switches
    async def get_control(self) -> CrawlControl:
        with self._metrics.time("get_control"):
            return await self._inner.get_control()

    async def put_control(self, row: CrawlControl) -> None:
        with self._metrics.time("put_control"):
            await self._inner.put_control(row)

    # seeds as the crawl scope knows them
    async def add_seed_roots(self, rows: Sequence[SeedRoot]) -> None:
        with self._metrics.time("add_seed_roots"):
            await self._inner.add_seed_roots(rows)

    async def seed_roots(self, domain: str) -> list[SeedRoot]:
        with self._metrics.time("seed_roots"):
            return await self._inner.seed_roots(domain)

    # robots.txt cache
    async def get_robots(self, origin: str) -> RobotsRecord | None:
        with self._metrics.time("get_robots"):
            return await self._inner.get_robots(origin)

    async def put_robots(self, row: RobotsRecord) -> None:
        with self._metrics.time("put_robots"):
            await self._inner.put_robots(row)

    # content fingerprints
    async def content_holder(self, content_hash: str
                             ) -> tuple[str, RecordPointer | None] | None:
        with self._metrics.time("content_holder"):
            return await self._inner.content_holder(content_hash)

    async def record_content(self, content_hash: str, url: str,
                             record: RecordPointer) -> None:
        with self._metrics.time("record_content"):
            await self._inner.record_content(content_hash, url, record)

    async def add_simhash(self, keys: Sequence[int], url: str, simhash: int,
                          sketch: bytes | None = None) -> None:
        with self._metrics.time("add_simhash"):
            await self._inner.add_simhash(keys, url, simhash, sketch)

    async def simhash_candidates(self, keys: Sequence[int]) -> list[tuple[str, int]]:
        with self._metrics.time("simhash_candidates"):
            return await self._inner.simhash_candidates(keys)

    async def simhash_sketches(self, urls: Sequence[str]) -> dict[str, bytes]:
        with self._metrics.time("simhash_sketches"):
            return await self._inner.simhash_sketches(urls)
