"""The three ports every stage talks through, and the state records they hold.

- :class:`Bus`: publish and consume host-keyed topics (in-process queues, or Kafka).
- :class:`StateStore`: url_state, hosts, robots answers and content fingerprints
  (SQLite, or Cassandra).
- :class:`BlobStore`: append-only files for WARC records, text records and indexes
  (a local folder; a shared volume in a cluster).

Stages depend on these protocols only; adapters live in ``common.adapters``. One
contract test suite (tests/contract) runs against every adapter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec

from common.messages import (
    Message,
    NearIndex,
    Reason,
    RecordPointer,
    TaskKind,
    Topic,
    UrlStatus,
)


class UrlState(msgspec.Struct, kw_only=True):
    """One row of url_state, keyed by (host, url). Written only by the host's frontier."""

    host: str
    url: str  # canonical URL
    status: UrlStatus = UrlStatus.QUEUED
    reason: Reason | None = None
    detail: str | None = None
    depth: int = 0
    priority: int = 1
    hops: int = 0
    source: str | None = None
    discovered_at: float = 0.0
    seq: int = 0  # discovery order within the store; breadth-first tie-break
    last_fetch_at: float | None = None
    next_fetch_at: float = 0.0  # not eligible before this time (retries, refresh)
    attempts: int = 0
    http_status: int | None = None
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    simhash: int | None = None
    duplicate_of: str | None = None
    revisit_interval: float | None = None
    record: RecordPointer | None = None
    kind: TaskKind | None = None  # how its body is read; None: a page
    lastmod: float | None = None  # the <lastmod> its sitemap last gave (Unix time)


class HostState(msgspec.Struct, kw_only=True):
    """One row of hosts. Written only by the host's frontier."""

    host: str
    crawl_delay: float | None = None  # from robots.txt, capped
    delay_override: float | None = None  # operator override (seconds)
    blocked: bool = False
    max_pages: int | None = None  # operator override of the pages-per-host cap
    page_count: int = 0  # fetch attempts that reached the host (pages, not robots)
    next_allowed_at: float = 0.0  # wall clock; survives restarts and owner changes
    lease_until: float = 0.0  # a dispatched request may run until then (owner handover)
    last_response_time: float = 0.0
    capped: bool = False  # the host reached its page cap
    refreshes: int = 0  # of page_count: fetches of pages already stored (refreshes)
    sitemap_files: int = 0  # sitemap files dispatched for the first time (their cap)


class ScopeRules(msgspec.Struct, frozen=True, kw_only=True):
    """Where a crawl's discovered links may lead (see common.scope and frontier.scope):
    from the settings (``CRAWLER_SCOPE_*``) or the operator (``PUT /v1/scope``)."""

    mode: str = "any"  # any | seed-hosts | seed-domains
    allow_domains: tuple[str, ...] = ()  # each covers its subdomains
    deny_domains: tuple[str, ...] = ()  # each covers its subdomains; wins over allow
    path_prefixes: tuple[str, ...] = ()  # '/docs' covers /docs and /docs/..., every host
    no_parent: bool = False  # a seed's host stays under its seeds' folders


class SeedRoot(msgspec.Struct, frozen=True, kw_only=True):
    """One seed as the crawl scope knows it: seeds and the targets of their redirects,
    recorded by the frontier that owns their host, read by every frontier."""

    domain: str  # registered domain of the host (Public Suffix List, private part too)
    host: str  # host name, without port
    path: str  # folder of the seed URL ('/docs/guide/' for /docs/guide/index.html)


class CrawlControl(msgspec.Struct, kw_only=True):
    """The operator's crawl-wide switches (one row), read by every frontier (and, for
    the render rules, by every parser that chooses pages to render)."""

    paused: bool = False
    blocked_paths: list[str] = msgspec.field(default_factory=list)  # regular expressions
    updated_at: float = 0.0
    scope: ScopeRules | None = None  # the operator's scope; None: the settings' one
    # the operator's render rules (docs/rendering.md), on top of CRAWLER_RENDER_*
    render_hosts: list[str] = msgspec.field(default_factory=list)
    render_patterns: list[str] = msgspec.field(default_factory=list)


def encode_control(row: CrawlControl) -> str:
    """The stored form of the control row (JSON), the same in every store."""
    return msgspec.json.encode(row).decode()


def decode_control(text: str) -> CrawlControl:
    try:
        return msgspec.json.decode(text, type=CrawlControl)
    except msgspec.DecodeError as exc:
        raise ValueError(f"stored crawl control row is unreadable: {exc}") from None


class RobotsRecord(msgspec.Struct, kw_only=True):
    """A cached robots.txt answer for a host (scheme://host:port)."""

    origin: str
    status: int  # HTTP status; 0 for a network error or timeout
    body: bytes  # at most the parse cap
    fetched_at: float
    expires_at: float


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """One consumed message with where it came from."""

    topic: Topic
    key: str
    message: Message
    partition: int = 0
    offset: int = 0
    attempt: int = 1  # failed calls counted toward the dead-letter limit, plus one
    # every call of the handler with this message, including those repeated while a
    # dependency was down (which do not count toward the limit): > 1 means an earlier
    # call may have done part of the work
    calls: int = 1


Handler = Callable[[Delivery], Awaitable[None]]
AssignCallback = Callable[[frozenset[int]], Awaitable[None]]


