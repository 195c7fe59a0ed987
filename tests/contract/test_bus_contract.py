"""The Bus contract: every adapter (in-process, Kafka) must pass these tests.

The last section covers what only the in-process bus offers (idleness, counters,
backlogs, one consumer per group).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib

import pytest

from common.adapters.memory_bus import MemoryBus
from common.messages import (
    MAX_DEAD_LETTER_PAYLOAD,
    DeadLetter,
    Discovered,
    FetchTask,
    Link,
    PayloadEncoding,
    StatusUpdate,
    Topic,
    UrlStatus,
    dead_letter_payload,
    decode,
    encode,
)
from common.ports import Delivery
from tests.contract.conftest import WAIT, BusHarness, Consumer, unique


def status(host: str, n: int) -> StatusUpdate:
    return StatusUpdate(url=f"http://{host}/{n}", host=host, status=UrlStatus.DONE)


def number(delivery: Delivery) -> int:
    message = delivery.message
    assert isinstance(message, StatusUpdate)
    return int(message.url.rsplit("/", 1)[1])


async def dead_letter_sink(h: BusHarness) -> Consumer:
    return await h.start(unique("dead"), [Topic.DEAD_LETTER])


async def letters_until_sentinel(sink: Consumer, key: str) -> list[DeadLetter]:
    """Publish a sentinel dead letter under ``key`` and return the letters before it.

    Letters of one key keep their order, so every dead letter the bus wrote for ``key``
    before the sentinel was published arrives before it.
    """
    bus = sink.bus
    sentinel = DeadLetter(topic="sentinel", key=key, payload="", error="", attempts=0)
    await bus.publish(Topic.DEAD_LETTER, key, sentinel)
    async with asyncio.timeout(WAIT):
        while not any(d.message == sentinel for d in sink.received):
            await sink.wait_for(len(sink.received) + 1)
    letters = [d.message for d in sink.received if d.key == key]
    out: list[DeadLetter] = []
    for letter in letters:
        assert isinstance(letter, DeadLetter)
        if letter == sentinel:
            return out
        out.append(letter)
    raise AssertionError("sentinel not seen")


async def test_publish_consume_roundtrip(bus_harness: BusHarness) -> None:
    h = bus_harness
    consumer = await h.start(unique("frontier"), [Topic.STATUS])
    sent = [status("a.example", 1), status("b.example", 2), status("a.example", 3)]
    for message in sent:
        await h.bus.publish(Topic.STATUS, message.host, message)
    got = await consumer.wait_for(3)
    assert sorted(number(d) for d in got) == [1, 2, 3]
    by_number = {number(d): d for d in got}
    for message, n in zip(sent, (1, 2, 3), strict=True):
        delivery = by_number[n]
        assert delivery.message == message
        assert type(delivery.message) is StatusUpdate
        assert delivery.topic is Topic.STATUS
        assert delivery.key == message.host
        assert delivery.partition == h.bus.partition_of(Topic.STATUS, message.host)
        assert delivery.attempt == 1
    assert consumer.assigned and consumer.assigned[0] <= frozenset(range(h.partitions))


async def test_consume_several_topics(bus_harness: BusHarness) -> None:
    h = bus_harness
    consumer = await h.start(unique("frontier"), [Topic.STATUS, Topic.FETCH])
    task = FetchTask(task_id="t1", url="http://a.example/", host="a.example")
    await h.bus.publish(Topic.FETCH, "a.example", task)
    await h.bus.publish(Topic.STATUS, "a.example", status("a.example", 1))
    got = await consumer.wait_for(2)
    assert {(d.topic, type(d.message)) for d in got} == {(Topic.FETCH, FetchTask),
                                                         (Topic.STATUS, StatusUpdate)}


async def test_every_group_gets_every_message(bus_harness: BusHarness) -> None:
    h = bus_harness
    frontier = await h.start(unique("frontier"), [Topic.STATUS])
    parser = await h.start(unique("parser"), [Topic.STATUS])
    for n in range(10):
        await h.bus.publish(Topic.STATUS, f"h{n % 3}.example", status(f"h{n % 3}.example", n))
    for consumer in (frontier, parser):
        got = await consumer.wait_for(10)
        assert sorted(number(d) for d in got) == list(range(10))


async def test_same_key_in_order_with_concurrency_one(bus_harness: BusHarness) -> None:
    h = bus_harness
    calls = 0

    async def handler(delivery: Delivery) -> None:
        nonlocal calls
        calls += 1
        for _ in range(calls % 3):  # uneven handler times
            await asyncio.sleep(0)

    consumer = await h.start(unique("frontier"), [Topic.STATUS], handler)
    hosts = ["a.example", "b.example", "c.example"]
    for n in range(60):
        host = hosts[n % 3]
        await h.bus.publish(Topic.STATUS, host, status(host, n))
    got = await consumer.wait_for(60)
    for host in hosts:
        numbers = [number(d) for d in got if d.key == host]
        assert numbers == sorted(numbers) and len(numbers) == 20


async def test_failed_handler_is_retried_until_it_succeeds(bus_harness: BusHarness) -> None:
    h = bus_harness
    assert h.max_delivery_attempts >= 3
    attempts: list[tuple[int, int]] = []

    async def flaky(delivery: Delivery) -> None:
        attempts.append((number(delivery), delivery.attempt))
        if number(delivery) == 1 and delivery.attempt < 3:
            raise ConnectionError("store busy")

    sink = await dead_letter_sink(h)
    consumer = await h.start(unique("frontier"), [Topic.STATUS], flaky)
    await h.bus.publish(Topic.STATUS, "a.example", status("a.example", 1))
    await h.bus.publish(Topic.STATUS, "a.example", status("a.example", 2))
    got = await consumer.wait_for(2)
    assert [(number(d), d.attempt) for d in got] == [(1, 3), (2, 1)]
    assert attempts == [(1, 1), (1, 2), (1, 3), (2, 1)]  # retried before the next one
    assert await letters_until_sentinel(sink, "a.example") == []


async def test_dead_letter_after_max_attempts(bus_harness: BusHarness) -> None:
    h = bus_harness
    attempts: list[int] = []

    async def broken(delivery: Delivery) -> None:
        if number(delivery) == 7:
            attempts.append(delivery.attempt)
            raise ValueError("cannot handle page 7")

    sink = await dead_letter_sink(h)
    consumer = await h.start(unique("frontier"), [Topic.STATUS], broken)
    poison = status("p.example", 7)
    await h.bus.publish(Topic.STATUS, "p.example", poison)
    await h.bus.publish(Topic.STATUS, "p.example", status("p.example", 8))
    got = await consumer.wait_for(1)
    assert [number(d) for d in got] == [8]  # the consumer went on after giving up
    assert attempts == list(range(1, h.max_delivery_attempts + 1))

    [letter] = await letters_until_sentinel(sink, "p.example")
    assert letter.topic == Topic.STATUS.value
    assert letter.key == "p.example"
    assert letter.attempts == h.max_delivery_attempts
    assert "ValueError" in letter.error and "cannot handle page 7" in letter.error
    assert decode(StatusUpdate, dead_letter_payload(letter)) == poison
    assert letter.payload == encode(poison).decode()  # UTF-8 that fits: kept as text
    assert letter.size == len(encode(poison)) and not letter.truncated


@pytest.mark.parametrize("payload", [
    b"{not json",
    b'{"v": 1, "url": "http://m.example/"}',  # missing fields
    encode(StatusUpdate(url="http://m.example/", host="m.example", status=UrlStatus.DONE,
                        v=99)),  # unknown schema version
    encode(FetchTask(task_id="x", url="http://m.example/", host="m.example")),  # wrong type
    b"\xff\xfe\x00",
])
async def test_undecodable_message_goes_to_dead_letters(bus_harness: BusHarness,
                                                        payload: bytes) -> None:
    h = bus_harness
    handled: list[Delivery] = []

    async def handler(delivery: Delivery) -> None:
        handled.append(delivery)

    sink = await dead_letter_sink(h)
    consumer = await h.start(unique("frontier"), [Topic.STATUS], handler)
    await h.publish_raw(Topic.STATUS, "m.example", payload)
    await h.bus.publish(Topic.STATUS, "m.example", status("m.example", 1))
    got = await consumer.wait_for(1)
    assert [number(d) for d in got] == [1]
    assert len(handled) == 1  # the handler never saw the bad bytes

    [letter] = await letters_until_sentinel(sink, "m.example")
    assert letter.topic == Topic.STATUS.value and letter.key == "m.example"
    assert dead_letter_payload(letter) == payload  # the exact bytes, not a lossy decoding
    assert letter.size == len(payload) and not letter.truncated
    assert letter.digest == "sha256:" + hashlib.sha256(payload).hexdigest()
    assert "MessageError" in letter.error


def _discovered(**link: object) -> bytes:
    """A well-formed Discovered whose one link has the given fields (encoding checks no
    range, so out-of-range values go out as they are)."""
    return encode(Discovered(host="r.example",
                             links=[Link(url="http://r.example/", **link)]))  # type: ignore[arg-type]


@pytest.mark.parametrize(("payload", "field"), [
    (_discovered(depth=-5), "depth"),
    (_discovered(priority=-3), "priority"),
    (_discovered(priority=10**9), "priority"),
    (_discovered(hops=-1), "hops"),
    (encode(FetchTask(task_id="x", url="http://r.example/", host="r.example",
                      attempt=-1)), "attempt"),
    (encode(FetchTask(task_id="x", url="http://r.example/", host="r.example",
                      delay=-2.0)), "delay"),
])
async def test_values_out_of_range_go_to_dead_letters(bus_harness: BusHarness,
                                                      payload: bytes, field: str) -> None:
    h = bus_harness
    topic = Topic.FETCH if b"task_id" in payload else Topic.DISCOVERED
    good = (encode(FetchTask(task_id="ok", url="http://r.example/", host="r.example"))
            if topic is Topic.FETCH else _discovered())
    handled: list[Delivery] = []

    async def handler(delivery: Delivery) -> None:
        handled.append(delivery)

    sink = await dead_letter_sink(h)
    consumer = await h.start(unique("frontier"), [topic], handler)
    await h.publish_raw(topic, "r.example", payload)
    await h.publish_raw(topic, "r.example", good)
    await consumer.wait_for(1)
    assert [encode(d.message) for d in handled] == [good]  # the bad one never got through

    [letter] = await letters_until_sentinel(sink, "r.example")
    assert letter.topic == topic.value and letter.attempts == 1
    assert "MessageError" in letter.error and field in letter.error
    assert dead_letter_payload(letter) == payload


@pytest.mark.parametrize("byte", [b"\x80", b"\x00"])
async def test_a_dead_letter_of_a_big_message_stays_small(bus_harness: BusHarness,
                                                          byte: bytes) -> None:
    """400 KB of invalid UTF-8 (\\x80) or of control characters (\\x00) grew to 1.2 MB
    and 2.4 MB as text with replacement in JSON: over Kafka's 1 MB message limit."""
    h = bus_harness
    payload = byte * 400_000
    sink = await dead_letter_sink(h)
    consumer = await h.start(unique("frontier"), [Topic.STATUS])
    await h.publish_raw(Topic.STATUS, "big.example", payload)
    await h.bus.publish(Topic.STATUS, "big.example", status("big.example", 1))
    await consumer.wait_for(1)  # the consumer went on

    [letter] = await letters_until_sentinel(sink, "big.example")
    assert len(encode(letter)) < MAX_DEAD_LETTER_PAYLOAD + 10_000 < 1_000_000
    assert letter.encoding is PayloadEncoding.BASE64 and letter.truncated
    assert letter.size == len(payload)
    assert letter.digest == "sha256:" + hashlib.sha256(payload).hexdigest()
    kept = dead_letter_payload(letter)
    assert len(kept) > 300_000 and payload.startswith(kept)


