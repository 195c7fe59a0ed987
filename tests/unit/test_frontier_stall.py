"""The frontier never stops dispatching while URLs of its hosts are due.

Each test replays a sequence that left URLs queued in the store with nothing in the
frontier's memory to dispatch them (a lost wake-up), and checks that they go out."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import (
    Discovered,
    FetchOutcome,
    FetchResult,
    FetchTask,
    Link,
    NearIndex,
    Topic,
)
from common.ports import Delivery, HostState, UrlState
from common.settings import Settings
from frontier.service import Frontier

LIMIT = 5.0


class FlakyStore(SqliteStateStore):
    """SQLite store that fails chosen calls once, as a store under load does (a write
    that timed out on the client after it was applied, a read that timed out)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.fail_after_add: bool = False  # add_urls applies its rows, then raises
        self.fail_get_host: dict[str, int] = {}  # host: its get_host call that raises
        self.get_host_calls: dict[str, int] = {}
        self.hang_due_urls = 0  # this many due_urls calls never answer
        self.fail_after_put_url_and_host = False  # applies the write, then raises

    async def put_url_and_host(self, row: UrlState, host: HostState, *,
                               index: NearIndex | None = None) -> None:
        await super().put_url_and_host(row, host, index=index)
        if self.fail_after_put_url_and_host:
            self.fail_after_put_url_and_host = False
            raise TimeoutError("write timed out (it was applied)")

    async def due_urls(self, host: str, now: float, limit: int) -> list[UrlState]:
        if self.hang_due_urls:
            self.hang_due_urls -= 1
            await asyncio.Event().wait()  # a request whose answer never comes
        return await super().due_urls(host, now, limit)

    async def add_urls(self, rows: Sequence[UrlState]) -> list[UrlState]:
        inserted = await super().add_urls(rows)
        if self.fail_after_add:
            self.fail_after_add = False
            raise TimeoutError("write timed out (it was applied)")
        return inserted

    async def get_host(self, host: str) -> HostState | None:
        n = self.get_host_calls[host] = self.get_host_calls.get(host, 0) + 1
        if self.fail_get_host.get(host) == n:
            raise TimeoutError("read timed out")
        return await super().get_host(host)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FlakyStore]:
    s = FlakyStore(tmp_path / "state.sqlite")
    await s.open()
    try:
        yield s
    finally:
        await s.close()


def _settings() -> Settings:
    return Settings().replace(politeness={"default_delay": 0.0})


def _discovered(host: str, paths: list[str]) -> Delivery:
    links = [Link(url=f"http://{host}{p}") for p in paths]
    return Delivery(topic=Topic.DISCOVERED, key=host, message=Discovered(host=host, links=links))


async def _retry(frontier: Frontier, delivery: Delivery, *, outage: bool = False) -> None:
    """What the bus does with a handler that raised: the same message again (while a
    dependency is down, without counting the failed call as an attempt)."""
    with pytest.raises(TimeoutError):
        await frontier.handle(delivery)
    await frontier.handle(Delivery(topic=delivery.topic, key=delivery.key,
                                   message=delivery.message, attempt=1 if outage else 2,
                                   calls=2))


async def _dispatched(frontier: Frontier, bus: MemoryBus, n: int) -> list[FetchTask]:
    """Run the frontier until ``n`` fetch tasks went out (or LIMIT passed)."""
    got: list[FetchTask] = []
    enough = asyncio.Event()

    async def collect(delivery: Delivery) -> None:
        assert isinstance(delivery.message, FetchTask)
        got.append(delivery.message)
        if len(got) >= n:
            enough.set()

    bus.declare_group("fetcher", (Topic.FETCH,))
    consumer = asyncio.create_task(bus.consume("fetcher", (Topic.FETCH,), collect))
    runner = asyncio.create_task(frontier.run())
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(enough.wait(), LIMIT)
    finally:
        await frontier.stop()
        await bus.stop()
        await asyncio.wait_for(asyncio.gather(consumer, runner), LIMIT)
    return got


# ------------------------------------------------------------------ discovered retries


async def test_a_discovered_message_retried_after_its_rows_were_stored_wakes_the_host(
        store: FlakyStore) -> None:
    bus = MemoryBus()
    frontier = Frontier(_settings(), bus, store, embedded=False)
    store.fail_after_add = True
    await _retry(frontier, _discovered("a.test", ["/1", "/2"]))
    got = await _dispatched(frontier, bus, 1)
    assert [t.url for t in got] == ["http://a.test/1"], frontier.describe()


