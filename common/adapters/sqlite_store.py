"""The embedded-mode :class:`~common.ports.StateStore`: one SQLite file in WAL mode.

Tables mirror the cluster data model (see the design's Data section):

- ``url_state`` (host, url) -> the :class:`~common.ports.UrlState` fields, the record
  pointer as three columns (``record_file``, ``record_offset``, ``record_length``);
- ``hosts`` (host) -> :class:`~common.ports.HostState`;
- ``robots`` (origin) -> :class:`~common.ports.RobotsRecord`;
- ``content`` (content_hash) -> the first (url, record) that held a body;
- ``simhash_blocks`` (key, url) -> simhash, for near-duplicate candidates;
- ``simhash_sketches`` (url) -> the page's MinHash sketch, for their verdict;
- ``seed_roots`` (domain, host, path): the seeds as the crawl scope knows them;
- ``url_counts`` (status, reason) -> number of url_state rows, kept by triggers;
- ``meta`` (name) -> integer counters (the next discovery sequence number);
- ``schema_version``: one row, the schema's version, for later migrations.

SimHash values and block keys are unsigned 64-bit numbers; SQLite integers are signed,
so they are stored two's-complement and turned back on the way out.

Every query that runs per fetch walks an index: ``due_urls`` reads
``url_due (host, status, priority, depth, seq, next_fetch_at)`` in order and stops after
``limit`` rows, ``next_due_time`` reads one entry of ``url_next (host, status,
next_fetch_at)``, and ``hosts_with_status`` skips from host to host through
``url_status (status, host)``. ``count_urls`` reads ``url_counts``, a small table
of counts by (status, reason) that triggers on ``url_state`` keep up to date in the
same transaction as the change.

Blocking calls run on one dedicated worker thread that owns the only connection, so
the event loop never waits on the disk and calls are applied in the order they were
made. The worker takes every call that is waiting when it looks (a group, up to
:data:`_MAX_GROUP`) and runs the group's writes in one transaction, each call under a
savepoint of its own, so a call that fails leaves no trace while the others of its
group stand (group commit). A call returns only after its group's COMMIT, so a write
is durable before its caller goes on; a process killed mid-write leaves the file as it
was before or after whole calls, never in between (SQLite's WAL). One group also
wakes the event loop once for all its results. With ``synchronous=NORMAL`` a power cut
can lose the last transactions, never consistency.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from common.adapters.int64 import index_entries, to_signed, to_unsigned
from common.adapters.rowcodec import RowCodec
from common.messages import NearIndex, RecordPointer, UrlStatus
from common.ports import (
    CrawlControl,
    HostState,
    RobotsRecord,
    SchemaError,
    SeedRoot,
    UrlState,
    decode_control,
    encode_control,
)

__all__ = ["SCHEMA_VERSION", "SqliteStateStore"]

SCHEMA_VERSION = 1

_KEYS_PER_QUERY = 500  # well under SQLite's bound-parameter limit
_MAX_GROUP = 256  # calls run in one transaction at most

R = TypeVar("R")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS url_state (
    host TEXT NOT NULL,
    url TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    detail TEXT,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    hops INTEGER NOT NULL,
    source TEXT,
    discovered_at REAL NOT NULL,
    seq INTEGER NOT NULL,
    last_fetch_at REAL,
    next_fetch_at REAL NOT NULL,
    attempts INTEGER NOT NULL,
    http_status INTEGER,
    etag TEXT,
    last_modified TEXT,
    content_hash TEXT,
    simhash INTEGER,
    duplicate_of TEXT,
    revisit_interval REAL,
    record_file TEXT,
    record_offset INTEGER,
    record_length INTEGER,
    kind TEXT,
    lastmod REAL,
    PRIMARY KEY (host, url)
);
CREATE INDEX IF NOT EXISTS url_due
    ON url_state (host, status, priority, depth, seq, next_fetch_at);
CREATE INDEX IF NOT EXISTS url_next ON url_state (host, status, next_fetch_at);
CREATE INDEX IF NOT EXISTS url_status ON url_state (status, host);
CREATE TABLE IF NOT EXISTS url_counts (
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (status, reason)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS url_counts_insert AFTER INSERT ON url_state BEGIN
    INSERT INTO url_counts (status, reason, n) VALUES (new.status, COALESCE(new.reason, ''), 1)
        ON CONFLICT (status, reason) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS url_counts_update AFTER UPDATE OF status, reason ON url_state
WHEN old.status IS NOT new.status OR old.reason IS NOT new.reason BEGIN
    UPDATE url_counts SET n = n - 1
        WHERE status = old.status AND reason = COALESCE(old.reason, '');
    INSERT INTO url_counts (status, reason, n) VALUES (new.status, COALESCE(new.reason, ''), 1)
        ON CONFLICT (status, reason) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS url_counts_delete AFTER DELETE ON url_state BEGIN
    UPDATE url_counts SET n = n - 1
        WHERE status = old.status AND reason = COALESCE(old.reason, '');
END;
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    crawl_delay REAL,
    delay_override REAL,
    blocked INTEGER NOT NULL,
    max_pages INTEGER,
    page_count INTEGER NOT NULL,
    next_allowed_at REAL NOT NULL,
    last_response_time REAL NOT NULL,
    capped INTEGER NOT NULL,
    lease_until REAL NOT NULL,
    refreshes INTEGER,
    sitemap_files INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS robots (
    origin TEXT PRIMARY KEY,
    status INTEGER NOT NULL,
    body BLOB NOT NULL,
    fetched_at REAL NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS content (
    content_hash TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    record_file TEXT,
    record_offset INTEGER,
    record_length INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS control (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS simhash_blocks (
    key INTEGER NOT NULL,
    url TEXT NOT NULL,
    simhash INTEGER NOT NULL,
    PRIMARY KEY (key, url)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS simhash_sketches (
    url TEXT PRIMARY KEY,
    sketch BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS seed_roots (
    domain TEXT NOT NULL,
    host TEXT NOT NULL,
    path TEXT NOT NULL,
    PRIMARY KEY (domain, host, path)
) WITHOUT ROWID;
"""



