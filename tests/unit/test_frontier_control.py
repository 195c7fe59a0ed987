"""Operator control of a running frontier: host changes by message, blocked path
patterns and pause from the store's control row."""

from __future__ import annotations

import asyncio

import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import (
    Discovered,
    FetchTask,
    HostControl,
    Link,
    Reason,
    Topic,
    UrlStatus,
)
from common.ports import CrawlControl, Delivery, HostState
from common.settings import Settings
from frontier.service import Frontier


def _settings() -> Settings:
    return Settings().replace(politeness={"default_delay": 0.0})


async def _discover(frontier: Frontier, host: str, paths: list[str]) -> None:
    links = tuple(Link(url=f"http://{host}{p}") for p in paths)
    await frontier.handle(Delivery(topic=Topic.DISCOVERED, key=host,
                                   message=Discovered(host=host, links=links)))


async def test_a_host_control_message_changes_the_live_row(
        store: SqliteStateStore) -> None:
    frontier = Frontier(_settings(), MemoryBus(), store, embedded=False)
    await store.put_host(HostState(host="a.test", crawl_delay=3.0, page_count=4,
                                   max_pages=4, capped=True))
    await _discover(frontier, "a.test", ["/x"])  # the host is now live in memory
    change = HostControl(host="a.test", delay=2.5, blocked=True, max_pages=9)
    await frontier.handle(Delivery(topic=Topic.CONTROL, key="a.test", message=change))
    row = await store.get_host("a.test")
    assert row is not None
    assert (row.delay_override, row.blocked, row.max_pages, row.capped) == (2.5, True, 9,
                                                                            False)
    assert row.crawl_delay == 3.0 and row.page_count == 4
    clear = HostControl(host="a.test", clear_delay=True, blocked=False)
    await frontier.handle(Delivery(topic=Topic.CONTROL, key="a.test", message=clear))
    row = await store.get_host("a.test")
    assert row is not None and row.delay_override is None and not row.blocked
    assert row.max_pages == 9


async def test_a_host_control_for_a_partition_not_owned_goes_to_the_store(
        store: SqliteStateStore) -> None:
    bus = MemoryBus(Settings().bus, partitions=4)
    frontier = Frontier(_settings(), bus, store, embedded=False)
    host = "b.test"
    others = frozenset(range(4)) - {bus.partition_of(Topic.DISCOVERED, host)}
    await frontier.assign(others)
    assert not frontier.owns(host)
    await frontier.handle(Delivery(topic=Topic.CONTROL, key=host,
                                   message=HostControl(host=host, blocked=True)))
    row = await store.get_host(host)
    assert row is not None and row.blocked


async def _fetch_tasks(bus: MemoryBus, frontier: Frontier, want: int) -> list[FetchTask]:
    """Run the frontier until ``want`` fetch tasks were published (bounded)."""
    got: list[FetchTask] = []
    enough = asyncio.Event()

    async def collect(delivery: Delivery) -> None:
        assert isinstance(delivery.message, FetchTask)
        got.append(delivery.message)
        if len(got) >= want:
            enough.set()

    consumer = asyncio.create_task(bus.consume("fetcher", (Topic.FETCH,), collect))
    runner = asyncio.create_task(frontier.run())
    try:
        await asyncio.wait_for(enough.wait(), 10)
        await asyncio.sleep(0.2)  # room for a task that should not come
    finally:
        await frontier.stop()
        await bus.stop()
        await asyncio.wait_for(asyncio.gather(consumer, runner), 10)
    return got


async def test_blocked_paths_reject_new_and_queued_urls(store: SqliteStateStore) -> None:
    bus = MemoryBus()
    bus.declare_group("fetcher", (Topic.FETCH,))
    frontier = Frontier(_settings().replace(politeness={"max_in_flight_per_host": 4}), bus,
                        store)
    await _discover(frontier, "c.test", ["/private/1", "/public/1"])
    frontier.apply_control(CrawlControl(blocked_paths=[r"^/private/", r"\?sort="]))
    await _discover(frontier, "c.test", ["/private/2", "/public/2?sort=up", "/public/3"])
    new_private = await store.get_url("c.test", "http://c.test/private/2")
    new_sorted = await store.get_url("c.test", "http://c.test/public/2?sort=up")
    assert new_private is not None and new_private.status is UrlStatus.REJECTED
    assert new_private.reason is Reason.BLOCKED
    assert new_sorted is not None and new_sorted.reason is Reason.BLOCKED
    tasks = await _fetch_tasks(bus, frontier, want=2)
    assert sorted(t.url for t in tasks) == ["http://c.test/public/1",
                                            "http://c.test/public/3"]
    queued_before = await store.get_url("c.test", "http://c.test/private/1")
    assert queued_before is not None and queued_before.status is UrlStatus.REJECTED
    assert queued_before.reason is Reason.BLOCKED


async def test_a_pattern_that_does_not_compile_is_skipped(store: SqliteStateStore,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    frontier = Frontier(_settings(), MemoryBus(), store)
    frontier.apply_control(CrawlControl(blocked_paths=["(", "^/x"]))
    assert "ignored" in caplog.text
    await _discover(frontier, "d.test", ["/x/1", "/y/1"])
    x = await store.get_url("d.test", "http://d.test/x/1")
    y = await store.get_url("d.test", "http://d.test/y/1")
    assert x is not None and x.reason is Reason.BLOCKED
    assert y is not None and y.status is UrlStatus.QUEUED


async def test_the_control_row_pauses_a_cluster_frontier_only(
        store: SqliteStateStore) -> None:
    await store.put_control(CrawlControl(paused=True, blocked_paths=["^/z"]))
    cluster = Frontier(_settings(), MemoryBus(), store, embedded=False)
    embedded = Frontier(_settings(), MemoryBus(), store, embedded=True)
    await cluster.refresh_control()
    await embedded.refresh_control()
    assert cluster.paused and not embedded.paused
    assert cluster.control.blocked_paths == embedded.control.blocked_paths == ["^/z"]
    await store.put_control(CrawlControl(paused=False))
    await cluster.refresh_control()
    assert not cluster.paused and cluster.control.blocked_paths == []
