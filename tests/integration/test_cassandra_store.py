"""CassandraStateStore against a real Cassandra (``scripts/servers start cassandra``).

The StateStore contract runs in tests/contract (parameter ``cassandra``). These tests
cover what only this adapter promises: the schema is created, checked and migrated at
open; the derived tables (queue, times, statuses, counts) stay in step with url_state;
a clear, bounded error when Cassandra does not answer; and a rough measurement of
add_urls throughput and due_urls latency (printed; run with ``-s`` to see it).

Tests that need the server are skipped unless it answers on 127.0.0.1 (``CASSANDRA_PORT``,
default 9042). Each uses a keyspace of its own, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import statistics
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec
import pytest
from cassandra.query import BatchStatement

from common.adapters.cassandra import (
    SCHEMA_VERSION,
    TABLES,
    CassandraStateStore,
    CassandraUnavailableError,
)
from common.adapters.cassandra.session import overlapping_read
from common.messages import NearIndex, Reason, RecordPointer, UrlStatus
from common.ports import HostState, SchemaError, UrlState
from common.settings import StoreSettings
from tests.conftest import unavailable

pytestmark = pytest.mark.integration



def _port() -> int:
    """Read when used: testcontainers' port is exported after this module is imported."""
    return int(os.environ.get("CASSANDRA_PORT", "").strip() or 9042)