async def test_publish_refuses_the_wrong_message_type(bus_harness: BusHarness) -> None:
    h = bus_harness
    task = FetchTask(task_id="x", url="http://a.example/", host="a.example")
    with pytest.raises(TypeError, match="StatusUpdate"):
        await h.bus.publish(Topic.STATUS, "a.example", task)


async def test_stop_ends_consume_promptly(bus_harness: BusHarness) -> None:
    h = bus_harness
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck(delivery: Delivery) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    busy = await h.start(unique("busy"), [Topic.STATUS], stuck)
    idle = await h.start(unique("idle"), [Topic.FETCH])
    await h.bus.publish(Topic.STATUS, "s.example", status("s.example", 1))
    async with asyncio.timeout(WAIT):
        await started.wait()
    async with asyncio.timeout(2):
        await h.bus.stop()
        assert busy.task is not None and idle.task is not None
        await busy.task
        await idle.task
    assert cancelled.is_set()
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert leftover == []


async def test_stop_from_inside_a_handler(bus_harness: BusHarness) -> None:
    h = bus_harness

    async def stopper(delivery: Delivery) -> None:
        await h.bus.stop()

    consumer = await h.start(unique("stopper"), [Topic.STATUS], stopper)
    await h.bus.publish(Topic.STATUS, "s.example", status("s.example", 1))
    assert consumer.task is not None
    async with asyncio.timeout(2):
        with contextlib.suppress(asyncio.CancelledError):
            await consumer.task
    assert consumer.task.done()


