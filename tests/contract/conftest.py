"""Fixtures of the port contract suites, one parameter per adapter.

Every test in this folder takes ``store`` / ``store_factory`` or ``bus_harness`` and so
runs once per adapter listed in :data:`STORE_BACKENDS` / :data:`BUS_BACKENDS`. To add
an adapter (Cassandra, Kafka):

1. add ``pytest.param("cassandra", marks=pytest.mark.integration)`` to the list (the
   other contract tests are marked unit);
2. add a branch to :func:`_make_store_factory` / :func:`_make_bus_harness` that calls
   :func:`require_server` (a skip when its server does not answer), then builds the
   adapter on a keyspace / topic prefix of its own (``uuid4().hex``), so tests do not
   see each other's data.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import Topic
from common.ports import Bus, Delivery, Handler, StateStore
from common.settings import StoreSettings
from tests.conftest import unavailable

STORE_BACKENDS = [pytest.param("sqlite"),
                  pytest.param("cassandra", marks=pytest.mark.integration),
                  # as a frontier owns it: rows it wrote kept in memory, not read back
                  pytest.param("cassandra-cached", marks=pytest.mark.integration)]
BUS_BACKENDS = [pytest.param("memory"),
                pytest.param("kafka", marks=pytest.mark.integration)]

# Bus settings every adapter is built with in these tests.
PARTITIONS = 4
MAX_DELIVERY_ATTEMPTS = 3

WAIT = 5.0  # seconds any single expectation may take before the test fails


HERE = Path(__file__).resolve().parent


def server_available(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on a loopback ``port``."""
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise ValueError(f"contract tests only talk to loopback, not {host!r}")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_server(name: str, port: int) -> None:
    """Skip the calling test unless ``name`` answers on loopback ``port``."""
    if not server_available(port):
        unavailable(f"{name} is not running on 127.0.0.1:{port}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Contract tests without a server (no integration mark) count as unit tests."""
    for item in items:
        if (HERE in Path(str(item.fspath)).resolve().parents
                and item.get_closest_marker("integration") is None):
            item.add_marker(pytest.mark.unit)


# ------------------------------------------------------------------ state store


@dataclass(frozen=True)
class StoreFactory:
    """Builds unopened stores over the same data: a second one sees the first's writes."""

    backend: str
    make: Callable[[], StateStore]


def _make_store_factory(backend: str, tmp_path: Path) -> StoreFactory:
    if backend == "sqlite":
        path = tmp_path / "state" / "state.sqlite"
        return StoreFactory(backend, lambda: SqliteStateStore(path))
    raise AssertionError(f"unknown store backend {backend!r}")


@pytest.fixture(params=STORE_BACKENDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    backend: str = request.param
    if backend.startswith("cassandra"):  # one keyspace per session, emptied before each
        settings = request.getfixturevalue("empty_cassandra_keyspace")
        from common.adapters.cassandra import CassandraStateStore
        cache = 1000 if backend == "cassandra-cached" else 0
        return StoreFactory(backend, lambda: CassandraStateStore(settings, row_cache=cache))
    return _make_store_factory(backend, tmp_path)


@pytest.fixture(scope="session")
def cassandra_keyspace() -> Iterator[StoreSettings]:
    """Settings naming a keyspace of this test session's own, dropped at its end."""
    port = int(os.environ.get("CASSANDRA_PORT", "").strip() or 9042)
    require_server("Cassandra", port)
    settings = StoreSettings(backend="cassandra", cassandra_port=port,
                             keyspace=f"contract_{uuid.uuid4().hex[:16]}")
    yield settings
    from common.adapters.cassandra import CassandraStateStore

    async def drop() -> None:
        async with CassandraStateStore(settings) as s:
            await s.drop_keyspace()
    with ThreadPoolExecutor(1) as pool:  # outside the tests' event loops
        pool.submit(asyncio.run, drop()).result()


@pytest.fixture
async def empty_cassandra_keyspace(cassandra_keyspace: StoreSettings) -> StoreSettings:
    from common.adapters.cassandra import CassandraStateStore

    async with CassandraStateStore(cassandra_keyspace) as s:  # creates the schema once
        await s.truncate()
    return cassandra_keyspace


@pytest.fixture
async def store(store_factory: StoreFactory) -> AsyncIterator[StateStore]:
    s = store_factory.make()
    await s.open()
    try:
        yield s
    finally:
        await s.close()


# -------------------------------------------------------------------------- bus


@dataclass
class BusHarness:
    """A bus under test plus what the contract needs beyond the port."""

    backend: str
    bus: Bus
    publish_raw: Callable[[Topic, str, bytes], Awaitable[None]]
    partitions: int = PARTITIONS
    max_delivery_attempts: int = MAX_DELIVERY_ATTEMPTS
    make_twin: Callable[[], Bus] | None = None  # same settings, for partition stability
    consumers: list[Consumer] = field(default_factory=list)
    cleanup: Callable[[], Awaitable[None]] | None = None  # after stop: drop server data

    async def start(self, group: str, topics: Sequence[Topic],
                    handler: Handler | None = None, *, concurrency: int = 1) -> Consumer:
        """Start consuming and return once the group has its partitions."""
        consumer = Consumer(self.bus, group, topics, handler, concurrency)
        self.consumers.append(consumer)
        await consumer.start()
        return consumer


class Consumer:
    """Runs ``bus.consume`` in a task and records what it delivered."""

    def __init__(self, bus: Bus, group: str, topics: Sequence[Topic],
                 handler: Handler | None, concurrency: int) -> None:
        self.bus = bus
        self.group = group
        self.topics = list(topics)
        self.handler = handler
        self.concurrency = concurrency
        self.received: list[Delivery] = []  # deliveries whose handler returned
        self.assigned: list[frozenset[int]] = []
        self._assigned = asyncio.Event()
        self._changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def _on_assign(self, partitions: frozenset[int]) -> None:
        self.assigned.append(partitions)
        self._assigned.set()

    async def _handle(self, delivery: Delivery) -> None:
        if self.handler is not None:
            await self.handler(delivery)
        self.received.append(delivery)
        self._changed.set()

    async def start(self) -> None:
        self.task = asyncio.create_task(self.bus.consume(
            self.group, self.topics, self._handle, concurrency=self.concurrency,
            on_assign=self._on_assign))
        waiter = asyncio.create_task(self._assigned.wait())
        done, _ = await asyncio.wait({waiter, self.task}, timeout=WAIT,
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            if self.task in done:
                self.task.result()  # raises what consume raised
            raise AssertionError(f"group {self.group!r} got no partitions within {WAIT}s")

    async def wait_for(self, count: int) -> list[Delivery]:
        """Wait (at most WAIT seconds) until ``count`` deliveries were handled; return all."""
        async with asyncio.timeout(WAIT):
            while len(self.received) < count:
                if self.task is not None and self.task.done():
                    self.task.result()
                    raise AssertionError("consume returned early")
                self._changed.clear()
                await self._changed.wait()
        return self.received


def _make_bus_harness(backend: str) -> BusHarness:
    if backend == "memory":
        def make() -> MemoryBus:
            return MemoryBus(partitions=PARTITIONS, max_delivery_attempts=MAX_DELIVERY_ATTEMPTS,
                             retry_backoff=0.001)
        bus = make()
        return BusHarness(backend, bus, bus.publish_raw, make_twin=make)
    if backend == "kafka":
        from common.adapters.kafka import KafkaBus
        from common.settings import BusSettings

        bootstrap = (os.environ.get("CRAWLER_BUS_KAFKA_BOOTSTRAP", "").strip()
                     or "127.0.0.1:9092")
        require_server("Kafka", int(bootstrap.split(",")[0].rpartition(":")[2]))
        settings = BusSettings(backend="kafka", kafka_bootstrap=bootstrap,
                               partitions=PARTITIONS, max_delivery_attempts=MAX_DELIVERY_ATTEMPTS,
                               topic_prefix=f"contract-{uuid.uuid4().hex[:12]}")
        kafka = KafkaBus(settings, retry_backoff=0.01)
        return BusHarness(backend, kafka, kafka.publish_raw,
                          make_twin=lambda: KafkaBus(settings), cleanup=kafka.delete_topics)
    raise AssertionError(f"unknown bus backend {backend!r}")


@pytest.fixture(params=BUS_BACKENDS)
async def bus_harness(request: pytest.FixtureRequest) -> AsyncIterator[BusHarness]:
    backend: str = request.param
    harness = _make_bus_harness(backend)
    try:
        yield harness
    finally:
        async with asyncio.timeout(WAIT):
            await harness.bus.stop()
        for consumer in harness.consumers:
            if consumer.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await consumer.task
        if harness.cleanup is not None:
            await harness.cleanup()


def unique(name: str) -> str:
    """A group name no other test uses (matters for servers that outlive a test)."""
    return f"{name}-{uuid.uuid4().hex[:12]}"