# url_state columns added after the first schema: (name, type), nullable
_ADDED_URL_COLUMNS = (("kind", "TEXT"), ("lastmod", "REAL"))
# hosts columns added after the first schema, nullable (empty: the field's default)
_ADDED_HOST_COLUMNS = (("refreshes", "INTEGER"), ("sitemap_files", "INTEGER"))

_URLS = RowCodec(UrlState, pointer="record", unsigned=frozenset({"simhash"}))
_HOSTS = RowCodec(HostState, added=frozenset(c for c, _ in _ADDED_HOST_COLUMNS))
_ROBOTS = RowCodec(RobotsRecord)

_QUEUED = str(UrlStatus.QUEUED)


def _insert_sql(table: str, columns: Sequence[str]) -> str:
    return (f"INSERT INTO {table} ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' for _ in columns)})")


def _upsert_sql(table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
    return (f"{_insert_sql(table, columns)} ON CONFLICT ({', '.join(key)}) "
            f"DO UPDATE SET {updates}")


_ADD_URL = _insert_sql("url_state", _URLS.columns) + " ON CONFLICT (host, url) DO NOTHING"
_PUT_URL = _upsert_sql("url_state", _URLS.columns, ("host", "url"))
_PUT_HOST = _upsert_sql("hosts", _HOSTS.columns, ("host",))
_PUT_ROBOTS = _upsert_sql("robots", _ROBOTS.columns, ("origin",))
_SEQ_INDEX = _URLS.columns.index("seq")

# Distinct hosts of one status, one index probe per host rather than a scan of all rows.
_HOSTS_WITH_STATUS = """
WITH RECURSIVE h(host) AS (
    SELECT (SELECT MIN(host) FROM url_state WHERE status = :status)
    UNION ALL
    SELECT (SELECT MIN(host) FROM url_state WHERE status = :status AND host > h.host)
    FROM h WHERE h.host IS NOT NULL
)
SELECT host FROM h WHERE host IS NOT NULL
"""


class _Call:
    """One call waiting for the worker thread, and where its answer goes."""

    __slots__ = ("alone", "args", "fn", "future", "loop")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any],
                 alone: bool) -> None:
        self.fn = fn
        self.args = args
        self.loop = loop
        self.future = future
        self.alone = alone  # runs outside any group transaction (open, close)