class Bus(Protocol):
    """Partitioned, host-keyed topics with at-least-once delivery.

    ``publish`` is durable when it returns (for Kafka: acknowledged by the broker).
    ``consume`` runs ``handler`` for each message of ``topics`` until :meth:`stop`; a
    message is acknowledged when its handler returns; a handler that raises is retried,
    and after ``max_delivery_attempts`` the message goes to the dead-letter topic with
    its error. Handlers must be idempotent. Messages with the same key keep their order
    within one consumer group when ``concurrency`` is 1.
    """

    def partition_of(self, topic: Topic, key: str) -> int: ...

    async def publish(self, topic: Topic, key: str, message: Message) -> None: ...

    async def consume(self, group: str, topics: Sequence[Topic], handler: Handler, *,
                      concurrency: int = 1,
                      on_assign: AssignCallback | None = None) -> None: ...

    async def stop(self) -> None: ...


class SchemaError(RuntimeError):
    """A state store's database (an SQLite file, a Cassandra keyspace) does not match the
    schema this code expects: newer, or laid out otherwise."""


class StateStore(Protocol):
    """Durable crawl state. Each host has a single writer (its frontier owner)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def forget_cached(self) -> None:
        """Drop whatever rows the store keeps in memory for a single writer: the
        caller's hosts changed (a frontier's new assignment)."""
        ...

    # url_state
    async def add_urls(self, rows: Sequence[UrlState]) -> list[UrlState]:
        """Insert rows whose (host, url) is not yet known; return those inserted."""
        ...

    async def get_url(self, host: str, url: str) -> UrlState | None: ...

    async def put_url(self, row: UrlState) -> None:
        """Insert or replace one row."""
        ...

    async def put_urls(self, rows: Sequence[UrlState]) -> None: ...

    async def put_url_and_host(self, row: UrlState, host: HostState, *,
                               index: NearIndex | None = None) -> None:
        """Write a URL's row and its host's row together: both or neither, so a crash
        between them cannot leave a result applied to one and not the other. With
        ``index``, the page's near-duplicate index entries go in the same write, as
        :meth:`add_simhash` writes them (``row.url`` under ``index.keys`` with
        ``row.simhash``, which must be set, and ``index.sketch``)."""
        ...

    async def due_urls(self, host: str, now: float, limit: int) -> list[UrlState]:
        """Queued rows of ``host`` with next_fetch_at <= now, by (priority, depth, seq)."""
        ...

    async def next_due_time(self, host: str) -> float | None:
        """Smallest next_fetch_at of the host's queued rows, or None if none are queued."""
        ...

    async def urls_with_status(self, status: UrlStatus, limit: int,
                               host: str | None = None) -> list[UrlState]: ...

    async def hosts_with_status(self, status: UrlStatus) -> list[str]:
        """Hosts that have at least one row in ``status``."""
        ...

    async def count_urls(self) -> dict[tuple[str, str], int]:
        """Counts by (status, reason or '') over all rows."""
        ...

    # hosts
    async def get_host(self, host: str) -> HostState | None: ...

    async def put_host(self, row: HostState) -> None: ...

    async def list_hosts(self) -> list[HostState]: ...

    # crawl-wide operator switches
    async def get_control(self) -> CrawlControl: ...

    async def put_control(self, row: CrawlControl) -> None: ...

    # seeds as the crawl scope knows them
    async def add_seed_roots(self, rows: Sequence[SeedRoot]) -> None:
        """Record seed roots (idempotent: a root recorded twice is one row)."""
        ...

    async def seed_roots(self, domain: str) -> list[SeedRoot]:
        """The seed roots recorded under ``domain`` (a registered domain)."""
        ...

    # robots.txt cache
    async def get_robots(self, origin: str) -> RobotsRecord | None: ...

    async def put_robots(self, row: RobotsRecord) -> None: ...

    # content fingerprints
    async def content_holder(self, content_hash: str
                             ) -> tuple[str, RecordPointer | None] | None:
        """The first stored copy of ``content_hash``: (url, record), or None."""
        ...

    async def record_content(self, content_hash: str, url: str,
                             record: RecordPointer) -> None:
        """Record ``url``'s stored copy (``record``) as the holder of ``content_hash``
        unless an earlier copy is recorded: the first one stays (recording again is
        harmless)."""
        ...

    async def add_simhash(self, keys: Sequence[int], url: str, simhash: int,
                          sketch: bytes | None = None) -> None:
        """Index ``url`` under each key (SimHash block keys, common.simhash.block_keys,
        and sketch keys, common.minhash.index_keys) and keep its MinHash sketch."""
        ...

    async def simhash_candidates(self, keys: Sequence[int]) -> list[tuple[str, int]]:
        """(url, simhash) of every page indexed under any of ``keys``."""
        ...

    async def simhash_sketches(self, urls: Sequence[str]) -> dict[str, bytes]:
        """The MinHash sketch of each of ``urls`` that has one (pages indexed before
        sketches were kept have none)."""
        ...


class BlobStore(Protocol):
    """Append-only byte streams rolled into files; records addressed by pointer."""

    def append(self, stream: str, data: bytes) -> RecordPointer:
        """Append one record to ``stream`` (for example 'warc', 'text') and say where."""
        ...

    def append_line(self, name: str, line: str) -> None:
        """Append one line to a small side file (index, page records)."""
        ...

    def read(self, pointer: RecordPointer) -> bytes: ...

    def set_file_header(self, stream: str, header: Callable[[str], bytes] | None) -> None:
        """Begin every new file of ``stream`` with ``header(file)`` (a WARC warcinfo record).

        The header is written when the file is created, before its first record, so
        it is the first record of every file however files roll over.
        """
        ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Ports:
    bus: Bus
    store: StateStore
    blobs: BlobStore