async def test_cancelled_consume_redelivers_unacknowledged(bus_harness: BusHarness) -> None:
    h = bus_harness
    group = unique("frontier")
    started = asyncio.Event()

    async def stuck(delivery: Delivery) -> None:
        started.set()
        await asyncio.Event().wait()

    first = await h.start(group, [Topic.STATUS], stuck)
    await h.bus.publish(Topic.STATUS, "r.example", status("r.example", 1))
    async with asyncio.timeout(WAIT):
        await started.wait()
    assert first.task is not None
    first.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        async with asyncio.timeout(2):
            await first.task
    assert first.received == []

    second = await h.start(group, [Topic.STATUS])
    [again] = await second.wait_for(1)
    assert number(again) == 1 and again.key == "r.example"


async def test_partition_of_is_stable_and_in_range(bus_harness: BusHarness) -> None:
    h = bus_harness
    keys = [f"host{i}.example" for i in range(200)] + ["", "xn--bcher-kva.example", "ü"]
    first = {k: h.bus.partition_of(Topic.STATUS, k) for k in keys}
    assert all(0 <= p < h.partitions for p in first.values())
    assert {k: h.bus.partition_of(Topic.STATUS, k) for k in keys} == first
    assert {k: h.bus.partition_of(Topic.FETCH, k) for k in keys} == first  # co-partitioned
    assert len(set(first.values())) == h.partitions  # 200 hosts use every partition
    assert h.make_twin is not None
    twin = h.make_twin()
    assert {k: twin.partition_of(Topic.STATUS, k) for k in keys} == first