def _settle(results: list[tuple[_Call, bool, Any]]) -> None:
    """On the event loop: hand each call its result or exception."""
    for call, ok, value in results:
        if call.future.done():  # the caller was cancelled meanwhile
            continue
        if ok:
            call.future.set_result(value)
        else:
            call.future.set_exception(value)


class SqliteStateStore:
    """:class:`~common.ports.StateStore` over one SQLite file (embedded mode).

    ``path`` is the database file (its folder is created) or ``":memory:"``. Use
    ``await store.open()`` and ``await store.close()``, or ``async with``.
    """

    def __init__(self, path: str | PathLike[str]) -> None:
        self.path = str(path)
        self._queue: queue.SimpleQueue[_Call | None] | None = None
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        # worker thread only: a group is running / its transaction is open
        self._grouping = False
        self._group_open = False

    async def __aenter__(self) -> SqliteStateStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ plumbing

    async def _run(self, fn: Callable[..., R], *args: Any) -> R:
        result: R = await self._submit(fn, args)
        return result

    def _submit(self, fn: Callable[..., Any], args: tuple[Any, ...], *,
                alone: bool = False) -> asyncio.Future[Any]:
        q = self._queue
        if q is None:
            raise RuntimeError("the state store is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        q.put(_Call(fn, args, loop, future, alone))
        return future

    def _work(self, q: queue.SimpleQueue[_Call | None]) -> None:
        """The worker thread: run waiting calls in groups until the stop mark."""
        stop = False
        while not stop:
            first = q.get()
            if first is None:
                return
            group = [first]
            while len(group) < _MAX_GROUP:
                try:
                    call = q.get_nowait()
                except queue.Empty:
                    break
                if call is None:
                    stop = True
                    break
                group.append(call)
            self._run_group(group)

    def _run_group(self, group: list[_Call]) -> None:
        results: list[tuple[_Call, bool, Any]] = []
        members: list[int] = []  # results that belong to the open transaction
        self._grouping = True
        try:
            for call in group:
                if call.alone:
                    self._end_group(results, members)
                try:
                    results.append((call, True, call.fn(*call.args)))
                except BaseException as exc:  # handed to the caller
                    results.append((call, False, exc))
                if self._group_open:
                    members.append(len(results) - 1)
            self._end_group(results, members)
        finally:
            self._grouping = False
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Call, bool, Any]]] = {}
        for item in results:
            by_loop.setdefault(item[0].loop, []).append(item)
        for loop, items in by_loop.items():
            # a closed event loop raises RuntimeError: nobody waits there any more
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, items)

    def _end_group(self, results: list[tuple[_Call, bool, Any]], members: list[int]) -> None:
        """Commit the group's transaction; if that fails, its calls fail with the error."""
        if not self._group_open:
            return
        self._group_open = False
        try:
            self._db.execute("COMMIT")
        except Exception as exc:
            if self._conn is not None and self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            for i in members:
                results[i] = (results[i][0], False, exc)
        members.clear()

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the state store is not open")
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One call's writes: a savepoint in its group's transaction (begun by the first
        call of the group that writes), or a transaction of its own outside a group."""
        db = self._db
        if not self._grouping:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return
        if not self._group_open:
            db.execute("BEGIN IMMEDIATE")
            self._group_open = True
        db.execute("SAVEPOINT call")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK TO call")
            db.execute("RELEASE call")
            raise
        db.execute("RELEASE call")

    async def open(self) -> None:
        """Open (creating if needed) the file and its schema. Calling it twice is harmless."""
        if self._queue is not None:
            return
        q: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        thread = threading.Thread(target=self._work, args=(q,), name="sqlite-store",
                                  daemon=True)
        self._queue, self._thread = q, thread
        thread.start()
        try:
            await self._submit(self._open_sync, (), alone=True)
        except BaseException:
            # Also when cancelled while the worker was still opening: close after it.
            self._queue = self._thread = None
            q.put(_Call(self._close_sync, (), asyncio.get_running_loop(),
                        asyncio.get_running_loop().create_future(), True))
            q.put(None)
            thread.join()
            raise

    def _open_sync(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=10000")
            self._conn = conn
            self._migrate()
        except BaseException:
            self._conn = None
            conn.close()
            raise

    def _migrate(self) -> None:
        """Create the schema in one transaction (idempotent) and check its version."""
        db = self._db
        try:
            # executescript runs the trigger bodies whole; the transaction stays open.
            db.executescript("BEGIN IMMEDIATE;\n" + _SCHEMA)
            row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
            version = row[0]
            if version is None:
                db.execute("INSERT INTO schema_version (version) VALUES (?)",
                           (SCHEMA_VERSION,))
            elif version > SCHEMA_VERSION:
                raise SchemaError(f"{self.path}: schema version {version} is newer than "
                                  f"this code supports ({SCHEMA_VERSION})")
            # Later versions add their migrations here, one step per version. Columns
            # that may be empty are added to a file made before them (sitemaps: kind,
            # lastmod; refreshes, sitemap_files: hosts), so an older crawl folder resumes.
            have = {r[1] for r in db.execute("PRAGMA table_info(url_state)")}
            for column, sql_type in _ADDED_URL_COLUMNS:
                if column not in have:
                    db.execute(f"ALTER TABLE url_state ADD COLUMN {column} {sql_type}")
            have = {r[1] for r in db.execute("PRAGMA table_info(hosts)")}
            for column, sql_type in _ADDED_HOST_COLUMNS:
                if column not in have:
                    db.execute(f"ALTER TABLE hosts ADD COLUMN {column} {sql_type}")
            for table, codec in (("url_state", _URLS), ("hosts", _HOSTS),
                                 ("robots", _ROBOTS)):
                have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
                missing = [c for c in codec.columns if c not in have]
                if missing:
                    raise SchemaError(f"{self.path}: table {table} lacks columns "
                                      f"{', '.join(missing)}; a schema migration is needed")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def forget_cached(self) -> None:
        """Nothing to drop: every call reads the file."""

    async def close(self) -> None:
        """Close the file; pending calls finish first. Calling it twice is harmless."""
        q, thread = self._queue, self._thread
        if q is None or thread is None:
            return
        try:
            await self._submit(self._close_sync, (), alone=True)
        finally:
            self._queue = self._thread = None
            q.put(None)
            thread.join()

    def _close_sync(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # ----------------------------------------------------------------- url_state

    async def add_urls(self, rows: Sequence[UrlState]) -> list[UrlState]:
        """Insert rows whose (host, url) is new, numbering them in order (``seq``)."""
        if not rows:
            return []
        return await self._run(self._add_urls_sync, list(rows))

    def _add_urls_sync(self, rows: list[UrlState]) -> list[UrlState]:
        inserted: list[UrlState] = []
        with self._transaction() as db:
            # Read inside the write transaction: right even if another process adds rows.
            found = db.execute("SELECT value FROM meta WHERE name = 'next_seq'").fetchone()
            seq = found[0] if found is not None else 1
            for row in rows:
                values = _URLS.encode(row)
                values[_SEQ_INDEX] = seq
                if db.execute(_ADD_URL, values).rowcount == 1:
                    inserted.append(msgspec.structs.replace(row, seq=seq))
                    seq += 1
            if inserted:
                db.execute("INSERT INTO meta (name, value) VALUES ('next_seq', ?) "
                           "ON CONFLICT (name) DO UPDATE SET value = excluded.value", (seq,))
        return inserted

    async def get_url(self, host: str, url: str) -> UrlState | None:
        return await self._run(self._get_url_sync, host, url)

    def _get_url_sync(self, host: str, url: str) -> UrlState | None:
        row = self._db.execute(f"SELECT {_URLS.select} FROM url_state "
                               "WHERE host = ? AND url = ?", (host, url)).fetchone()
        return None if row is None else _URLS.decode(row)

    async def put_url(self, row: UrlState) -> None:
        """Insert or replace one row, ``seq`` included."""
        await self._run(self._put_urls_sync, [row])

    async def put_urls(self, rows: Sequence[UrlState]) -> None:
        """Insert or replace rows in one transaction."""
        if rows:
            await self._run(self._put_urls_sync, list(rows))

    async def put_url_and_host(self, row: UrlState, host: HostState, *,
                               index: NearIndex | None = None) -> None:
        """Both rows, and the page's near-duplicate index entries, in one transaction."""
        if row.host != host.host:
            raise ValueError(f"url row of {row.host!r} with the host row of {host.host!r}")
        entries = [] if index is None else index_entries(index.keys, row.url, row.simhash)
        await self._run(self._put_url_and_host_sync, _URLS.encode(row), _HOSTS.encode(host),
                        entries, index.sketch if index is not None else None)

    def _put_url_and_host_sync(self, url: Sequence[Any], host: Sequence[Any],
                               entries: list[tuple[int, str, int]],
                               sketch: bytes | None) -> None:
        with self._transaction() as db:
            db.execute(_PUT_URL, url)
            db.execute(_PUT_HOST, host)
            if entries:
                self._index_sync(db, entries, entries[0][1], sketch)

    def _put_urls_sync(self, rows: list[UrlState]) -> None:
        encoded = [_URLS.encode(r) for r in rows]
        with self._transaction() as db:
            db.executemany(_PUT_URL, encoded)

    async def due_urls(self, host: str, now: float, limit: int) -> list[UrlState]:
        """Queued rows of ``host`` with next_fetch_at <= now, by (priority, depth, seq)."""
        if limit <= 0:
            return []
        return await self._run(self._select_urls, (
            f"SELECT {_URLS.select} FROM url_state INDEXED BY url_due "
            "WHERE host = ? AND status = ? AND next_fetch_at <= ? "
            "ORDER BY priority, depth, seq LIMIT ?"), (host, _QUEUED, now, limit))

    def _select_urls(self, sql: str, params: Sequence[Any]) -> list[UrlState]:
        return [_URLS.decode(r) for r in self._db.execute(sql, params)]

    async def next_due_time(self, host: str) -> float | None:
        return await self._run(self._next_due_sync, host)

    def _next_due_sync(self, host: str) -> float | None:
        row = self._db.execute("SELECT MIN(next_fetch_at) FROM url_state INDEXED BY url_next "
                               "WHERE host = ? AND status = ?", (host, _QUEUED)).fetchone()
        return None if row[0] is None else float(row[0])

    async def urls_with_status(self, status: UrlStatus, limit: int,
                               host: str | None = None) -> list[UrlState]:
        """Rows in ``status``: of one host by (priority, depth, seq), else by host."""
        if limit <= 0:
            return []
        if host is None:
            return await self._run(self._select_urls, (
                f"SELECT {_URLS.select} FROM url_state INDEXED BY url_status "
                "WHERE status = ? ORDER BY host LIMIT ?"), (str(status), limit))
        return await self._run(self._select_urls, (
            f"SELECT {_URLS.select} FROM url_state INDEXED BY url_due "
            "WHERE host = ? AND status = ? ORDER BY priority, depth, seq LIMIT ?"),
            (host, str(status), limit))

    async def hosts_with_status(self, status: UrlStatus) -> list[str]:
        """Hosts with at least one row in ``status``, sorted."""
        return await self._run(self._hosts_with_status_sync, str(status))

    def _hosts_with_status_sync(self, status: str) -> list[str]:
        return [r[0] for r in self._db.execute(_HOSTS_WITH_STATUS, {"status": status})]

    async def count_urls(self) -> dict[tuple[str, str], int]:
        return await self._run(self._count_urls_sync)

    def _count_urls_sync(self) -> dict[tuple[str, str], int]:
        rows = self._db.execute("SELECT status, reason, n FROM url_counts WHERE n > 0")
        return {(status, reason): n for status, reason, n in rows}

    # --------------------------------------------------------------------- hosts

    async def get_host(self, host: str) -> HostState | None:
        return await self._run(self._get_host_sync, host)

    def _get_host_sync(self, host: str) -> HostState | None:
        row = self._db.execute(f"SELECT {_HOSTS.select} FROM hosts WHERE host = ?",
                               (host,)).fetchone()
        return None if row is None else _HOSTS.decode(row)

    async def put_host(self, row: HostState) -> None:
        await self._run(self._put_sync, _PUT_HOST, _HOSTS.encode(row))

    def _put_sync(self, sql: str, values: Sequence[Any]) -> None:
        with self._transaction() as db:
            db.execute(sql, values)

    async def list_hosts(self) -> list[HostState]:
        """Every host row, sorted by host."""
        return await self._run(self._list_hosts_sync)

    def _list_hosts_sync(self) -> list[HostState]:
        return [_HOSTS.decode(r) for r in
                self._db.execute(f"SELECT {_HOSTS.select} FROM hosts ORDER BY host")]

    # ------------------------------------------------------------------- control

    async def get_control(self) -> CrawlControl:
        return await self._run(self._get_control_sync)

    def _get_control_sync(self) -> CrawlControl:
        row = self._db.execute("SELECT value FROM control WHERE name = 'crawl'").fetchone()
        return CrawlControl() if row is None else decode_control(row[0])

    async def put_control(self, row: CrawlControl) -> None:
        await self._run(self._put_sync, "INSERT INTO control (name, value) VALUES ('crawl', ?) "
                        "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        (encode_control(row),))

    # ---------------------------------------------------------------- seed roots

    async def add_seed_roots(self, rows: Sequence[SeedRoot]) -> None:
        """Record seed roots; a root recorded again is harmless."""
        if rows:
            await self._run(self._add_seed_roots_sync,
                            [(r.domain, r.host, r.path) for r in rows])

    def _add_seed_roots_sync(self, rows: list[tuple[str, str, str]]) -> None:
        with self._transaction() as db:
            db.executemany("INSERT INTO seed_roots (domain, host, path) VALUES (?, ?, ?) "
                           "ON CONFLICT (domain, host, path) DO NOTHING", rows)

    async def seed_roots(self, domain: str) -> list[SeedRoot]:
        return await self._run(self._seed_roots_sync, domain)

    def _seed_roots_sync(self, domain: str) -> list[SeedRoot]:
        return [SeedRoot(domain=d, host=h, path=p) for d, h, p in self._db.execute(
            "SELECT domain, host, path FROM seed_roots WHERE domain = ? ORDER BY host, path",
            (domain,))]

    # -------------------------------------------------------------------- robots

    async def get_robots(self, origin: str) -> RobotsRecord | None:
        return await self._run(self._get_robots_sync, origin)

    def _get_robots_sync(self, origin: str) -> RobotsRecord | None:
        row = self._db.execute(f"SELECT {_ROBOTS.select} FROM robots WHERE origin = ?",
                               (origin,)).fetchone()
        return None if row is None else _ROBOTS.decode(row)

    async def put_robots(self, row: RobotsRecord) -> None:
        await self._run(self._put_sync, _PUT_ROBOTS, _ROBOTS.encode(row))

    # ------------------------------------------------------ content fingerprints

    async def content_holder(self, content_hash: str
                             ) -> tuple[str, RecordPointer | None] | None:
        """The first stored copy of ``content_hash``: (url, record), or None."""
        return await self._run(self._holder_sync, content_hash)

    def _holder_sync(self, content_hash: str) -> tuple[str, RecordPointer | None] | None:
        with self._transaction() as db:
            row = db.execute("SELECT url, record_file, record_offset, record_length "
                             "FROM content WHERE content_hash = ?", (content_hash,)).fetchone()
        if row is None:
            return None
        url, file, offset, length = row
        return url, None if file is None else RecordPointer(file, offset, length)

    async def record_content(self, content_hash: str, url: str,
                             record: RecordPointer) -> None:
        """Record ``url``'s copy as the holder of ``content_hash`` unless one is
        recorded (the first stays)."""
        await self._run(self._put_sync, (
            "INSERT INTO content (content_hash, url, record_file, record_offset, "
            "record_length) VALUES (?, ?, ?, ?, ?) ON CONFLICT (content_hash) DO NOTHING"),
            (content_hash, url, record.file, record.offset, record.length))

    async def add_simhash(self, keys: Sequence[int], url: str, simhash: int,
                          sketch: bytes | None = None) -> None:
        """Index ``url`` under each block key and keep its sketch; adding it again is
        harmless."""
        if not keys:
            return
        value = to_signed(simhash)
        rows = [(to_signed(k), url, value) for k in keys]
        await self._run(self._add_simhash_sync, rows, url, sketch)

    def _add_simhash_sync(self, rows: list[tuple[int, str, int]], url: str,
                          sketch: bytes | None) -> None:
        with self._transaction() as db:
            self._index_sync(db, rows, url, sketch)

    @staticmethod
    def _index_sync(db: sqlite3.Connection, rows: list[tuple[int, str, int]], url: str,
                    sketch: bytes | None) -> None:
        db.executemany("INSERT INTO simhash_blocks (key, url, simhash) VALUES (?, ?, ?) "
                       "ON CONFLICT (key, url) DO UPDATE SET simhash = excluded.simhash",
                       rows)
        if sketch:
            db.execute("INSERT INTO simhash_sketches (url, sketch) VALUES (?, ?) "
                       "ON CONFLICT (url) DO UPDATE SET sketch = excluded.sketch",
                       (url, sketch))

    async def simhash_sketches(self, urls: Sequence[str]) -> dict[str, bytes]:
        """The stored sketch of each of ``urls`` that has one."""
        wanted = sorted(set(urls))
        if not wanted:
            return {}
        return await self._run(self._sketches_sync, wanted)

    def _sketches_sync(self, urls: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for start in range(0, len(urls), _KEYS_PER_QUERY):
            chunk = urls[start:start + _KEYS_PER_QUERY]
            sql = ("SELECT url, sketch FROM simhash_sketches WHERE url IN "
                   f"({', '.join('?' for _ in chunk)})")
            found.update((url, bytes(sketch)) for url, sketch in self._db.execute(sql, chunk))
        return found

    async def simhash_candidates(self, keys: Sequence[int]) -> list[tuple[str, int]]:
        """(url, simhash) of every page indexed under any of ``keys``, each pair once."""
        signed = sorted({to_signed(k) for k in keys})
        if not signed:
            return []
        return await self._run(self._candidates_sync, signed)

    def _candidates_sync(self, keys: list[int]) -> list[tuple[str, int]]:
        found: dict[tuple[str, int], None] = {}
        for start in range(0, len(keys), _KEYS_PER_QUERY):
            chunk = keys[start:start + _KEYS_PER_QUERY]
            sql = ("SELECT url, simhash FROM simhash_blocks WHERE key IN "
                   f"({', '.join('?' for _ in chunk)})")
            for url, value in self._db.execute(sql, chunk):
                found[(url, to_unsigned(value))] = None
        return list(found)