def _answering() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", _port()), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def session() -> Iterator[Any]:
    """A plain driver session, for looking at and tampering with the tables."""
    if not _answering():
        unavailable(f"Cassandra is not running on 127.0.0.1:{_port()} (scripts/servers start)")
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy
    from cassandra.query import tuple_factory

    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=60,
                               row_factory=tuple_factory)
    cluster = Cluster(["127.0.0.1"], port=_port(), connect_timeout=10,
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


@pytest.fixture
async def settings(session: Any) -> AsyncIterator[StoreSettings]:
    s = StoreSettings(backend="cassandra", cassandra_port=_port(),
                      keyspace=f"itest_{uuid.uuid4().hex[:16]}")
    yield s
    await cql(session, f"DROP KEYSPACE IF EXISTS {s.keyspace}")


async def cql(session: Any, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    return list(await asyncio.to_thread(session.execute, query, params))


def row(host: str, path: str, **fields: Any) -> UrlState:
    return UrlState(host=host, url=f"http://{host}{path}", **fields)


# ------------------------------------------------------------------- schema


async def test_open_creates_the_schema_and_is_idempotent(settings: StoreSettings,
                                                         session: Any) -> None:
    ks = settings.keyspace
    first, second = CassandraStateStore(settings), CassandraStateStore(settings)
    await asyncio.gather(first.open(), second.open())  # side by side on a new keyspace
    await first.open()  # a second open of the same store is a no-op
    [added] = await first.add_urls([row("i.example", "/")])
    assert await second.get_url("i.example", "http://i.example/") == added
    await first.close()
    await first.close()
    with pytest.raises(RuntimeError, match="not open"):
        await first.get_url("i.example", "http://i.example/")
    await second.close()

    async with CassandraStateStore(settings) as third:  # the schema is already there
        assert await third.get_url("i.example", "http://i.example/") == added

    tables = {name: table_id for name, table_id in await cql(
        session, "SELECT table_name, id FROM system_schema.tables WHERE keyspace_name = %s",
        (ks,))}
    assert set(tables) == {t.name for t in TABLES}
    # table ids depend only on the names, so coordinators creating them agree
    assert tables["url_state"] != tables["url_queue"]
    assert tables["url_state"] == uuid.UUID(TABLES[1].ddl(ks).rsplit("WITH ID = ", 1)[1])
    replication = (await cql(session, "SELECT replication FROM system_schema.keyspaces "
                             "WHERE keyspace_name = %s", (ks,)))[0][0]
    assert replication["class"].endswith("SimpleStrategy")
    assert replication["replication_factor"] == str(settings.replication_factor)
    assert await cql(session, f"SELECT name, version, buckets FROM {ks}.schema_version") == [
        ("crawler", SCHEMA_VERSION, 1)]


async def test_open_adds_a_missing_column(settings: StoreSettings, session: Any) -> None:
    async with CassandraStateStore(settings):
        pass
    await cql(session, f"ALTER TABLE {settings.keyspace}.url_state DROP etag")
    async with CassandraStateStore(settings) as store:
        r = row("m.example", "/", etag='"v1"', status=UrlStatus.DONE)
        await store.put_url(r)
        assert await store.get_url(r.host, r.url) == r


async def test_a_hosts_row_from_before_the_refresh_count_reads_as_none_refreshed(
        settings: StoreSettings, session: Any) -> None:
    async with CassandraStateStore(settings) as store:
        await store.put_host(HostState(host="old.example", page_count=4))
    await cql(session, f"ALTER TABLE {settings.keyspace}.hosts DROP refreshes")
    async with CassandraStateStore(settings) as store:  # adds the column again
        old = await store.get_host("old.example")
        assert old is not None and (old.page_count, old.refreshes) == (4, 0)
        await store.put_host(HostState(host="new.example", page_count=5, refreshes=3))
        assert await store.get_host("new.example") == HostState(
            host="new.example", page_count=5, refreshes=3)


async def test_open_refuses_a_newer_schema(settings: StoreSettings, session: Any) -> None:
    async with CassandraStateStore(settings):
        pass
    await cql(session, f"UPDATE {settings.keyspace}.schema_version SET version = 99 "
                       "WHERE name = 'crawler'")
    store = CassandraStateStore(settings)
    with pytest.raises(SchemaError, match="newer"):
        await store.open()
    await store.close()


async def test_open_refuses_a_keyspace_of_the_old_layout(settings: StoreSettings,
                                                        session: Any) -> None:
    """A version 1 keyspace (statuses by (host, status), counts by status bucket) is
    refused with a clear error before anything is created in it."""
    ks = settings.keyspace
    await cql(session, f"CREATE KEYSPACE {ks} WITH replication = "
                       "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    await cql(session, f"CREATE TABLE {ks}.schema_version (name text PRIMARY KEY, "
                       "version int, buckets int)")
    await cql(session, f"INSERT INTO {ks}.schema_version (name, version, buckets) "
                       "VALUES ('crawler', 1, 16)")
    store = CassandraStateStore(settings)
    with pytest.raises(SchemaError, match=r"schema version 1 has the old layout.*new "
                                          r"keyspace"):
        await store.open()
    tables = await cql(session, "SELECT table_name FROM system_schema.tables "
                                "WHERE keyspace_name = %s", (ks,))
    assert tables == [("schema_version",)]


async def test_open_refuses_a_table_of_another_shape(settings: StoreSettings,
                                                     session: Any) -> None:
    ks = settings.keyspace
    await cql(session, f"CREATE KEYSPACE {ks} WITH replication = "
                       "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    await cql(session, f"CREATE TABLE {ks}.hosts (host text PRIMARY KEY, page_count int)")
    store = CassandraStateStore(settings)
    with pytest.raises(SchemaError, match=r"hosts\.page_count is int, expected bigint"):
        await store.open()


# ---------------------------------------------------- errors and settings


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_unreachable_cassandra_is_named_within_the_wait() -> None:
    port = _free_loopback_port()
    settings = StoreSettings(backend="cassandra", cassandra_hosts=("127.0.0.1",),
                             cassandra_port=port, keyspace="nowhere")
    store = CassandraStateStore(settings, connect_timeout=2.0)
    started = time.monotonic()
    with pytest.raises(CassandraUnavailableError, match=f"127.0.0.1:{port}.*within 2 s"):
        await store.open()
    assert time.monotonic() - started < 15
    with pytest.raises(RuntimeError, match="not open"):
        await store.count_urls()


class _FreezingProxy:
    """A TCP relay on 127.0.0.1 to the test's Cassandra that can stop passing bytes
    (both ways) while keeping the connections open: a node that takes requests and
    never answers them."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink))
            self.tasks.add(task)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self.flowing.wait()
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()


async def test_a_request_without_an_answer_fails_after_the_request_timeout(
        settings: StoreSettings) -> None:
    """A request the node takes and never answers fails after ``request_timeout`` with
    the driver's timeout error (the caller's outage handling waits and tries again),
    the store is reported down, and once the node answers again the next request
    succeeds and the store is reported up."""
    from cassandra import OperationTimedOut

    from common.adapters.handling import DEPENDENCIES, STORE

    proxy = _FreezingProxy(_port())
    async with proxy as port:
        store = CassandraStateStore(dataclasses.replace(settings, cassandra_port=port),
                                    request_timeout=1.5)
        async with store:
            [added] = await store.add_urls([row("t.example", "/")])
            proxy.flowing.clear()
            started = time.monotonic()
            with pytest.raises(OperationTimedOut):
                await store.get_url("t.example", "http://t.example/")
            waited = time.monotonic() - started
            assert 1.4 <= waited < 10, waited
            assert DEPENDENCIES.is_down(STORE)
            proxy.flowing.set()
            assert await store.get_url("t.example", "http://t.example/") == added
            assert not DEPENDENCIES.is_down(STORE)


def test_bad_settings_name_the_variable() -> None:
    with pytest.raises(ValueError, match="CRAWLER_STORE_KEYSPACE"):
        CassandraStateStore(StoreSettings(keyspace="crawl-2024"))
    with pytest.raises(ValueError, match="CRAWLER_STORE_KEYSPACE"):
        CassandraStateStore(StoreSettings(keyspace="x; DROP KEYSPACE system"))
    with pytest.raises(ValueError, match=r"CRAWLER_STORE_READ_CONSISTENCY.*'SOMETIMES'"):
        CassandraStateStore(StoreSettings(read_consistency="SOMETIMES"))
    with pytest.raises(ValueError, match="CRAWLER_STORE_WRITE_CONSISTENCY"):
        CassandraStateStore(StoreSettings(write_consistency=""))
    with pytest.raises(ValueError, match="CRAWLER_STORE_CASSANDRA_HOSTS"):
        CassandraStateStore(StoreSettings(cassandra_hosts=()))


def test_reads_before_writes_overlap_the_write_level() -> None:
    from cassandra import ConsistencyLevel as Level

    assert overlapping_read(Level.LOCAL_ONE, Level.LOCAL_QUORUM) == Level.LOCAL_QUORUM
    assert overlapping_read(Level.QUORUM, Level.LOCAL_QUORUM) == Level.QUORUM
    assert overlapping_read(Level.ONE, Level.QUORUM) == Level.QUORUM
    assert overlapping_read(Level.LOCAL_ONE, Level.ONE) == Level.ALL
    assert overlapping_read(Level.LOCAL_ONE, Level.ALL) == Level.LOCAL_ONE


async def test_consistency_levels_come_from_the_settings(settings: StoreSettings) -> None:
    from cassandra import ConsistencyLevel as Level

    tuned = StoreSettings(backend="cassandra", cassandra_port=_port(), keyspace=settings.keyspace,
                          read_consistency="one", write_consistency="ONE")
    async with CassandraStateStore(tuned) as store:
        assert store._ps["get_url"].consistency_level == Level.ONE
        assert store._ps["put_url"].consistency_level == Level.ONE
        assert store._ps["old_urls"].consistency_level == Level.ALL  # one node: still works
        # the claim's read-back overlaps the claim's write; no serial level: no Paxos
        assert store._ps["claim_get"].consistency_level == Level.ALL
        assert store._ps["claim_put"].serial_consistency_level is None
        [added] = await store.add_urls([row("c.example", "/")])
        assert await store.get_url(added.host, added.url) == added


# --------------------------------------------------------- derived tables


async def _check_derived(session: Any, store: CassandraStateStore) -> None:
    """The queue, time, status and count tables say exactly what url_state says."""
    ks = store.keyspace
    state = await cql(session, f"SELECT host, url, status, reason, priority, depth, seq, "
                               f"next_fetch_at FROM {ks}.url_state")
    queued = [r for r in state if r[2] == "queued"]
    assert sorted(await cql(session, f"SELECT host, priority, depth, seq, url, next_fetch_at "
                                     f"FROM {ks}.url_queue")) == sorted(
        (h, p, d, s, u, n) for h, u, _, _, p, d, s, n in queued)
    assert sorted(await cql(session, f"SELECT host, next_fetch_at, url FROM {ks}.url_next")
                  ) == sorted((h, n, u) for h, u, *_, n in queued)
    assert sorted(await cql(session, f"SELECT host, status, url FROM {ks}.url_by_status")
                  ) == sorted((h, st, u) for h, u, st, *_ in state if st != "queued")
    counts = {(h, st, r): n for h, st, r, n in await cql(
        session, f"SELECT host, status, reason, n FROM {ks}.host_counts") if n}
    expected = Counter((h, st, r or "") for h, _, st, r, *_ in state)
    assert counts == dict(expected)


async def test_derived_tables_follow_every_change(settings: StoreSettings,
                                                  session: Any) -> None:
    async with CassandraStateStore(settings) as store:
        added = await store.add_urls(
            [row(f"h{i % 3}.example", f"/{i}", priority=i % 2, depth=i % 4,
                 next_fetch_at=float(i)) for i in range(40)]
            + [row("h0.example", "/robots-says-no", status=UrlStatus.REJECTED,
                   reason=Reason.ROBOTS)])
        assert len(added) == 41
        await _check_derived(session, store)

        flying = [msgspec.structs.replace(r, status=UrlStatus.IN_FLIGHT) for r in added[:10]]
        await store.put_urls(flying)
        await _check_derived(session, store)
        assert sorted(await store.hosts_with_status(UrlStatus.IN_FLIGHT)) == [
            "h0.example", "h1.example", "h2.example"]

        done = [msgspec.structs.replace(r, status=UrlStatus.DONE, http_status=200)
                for r in flying[:6]]
        moved = [msgspec.structs.replace(r, priority=5, depth=1, next_fetch_at=99.0)
                 for r in added[20:25]]  # still queued: new place in the queue and time
        await store.put_urls([*done, *moved, *done[:2]])  # repeats: the last counts
        await _check_derived(session, store)

        refresh = [msgspec.structs.replace(r, status=UrlStatus.QUEUED, next_fetch_at=500.0)
                   for r in done[:3]]
        dead = msgspec.structs.replace(flying[9], status=UrlStatus.DEAD, reason=Reason.DEAD)
        await store.put_urls([*refresh, dead])
        await _check_derived(session, store)
        assert (await store.count_urls())[("dead", "dead")] == 1
        assert await store.urls_with_status(UrlStatus.DEAD, 10) == [dead]
        in_flight = await store.urls_with_status(UrlStatus.IN_FLIGHT, 100)
        assert sorted(r.url for r in in_flight) == sorted(r.url for r in flying[6:9])
        stored = [await store.get_url(r.host, r.url) for r in added]
        queued_h1 = sorted((r for r in stored if r is not None and r.host == "h1.example"
                            and r.status is UrlStatus.QUEUED),
                           key=lambda r: (r.priority, r.depth, r.seq))
        assert len(queued_h1) > 5
        assert await store.urls_with_status(UrlStatus.QUEUED, 5, host="h1.example") == (
            queued_h1[:5])


async def test_queue_entries_that_outlived_their_row_are_skipped(settings: StoreSettings,
                                                                 session: Any) -> None:
    """A delete that comes back (a replica that missed it) does not queue a URL again."""
    async with CassandraStateStore(settings) as store:
        [a, b] = await store.add_urls([row("z.example", "/a", priority=1),
                                       row("z.example", "/b", priority=1)])
        await store.put_url(msgspec.structs.replace(a, status=UrlStatus.DONE))
        await cql(session, f"INSERT INTO {settings.keyspace}.url_queue (host, priority, depth, "
                           "seq, url, next_fetch_at) VALUES (%s, %s, %s, %s, %s, %s)",
                  (a.host, 0, 0, a.seq, a.url, 0.0))
        await cql(session, f"INSERT INTO {settings.keyspace}.url_queue (host, priority, depth, "
                           "seq, url, next_fetch_at) VALUES (%s, %s, %s, %s, %s, %s)",
                  (b.host, 0, 0, b.seq, b.url, 0.0))  # b is queued, but at priority 1
        assert await store.due_urls("z.example", 10.0, 10) == [b]
        assert await store.urls_with_status(UrlStatus.QUEUED, 10, host="z.example") == [b]


async def test_invalid_rows_fail_before_anything_is_written(settings: StoreSettings) -> None:
    async with CassandraStateStore(settings) as store:
        good = row("v.example", "/good")
        with pytest.raises(ValueError, match="64-bit"):
            await store.add_urls([good, row("v.example", "/bad", simhash=1 << 64)])
        with pytest.raises(ValueError, match="64-bit"):
            await store.put_urls([good, row("v.example", "/bad", simhash=-1)])
        with pytest.raises(ValueError, match="64-bit"):
            await store.add_simhash([1, -5], "http://v.example/", 7)
        assert await store.get_url(good.host, good.url) is None
        assert await store.count_urls() == {}
        assert await store.simhash_candidates([1]) == []


async def test_truncate_empties_every_table(settings: StoreSettings, session: Any) -> None:
    async with CassandraStateStore(settings) as store:
        await store.add_urls([row("t.example", "/")])
        await store.record_content("sha256:" + "77" * 32, "http://t.example/",
                                   RecordPointer("crawl-00000.warc.gz", 0, 1))
        await store.truncate()
        assert await store.count_urls() == {}
        assert await store.next_due_time("t.example") is None
        for table in TABLES:
            rows = await cql(session, f"SELECT * FROM {settings.keyspace}.{table.name}")
            assert (len(rows) == 1) if table.name == "schema_version" else rows == [], table


# ------------------------------------------------------------ measurement


async def test_measure_add_urls_and_due_urls(settings: StoreSettings) -> None:
    """Rough numbers on this machine; the assertions check the work, not the speed."""
    async with CassandraStateStore(settings) as store:
        one_host = [row("big.example", f"/p/{i:06d}", priority=i % 3, depth=i % 5)
                    for i in range(10_000)]
        started = time.perf_counter()
        added = await store.add_urls(one_host)
        one_host_rate = len(added) / (time.perf_counter() - started)

        many_hosts = [row(f"h{i % 100}.example", f"/p/{i:06d}") for i in range(10_000)]
        started = time.perf_counter()
        added_many = await store.add_urls(many_hosts)
        many_hosts_rate = len(added_many) / (time.perf_counter() - started)
        assert len(added) == len(added_many) == 10_000
        assert await store.count_urls() == {("queued", ""): 20_000}

        latencies = []
        for _ in range(50):
            started = time.perf_counter()
            due = await store.due_urls("big.example", now=1.0, limit=10)
            latencies.append(time.perf_counter() - started)
        keys = [(r.priority, r.depth, r.seq) for r in due]
        assert len(due) == 10 and keys == sorted(keys) and keys[0][:2] == (0, 0)

        taken = await store.due_urls("big.example", now=1.0, limit=2_000)
        started = time.perf_counter()
        await store.put_urls([msgspec.structs.replace(r, status=UrlStatus.IN_FLIGHT)
                              for r in taken])
        put_rate = len(taken) / (time.perf_counter() - started)
        after = []
        for _ in range(50):
            started = time.perf_counter()
            due_after = await store.due_urls("big.example", now=1.0, limit=10)
            after.append(time.perf_counter() - started)
        assert {r.url for r in due_after}.isdisjoint(r.url for r in taken)
        assert len(due_after) == 10

        print(f"\ncassandra store: add_urls 10k rows, one host {one_host_rate:,.0f} rows/s, "
              f"100 hosts {many_hosts_rate:,.0f} rows/s; put_urls {put_rate:,.0f} rows/s; "
              f"due_urls(limit=10) median {statistics.median(latencies) * 1000:.1f} ms, "
              f"after 2,000 rows left the queue "
              f"{statistics.median(after) * 1000:.1f} ms")


# ------------------------------------------------ statements of a single writer


class Statements:
    """The kinds of the statements a store sends (its ``on_statement``)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def __call__(self, kind: str, rows: int) -> None:
        self.kinds.append(kind)

    def take(self) -> list[str]:
        kinds, self.kinds = self.kinds, []
        return kinds


async def test_an_owner_writes_its_rows_without_reading_them_back(
        settings: StoreSettings) -> None:
    sent = Statements()
    async with CassandraStateStore(settings, row_cache=100, on_statement=sent) as store:
        [added] = await store.add_urls([row("w.example", "/")])
        # the host's counts of every status, in one read, with the first write
        assert sent.take() == ["read", "read", "batch"]  # rows known? counts; the write
        added.status = UrlStatus.IN_FLIGHT
        await store.put_url(added)
        assert sent.take() == ["batch"]
        assert await store.get_url(added.host, added.url) == added
        added.status = UrlStatus.FETCHED
        await store.put_url(added)
        added.status = UrlStatus.DONE
        await store.put_url(added)
        assert sent.take() == ["batch", "batch"]
        added.status = UrlStatus.QUEUED
        await store.put_url(added)
        added.status = UrlStatus.DONE
        await store.put_url(added)
        assert sent.take() == ["batch", "batch"]  # known rows and counts: writes only
        assert await store.get_url(added.host, added.url) == added
        assert sent.take() == []
        # what it wrote is what a store without memory reads
    async with CassandraStateStore(settings) as fresh:
        assert await fresh.get_url(added.host, added.url) == added
        assert (await fresh.count_urls()) == {("done", ""): 1}


async def test_an_owner_does_not_read_rows_it_knows_do_not_exist(
        settings: StoreSettings) -> None:
    """While every row of a host is held (its counts add up to the rows held), a URL
    not held has no row: adding it reads nothing."""
    sent = Statements()
    async with CassandraStateStore(settings, row_cache=100, on_statement=sent) as store:
        await store.add_urls([row("n.example", "/")])
        sent.take()
        await store.add_urls([row("n.example", "/2"), row("n.example", "/3")])
        assert sent.take() == ["batch"]
        assert [r.url for r in await store.add_urls([row("n.example", "/2")])] == []
        assert sent.take() == []
    async with CassandraStateStore(settings, row_cache=100, on_statement=sent) as other:
        # a host with rows this writer does not hold: they are read
        await other.get_url("n.example", "http://n.example/")
        sent.take()
        assert [r.url for r in await other.add_urls(
            [row("n.example", "/"), row("n.example", "/4")])] == ["http://n.example/4"]
        assert sent.take() == ["read", "read", "batch"]
        await _check_derived_counts(other, {("queued", ""): 4})


async def _check_derived_counts(store: CassandraStateStore,
                                expected: dict[tuple[str, str], int]) -> None:
    assert await store.count_urls() == expected


async def test_every_logged_batch_is_one_partition(settings: StoreSettings) -> None:
    """Every table written with a host's URL rows is keyed by the host, so each logged
    batch is one mutation (no batch log); only a batch that carries a page's
    near-duplicate index entries spans partitions, and it is unlogged."""
    async with CassandraStateStore(settings, row_cache=100) as store:
        real = store._send
        seen: list[tuple[str, set[bytes]]] = []

        async def look(statement: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(statement, BatchStatement):
                # every table's partition key is its first bound value here
                keys = {bytes(values[0])
                        for _, _, values in statement._statements_and_parameters}
                seen.append((statement.batch_type.name, keys))
            return await real(statement, *args, **kwargs)

        store._send = look  # type: ignore[method-assign]
        added = await store.add_urls([row("p.example", f"/{i}") for i in range(40)]
                                     + [row("q.example", "/")])
        first = added[0]
        first.status = UrlStatus.IN_FLIGHT
        await store.put_url_and_host(first, HostState(host="p.example", lease_until=9.0))
        first.status, first.simhash = UrlStatus.DONE, 5
        await store.put_url_and_host(
            first, HostState(host="p.example", page_count=1),
            index=NearIndex(keys=[1, 2], sketch=b"s"))
        await store.put_urls([msgspec.structs.replace(r, status=UrlStatus.REJECTED,
                                                      reason=Reason.HOST_CAP)
                              for r in added[1:]])
        logged = [keys for kind, keys in seen if kind == "LOGGED"]
        assert len(logged) >= 5 and all(len(keys) == 1 for keys in logged), seen
        assert [len(keys) > 1 for kind, keys in seen if kind == "UNLOGGED"] == [True]


async def test_an_owner_forgets_its_rows_when_its_hosts_change(settings: StoreSettings) -> None:
    sent = Statements()
    async with CassandraStateStore(settings, row_cache=100, on_statement=sent) as owner, \
            CassandraStateStore(settings) as other:
        [added] = await owner.add_urls([row("f.example", "/")])
        # another writer took the host meanwhile (a rebalance) and changed the row
        changed = msgspec.structs.replace(added, status=UrlStatus.DONE)
        await other.put_url(changed)
        owner.forget_cached()
        sent.take()
        assert await owner.get_url(added.host, added.url) == changed
        assert sent.take() == ["read"]


async def test_the_rows_of_a_failed_write_are_read_again(settings: StoreSettings) -> None:
    sent = Statements()
    async with CassandraStateStore(settings, row_cache=100, on_statement=sent) as store:
        [added] = await store.add_urls([row("x.example", "/")])
        bad = msgspec.structs.replace(added, status=UrlStatus.IN_FLIGHT, detail="x" * 10)
        failing = store._send

        async def refuse(statement: Any, *args: Any, **kwargs: Any) -> Any:
            raise OSError("write timed out")

        store._send = refuse  # type: ignore[method-assign]
        with pytest.raises(OSError, match="write timed out"):
            await store.put_url(bad)
        store._send = failing  # type: ignore[method-assign]
        sent.take()
        assert await store.get_url(added.host, added.url) == added
        assert sent.take() == ["read"]


async def test_a_failed_write_of_one_host_returns_after_the_others_ended(
        settings: StoreSettings) -> None:
    """A call that writes several hosts raises only once every host's write has ended:
    its host locks are held until then, so the next call of a host whose write was
    still on its way cannot read that host's counts before the write lands (and lose an
    update: a queued count that stays 1 with nothing queued, a crawl that never ends)."""
    async with CassandraStateStore(settings, row_cache=100) as store:
        real = store._send
        batches = 0
        landed = asyncio.Event()

        async def one_fails_one_is_slow(statement: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal batches
            if not isinstance(statement, BatchStatement):
                return await real(statement, *args, **kwargs)
            batches += 1
            if batches == 1:
                raise OSError("write timed out")
            await asyncio.sleep(0.5)
            result = await real(statement, *args, **kwargs)
            landed.set()
            return result

        store._send = one_fails_one_is_slow  # type: ignore[method-assign]
        with pytest.raises(OSError, match="write timed out"):
            await store.add_urls([row("fail.example", "/"), row("slow.example", "/")])
        assert landed.is_set(), "the call raised while another host's write was on its way"
        store._send = real  # type: ignore[method-assign]
        # either host's batch may have been the one that failed: add both again
        await store.add_urls([row("slow.example", "/"), row("slow.example", "/2"),
                              row("fail.example", "/")])
        counts = await store.count_urls()
        assert counts == {("queued", ""): 3}, counts


async def test_counts_are_checked_against_the_rows_after_a_failed_write(
        settings: StoreSettings, session: Any) -> None:
    """A failed write may land later than a write that read the counts without it (a
    request the client gave up on, a batch replayed from the batch log after a
    restart): the host's counts are then counted again from its rows."""
    async with CassandraStateStore(settings, row_cache=100, repair_after=0.3) as store:
        await store.add_urls([row("r.example", "/1"), row("r.example", "/2")])
        # what a late landing leaves: counts that disagree with the rows
        await cql(session, f"UPDATE {settings.keyspace}.host_counts SET n = 5 WHERE "
                  "host = 'r.example' AND status = 'queued' AND reason = ''")
        await cql(session, f"UPDATE {settings.keyspace}.host_counts SET n = 1 WHERE "
                  "host = 'r.example' AND status = 'fetched' AND reason = ''")
        assert (await store.count_urls())[("queued", "")] == 5
        real = store._send

        async def refuse(statement: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(statement, BatchStatement):
                raise OSError("write timed out")
            return await real(statement, *args, **kwargs)

        store._send = refuse  # type: ignore[method-assign]
        [first] = await store.due_urls("r.example", now=1e12, limit=1)
        with pytest.raises(OSError, match="write timed out"):
            await store.put_url(msgspec.structs.replace(first, status=UrlStatus.IN_FLIGHT))
        store._send = real  # type: ignore[method-assign]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            counts = {k: n for k, n in (await store.count_urls()).items() if n}
            if counts == {("queued", ""): 2}:
                break
            await asyncio.sleep(0.2)
        assert counts == {("queued", ""): 2}, counts
        # and the writer's own memory of the counts is the repaired one
        await store.put_url(msgspec.structs.replace(first, status=UrlStatus.DONE))
        counts = {k: n for k, n in (await store.count_urls()).items() if n}
        assert counts == {("queued", ""): 1, ("done", ""): 1}, counts


async def test_content_records_need_no_paxos_and_the_earliest_wins(
        settings: StoreSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    import common.adapters.cassandra.small_tables as cs

    sent = Statements()
    h = "sha256:" + "88" * 32
    now = time.time_ns()
    early = RecordPointer("crawl-00009.warc.gz", 0, 10)
    late = RecordPointer("crawl-00009.warc.gz", 10, 10)
    async with CassandraStateStore(settings, on_statement=sent) as store:
        # the later copy's write reaches the database first
        monkeypatch.setattr(cs.time, "time_ns", lambda: now + 5_000_000)
        await store.record_content(h, "http://late.example/", late)
        assert await store.content_holder(h) == ("http://late.example/", late)
        monkeypatch.setattr(cs.time, "time_ns", lambda: now)
        await store.record_content(h, "http://early.example/", early)
        assert await store.content_holder(h) == ("http://early.example/", early)
        monkeypatch.setattr(cs.time, "time_ns", lambda: now + 9_000_000)
        await store.record_content(h, "http://third.example/", late)
        assert await store.content_holder(h) == ("http://early.example/", early)
    assert sent.kinds.count("write") == 3 and "lwt" not in sent.kinds


async def test_the_earliest_copy_wins_within_one_grouped_batch(
        settings: StoreSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two records of one body in the same group: each keeps its own timestamp in the
    batch, so the earlier copy is the holder whichever comes first in the batch."""
    import common.adapters.cassandra.small_tables as cs

    sent = Statements()
    h = "sha256:" + "99" * 32
    now = time.time_ns()
    early = RecordPointer("crawl-00010.warc.gz", 0, 10)
    late = RecordPointer("crawl-00010.warc.gz", 10, 10)
    stamps = iter([now + 5_000_000, now])  # the later copy is recorded first
    monkeypatch.setattr(cs.time, "time_ns", lambda: next(stamps))
    grouped = dataclasses.replace(settings, group_wait=0.05)
    async with CassandraStateStore(grouped, on_statement=sent) as store:
        await asyncio.gather(store.record_content(h, "http://late.example/", late),
                             store.record_content(h, "http://early.example/", early))
        assert sent.take() == ["batch"]
        assert await store.content_holder(h) == ("http://early.example/", early)


async def test_content_and_candidate_look_ups_of_several_pages_go_out_together(
        settings: StoreSettings) -> None:
    """Pages' look-ups made within the group wait are one request each kind, and each
    page gets its own answer."""
    sent = Statements()
    grouped = dataclasses.replace(settings, group_wait=0.05)
    hashes = ["sha256:" + f"{i:02x}" * 32 for i in range(4)]
    pointers = [RecordPointer("crawl-00001.warc.gz", 100 * i, 50) for i in range(4)]
    async with CassandraStateStore(grouped, on_statement=sent) as store:
        await asyncio.gather(*(store.record_content(h, f"http://p{i}.example/", p)
                               for i, (h, p) in enumerate(zip(hashes[:3], pointers,
                                                              strict=False))))
        assert sent.take() == ["batch"]  # three records, one unlogged batch
        found = await asyncio.gather(*(store.content_holder(h) for h in hashes))
        assert sent.take() == ["read"]
        assert found == [(f"http://p{i}.example/", pointers[i]) for i in range(3)] + [None]
        await store.add_simhash([1, 2], "http://a.example/", 11)
        await store.add_simhash([2, 3], "http://b.example/", 22)
        await store.add_simhash([2**63 + 5], "http://c.example/", 2**64 - 1)
        sent.take()
        answers = await asyncio.gather(store.simhash_candidates([1]),
                                       store.simhash_candidates([3, 2]),
                                       store.simhash_candidates([2**63 + 5]),
                                       store.simhash_candidates([99]))
        assert sent.take() == ["read"]
    assert answers[0] == [("http://a.example/", 11)]
    assert sorted(answers[1]) == [("http://a.example/", 11), ("http://b.example/", 22)]
    assert answers[2] == [("http://c.example/", 2**64 - 1)]
    assert answers[3] == []
