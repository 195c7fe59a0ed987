"""The cluster-mode :class:`~common.ports.StateStore`: Apache Cassandra 4.x and 5.x.

One keyspace per crawl (``CRAWLER_STORE_KEYSPACE``), created with ``SimpleStrategy`` and
``CRAWLER_STORE_REPLICATION_FACTOR`` when it does not exist yet (an existing keyspace keeps
the replication an operator gave it) by :meth:`CassandraStateStore.open`, which also
creates and checks the schema (``CREATE ... IF NOT EXISTS``, table ids derived from the
keyspace and table names so that services starting side by side on different
coordinators create the same tables, missing regular columns added, a ``schema_version``
row). Plain CQL only: no secondary indexes, SAI, materialized views or ``ALLOW
FILTERING``.

Tables (partition key in double parentheses):

- ``url_state ((host), url)``: every :class:`~common.ports.UrlState` field, the record
  pointer as ``record_file``, ``record_offset``, ``record_length``. The truth.
- ``url_queue ((host), priority, depth, seq, url)`` -> ``next_fetch_at``: the host's
  QUEUED rows in fetch order, for :meth:`~CassandraStateStore.due_urls`.
- ``url_next ((host), next_fetch_at, url)``: the same rows by time, for
  :meth:`~CassandraStateStore.next_due_time` (one row read).
- ``url_by_status ((host, status), url)``: rows in every other status, so recovery
  (IN_FLIGHT, FETCHED) reads one small partition per host instead of scanning.
- ``url_counts ((status, bucket), host, reason)`` -> ``n``: rows per (host, status,
  reason); ``bucket`` is crc32(host) modulo the keyspace's bucket count (16, recorded in
  ``schema_version``) so no partition holds every host. :meth:`hosts_with_status` reads
  the buckets of one status; :meth:`count_urls` reads them all (cost: hosts x statuses,
  not URLs).
- ``hosts ((host))``, ``robots ((origin))``, ``content ((content_hash))``,
  ``simhash_blocks ((block_key), url)`` -> ``simhash``, ``simhash_sketches ((url))`` ->
  ``sketch`` (the page's MinHash sketch), ``seed_roots ((domain), host, path)`` (the
  seeds as the crawl scope knows them; one partition per registered domain).

Writes to url_state and the four derived tables. Each host has a single writer (its
frontier owner), so there are no lightweight transactions on this path: a write reads the
old rows and the host's counts (at a level that overlaps the write level, see below),
then writes the new rows together with their queue, time, status and count entries as
one LOGGED batch per chunk of rows. A logged batch is applied whole or not at all, even
if the writer dies mid-call, so the derived tables never disagree with url_state and the
counts stay exact; a call of many rows is atomic per chunk (rows of one host, at most
:data:`BATCH_ROWS` and about :data:`BATCH_BYTES` of data, under Cassandra's default
batch-size warning of 5 KiB), not as a whole, unlike the SQLite store. A host's chunks
run one after the other (each carries the host's running counts); different hosts run
concurrently. Within
one process, calls that touch the same host are serialized by a per-host lock. The
single-writer rule also relies on Cassandra's last-write-wins timestamps: when a host
moves to a new owner, the owners' clocks must agree to better than the hand-over time.

``seq`` (discovery order): Cassandra has no global sequence, so ``add_urls`` numbers rows
with ``time.time_ns()``, raised where needed to stay strictly increasing within the
process. Rows written by one process are in insert order; across processes the order is
the clocks', which only affects breadth-first tie-breaking.

Content records (exact duplicates) are cross-host and first-writer-wins, without
lightweight transactions (no Paxos round): ``record_content`` writes the hash's row
``USING TIMESTAMP`` a value that counts down with the clock (:func:`_claim_stamp`), so
Cassandra's last-write-wins keeps the earliest copy's cells on every replica whatever
order the writes arrive in; ``content_holder`` reads it at the write-overlapping level.
A fetcher looks before it writes a body (one read) and records the copy after (one
write). A unique page's near-duplicate index entries (``simhash_blocks`` and its sketch)
are one unlogged batch of their own (:meth:`add_simhash`), or part of the logged batch
of :meth:`put_url_and_host` that applies the page's result (``index``). Two fetchers
that store the same new body within one write's time of each other both store it in
full; the earlier copy stays the holder that later copies refer to.

Consistency levels come from the settings: ``read_consistency`` for plain reads,
``write_consistency`` for writes. The reads that a write depends on (does this URL exist,
what was its status, what are the counts) use a level that overlaps the write level
(LOCAL_QUORUM when writes are LOCAL_QUORUM; ALL when writes are ONE), so a writer always
sees its own earlier writes. With RF > 1, give plain reads an overlapping level too
(LOCAL_QUORUM) if callers read a row and write it back. On one node, LOCAL_QUORUM with
RF=1 is one replica.

Tombstones: url_queue, url_next and url_by_status delete an entry whenever a URL leaves a
status, so a host's partitions collect tombstones at its fetch rate, which politeness
bounds (about one per second per host). These tables use a three-hour gc_grace_seconds
and tombstone compaction so they are purged within hours; a resurrected entry is
harmless because ``due_urls`` and ``urls_with_status`` check url_state.

Requests run concurrently on the driver's own I/O thread (``execute_async``), bridged into
asyncio, at most ``max_concurrency`` at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import re
import socket
import threading
import time
import uuid
import zlib
from collections import Counter, OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from cassandra import (
    ConsistencyLevel,
    InvalidRequest,
    OperationTimedOut,
    Unavailable,
    UnresolvableContactPoints,
    WriteTimeout,
)
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
from cassandra.policies import (
    ConstantReconnectionPolicy,
    DCAwareRoundRobinPolicy,
    HostStateListener,
    TokenAwarePolicy,
)
from cassandra.query import (
    UNSET_VALUE,
    BatchStatement,
    BatchType,
    SimpleStatement,
    tuple_factory,
)

from common.adapters.handling import DEPENDENCIES, STORE, dependency_down, describe
from common.adapters.int64 import index_entries, to_signed, to_unsigned
from common.adapters.rowcodec import RowCodec
from common.adapters.sqlite_store import SchemaError
from common.messages import NearIndex, RecordPointer, UrlStatus
from common.ports import (
    CrawlControl,
    HostState,
    RobotsRecord,
    SeedRoot,
    UrlState,
    decode_control,
    encode_control,
)
from common.settings import StoreSettings

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "SCHEMA_VERSION",
    "CassandraStateStore",
    "CassandraUnavailableError",
    "SchemaError",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
STATUS_BUCKETS = 16  # url_counts partitions per status, fixed when a keyspace is created
SCHEMA_CLAIM_TRIES = 5  # tries of the schema version's lightweight transaction at start
# Seconds after a failed url write of a host (and after the store's last outage) before
# its counts are checked against its rows: longer than a request the client gave up on
# can take to land, and than a restarted node takes to replay its batch log.
REPAIR_AFTER = 60.0
BATCH_ROWS = 32  # url_state rows per logged batch at most (with their derived entries)
BATCH_BYTES = 4096  # estimated data per logged batch at most
SKETCHES_PER_QUERY = 100  # candidate sketches read by one IN query at most
_ROW_BYTES = 320  # estimated data of one new row and its entries, besides its text
_REPLACE_BYTES = 400  # more for a replaced row: cleared columns, deleted entries
_IN_ROWS = 100  # clustering keys per "url IN ?" read
_CLAIM_EPOCH_US = 1 << 60  # claim timestamps count down from here (see _claim_stamp)
RECONNECT_SECONDS = 1.0  # how often the driver tries a node that is down

# lower case only: Cassandra folds unquoted names to lower case, so a keyspace created
# as krunA is krunA's lower-case twin, and looking it up as krunA finds nothing
_KEYSPACE_RE = re.compile(r"[a-z][a-z0-9_]{0,47}")
_TABLE_ID_NAMESPACE = uuid.UUID("0f5c6a52-5e0a-4c1e-9a53-2b1f8f0d6c11")

_QUEUED = str(UrlStatus.QUEUED)
_STATUSES = tuple(str(s) for s in UrlStatus)


class CassandraUnavailableError(ConnectionError):
    """Cassandra did not answer at the configured contact points in time."""


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class _Table:
    name: str
    columns: dict[str, str]  # name -> CQL type, in declaration order
    key: str  # the PRIMARY KEY clause
    options: str = ""

    @property
    def key_columns(self) -> frozenset[str]:
        return frozenset(re.findall(r"[a-z_]+", self.key))

    def ddl(self, keyspace: str) -> str:
        table_id = uuid.uuid5(_TABLE_ID_NAMESPACE, f"{keyspace}.{self.name}")
        columns = ", ".join(f"{n} {t}" for n, t in self.columns.items())
        options = f" AND {self.options}" if self.options else ""
        return (f"CREATE TABLE IF NOT EXISTS {keyspace}.{self.name} ({columns}, "
                f"PRIMARY KEY {self.key}) WITH ID = {table_id}{options}")


# Tables that lose entries as URLs move on: purge their tombstones within hours.
_CHURN = ("gc_grace_seconds = 10800 AND compaction = {'class': "
          "'SizeTieredCompactionStrategy', 'unchecked_tombstone_compaction': 'true', "
          "'tombstone_compaction_interval': '3600'}")

_URL_COLUMNS = {
    "host": "text", "url": "text", "status": "text", "reason": "text", "detail": "text",
    "depth": "bigint", "priority": "bigint", "hops": "bigint", "source": "text",
    "discovered_at": "double", "seq": "bigint", "last_fetch_at": "double",
    "next_fetch_at": "double", "attempts": "bigint", "http_status": "bigint",
    "etag": "text", "last_modified": "text", "content_hash": "text", "simhash": "bigint",
    "duplicate_of": "text", "revisit_interval": "double", "record_file": "text",
    "record_offset": "bigint", "record_length": "bigint", "kind": "text", "lastmod": "double",
}

TABLES: tuple[_Table, ...] = (
    _Table("schema_version", {"name": "text", "version": "int", "buckets": "int"},
           "(name)"),
    _Table("url_state", _URL_COLUMNS, "((host), url)"),
    _Table("url_queue", {"host": "text", "priority": "bigint", "depth": "bigint",
                         "seq": "bigint", "url": "text", "next_fetch_at": "double"},
           "((host), priority, depth, seq, url)", _CHURN),
    _Table("url_next", {"host": "text", "next_fetch_at": "double", "url": "text"},
           "((host), next_fetch_at, url)", _CHURN),
    _Table("url_by_status", {"host": "text", "status": "text", "url": "text"},
           "((host, status), url)", _CHURN),
    _Table("url_counts", {"status": "text", "bucket": "int", "host": "text",
                          "reason": "text", "n": "bigint"},
           "((status, bucket), host, reason)"),
    _Table("hosts", {"host": "text", "crawl_delay": "double", "delay_override": "double",
                     "blocked": "boolean", "max_pages": "bigint", "page_count": "bigint",
                     "next_allowed_at": "double", "last_response_time": "double",
                     "capped": "boolean",
                     "lease_until": "double",
                     # added later (ALTER TABLE at start): empty in older rows
                     "refreshes": "bigint", "sitemap_files": "bigint"}, "(host)"),
    _Table("robots", {"origin": "text", "status": "bigint", "body": "blob",
                      "fetched_at": "double", "expires_at": "double"}, "(origin)"),
    _Table("content", {"content_hash": "text", "url": "text", "record_file": "text",
                       "record_offset": "bigint", "record_length": "bigint"},
           "(content_hash)"),
    _Table("simhash_blocks", {"block_key": "bigint", "url": "text", "simhash": "bigint"},
           "((block_key), url)"),
    _Table("simhash_sketches", {"url": "text", "sketch": "blob"}, "(url)"),
    _Table("control", {"name": "text", "value": "text"}, "(name)"),
    _Table("seed_roots", {"domain": "text", "host": "text", "path": "text"},
           "((domain), host, path)"),
)
_TABLES = {t.name: t for t in TABLES}


# ---------------------------------------------------------------------------- codecs



_URLS = RowCodec(UrlState, pointer="record", unsigned=frozenset({"simhash"}))
_HOSTS = RowCodec(HostState, added=frozenset({"refreshes", "sitemap_files"}))
_ROBOTS = RowCodec(RobotsRecord)


# ------------------------------------------------------------------------- helpers


def _unset_none(values: list[Any]) -> list[Any]:
    """None leaves a column unset on insert (no tombstone)."""
    return [UNSET_VALUE if v is None else v for v in values]

_seq_lock = threading.Lock()
_last_seq = 0


def _take_seqs(n: int) -> int:
    """The first of ``n`` discovery numbers, above every number this process gave out."""
    global _last_seq
    with _seq_lock:
        first = max(time.time_ns(), _last_seq + 1)
        _last_seq = first + n - 1
    return first


def _level(name: str, variable: str) -> int:
    try:
        return int(ConsistencyLevel.name_to_value[name.strip().upper()])
    except KeyError:
        known = ", ".join(sorted(ConsistencyLevel.name_to_value))
        raise ValueError(f"{variable}: unknown consistency level {name!r} "
                         f"(expected one of {known})") from None


def _overlapping_read(read: int, write: int) -> int:
    """A read level that sees every write made at ``write`` (R + W > RF)."""
    cl = ConsistencyLevel
    if write == cl.ALL:
        return read
    if write in (cl.QUORUM, cl.EACH_QUORUM):
        return read if read in (cl.QUORUM, cl.ALL) else cl.QUORUM
    if write == cl.LOCAL_QUORUM:
        return read if read in (cl.LOCAL_QUORUM, cl.QUORUM, cl.EACH_QUORUM, cl.ALL) \
            else cl.LOCAL_QUORUM
    return int(cl.ALL)


def _claim_stamp(now_us: int) -> int:
    """The write timestamp of a content record made at ``now_us``: larger for earlier
    records, so last-write-wins keeps the first one."""
    return _CLAIM_EPOCH_US - now_us


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _check(row: UrlState) -> None:
    """Fail before anything is written on a value the table cannot hold."""
    if row.simhash is not None:
        to_signed(row.simhash)


def _batches(items: Sequence[tuple[_Old | None, UrlState]]
             ) -> Iterable[Sequence[tuple[_Old | None, UrlState]]]:
    """Consecutive chunks of at most BATCH_ROWS rows and about BATCH_BYTES of data."""
    start, size = 0, 0
    for i, (old, new) in enumerate(items):
        texts = (new.detail, new.source, new.etag, new.last_modified, new.content_hash,
                 new.duplicate_of)
        row = (_ROW_BYTES + (0 if old is None else _REPLACE_BYTES) + 3 * len(new.url)
               + 2 * len(new.host) + sum(len(v) for v in texts if v is not None))
        if i > start and (i - start >= BATCH_ROWS or size + row > BATCH_BYTES):
            yield items[start:i]
            start, size = i, 0
        size += row
    if start < len(items):
        yield items[start:]


def _reason(value: object) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class _Old:
    """What a write needs to know of the row it replaces."""

    status: str
    reason: str
    priority: int
    depth: int
    seq: int
    next_fetch_at: float


@dataclass(slots=True)
class _HostLock:
    lock: asyncio.Lock
    users: int = 0


def _old_of(row: UrlState) -> _Old:
    return _Old(str(row.status), _reason(row.reason), row.priority, row.depth, row.seq,
                row.next_fetch_at)


class _RowCache:
    """What a single writer knows of its hosts' rows without reading them back.

    The url_state rows this process wrote (copies) and the count rows it read or wrote,
    per host, for at most ``limit`` rows in all (least recently used hosts go first).
    Valid only while this process is the hosts' one writer: the owner drops it when
    its hosts change (:meth:`CassandraStateStore.forget_cached`), and a host's entries
    go whenever a write of it fails (it may or may not have been applied).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.rows: OrderedDict[str, dict[str, UrlState]] = OrderedDict()
        self.counts: dict[str, dict[str, Counter[str]]] = {}  # host -> status -> reason -> n
        self.size = 0

    def row(self, host: str, url: str) -> UrlState | None:
        rows = self.rows.get(host)
        return None if rows is None else rows.get(url)

    def split(self, host: str, urls: Iterable[str]) -> tuple[dict[str, UrlState], list[str]]:
        """The cached rows of ``urls`` (not copies) and the URLs not cached."""
        held = self.rows.get(host) or {}
        found: dict[str, UrlState] = {}
        missing: list[str] = []
        for url in urls:
            row = held.get(url)
            if row is None:
                missing.append(url)
            else:
                found[url] = row
        return found, missing

    def put(self, host: str, rows: Iterable[UrlState]) -> None:
        held = self.rows.get(host)
        if held is None:
            held = self.rows[host] = {}
        else:
            self.rows.move_to_end(host)
        before = len(held)
        for row in rows:
            held[row.url] = msgspec.structs.replace(row)
        self.size += len(held) - before
        while self.size > self.limit and self.rows:
            victim, dropped = next(iter(self.rows.items()))
            if victim == host and len(self.rows) == 1:  # one host alone: trim it
                for url in list(itertools.islice(dropped, len(dropped) - self.limit)):
                    del dropped[url]
                self.size = len(dropped)
                break
            self.forget(victim)

    def host_counts(self, host: str, statuses: Iterable[str]
                    ) -> tuple[Counter[tuple[str, str]], list[str]]:
        """The known counts of ``statuses`` and the statuses not known."""
        known = self.counts.get(host, {})
        counts: Counter[tuple[str, str]] = Counter()
        missing = []
        for status in statuses:
            by_reason = known.get(status)
            if by_reason is None:
                missing.append(status)
                continue
            for reason, n in by_reason.items():
                counts[(status, reason)] = n
        return counts, missing

    def set_counts(self, host: str, statuses: Iterable[str],
                   counts: Counter[tuple[str, str]]) -> None:
        if host not in self.rows:  # counts are kept for hosts whose rows are
            self.rows[host] = {}
        known = self.counts.setdefault(host, {})
        for status in statuses:
            known[status] = Counter({reason: n for (s, reason), n in counts.items()
                                     if s == status})

    def forget(self, host: str) -> None:
        dropped = self.rows.pop(host, None)
        if dropped is not None:
            self.size -= len(dropped)
        self.counts.pop(host, None)

    def clear(self) -> None:
        self.rows.clear()
        self.counts.clear()
        self.size = 0