# ----------------------------------------------------------- MemoryBus specifics


def memory_bus(backlog_limit: int = 100_000) -> MemoryBus:
    return MemoryBus(partitions=4, max_delivery_attempts=3, retry_backoff=0.001,
                     backlog_limit=backlog_limit)


async def run(bus: MemoryBus, group: str, topics: list[Topic],
              received: list[Delivery], *, concurrency: int = 1) -> asyncio.Task[None]:
    async def handler(delivery: Delivery) -> None:
        received.append(delivery)

    task = asyncio.create_task(bus.consume(group, topics, handler, concurrency=concurrency))
    await asyncio.sleep(0)
    return task


async def test_memory_pending_and_wait_idle() -> None:
    bus = memory_bus()
    bus.declare_group("frontier", [Topic.STATUS])
    bus.declare_group("parser", [Topic.STATUS, Topic.FETCHED])
    assert bus.pending() == 0 and await bus.drained()
    for n in range(5):
        await bus.publish(Topic.STATUS, "a.example", status("a.example", n))
    assert bus.pending() == 10  # one delivery per group
    assert not await bus.drained()

    received: list[Delivery] = []
    gate = asyncio.Event()

    async def chained(delivery: Delivery) -> None:
        # a handler that publishes follow-up work before it returns
        if number(delivery) < 100:
            await bus.publish(Topic.STATUS, "a.example", status("a.example", 100 + number(
                delivery)))
        await gate.wait()
        received.append(delivery)

    tasks = [asyncio.create_task(bus.consume("frontier", [Topic.STATUS], chained)),
             await run(bus, "parser", [Topic.STATUS], [])]
    waiter = asyncio.create_task(bus.wait_idle())
    await asyncio.sleep(0.05)
    assert not waiter.done() and bus.pending() > 0
    gate.set()
    async with asyncio.timeout(WAIT):
        await waiter
    assert bus.pending() == 0
    assert sorted(number(d) for d in received) == [0, 1, 2, 3, 4, 100, 101, 102, 103, 104]
    counters = bus.counters()[Topic.STATUS]
    assert counters.published == 10 and counters.handled == 20
    await bus.stop()
    for task in tasks:
        await task


async def test_memory_backlog_goes_to_the_first_group() -> None:
    bus = memory_bus()
    for n in range(3):
        await bus.publish(Topic.STATUS, "a.example", status("a.example", n))
    assert bus.backlog(Topic.STATUS) == 3 and bus.pending() == 0
    first: list[Delivery] = []
    second: list[Delivery] = []
    t1 = await run(bus, "frontier", [Topic.STATUS], first)
    t2 = await run(bus, "late", [Topic.STATUS], second)
    await bus.publish(Topic.STATUS, "a.example", status("a.example", 3))
    async with asyncio.timeout(WAIT):
        await bus.wait_idle()
    assert [number(d) for d in first] == [0, 1, 2, 3]
    assert [number(d) for d in second] == [3]
    assert bus.backlog(Topic.STATUS) == 0
    await bus.stop()
    await t1
    await t2


