"""Bus metrics: the in-process bus counts traffic, errors, dead letters and lag per
topic; the Kafka bus's lag is read from librdkafka statistics (parsed here without a
broker; tests/integration/test_kafka_bus.py has the real thing)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from common.adapters.kafka import consumer_lag
from common.adapters.memory_bus import MemoryBus
from common.messages import DeadLetter, StatusUpdate, Topic, UrlStatus
from common.metrics import Metrics
from common.ports import Delivery
from common.runtime import make_bus
from common.settings import Settings

WAIT = 5.0


def _value(metrics: Metrics, name: str, topic: Topic) -> float:
    value = metrics.registry.get_sample_value(name, {"topic": topic.value})
    return 0.0 if value is None else value


def consumed(metrics: Metrics, topic: Topic) -> float:
    return _value(metrics, "crawler_bus_messages_consumed_total", topic)


def published(metrics: Metrics, topic: Topic) -> float:
    return _value(metrics, "crawler_bus_messages_published_total", topic)


def errors(metrics: Metrics, topic: Topic) -> float:
    return _value(metrics, "crawler_bus_handler_errors_total", topic)


def dead(metrics: Metrics, topic: Topic) -> float:
    return _value(metrics, "crawler_bus_dead_lettered_messages_total", topic)


def lag(metrics: Metrics, topic: Topic) -> float:
    return _value(metrics, "crawler_bus_consumer_lag_messages", topic)


def status(n: int, host: str = "a.test") -> StatusUpdate:
    return StatusUpdate(url=f"http://{host}/{n}", host=host, status=UrlStatus.DONE)


def number(delivery: Delivery) -> int:
    assert isinstance(delivery.message, StatusUpdate)
    return int(delivery.message.url.rsplit("/", 1)[1])


@pytest.fixture
def metrics() -> Metrics:
    return Metrics.create((), process=False)


@pytest.fixture
async def running() -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


def consume(tasks: list[asyncio.Task[None]], bus: MemoryBus, group: str, topic: Topic,
            handler: Callable[[Delivery], Awaitable[None]]) -> None:
    tasks.append(asyncio.create_task(bus.consume(group, (topic,), handler)))


async def test_memory_bus_counts_traffic_errors_and_dead_letters(
        metrics: Metrics, running: list[asyncio.Task[None]]) -> None:
    bus = MemoryBus(partitions=2, max_delivery_attempts=3, retry_backoff=0.0,
                    metrics=metrics.bus)
    calls: list[tuple[int, int]] = []
    letters: list[Delivery] = []

    async def handler(delivery: Delivery) -> None:
        calls.append((number(delivery), delivery.attempt))
        if number(delivery) == 1 and delivery.attempt == 1:
            raise ConnectionError("store busy")  # retried once, then fine
        if number(delivery) == 2:
            raise ValueError("poison")  # every attempt: dead-lettered

    async def sink(delivery: Delivery) -> None:
        letters.append(delivery)

    bus.declare_group("frontier", (Topic.STATUS,))
    bus.declare_group("dead", (Topic.DEAD_LETTER,))
    for n in range(5):
        await bus.publish(Topic.STATUS, "a.test", status(n))
    await bus.publish_raw(Topic.STATUS, "a.test", b'{"not": "a status"')  # undecodable
    assert published(metrics, Topic.STATUS) == 6
    assert consumed(metrics, Topic.STATUS) == 0
    consume(running, bus, "frontier", Topic.STATUS, handler)
    consume(running, bus, "dead", Topic.DEAD_LETTER, sink)
    async with asyncio.timeout(WAIT):
        await bus.wait_idle()

    assert sorted(calls) == [(0, 1), (1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 1), (4, 1)]
    assert consumed(metrics, Topic.STATUS) == 5  # once per message, not per attempt
    assert errors(metrics, Topic.STATUS) == 4  # one for message 1, three for message 2
    assert dead(metrics, Topic.STATUS) == 2  # the poison and the undecodable one
    assert published(metrics, Topic.DEAD_LETTER) == 2
    assert consumed(metrics, Topic.DEAD_LETTER) == 2
    assert all(isinstance(d.message, DeadLetter) for d in letters) and len(letters) == 2
    assert dead(metrics, Topic.DEAD_LETTER) == 0
    assert lag(metrics, Topic.STATUS) == 0 and lag(metrics, Topic.DEAD_LETTER) == 0
    # the bus's own counters agree with the exported ones
    counters = bus.counters()
    assert counters[Topic.STATUS].published == published(metrics, Topic.STATUS)
    assert counters[Topic.STATUS].dead_lettered == dead(metrics, Topic.STATUS)


async def test_memory_bus_lag_counts_waiting_and_running_messages(
        metrics: Metrics, running: list[asyncio.Task[None]]) -> None:
    bus = MemoryBus(partitions=3, metrics=metrics.bus)
    release = asyncio.Event()
    started = asyncio.Event()
    audited = asyncio.Event()
    handled: list[int] = []

    async def slow(delivery: Delivery) -> None:
        started.set()
        await release.wait()
        handled.append(number(delivery))

    async def quick(delivery: Delivery) -> None:
        handled.append(-number(delivery))
        if len(handled) == 4:
            audited.set()

    bus.declare_group("frontier", (Topic.STATUS,))
    bus.declare_group("audit", (Topic.STATUS,))
    for n in range(1, 5):
        await bus.publish(Topic.STATUS, f"h{n}.test", status(n, f"h{n}.test"))
    assert lag(metrics, Topic.STATUS) == 8  # four messages for each of two groups
    assert bus.waiting("frontier") == bus.waiting("audit") == 4
    assert bus.waiting("nobody") == 0

    consume(running, bus, "audit", Topic.STATUS, quick)
    consume(running, bus, "frontier", Topic.STATUS, slow)
    async with asyncio.timeout(WAIT):
        await started.wait()
        await audited.wait()
    assert sorted(handled) == [-4, -3, -2, -1]  # audit is done, frontier is stuck
    assert lag(metrics, Topic.STATUS) == 4  # one in progress, three waiting
    assert bus.waiting("frontier") == 3 and bus.waiting("audit") == 0
    release.set()
    async with asyncio.timeout(WAIT):
        await bus.wait_idle()
    assert lag(metrics, Topic.STATUS) == 0
    assert consumed(metrics, Topic.STATUS) == 8


async def test_memory_bus_backlog_of_an_undeclared_topic_is_not_lag(
        metrics: Metrics) -> None:
    bus = MemoryBus(metrics=metrics.bus)
    for n in range(3):
        await bus.publish(Topic.STATUS, "a.test", status(n))
    assert bus.backlog(Topic.STATUS) == 3
    assert published(metrics, Topic.STATUS) == 3
    assert lag(metrics, Topic.STATUS) == 0
    bus.declare_group("late", (Topic.STATUS,))  # the backlog goes to the first group
    assert lag(metrics, Topic.STATUS) == 3


async def test_memory_bus_without_metrics_still_works(
        running: list[asyncio.Task[None]]) -> None:
    bus = MemoryBus(max_delivery_attempts=2, retry_backoff=0.0)
    got: list[tuple[int, int]] = []

    async def handler(delivery: Delivery) -> None:
        got.append((number(delivery), delivery.attempt))
        if number(delivery) == 2:
            raise ValueError("poison")

    bus.declare_group("g", (Topic.STATUS,))
    await bus.publish(Topic.STATUS, "a.test", status(1))
    await bus.publish(Topic.STATUS, "a.test", status(2))
    consume(running, bus, "g", Topic.STATUS, handler)
    async with asyncio.timeout(WAIT):
        await bus.wait_idle()
    assert got == [(1, 1), (2, 1), (2, 2)]
    assert bus.counters()[Topic.STATUS].dead_lettered == 1


async def test_make_bus_wires_the_metrics(metrics: Metrics) -> None:
    bus = make_bus(Settings(), metrics=metrics)
    assert isinstance(bus, MemoryBus)
    await bus.publish(Topic.STATUS, "a.test", status(1))
    assert published(metrics, Topic.STATUS) == 1
    other = Metrics.create((), process=False)
    unmetered = make_bus(Settings())
    await unmetered.publish(Topic.STATUS, "a.test", status(1))
    assert published(other, Topic.STATUS) == 0 and published(metrics, Topic.STATUS) == 1


# ------------------------------------------------- librdkafka statistics -> lag


def _partition(partition: int, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"partition": partition, "fetch_state": "active",
                            "committed_offset": -1001, "lo_offset": -1001,
                            "hi_offset": -1001, "ls_offset": -1001, "consumer_lag": -1}
    return base | fields


def _stats(**topics: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "consumer", "topics": {
        name: {"topic": name, "partitions": {str(p["partition"]): p for p in parts}}
        for name, parts in topics.items()}}


def test_lag_sums_the_owned_partitions_from_committed_offsets() -> None:
    stats = _stats(**{
        "crawl.fetch": [_partition(0, consumer_lag=5, committed_offset=10, hi_offset=15,
                                   ls_offset=15, lo_offset=0),
                        _partition(1, consumer_lag=2, committed_offset=3, hi_offset=5,
                                   ls_offset=5, lo_offset=0),
                        _partition(2, consumer_lag=40),  # another consumer owns it
                        _partition(-1)],  # librdkafka's internal unassigned partition
        "crawl.status": [_partition(0, consumer_lag=0, committed_offset=7, hi_offset=7,
                                    ls_offset=7, lo_offset=0)],
    })
    owned = [("crawl.fetch", 0), ("crawl.fetch", 1), ("crawl.status", 0), ("crawl.status", 3)]
    assert consumer_lag(stats, owned) == {"crawl.fetch": 7, "crawl.status": 0}
    assert consumer_lag(stats, []) == {}
    assert consumer_lag(stats, [("crawl.fetch", -1)]) == {"crawl.fetch": 0}


def test_lag_of_a_group_that_never_committed_counts_from_the_low_watermark() -> None:
    never = _partition(0, lo_offset=4, hi_offset=12, ls_offset=10)
    stats = _stats(**{"crawl.fetch": [never]})
    owned = [("crawl.fetch", 0)]
    assert consumer_lag(stats, owned) == {"crawl.fetch": 6}  # read_committed: ls_offset
    assert consumer_lag(stats, owned, read_committed=False) == {"crawl.fetch": 8}
    assert consumer_lag(stats, owned, from_start=False) == {"crawl.fetch": 0}
    starting = _stats(**{"crawl.fetch": [_partition(0, fetch_state="offset-query",
                                                    lo_offset=4, ls_offset=10)]})
    assert consumer_lag(starting, owned) == {"crawl.fetch": 0}  # not fetching yet
    unknown = _stats(**{"crawl.fetch": [_partition(0)]})  # no watermarks yet
    assert consumer_lag(unknown, owned) == {"crawl.fetch": 0}


def test_lag_ignores_malformed_statistics() -> None:
    owned = [("crawl.fetch", 0)]
    assert consumer_lag({}, owned) == {"crawl.fetch": 0}
    assert consumer_lag({"topics": []}, owned) == {"crawl.fetch": 0}
    assert consumer_lag({"topics": {"crawl.fetch": {"partitions": {"0": "x"}}}},
                        owned) == {"crawl.fetch": 0}
    bad = _stats(**{"crawl.fetch": [_partition(0, consumer_lag="7", committed_offset=None,
                                               lo_offset=True, ls_offset=3)]})
    assert consumer_lag(bad, owned) == {"crawl.fetch": 0}