class _NodeWatch(HostStateListener):  # type: ignore[misc]
    """Reports to ``DEPENDENCIES`` (and so ``/readyz``) when the driver finds no node up,
    and when one comes back, whether or not this process was sending requests then: an
    idle process (a fetcher waiting on politeness) knows of an outage too. Called from
    the driver's threads; ``DEPENDENCIES`` is thread-safe."""

    def __init__(self, hosts: Any) -> None:
        self._lock = threading.Lock()
        self._up = {h.endpoint for h in hosts if h.is_up is not False}

    def on_up(self, host: Any) -> None:
        with self._lock:
            self._up.add(host.endpoint)
        DEPENDENCIES.up(STORE)

    def on_down(self, host: Any) -> None:
        with self._lock:
            self._up.discard(host.endpoint)
            none_up = not self._up
        if none_up:
            DEPENDENCIES.down(STORE, f"no Cassandra node is up (the driver lost {host})")

    def on_add(self, host: Any) -> None:
        if host.is_up:
            self.on_up(host)

    def on_remove(self, host: Any) -> None:
        self.on_down(host)


class CassandraStateStore:
    """:class:`~common.ports.StateStore` over a Cassandra keyspace (cluster mode).

    ``connect_timeout`` bounds how long :meth:`open` waits for the contact points (it
    retries until then, for a server that is still starting); ``request_timeout`` bounds
    each request; ``max_concurrency`` bounds requests in flight from this store. Use
    ``await store.open()`` and ``await store.close()``, or ``async with``.
    """

    def __init__(self, settings: StoreSettings, *, connect_timeout: float = 10.0,
                 request_timeout: float = 30.0, max_concurrency: int = 128,
                 on_statement: Callable[[str, int], None] | None = None,
                 row_cache: int = 0, repair_after: float = REPAIR_AFTER) -> None:
        keyspace = settings.keyspace.strip()
        if not _KEYSPACE_RE.fullmatch(keyspace):
            raise ValueError(f"CRAWLER_STORE_KEYSPACE: {settings.keyspace!r} is not a valid "
                             "keyspace name (a lower-case letter, then lower-case letters, "
                             "digits or _; at most 48)")
        if not settings.cassandra_hosts:
            raise ValueError("CRAWLER_STORE_CASSANDRA_HOSTS: no contact points")
        self.settings = settings
        self.keyspace = keyspace
        self._read = _level(settings.read_consistency, "CRAWLER_STORE_READ_CONSISTENCY")
        self._write = _level(settings.write_consistency, "CRAWLER_STORE_WRITE_CONSISTENCY")
        self._rmw = _overlapping_read(self._read, self._write)
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._max_concurrency = max_concurrency
        self._cluster: Any = None
        self._session: Any = None
        self._slots: asyncio.Semaphore | None = None
        self._ps: dict[str, Any] = {}
        self._locks: dict[str, _HostLock] = {}
        self.buckets = STATUS_BUCKETS
        self._on_statement = on_statement
        self._kinds: dict[int, str] = {}
        self._cache = _RowCache(row_cache) if row_cache > 0 else None
        # hosts whose url write failed (monotonic time of the last failure), and the
        # tasks that count their rows again once a late landing of it is no longer
        # possible (see _repair_counts)
        self._repair_after = repair_after
        self._suspect: dict[str, float] = {}
        self._trouble = 0.0  # monotonic time the store last failed a request for an outage
        self._repairs: dict[str, asyncio.Task[None]] = {}

    @property
    def contact_points(self) -> str:
        port = self.settings.cassandra_port
        return ", ".join(f"{h}:{port}" for h in self.settings.cassandra_hosts)

    async def __aenter__(self) -> CassandraStateStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------- open / close

    async def open(self) -> None:
        """Connect, create or check the keyspace and schema, prepare statements.

        Raises :class:`CassandraUnavailableError` naming the contact points when none
        answers within ``connect_timeout``; :class:`SchemaError` when the keyspace holds
        a newer or incompatible schema. Calling it twice is harmless.
        """
        if self._session is not None:
            return
        cluster, session = await self._connect()
        try:
            await asyncio.to_thread(self._migrate_sync, cluster, session)
            await asyncio.to_thread(self._prepare_sync, session)
        except BaseException:
            await asyncio.to_thread(cluster.shutdown)
            raise
        self._cluster, self._session = cluster, session
        self._slots = asyncio.Semaphore(self._max_concurrency)
        cluster.register_listener(_NodeWatch(cluster.metadata.all_hosts()))

    async def _connect(self) -> tuple[Any, Any]:
        deadline = time.monotonic() + self._connect_timeout
        while True:
            left = max(deadline - time.monotonic(), 0.5)
            profile = ExecutionProfile(
                load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
                consistency_level=self._read, request_timeout=self._request_timeout,
                row_factory=tuple_factory)
            cluster = None
            try:
                cluster = Cluster(list(self.settings.cassandra_hosts),
                                  port=self.settings.cassandra_port,
                                  protocol_version=5,
                                  connect_timeout=min(left, 5.0),
                                  control_connection_timeout=min(left, 5.0),
                                  execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                                  # without it, requests over a few KiB wait ~40 ms (Nagle)
                                  sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                                  # a node that comes back is used again within about
                                  # a second, not after the default's growing wait
                                  # (up to 10 min)
                                  reconnection_policy=ConstantReconnectionPolicy(
                                      RECONNECT_SECONDS),
                                  max_schema_agreement_wait=30)
                session = await asyncio.to_thread(cluster.connect)
            except (NoHostAvailable, UnresolvableContactPoints, OperationTimedOut,
                    OSError) as exc:
                if cluster is not None:
                    await asyncio.to_thread(cluster.shutdown)
                if time.monotonic() + 1.0 >= deadline:
                    detail = ("no contact point resolves"
                              if isinstance(exc, UnresolvableContactPoints) else str(exc))
                    raise CassandraUnavailableError(
                        f"Cassandra did not answer at {self.contact_points} within "
                        f"{self._connect_timeout:g} s: {detail}") from exc
                await asyncio.sleep(1.0)
                continue
            except BaseException:
                if cluster is not None:
                    await asyncio.to_thread(cluster.shutdown)
                raise
            return cluster, session

    def _statement(self, cql: str, level: int | None = None) -> Any:
        return SimpleStatement(cql, consistency_level=self._write if level is None else level)

    def _migrate_sync(self, cluster: Any, session: Any) -> None:
        """Create what is missing (idempotent), add missing columns, check the version."""
        ks = self.keyspace
        timeout = max(self._request_timeout, 60.0)
        session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {{'class': "
            f"'SimpleStrategy', 'replication_factor': {self.settings.replication_factor}}}",
            timeout=timeout)
        for table in TABLES:
            session.execute(table.ddl(ks), timeout=timeout)
        cluster.refresh_keyspace_metadata(ks)
        for table in TABLES:
            have = self._columns_sync(cluster, table.name)
            for name, cql_type in table.columns.items():
                if name not in have:
                    if name in table.key_columns:
                        raise SchemaError(f"{ks}.{table.name}: key column {name} is missing; "
                                          "the table has another layout")
                    # Migration: columns added by later versions of a table. Another
                    # process may be adding the same column: that is fine too.
                    with contextlib.suppress(InvalidRequest):
                        session.execute(f"ALTER TABLE {ks}.{table.name} ADD {name} "
                                        f"{cql_type}", timeout=timeout)
                elif have[name] != cql_type:
                    raise SchemaError(f"{ks}.{table.name}.{name} is {have[name]}, "
                                      f"expected {cql_type}")
        # The first store to open a keyspace fixes its version and bucket count.
        row = self._claim_schema_version_sync(session, timeout)
        if not row["[applied]"]:
            version, buckets = row["version"], row["buckets"]
            if version is None or buckets is None or buckets < 1:
                raise SchemaError(f"{ks}.schema_version: incomplete row {row!r}")
            if version > SCHEMA_VERSION:
                raise SchemaError(f"keyspace {ks}: schema version {version} is newer than "
                                  f"this code supports ({SCHEMA_VERSION})")
            # Later versions migrate here, one step per version, then record the version.
            self.buckets = int(buckets)

    def _claim_schema_version_sync(self, session: Any, timeout: float) -> dict[str, Any]:
        """Insert the keyspace's version row unless there is one (a lightweight
        transaction); the row as it is. Services that start together race for it, and on
        a busy node a Paxos round can time out with its outcome unknown: asking again is
        safe (the row is the same whoever wrote it), a few times."""
        statement = self._statement(
            f"INSERT INTO {self.keyspace}.schema_version (name, version, buckets) VALUES "
            f"('crawler', {SCHEMA_VERSION}, {STATUS_BUCKETS}) IF NOT EXISTS")
        for attempt in range(1, SCHEMA_CLAIM_TRIES + 1):
            try:
                result = session.execute(statement, timeout=timeout)
            except (WriteTimeout, Unavailable, OperationTimedOut) as exc:
                if attempt == SCHEMA_CLAIM_TRIES:
                    raise
                log.info("recording the schema version timed out (%s); asking again", exc)
                time.sleep(0.5 * attempt)
                continue
            return dict(zip(result.column_names, result.one(), strict=True))
        raise AssertionError("unreachable")

    def _columns_sync(self, cluster: Any, table: str) -> dict[str, str]:
        """The table's columns and types, once the driver's schema metadata shows it.

        A table another process created a moment ago can take a refresh or two to appear.
        """
        deadline = time.monotonic() + 30.0
        while True:
            keyspace = cluster.metadata.keyspaces.get(self.keyspace)
            found = keyspace.tables.get(table) if keyspace is not None else None
            if found is not None:
                return {name: col.cql_type for name, col in found.columns.items()}
            if time.monotonic() > deadline:
                raise SchemaError(f"{self.keyspace}.{table}: not visible after it was created")
            time.sleep(0.2)
            cluster.refresh_schema_metadata(max_schema_agreement_wait=10)

    def _prepare_sync(self, session: Any) -> None:
        ks = self.keyspace
        url_cols = _URLS.columns

        def insert(table: str, columns: Sequence[str]) -> str:
            return (f"INSERT INTO {ks}.{table} ({', '.join(columns)}) "
                    f"VALUES ({', '.join('?' for _ in columns)})")

        old = "url, status, reason, priority, depth, seq, next_fetch_at"
        cql = {
            "put_url": (insert("url_state", url_cols), self._write),
            "get_url": (f"SELECT {_URLS.select} FROM {ks}.url_state "
                        "WHERE host = ? AND url = ?", self._read),
            "host_statuses": (f"SELECT status, reason FROM {ks}.url_state WHERE host = ?",
                              self._rmw),
            "get_urls": (f"SELECT {_URLS.select} FROM {ks}.url_state "
                         "WHERE host = ? AND url IN ?", self._read),
            "old_urls": (f"SELECT {old} FROM {ks}.url_state WHERE host = ? AND url IN ?",
                         self._rmw),
            "queue_put": (insert("url_queue", tuple(_TABLES["url_queue"].columns)), self._write),
            "queue_del": (f"DELETE FROM {ks}.url_queue WHERE host = ? AND priority = ? "
                          "AND depth = ? AND seq = ? AND url = ?", self._write),
            "queue_scan": ("SELECT priority, depth, seq, url, next_fetch_at "
                           f"FROM {ks}.url_queue WHERE host = ?", self._read),
            "next_put": (insert("url_next", ("host", "next_fetch_at", "url")), self._write),
            "next_del": (f"DELETE FROM {ks}.url_next WHERE host = ? AND next_fetch_at = ? "
                         "AND url = ?", self._write),
            "next_first": (f"SELECT next_fetch_at FROM {ks}.url_next WHERE host = ? LIMIT 1",
                           self._read),
            "status_put": (insert("url_by_status", ("host", "status", "url")), self._write),
            "status_del": (f"DELETE FROM {ks}.url_by_status WHERE host = ? AND status = ? "
                           "AND url = ?", self._write),
            "status_scan": (f"SELECT url FROM {ks}.url_by_status WHERE host = ? "
                            "AND status = ?", self._read),
            "counts_put": (insert("url_counts", ("status", "bucket", "host", "reason", "n")),
                           self._write),
            "counts_of_host": (f"SELECT status, reason, n FROM {ks}.url_counts "
                               "WHERE status IN ? AND bucket = ? AND host = ?", self._rmw),
            "counts_scan": (f"SELECT host, reason, n FROM {ks}.url_counts WHERE status = ? "
                            "AND bucket = ?", self._read),
            "put_host": (insert("hosts", _HOSTS.columns), self._write),
            "get_host": (f"SELECT {_HOSTS.select} FROM {ks}.hosts WHERE host = ?",
                         self._read),
            "list_hosts": (f"SELECT {_HOSTS.select} FROM {ks}.hosts", self._read),
            "put_control": (insert("control", ("name", "value")), self._write),
            "get_control": (f"SELECT value FROM {ks}.control WHERE name = ?", self._read),
            "seed_root_put": (insert("seed_roots", ("domain", "host", "path")), self._write),
            "seed_roots_get": (f"SELECT domain, host, path FROM {ks}.seed_roots "
                               "WHERE domain = ?", self._read),
            "put_robots": (insert("robots", _ROBOTS.columns), self._write),
            "get_robots": (f"SELECT {_ROBOTS.select} FROM {ks}.robots WHERE origin = ?",
                           self._read),
            "claim_put": (insert("content", ("content_hash", "url", "record_file",
                                             "record_offset", "record_length"))
                          + " USING TIMESTAMP ?", self._write),
            "claim_get": ("SELECT url, record_file, record_offset, record_length "
                          f"FROM {ks}.content WHERE content_hash = ?", self._rmw),
            "simhash_put": (insert("simhash_blocks", ("block_key", "url", "simhash")),
                            self._write),
            "simhash_get": (f"SELECT url, simhash FROM {ks}.simhash_blocks "
                            "WHERE block_key IN ?", self._read),
            "sketch_put": (insert("simhash_sketches", ("url", "sketch")), self._write),
            "sketch_get": (f"SELECT url, sketch FROM {ks}.simhash_sketches "
                           "WHERE url IN ?", self._read),
        }
        prepared: dict[str, Any] = {}
        for name, (text, level) in cql.items():
            statement = session.prepare(text)
            statement.consistency_level = level
            prepared[name] = statement
        self._ps = prepared

    async def close(self) -> None:
        """Disconnect. Calling it twice is harmless."""
        repairs = list(self._repairs.values())
        self._repairs.clear()
        for task in repairs:
            task.cancel()
        for task in repairs:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        cluster, self._cluster, self._session = self._cluster, None, None
        self._slots = None
        if cluster is not None:
            await asyncio.to_thread(cluster.shutdown)

    def forget_cached(self) -> None:
        """Drop the rows kept in memory (see ``row_cache``): the caller's hosts changed.
        Repairs of counts still to come are dropped too: the hosts may have another
        writer now."""
        if self._cache is not None:
            self._cache.clear()
        self._suspect.clear()
        for task in self._repairs.values():
            task.cancel()
        self._repairs.clear()

    async def truncate(self) -> None:
        """Empty every table of the keyspace and keep the schema (tests; a crawl anew)."""
        self.forget_cached()
        for table in TABLES:
            if table.name == "schema_version":
                continue
            probe = SimpleStatement(f"SELECT * FROM {self.keyspace}.{table.name} LIMIT 1",
                                    consistency_level=ConsistencyLevel.ALL)
            if (await self._send(probe)).current_rows:
                await self._send(SimpleStatement(f"TRUNCATE {self.keyspace}.{table.name}"),
                                 request_timeout=max(self._request_timeout, 60.0))

    async def drop_keyspace(self) -> None:
        """Drop this crawl's keyspace and everything in it."""
        await self._send(SimpleStatement(f"DROP KEYSPACE IF EXISTS {self.keyspace}"),
                         request_timeout=max(self._request_timeout, 120.0))

    # --------------------------------------------------------------- plumbing

    async def _send(self, statement: Any, paging_state: Any = None, *,
                    request_timeout: float | None = None) -> Any:
        """Run one statement on the driver's I/O thread; the result set of one page."""
        if self._session is None or self._slots is None:
            raise RuntimeError("the state store is not open")
        if self._on_statement is not None:
            self._count(statement)
        async with self._slots:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[Any] = loop.create_future()
            future = self._session.execute_async(
                statement, paging_state=paging_state,
                timeout=self._request_timeout if request_timeout is None else request_timeout)

            def settle(outcome: Any, failed: bool) -> None:
                if done.done():
                    return
                if failed:
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)

            def on_result(_rows: Any) -> None:
                try:
                    result, failed = future.result(), False
                except Exception as exc:  # the driver re-raises what ended the request
                    result, failed = exc, True
                with contextlib.suppress(RuntimeError):  # the loop already closed
                    loop.call_soon_threadsafe(settle, result, failed)

            def on_error(exc: BaseException) -> None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(settle, exc, True)

            future.add_callbacks(on_result, on_error)
            try:
                result = await done
            except Exception as exc:
                if dependency_down(exc) == STORE:
                    DEPENDENCIES.down(STORE, describe(exc))  # /readyz: not ready
                    self._trouble = time.monotonic()
                raise
            if DEPENDENCIES.is_down(STORE):
                DEPENDENCIES.up(STORE)  # a request succeeded: Cassandra is back
            return result

    def _count(self, statement: Any) -> None:
        """Report one statement to ``on_statement``: its kind and, for a batch, rows."""
        assert self._on_statement is not None
        if isinstance(statement, BatchStatement):
            self._on_statement("batch", len(statement))
            return
        prepared = getattr(statement, "prepared_statement", statement)
        kind = self._kinds.get(id(prepared))
        if kind is None:
            text = " ".join(str(getattr(prepared, "query_string", "")).upper().split())
            kind = ("read" if text.startswith("SELECT")
                    else "lwt" if " IF " in f"{text} " else "write")
            self._kinds[id(prepared)] = kind
        self._on_statement(kind, 1)

    def _bind(self, name: str, params: Sequence[Any]) -> Any:
        if self._session is None:
            raise RuntimeError("the state store is not open")
        return self._ps[name].bind(params)

    async def _query(self, name: str, params: Sequence[Any], *,
                     fetch_size: int | None = None) -> Any:
        bound = self._bind(name, params)
        if fetch_size is not None:
            bound.fetch_size = fetch_size
        return await self._send(bound)

    async def _rows(self, name: str, params: Sequence[Any]) -> list[Any]:
        return list((await self._query(name, params)).current_rows)

    async def _pages(self, name: str, params: Sequence[Any],
                     fetch_size: int = 5000) -> AsyncGenerator[list[Any], None]:
        bound = self._bind(name, params)
        bound.fetch_size = fetch_size
        paging_state = None
        while True:
            result = await self._send(bound, paging_state)
            yield list(result.current_rows)
            paging_state = result.paging_state
            if paging_state is None:
                return

    async def _all_rows(self, name: str, params: Sequence[Any]) -> list[Any]:
        rows: list[Any] = []
        async with contextlib.aclosing(self._pages(name, params)) as pages:
            async for page in pages:
                rows += page
        return rows

    def _batch(self) -> Any:
        return BatchStatement(batch_type=BatchType.LOGGED, consistency_level=self._write)

    @contextlib.asynccontextmanager
    async def _locked(self, hosts: Iterable[str]) -> AsyncIterator[None]:
        """Hold this process's write lock of each host (in sorted order: no deadlock)."""
        names = sorted(set(hosts))
        entries: list[_HostLock] = []
        for host in names:
            entry = self._locks.get(host)
            if entry is None:
                entry = self._locks[host] = _HostLock(asyncio.Lock())
            entry.users += 1
            entries.append(entry)
        held: list[asyncio.Lock] = []
        try:
            for entry in entries:
                await entry.lock.acquire()
                held.append(entry.lock)
            yield
        finally:
            for lock in held:
                lock.release()
            for host, entry in zip(names, entries, strict=True):
                entry.users -= 1
                if entry.users == 0:
                    del self._locks[host]

    def bucket(self, host: str) -> int:
        """The url_counts bucket of ``host``."""
        return zlib.crc32(host.encode("utf-8", "surrogatepass")) % self.buckets

    # -------------------------------------------------------------- url_state

    async def add_urls(self, rows: Sequence[UrlState]) -> list[UrlState]:
        """Insert rows whose (host, url) is new, numbering them in order (``seq``).

        Of rows repeated within the call, the first counts. Returns the inserted rows.
        """
        if not rows:
            return []
        unique: dict[tuple[str, str], UrlState] = {}
        for r in rows:
            _check(r)
            unique.setdefault((r.host, r.url), r)
        by_host: dict[str, list[UrlState]] = {}
        for r in unique.values():
            by_host.setdefault(r.host, []).append(r)
        async with self._locked(by_host):
            known = await self._old_rows(by_host)
            fresh = [r for r in unique.values() if (r.host, r.url) not in known]
            if not fresh:
                return []
            first = _take_seqs(len(fresh))
            inserted = [msgspec.structs.replace(r, seq=first + i) for i, r in enumerate(fresh)]
            changes: dict[str, list[tuple[_Old | None, UrlState]]] = {}
            for r in inserted:
                changes.setdefault(r.host, []).append((None, r))
            await self._apply(changes)
        return inserted

    async def get_url(self, host: str, url: str) -> UrlState | None:
        if self._cache is not None and (cached := self._cache.row(host, url)) is not None:
            return msgspec.structs.replace(cached)
        rows = await self._rows("get_url", (host, url))
        return _URLS.decode(rows[0]) if rows else None

    async def put_url(self, row: UrlState) -> None:
        """Insert or replace one row, ``seq`` included."""
        await self.put_urls([row])

    async def put_urls(self, rows: Sequence[UrlState]) -> None:
        """Insert or replace rows; of rows repeated within the call, the last counts."""
        if not rows:
            return
        last: dict[tuple[str, str], UrlState] = {}
        for r in rows:
            last.pop((r.host, r.url), None)
            last[(r.host, r.url)] = r
        for r in last.values():
            _check(r)
        by_host: dict[str, list[UrlState]] = {}
        for r in last.values():
            by_host.setdefault(r.host, []).append(r)
        async with self._locked(by_host):
            old = await self._old_rows(by_host)
            changes = {host: [(old.get((host, r.url)), r) for r in group]
                       for host, group in by_host.items()}
            await self._apply(changes)

    async def put_url_and_host(self, row: UrlState, host: HostState, *,
                               index: NearIndex | None = None) -> None:
        """The URL's row, its index entries and counts, the host's row and, with
        ``index``, the page's near-duplicate index entries and sketch, in one logged
        batch (Cassandra applies a logged batch in full or not at all)."""
        if row.host != host.host:
            raise ValueError(f"url row of {row.host!r} with the host row of {host.host!r}")
        _check(row)
        near = [] if index is None else index_entries(index.keys, row.url, row.simhash)
        sketch = index.sketch if index is not None else None
        async with self._locked([row.host]):
            old = await self._old_rows({row.host: [row]})
            await self._apply_host(row.host, [(old.get((row.host, row.url)), row)],
                                   host_row=host, near=(near, sketch))

    async def _old_rows(self, by_host: dict[str, list[UrlState]]) -> dict[tuple[str, str], _Old]:
        """The stored state of these rows, read at the write-overlapping level (rows in
        the cache are not read)."""
        found: dict[tuple[str, str], _Old] = {}
        cache = self._cache
        if cache is not None:
            unread: dict[str, list[str]] = {}
            for host, group in by_host.items():
                cached, unread[host] = cache.split(host, (r.url for r in group))
                found.update({(host, url): _old_of(row) for url, row in cached.items()})
        else:
            unread = {host: [r.url for r in group] for host, group in by_host.items()}
        keys = [(host, list(chunk)) for host, group in unread.items()
                for chunk in _chunks(group, _IN_ROWS)]
        results = await asyncio.gather(*(self._rows("old_urls", key) for key in keys))
        for (host, _), result in zip(keys, results, strict=True):
            for url, status, reason, priority, depth, seq, next_fetch_at in result:
                found[(host, url)] = _Old(status, reason or "", priority, depth, seq,
                                          next_fetch_at)
        return found

    async def _apply(self, changes: dict[str, list[tuple[_Old | None, UrlState]]]) -> None:
        """Write each host's changes: its chunks in order, hosts concurrently. Returns
        (or raises the first failure) only once every host's write has ended: the
        caller's host locks are held until then, so no other call reads a host's counts
        while a write of them is still on its way (which would lose one of the two)."""
        results = await asyncio.gather(
            *(self._apply_host(host, items) for host, items in changes.items()),
            return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _apply_host(self, host: str, items: list[tuple[_Old | None, UrlState]], *,
                          host_row: HostState | None = None,
                          near: tuple[list[tuple[int, str, int]], bytes | None] = ([], None)
                          ) -> None:
        """Write the rows of one host; ``host_row`` and ``near`` (near-duplicate index
        entries and a sketch) go into the last batch."""
        try:
            await self._write_host(host, items, host_row, near)
        except BaseException:
            if self._cache is not None:  # applied or not: read it back next time
                self._cache.forget(host)
            self._suspect_counts(host)
            raise

    def _suspect_counts(self, host: str) -> None:
        """A write of ``host`` failed: it may still land later (a request the client
        gave up on, a logged batch replayed from the batch log after a restart), after
        a later write that read the counts without it, which then disagree with the
        rows. Count the host's rows again once that can no longer happen."""
        self._suspect[host] = time.monotonic()
        if host not in self._repairs and self._session is not None:
            task = asyncio.get_running_loop().create_task(self._repair_counts(host),
                                                          name=f"repair-counts:{host}")
            self._repairs[host] = task
            task.add_done_callback(functools.partial(self._repair_done, host))

    def _repair_done(self, host: str, task: asyncio.Task[None]) -> None:
        if self._repairs.get(host) is task:
            del self._repairs[host]

    async def _repair_counts(self, host: str) -> None:
        """Wait until ``repair_after`` seconds have passed since the host's last failed
        write, then, under the host's lock, count its rows by (status, reason) and write
        the counts that differ. Tried again later while the store is down."""
        while True:
            since = self._suspect.get(host)
            if since is None:
                return
            # a node that was down replays its batch log some time after it is back
            wait = max(since, self._trouble) + self._repair_after - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                async with self._locked([host]):
                    if self._suspect.get(host) != since:
                        continue  # failed again meanwhile: wait from that failure
                    fixed = await self._recount(host)
                    del self._suspect[host]
                if fixed:
                    log.warning("counts of %s did not match its rows after a failed write; "
                                "repaired: %s", host, fixed)
                return
            except Exception as exc:
                log.info("recounting %s failed (%r); trying again later", host, exc)
                self._suspect[host] = time.monotonic()

    async def _recount(self, host: str) -> dict[tuple[str, str], tuple[int, int]]:
        """Count ``host``'s rows and write the counts that were wrong; returns them as
        (status, reason) -> (was, is). The caller holds the host's lock."""
        actual: Counter[tuple[str, str]] = Counter()
        async with contextlib.aclosing(self._pages("host_statuses", (host,))) as pages:
            async for page in pages:
                for status, reason in page:
                    actual[(status, reason or "")] += 1
        bucket = self.bucket(host)
        stored = await self._host_counts(host, bucket, _STATUSES)
        wrong = {key: (stored.get(key, 0), actual.get(key, 0))
                 for key in set(stored) | set(actual)
                 if stored.get(key, 0) != actual.get(key, 0)}
        if wrong:
            batch = self._batch()
            for (status, reason), (_, n) in sorted(wrong.items()):
                batch.add(self._ps["counts_put"], (status, bucket, host, reason, n))
            await self._send(batch)
        if self._cache is not None:
            self._cache.set_counts(host, _STATUSES, actual)
        return wrong

    async def _write_host(self, host: str, items: list[tuple[_Old | None, UrlState]],
                          host_row: HostState | None,
                          near: tuple[list[tuple[int, str, int]], bytes | None] = ([], None)
                          ) -> None:
        bucket = self.bucket(host)
        statuses = {str(new.status) for _, new in items}
        statuses |= {old.status for old, _ in items if old is not None}
        cache = self._cache
        if cache is not None:
            counts, unread = cache.host_counts(host, statuses)
            if unread:  # every status in one read, so the host's later writes read none
                unread = list(_STATUSES)
                counts.update(await self._host_counts(host, bucket, unread))
                cache.set_counts(host, unread, counts)
        else:
            counts = await self._host_counts(host, bucket, statuses)
        ps = self._ps
        chunks = list(_batches(items))
        for number, chunk in enumerate(chunks, 1):
            batch = self._batch()
            if number == len(chunks):
                if host_row is not None:
                    batch.add(ps["put_host"], _HOSTS.encode(host_row))
                entries, sketch = near
                for entry in entries:
                    batch.add(ps["simhash_put"], entry)
                if entries and sketch:
                    batch.add(ps["sketch_put"], (entries[0][1], sketch))
            touched: set[tuple[str, str]] = set()
            for old, new in chunk:
                url, status = new.url, str(new.status)
                key = (new.priority, new.depth, new.seq)
                values = _URLS.encode(new)
                batch.add(ps["put_url"], _unset_none(values) if old is None else values)
                if old is not None:
                    if old.status == _QUEUED:
                        if status != _QUEUED or (old.priority, old.depth, old.seq) != key:
                            batch.add(ps["queue_del"], (host, old.priority, old.depth,
                                                        old.seq, url))
                        if status != _QUEUED or old.next_fetch_at != new.next_fetch_at:
                            batch.add(ps["next_del"], (host, old.next_fetch_at, url))
                    elif old.status != status:
                        batch.add(ps["status_del"], (host, old.status, url))
                    was = (old.status, old.reason)
                    counts[was] -= 1
                    touched.add(was)
                if status == _QUEUED:
                    batch.add(ps["queue_put"], (host, *key, url, new.next_fetch_at))
                    batch.add(ps["next_put"], (host, new.next_fetch_at, url))
                else:
                    batch.add(ps["status_put"], (host, status, url))
                now = (status, _reason(new.reason))
                counts[now] += 1
                touched.add(now)
            for status, reason in sorted(touched):
                batch.add(ps["counts_put"], (status, bucket, host, reason,
                                             counts[(status, reason)]))
            await self._send(batch)
            if cache is not None:
                cache.put(host, (new for _, new in chunk))
                cache.set_counts(host, statuses, counts)

    async def _host_counts(self, host: str, bucket: int,
                           statuses: Iterable[str]) -> Counter[tuple[str, str]]:
        """The host's counts of ``statuses``, in one statement."""
        counts: Counter[tuple[str, str]] = Counter()
        for status, reason, n in await self._rows("counts_of_host",
                                                   (sorted(statuses), bucket, host)):
            counts[(status, reason)] = n
        return counts

    async def _fetch_rows(self, host: str, urls: Sequence[str]) -> dict[str, UrlState]:
        results = await asyncio.gather(*(self._rows("get_urls", (host, list(chunk)))
                                         for chunk in _chunks(urls, _IN_ROWS)))
        return {r.url: r for rows in results for r in map(_URLS.decode, rows)}

    async def _rows_of(self, host: str, urls: Sequence[str]) -> dict[str, UrlState]:
        """The rows of these URLs: copies of cached ones, the rest read."""
        if self._cache is None:
            return await self._fetch_rows(host, urls)
        cached, unread = self._cache.split(host, urls)
        found = {url: msgspec.structs.replace(row) for url, row in cached.items()}
        if unread:
            found.update(await self._fetch_rows(host, unread))
        return found

    async def due_urls(self, host: str, now: float, limit: int) -> list[UrlState]:
        """Queued rows of ``host`` with next_fetch_at <= now, by (priority, depth, seq)."""
        if limit <= 0:
            return []
        return await self._queued(host, limit, now)

    async def _queued(self, host: str, limit: int, now: float | None) -> list[UrlState]:
        """The host's queued rows in queue order (those due by ``now``, if given).

        Reads url_queue in order and the url_state rows its entries name; an entry that
        disagrees with its row (a resurrected delete) is skipped.
        """
        found: list[UrlState] = []
        fetch_size = min(max(4 * limit, 100), 5000)
        async with contextlib.aclosing(self._pages("queue_scan", (host,),
                                                   fetch_size)) as pages:
            async for page in pages:
                entries = [e for e in page if now is None or e[4] <= now]
                while entries and len(found) < limit:
                    take, entries = entries[:limit - len(found)], entries[limit - len(found):]
                    rows = await self._rows_of(host, [e[3] for e in take])
                    for priority, depth, seq, url, next_fetch_at in take:
                        r = rows.get(url)
                        if (r is not None and r.status is UrlStatus.QUEUED
                                and (r.priority, r.depth, r.seq, r.next_fetch_at)
                                == (priority, depth, seq, next_fetch_at)):
                            found.append(r)
                if len(found) >= limit:
                    break
        return found

    async def next_due_time(self, host: str) -> float | None:
        """Smallest next_fetch_at of the host's queued rows, or None if none are queued."""
        rows = await self._rows("next_first", (host,))
        return float(rows[0][0]) if rows else None

    async def urls_with_status(self, status: UrlStatus, limit: int,
                               host: str | None = None) -> list[UrlState]:
        """Rows in ``status``: of one host by (priority, depth, seq), else host by host.

        Reads the host's partition of that status (url_queue for QUEUED, else
        url_by_status) and the rows it names: cost grows with the host's rows in that
        status, which for the recovery statuses (IN_FLIGHT, FETCHED) stays small.
        """
        if limit <= 0:
            return []
        status = UrlStatus(status)
        if host is not None:
            return await self._host_urls_with_status(status, limit, host)
        found: list[UrlState] = []
        for h in await self.hosts_with_status(status):
            found += await self._host_urls_with_status(status, limit - len(found), h)
            if len(found) >= limit:
                break
        return found

    async def _host_urls_with_status(self, status: UrlStatus, limit: int,
                                     host: str) -> list[UrlState]:
        if status is UrlStatus.QUEUED:
            return await self._queued(host, limit, None)
        urls = [r[0] for r in await self._all_rows("status_scan", (host, str(status)))]
        rows = await self._fetch_rows(host, urls)
        matching = [r for r in rows.values() if r.status is status]
        matching.sort(key=lambda r: (r.priority, r.depth, r.seq, r.url))
        return matching[:limit]

    async def hosts_with_status(self, status: UrlStatus) -> list[str]:
        """Hosts with at least one row in ``status``, sorted."""
        status = UrlStatus(status)
        results = await asyncio.gather(*(self._all_rows("counts_scan", (str(status), b))
                                         for b in range(self.buckets)))
        return sorted({host for rows in results for host, _, n in rows if n > 0})

    async def count_urls(self) -> dict[tuple[str, str], int]:
        """Counts by (status, reason or ''), summed over the hosts' count rows."""
        keys = [(str(s), b) for s in UrlStatus for b in range(self.buckets)]
        results = await asyncio.gather(*(self._all_rows("counts_scan", k) for k in keys))
        totals: Counter[tuple[str, str]] = Counter()
        for (status, _), rows in zip(keys, results, strict=True):
            for _, reason, n in rows:
                totals[(status, reason)] += n
        return {k: n for k, n in totals.items() if n > 0}

    # ------------------------------------------------------------------ hosts

    async def get_host(self, host: str) -> HostState | None:
        rows = await self._rows("get_host", (host,))
        return _HOSTS.decode(rows[0]) if rows else None

    async def put_host(self, row: HostState) -> None:
        await self._query("put_host", _HOSTS.encode(row))

    async def list_hosts(self) -> list[HostState]:
        """Every host row, sorted by host (a scan of the hosts table)."""
        hosts = [_HOSTS.decode(r) for r in await self._all_rows("list_hosts", ())]
        return sorted(hosts, key=lambda h: h.host)

    # ---------------------------------------------------------------- control

    async def get_control(self) -> CrawlControl:
        rows = await self._rows("get_control", ("crawl",))
        return decode_control(rows[0][0]) if rows else CrawlControl()

    async def put_control(self, row: CrawlControl) -> None:
        await self._query("put_control", ("crawl", encode_control(row)))

    # ------------------------------------------------------------- seed roots

    async def add_seed_roots(self, rows: Sequence[SeedRoot]) -> None:
        """Record seed roots; a root recorded again is harmless (an upsert)."""
        for chunk in _chunks(list(dict.fromkeys(rows)), _IN_ROWS):
            await asyncio.gather(*(self._query("seed_root_put", (r.domain, r.host, r.path))
                                   for r in chunk))

    async def seed_roots(self, domain: str) -> list[SeedRoot]:
        return [SeedRoot(domain=d, host=h, path=p)
                for d, h, p in await self._all_rows("seed_roots_get", (domain,))]

    # ----------------------------------------------------------------- robots

    async def get_robots(self, origin: str) -> RobotsRecord | None:
        rows = await self._rows("get_robots", (origin,))
        return _ROBOTS.decode(rows[0]) if rows else None

    async def put_robots(self, row: RobotsRecord) -> None:
        await self._query("put_robots", _ROBOTS.encode(row))

    # --------------------------------------------------- content fingerprints

    async def content_holder(self, content_hash: str
                             ) -> tuple[str, RecordPointer | None] | None:
        """The first stored copy of ``content_hash``: (url, record), or None (read at
        the write-overlapping level)."""
        rows = await self._rows("claim_get", (content_hash,))
        if not rows:
            return None
        url, file, offset, length = rows[0]
        return url, (None if file is None else RecordPointer(file, offset, length))

    async def record_content(self, content_hash: str, url: str,
                             record: RecordPointer) -> None:
        """Record ``url``'s copy as the holder of ``content_hash`` unless an earlier one
        is recorded. No lightweight transaction: the row is written ``USING TIMESTAMP``
        a value that is larger the earlier the copy (:func:`_claim_stamp`), so
        last-write-wins keeps the first copy on every replica whatever order the
        writes arrive in."""
        stamp = _claim_stamp(time.time_ns() // 1000)
        await self._query("claim_put", (content_hash, url, record.file, record.offset,
                                        record.length, stamp))

    async def add_simhash(self, keys: Sequence[int], url: str, simhash: int,
                          sketch: bytes | None = None) -> None:
        """Index ``url`` under each block key and keep its sketch; adding it again is
        harmless."""
        if not keys:
            return
        batch = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=self._write)
        for entry in index_entries(keys, url, simhash):
            batch.add(self._ps["simhash_put"], entry)
        if sketch:
            batch.add(self._ps["sketch_put"], (url, sketch))
        await self._send(batch)  # one statement; each entry is idempotent

    async def simhash_sketches(self, urls: Sequence[str]) -> dict[str, bytes]:
        """The stored sketch of each of ``urls`` that has one (one ``IN`` query per
        :data:`SKETCHES_PER_QUERY` URLs: a page has a handful of candidates)."""
        wanted = sorted(set(urls))
        found: dict[str, bytes] = {}
        for start in range(0, len(wanted), SKETCHES_PER_QUERY):
            chunk = wanted[start:start + SKETCHES_PER_QUERY]
            for url, sketch in await self._all_rows("sketch_get", (chunk,)):
                if sketch:
                    found[url] = bytes(sketch)
        return found

    async def simhash_candidates(self, keys: Sequence[int]) -> list[tuple[str, int]]:
        """(url, simhash) of every page indexed under any of ``keys``, each pair once."""
        signed = sorted({to_signed(k) for k in keys})
        if not signed:
            return []
        found: dict[tuple[str, int], None] = {}
        for url, value in await self._all_rows("simhash_get", (signed,)):  # one statement
            found[(url, to_unsigned(value))] = None
        return list(found)