@pytest.mark.parametrize("outage", [False, True])
async def test_a_discovered_message_retried_after_scheduling_failed_wakes_the_host(
        store: FlakyStore, outage: bool) -> None:
    bus = MemoryBus()
    frontier = Frontier(_settings(), bus, store, embedded=False)
    store.fail_get_host["a.test"] = 2  # the first reads the host's caps, the second
    # makes its slot, after the rows were stored
    await _retry(frontier, _discovered("a.test", ["/1", "/2"]), outage=outage)
    got = await _dispatched(frontier, bus, 1)
    assert [t.url for t in got] == ["http://a.test/1"], frontier.describe()


# ------------------------------------------------------------------ result retries


@pytest.mark.parametrize("outage", [False, True])
async def test_a_result_retried_after_its_write_was_applied_counts_the_page_once(
        store: FlakyStore, outage: bool) -> None:
    """The write of a result reported a failure but was applied: the retry finds the
    URL done (a stale result) and must not keep the host's page count it remembered,
    or the next result writes the count back one short."""
    bus = MemoryBus()
    settings = Settings().replace(politeness={"default_delay": 0.0,
                                              "max_in_flight_per_host": 2})
    frontier = Frontier(settings, bus, store, embedded=False)
    await frontier.handle(_discovered("a.test", ["/1", "/2"]))
    first, second = await _dispatched(frontier, bus, 2)
    store.fail_after_put_url_and_host = True
    await _retry(frontier, _result(first), outage=outage)
    await frontier.handle(_result(second))
    host = await store.get_host("a.test")
    assert host is not None and host.page_count == 2, host


def _result(task: FetchTask) -> Delivery:
    result = FetchResult(task=task, outcome=FetchOutcome.NOT_MODIFIED, status=304,
                         fetched_at=time.time())
    return Delivery(topic=Topic.FETCHED, key=task.host, message=result)


# ------------------------------------------------------------------ the watchdog


async def test_the_watchdog_recovers_a_frontier_whose_counters_drifted(
        store: FlakyStore) -> None:
    """189 queued, 0 in flight: the frontier believed it was at capacity."""
    bus = MemoryBus()
    settings = _settings().replace(crawl={"stall_seconds": 0.5})
    frontier = Frontier(settings, bus, store, embedded=False)
    await frontier.handle(_discovered("a.test", ["/1"]))
    frontier.dispatcher.outstanding = frontier.max_outstanding  # a leaked count
    got = await _dispatched(frontier, bus, 1)
    assert [t.url for t in got] == ["http://a.test/1"], frontier.describe()
    assert frontier.outstanding == 1


async def test_the_watchdog_reschedules_queued_hosts_nothing_in_memory_wakes(
        store: FlakyStore) -> None:
    bus = MemoryBus()
    settings = _settings().replace(crawl={"stall_seconds": 0.5})
    frontier = Frontier(settings, bus, store, embedded=False)
    await frontier.handle(_discovered("a.test", ["/1"]))
    slot = frontier.hosts.slots["a.test"]
    slot.ready = True  # a ready flag with no heap entry and no dispatch task
    frontier.hosts.timer.clear()
    slot.wake_at, slot.due_since = None, frontier.clock() - 10
    got = await _dispatched(frontier, bus, 1)
    assert [t.url for t in got] == ["http://a.test/1"], frontier.describe()


async def test_the_oldest_due_age_counts_ready_hosts(store: FlakyStore) -> None:
    frontier = Frontier(_settings(), MemoryBus(), store, embedded=False)
    await frontier.handle(_discovered("a.test", ["/1"]))
    now = frontier.clock()
    frontier.pause()
    frontier.dispatcher.dispatch(now)
    frontier.resume()
    frontier.dispatcher.dispatch(now)  # no room: it stays ready
    frontier.max_outstanding = 0
    assert frontier.oldest_due(now + 30) == 0 or frontier.oldest_due(now + 30) >= 29


async def test_a_dispatch_whose_store_call_never_answers_is_abandoned_and_retried(
        store: FlakyStore) -> None:
    """The stall seen on the cluster: dispatch tasks waiting for ever on a Cassandra
    request, their hosts held and their capacity counted, nothing fetched."""
    bus = MemoryBus()
    settings = _settings().replace(crawl={"stall_seconds": 0.4})
    frontier = Frontier(settings, bus, store, embedded=False)
    await frontier.handle(_discovered("a.test", ["/1"]))
    store.hang_due_urls = 1
    got = await _dispatched(frontier, bus, 1)
    assert [t.url for t in got] == ["http://a.test/1"], frontier.describe()
    assert frontier.outstanding == 1