async def test_memory_backlog_is_bounded() -> None:
    bus = memory_bus(backlog_limit=5)
    for n in range(8):
        await bus.publish(Topic.STATUS, "a.example", status("a.example", n))
    assert bus.backlog(Topic.STATUS) == 5
    assert bus.counters()[Topic.STATUS].dropped == 3
    received: list[Delivery] = []
    task = await run(bus, "frontier", [Topic.STATUS], received)
    async with asyncio.timeout(WAIT):
        await bus.wait_idle()
    assert [number(d) for d in received] == [3, 4, 5, 6, 7]  # the oldest were dropped
    await bus.stop()
    await task


async def test_memory_one_consumer_per_group() -> None:
    bus = memory_bus()
    task = await run(bus, "frontier", [Topic.STATUS], [])
    with pytest.raises(RuntimeError, match="already being consumed"):
        await bus.consume("frontier", [Topic.STATUS], _ignore)
    await bus.stop()
    await task
    # after stop, consume returns at once
    async with asyncio.timeout(1):
        await bus.consume("other", [Topic.STATUS], _ignore)


async def _ignore(delivery: Delivery) -> None:
    return None


async def test_memory_concurrency_runs_handlers_in_parallel() -> None:
    bus = memory_bus()
    running = 0
    peak = 0
    release = asyncio.Event()

    async def slow(delivery: Delivery) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    task = asyncio.create_task(bus.consume("fetcher", [Topic.STATUS], slow, concurrency=4))
    for n in range(6):
        await bus.publish(Topic.STATUS, f"h{n}.example", status(f"h{n}.example", n))
    await asyncio.sleep(0.05)
    assert peak == 4 and bus.pending() == 6
    release.set()
    async with asyncio.timeout(WAIT):
        await bus.wait_idle()
    await bus.stop()
    await task


async def test_memory_failing_dead_letter_handler_does_not_loop() -> None:
    bus = memory_bus()
    calls: list[int] = []

    async def broken(delivery: Delivery) -> None:
        calls.append(delivery.attempt)
        raise RuntimeError("no")

    bus.declare_group("frontier", [Topic.STATUS])
    task = asyncio.create_task(bus.consume("dead", [Topic.DEAD_LETTER], broken))
    front = asyncio.create_task(bus.consume("frontier", [Topic.STATUS], broken))
    await bus.publish(Topic.STATUS, "a.example", status("a.example", 1))
    async with asyncio.timeout(WAIT):
        await bus.wait_idle()
    counters = bus.counters()
    assert counters[Topic.STATUS].dead_lettered == 1
    assert counters[Topic.STATUS].retried == 2
    assert counters[Topic.DEAD_LETTER].dropped == 1
    assert counters[Topic.DEAD_LETTER].published == 1
    assert calls == [1, 2, 3, 1, 2, 3]
    await bus.stop()
    await task
    await front


async def test_memory_stray_cancellation_in_a_handler_is_a_failure() -> None:
    bus = memory_bus()
    attempts: list[int] = []

    async def handler(delivery: Delivery) -> None:
        attempts.append(delivery.attempt)
        if delivery.attempt == 1:
            raise asyncio.CancelledError  # not the bus cancelling this worker

    bus.declare_group("frontier", [Topic.STATUS])
    task = asyncio.create_task(bus.consume("frontier", [Topic.STATUS], handler))
    await bus.publish(Topic.STATUS, "a.example", status("a.example", 1))
    async with asyncio.timeout(WAIT):
        await bus.wait_idle()
    assert attempts == [1, 2]
    assert bus.counters()[Topic.STATUS].handled == 1
    assert not task.done()  # the consumer keeps running
    await bus.stop()
    await task


def test_memory_settings_and_custom_partitioner() -> None:
    from common.settings import BusSettings

    bus = MemoryBus(BusSettings(partitions=7, max_delivery_attempts=2))
    assert bus.partitions == 7 and bus.max_delivery_attempts == 2
    assert MemoryBus(BusSettings(partitions=7), partitions=3).partitions == 3
    fixed = MemoryBus(partitions=3, partitioner=lambda key: len(key) % 3)
    assert fixed.partition_of(Topic.FETCH, "abcd") == 1
    bad = MemoryBus(partitions=3, partitioner=lambda key: 3)
    with pytest.raises(ValueError, match="partitioner"):
        bad.partition_of(Topic.FETCH, "a")
    with pytest.raises(ValueError, match="partitions"):
        MemoryBus(partitions=0)
