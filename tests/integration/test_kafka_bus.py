"""KafkaBus against a real Apache Kafka broker.

Skipped unless Kafka answers on ``CRAWLER_BUS_KAFKA_BOOTSTRAP`` (default
127.0.0.1:9092; ``scripts/servers start kafka``). Every test uses topics of its own
(a unique prefix) and deletes them, and the consumer groups it joined, afterwards.
The behaviour every bus shares is in tests/contract; this file covers what needs
Kafka itself: topic creation, the ring as the partitioner, groups of several
consumers, commits across restarts, flow control and start-up errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from common.adapters.kafka import KafkaBus, KafkaBusError
from common.messages import (
    DeadLetter,
    Discovered,
    Link,
    PayloadEncoding,
    StatusUpdate,
    Topic,
    UrlStatus,
    dead_letter_payload,
    decode,
)
from common.metrics import Metrics
from common.ports import Delivery, Handler
from common.ring import HostRing
from common.settings import BusSettings
from tests.conftest import unavailable

pytestmark = pytest.mark.integration

PARTITIONS = 4
WAIT = 30.0  # seconds any single expectation may take


def _bootstrap() -> str:
    return os.environ.get("CRAWLER_BUS_KAFKA_BOOTSTRAP", "").strip() or "127.0.0.1:9092"


def _require_kafka(bootstrap: str) -> None:
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        host = host.strip("[]")
        try:
            infos = socket.getaddrinfo(host, int(port))
        except (OSError, ValueError) as exc:
            pytest.skip(f"cannot resolve Kafka bootstrap {address!r}: {exc}")
        if not all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos):
            pytest.skip(f"{address} is not a loopback address; tests only talk to loopback")
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                pass
        except OSError:
            unavailable(f"Kafka is not answering on {address} (scripts/servers start kafka)")


@dataclass
class Buses:
    """Builds buses over one test's own topics; stops them and deletes the topics."""

    settings: BusSettings
    made: list[KafkaBus] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def make(self, **options: Any) -> KafkaBus:
        bus = KafkaBus(self.settings, retry_backoff=0.01, **options)
        self.made.append(bus)
        return bus


@pytest.fixture
async def buses() -> AsyncIterator[Buses]:
    bootstrap = _bootstrap()
    _require_kafka(bootstrap)
    settings = BusSettings(backend="kafka", kafka_bootstrap=bootstrap, partitions=PARTITIONS,
                           max_delivery_attempts=3,
                           topic_prefix=f"it-{uuid.uuid4().hex[:12]}",
                           group_prefix=f"it-{uuid.uuid4().hex[:6]}")
    made = Buses(settings)
    try:
        yield made
    finally:
        for bus in made.made:
            async with asyncio.timeout(WAIT):
                await bus.stop()
        for task in made.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for bus in made.made:
            await bus.delete_topics()
        leftover = [t.name for t in threading.enumerate() if t.name.startswith("kafka-bus")]
        assert leftover == [], f"threads left running: {leftover}"


class Collector:
    """Runs one ``consume`` and records deliveries and assignments."""

    def __init__(self, buses: Buses, bus: KafkaBus, group: str, topics: list[Topic],
                 handler: Handler | None = None, *, concurrency: int = 1) -> None:
        self.bus = bus
        self.handler = handler
        self.received: list[Delivery] = []
        self.assigned: list[frozenset[int]] = []
        self.history: list[tuple[float, frozenset[int]]] = []  # (monotonic time, owned)
        self.changed = asyncio.Event()
        self.task = asyncio.create_task(bus.consume(
            group, topics, self._handle, concurrency=concurrency, on_assign=self._on_assign))
        buses.tasks.append(self.task)

    async def _on_assign(self, partitions: frozenset[int]) -> None:
        self.assigned.append(partitions)
        self.history.append((time.monotonic(), partitions))
        self.changed.set()

    async def _handle(self, delivery: Delivery) -> None:
        if self.handler is not None:
            await self.handler(delivery)
        self.received.append(delivery)
        self.changed.set()

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(WAIT):
                while not condition():
                    if self.task.done():
                        self.task.result()
                        raise AssertionError(f"consume ended while waiting for {what}")
                    self.changed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.2):
                            await self.changed.wait()
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}") from None

    async def assigned_once(self) -> None:
        await self.until(lambda: bool(self.assigned), "an assignment")

    async def wait_for(self, count: int) -> list[Delivery]:
        await self.until(lambda: len(self.received) >= count, f"{count} deliveries")
        return self.received


def status(host: str, n: int) -> StatusUpdate:
    return StatusUpdate(url=f"http://{host}/{n}", host=host, status=UrlStatus.DONE)


def number(delivery: Delivery) -> int:
    message = delivery.message
    assert isinstance(message, StatusUpdate)
    return int(message.url.rsplit("/", 1)[1])


async def publish_all(bus: KafkaBus, messages: list[StatusUpdate]) -> None:
    for message in messages:
        await bus.publish(Topic.STATUS, message.host, message)


async def test_start_creates_every_topic_idempotently(buses: Buses) -> None:
    bus = buses.make()
    await bus.start()
    await buses.make().start()  # a second process with the same settings: topics exist
    admin = AdminClient({"bootstrap.servers": buses.settings.kafka_bootstrap})
    topics = (await asyncio.to_thread(admin.list_topics, timeout=10)).topics
    prefix = buses.settings.topic_prefix
    for topic in Topic:
        name = f"{prefix}.{topic.value}"
        assert name == bus.topic_name(topic)
        assert name in topics, name
        assert len(topics[name].partitions) == PARTITIONS


async def test_round_trip(buses: Buses) -> None:
    bus = buses.make()
    consumer = Collector(buses, bus, "frontier", [Topic.STATUS, Topic.DISCOVERED])
    await consumer.assigned_once()
    assert consumer.assigned[0] == frozenset(range(PARTITIONS))
    sent = Discovered(host="a.example", links=[Link(url="http://a.example/x", depth=2)])
    await bus.publish(Topic.DISCOVERED, "a.example", sent)
    await bus.publish(Topic.STATUS, "b.example", status("b.example", 1))
    got = await consumer.wait_for(2)
    by_topic = {d.topic: d for d in got}
    assert by_topic[Topic.DISCOVERED].message == sent
    assert by_topic[Topic.DISCOVERED].key == "a.example"
    assert by_topic[Topic.STATUS].message == status("b.example", 1)
    assert all(d.attempt == 1 and d.offset >= 0 for d in got)


async def test_partitions_follow_the_ring(buses: Buses) -> None:
    bus = buses.make()
    ring = HostRing(PARTITIONS)
    hosts = [f"host{i}.example" for i in range(40)]
    consumer = Collector(buses, bus, "check", [Topic.STATUS])
    await consumer.assigned_once()
    await publish_all(bus, [status(h, i) for i, h in enumerate(hosts)])
    got = await consumer.wait_for(len(hosts))
    placed = {d.key: d.partition for d in got}  # the partition Kafka stored it in
    assert placed == {h: ring(h) for h in hosts}
    assert placed == {h: bus.partition_of(Topic.FETCH, h) for h in hosts}
    assert len(set(placed.values())) == PARTITIONS


async def test_same_key_in_order_while_keys_run_concurrently(buses: Buses) -> None:
    bus = buses.make()
    running = 0
    peak = 0
    rnd = random.Random(7)

    async def uneven(delivery: Delivery) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(rnd.random() * 0.005)
        running -= 1

    hosts = [f"k{i}.example" for i in range(6)]
    messages = [status(hosts[n % len(hosts)], n) for n in range(240)]
    await bus.start()
    # Tasks run in creation order and each hands its message to the producer before it
    # first waits, so the log order is the list order; all are there before consuming.
    await asyncio.gather(*(bus.publish(Topic.STATUS, m.host, m) for m in messages))
    consumer = Collector(buses, bus, "ordered", [Topic.STATUS], uneven, concurrency=8)
    got = await consumer.wait_for(len(messages))
    assert sorted(number(d) for d in got) == list(range(240))
    for host in hosts:
        numbers = [number(d) for d in got if d.key == host]
        offsets = [d.offset for d in got if d.key == host]
        assert numbers == sorted(numbers) and len(numbers) == 40
        assert offsets == sorted(offsets)
    assert peak > 1  # different keys were handled at the same time


async def test_retried_handler_then_success(buses: Buses) -> None:
    bus = buses.make()
    attempts: list[tuple[int, int]] = []

    async def flaky(delivery: Delivery) -> None:
        attempts.append((number(delivery), delivery.attempt))
        if number(delivery) == 1 and delivery.attempt < 3:
            raise ConnectionError("store busy")

    dead = Collector(buses, bus, "dead", [Topic.DEAD_LETTER])
    consumer = Collector(buses, bus, "frontier", [Topic.STATUS], flaky)
    await dead.assigned_once()
    await consumer.assigned_once()
    await publish_all(bus, [status("r.example", 1), status("r.example", 2)])
    got = await consumer.wait_for(2)
    assert [(number(d), d.attempt) for d in got] == [(1, 3), (2, 1)]
    assert attempts == [(1, 1), (1, 2), (1, 3), (2, 1)]
    await bus.publish(Topic.DEAD_LETTER, "r.example",
                      DeadLetter(topic="sentinel", key="r.example", payload="", error="",
                                 attempts=0))
    [letter] = await dead.wait_for(1)
    assert isinstance(letter.message, DeadLetter) and letter.message.topic == "sentinel"


async def test_dead_letter_after_max_attempts_with_the_error(buses: Buses) -> None:
    bus = buses.make()
    calls: list[int] = []

    async def broken(delivery: Delivery) -> None:
        if number(delivery) == 7:
            calls.append(delivery.attempt)
            raise ValueError("cannot handle page 7")

    dead = Collector(buses, bus, "dead", [Topic.DEAD_LETTER])
    consumer = Collector(buses, bus, "frontier", [Topic.STATUS], broken)
    await dead.assigned_once()
    await consumer.assigned_once()
    poison = status("p.example", 7)
    await publish_all(bus, [poison, status("p.example", 8)])
    got = await consumer.wait_for(1)
    assert [number(d) for d in got] == [8]
    assert calls == [1, 2, 3]
    [letter] = await dead.wait_for(1)
    message = letter.message
    assert isinstance(message, DeadLetter)
    assert letter.key == "p.example"
    assert letter.partition == bus.partition_of(Topic.DEAD_LETTER, "p.example")
    assert (message.topic, message.key, message.attempts) == ("status", "p.example", 3)
    assert "ValueError: cannot handle page 7" in message.error
    assert decode(StatusUpdate, dead_letter_payload(message)) == poison


async def test_malformed_payload_goes_straight_to_dead_letters(buses: Buses) -> None:
    bus = buses.make()
    seen: list[Delivery] = []

    async def handler(delivery: Delivery) -> None:
        seen.append(delivery)

    dead = Collector(buses, bus, "dead", [Topic.DEAD_LETTER])
    consumer = Collector(buses, bus, "frontier", [Topic.STATUS], handler)
    await dead.assigned_once()
    await consumer.assigned_once()
    await bus.publish_raw(Topic.STATUS, "m.example", b'{"v": 1, "url": 3')
    await bus.publish(Topic.STATUS, "m.example", status("m.example", 1))
    await consumer.wait_for(1)
    assert [number(d) for d in seen] == [1]
    [letter] = await dead.wait_for(1)
    message = letter.message
    assert isinstance(message, DeadLetter)
    assert message.payload == '{"v": 1, "url": 3' and message.attempts == 1
    assert "MessageError" in message.error


async def test_stopped_mid_handler_redelivers_after_restart(buses: Buses) -> None:
    """At-least-once across a restart: nothing lost, done work committed at stop."""
    first_bus = buses.make()
    blocked = asyncio.Event()
    hosts = [f"s{i}.example" for i in range(8)]
    stuck_host = hosts[0]
    messages = [status(hosts[n % len(hosts)], n) for n in range(80)]

    async def stuck_on_24(delivery: Delivery) -> None:
        if number(delivery) == 24:  # the fourth message of stuck_host
            blocked.set()
            await asyncio.Event().wait()

    first = Collector(buses, first_bus, "frontier", [Topic.STATUS], stuck_on_24,
                      concurrency=4)
    await first.assigned_once()
    await publish_all(first_bus, messages)
    async with asyncio.timeout(WAIT):
        await blocked.wait()
    # everything not queued behind the stuck message is handled; then stop
    stuck_partition = first_bus.partition_of(Topic.STATUS, stuck_host)
    others = [m for m in messages if first_bus.partition_of(Topic.STATUS, m.host)
              != stuck_partition]
    await first.until(lambda: {number(d) for d in first.received}
                      >= {int(m.url.rsplit("/", 1)[1]) for m in others}, "other partitions")
    started = time.monotonic()
    await first_bus.stop()
    await first.task
    assert time.monotonic() - started < 5
    done_first = {number(d) for d in first.received}
    assert 24 not in done_first and {0, 8, 16} <= done_first

    second_bus = buses.make()
    second = Collector(buses, second_bus, "frontier", [Topic.STATUS], concurrency=4)
    await second.until(lambda: {number(d) for d in second.received} | done_first
                       == set(range(80)), "every message handled")
    again = list(second.received)
    assert 24 in {number(d) for d in again}
    # done work was committed at stop: only the stuck partition is read again, from
    # the stuck message on
    assert {d.partition for d in again} == {stuck_partition}
    assert min(number(d) for d in again if d.key == stuck_host) == 24


async def test_two_consumers_split_the_partitions(buses: Buses) -> None:
    """A second member takes half the partitions while messages flow: each consumer
    handles only partitions it was last told it owns, and nothing is lost."""
    one_bus, two_bus = buses.make(), buses.make()
    violations: list[str] = []
    owners: dict[str, Collector] = {}

    def checker(name: str) -> Handler:
        async def check(delivery: Delivery) -> None:
            own = owners[name]
            if not own.assigned or delivery.partition not in own.assigned[-1]:
                violations.append(f"{name} got partition {delivery.partition}")
            await asyncio.sleep(0.002)
        return check

    one = owners["one"] = Collector(buses, one_bus, "frontier",
                                    [Topic.STATUS, Topic.FETCHED], checker("one"),
                                    concurrency=4)
    await one.assigned_once()
    assert one.assigned[-1] == frozenset(range(PARTITIONS))
    hosts = [f"g{i}.example" for i in range(40)]
    sent: list[int] = []
    enough = asyncio.Event()

    async def trickle() -> None:
        # until the second member has handled some: the rebalance happens mid-stream
        for n in range(3000):
            if enough.is_set():
                return
            await one_bus.publish(Topic.STATUS, hosts[n % len(hosts)],
                                  status(hosts[n % len(hosts)], n))
            sent.append(n)
            await asyncio.sleep(0.002)

    publishing = asyncio.create_task(trickle())
    await one.until(lambda: len(one.received) >= 20, "the first messages")
    two = owners["two"] = Collector(buses, two_bus, "frontier",
                                    [Topic.STATUS, Topic.FETCHED], checker("two"),
                                    concurrency=4)

    def split() -> bool:
        if not one.assigned or not two.assigned:
            return False
        a, b = one.assigned[-1], two.assigned[-1]
        return bool(a) and bool(b) and not a & b and a | b == frozenset(range(PARTITIONS))

    await two.until(split, "the partitions to be split")
    await two.until(lambda: len(two.received) >= 20, "the second member's messages")
    enough.set()
    await publishing
    everything = set(sent)
    assert len(everything) < 3000
    await two.until(lambda: {number(d) for d in one.received + two.received} >= everything,
                    "every message")
    assert violations == []
    # one owner per partition at every moment: one gave its partitions up (on_assign
    # with what it kept) before two was told it owns them
    owned: dict[str, frozenset[int]] = {"one": frozenset(), "two": frozenset()}
    events = sorted([(t, "one", ps) for t, ps in one.history]
                    + [(t, "two", ps) for t, ps in two.history])
    for _, name, partitions in events:
        owned[name] = partitions
        assert not owned["one"] & owned["two"], events
    assert frozenset() in one.assigned  # the revocation was reported
    assert two.received and {d.partition for d in two.received} <= two.assigned[-1]

    await two_bus.stop()  # the survivor takes every partition back
    await one.until(lambda: one.assigned[-1] == frozenset(range(PARTITIONS)),
                    "the partitions back")


@pytest.mark.parametrize("pause_after", [0.0, 1.0])
async def test_small_prefetch_holds_reading_and_loses_nothing(buses: Buses,
                                                              pause_after: float) -> None:
    """With room for 8 messages, reading stops and resumes many times (by pausing the
    partitions at once, or by not reading for a while first)."""
    bus = buses.make(prefetch=8, pause_after=pause_after)

    async def slowish(delivery: Delivery) -> None:
        await asyncio.sleep(0.001)

    consumer = Collector(buses, bus, "frontier", [Topic.STATUS], slowish, concurrency=2)
    await consumer.assigned_once()
    messages = [status(f"f{n % 3}.example", n) for n in range(150)]
    await publish_all(bus, messages)
    got = await consumer.wait_for(150)
    assert sorted(number(d) for d in got) == list(range(150))
    for host in {m.host for m in messages}:
        numbers = [number(d) for d in got if d.key == host]
        assert numbers == sorted(numbers)


def _bus_value(metrics: Metrics, name: str, topic: Topic) -> float:
    value = metrics.registry.get_sample_value(f"crawler_bus_{name}", {"topic": topic.value})
    return 0.0 if value is None else value


async def _eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_metrics_count_traffic_and_follow_the_lag(buses: Buses) -> None:
    """Published and consumed counts per topic; the lag gauge shows the messages
    waiting (or in progress) and falls to 0 once they are handled and committed, both
    for a group that never committed and for one that did."""
    metrics = Metrics.create((), process=False)
    bus = buses.make(metrics=metrics.bus, lag_interval=0.1, commit_interval=0.1)
    release = asyncio.Event()

    async def held(delivery: Delivery) -> None:
        await release.wait()

    def lag() -> float:
        return _bus_value(metrics, "consumer_lag_messages", Topic.STATUS)

    def consumed() -> float:
        return _bus_value(metrics, "messages_consumed_total", Topic.STATUS)

    hosts = [f"lag{i}.example" for i in range(4)]
    first = [status(hosts[n % len(hosts)], n) for n in range(12)]
    await publish_all(bus, first)
    assert _bus_value(metrics, "messages_published_total", Topic.STATUS) == 12
    assert _bus_value(metrics, "messages_published_total", Topic.FETCH) == 0
    consumer = Collector(buses, bus, "lagging", [Topic.STATUS], held, concurrency=4)
    await _eventually(lambda: lag() == 12, "a lag of 12 with nothing handled")
    # one message of each host's lane is in a handler, the others wait behind it
    await _eventually(lambda: consumed() == 4, "4 messages in handlers")
    assert consumer.received == []

    release.set()
    await consumer.wait_for(12)
    await _eventually(lambda: lag() == 0, "the lag to fall to 0")
    assert consumed() == 12

    release.clear()  # now from committed offsets
    await publish_all(bus, [status(hosts[n % len(hosts)], n) for n in range(12, 17)])
    await _eventually(lambda: lag() == 5, "a lag of 5 past the committed offsets")
    release.set()
    await consumer.wait_for(17)
    await _eventually(lambda: lag() == 0, "the lag to fall to 0 again")
    assert consumed() == 17
    assert _bus_value(metrics, "messages_published_total", Topic.STATUS) == 17
    assert _bus_value(metrics, "handler_errors_total", Topic.STATUS) == 0
    await bus.stop()
    assert lag() == 0  # a stopped consumer owns no partitions


async def test_metrics_count_handler_errors_and_dead_letters(buses: Buses) -> None:
    metrics = Metrics.create((), process=False)
    bus = buses.make(metrics=metrics.bus)

    async def broken(delivery: Delivery) -> None:
        if number(delivery) == 7:
            raise ValueError("cannot handle page 7")

    dead = Collector(buses, bus, "dead", [Topic.DEAD_LETTER])
    consumer = Collector(buses, bus, "frontier", [Topic.STATUS], broken)
    await dead.assigned_once()
    await consumer.assigned_once()
    await publish_all(bus, [status("p.example", 7), status("p.example", 8)])
    await bus.publish_raw(Topic.STATUS, "p.example", b'{"v": 1, "url": 3')
    await consumer.wait_for(1)
    await dead.wait_for(2)
    # a dead letter counts once the broker acknowledged it, which may come after the
    # dead-letter consumer already has it
    await _eventually(lambda: _bus_value(metrics, "dead_lettered_messages_total",
                                         Topic.STATUS) == 2, "2 dead letters counted")
    assert _bus_value(metrics, "messages_published_total", Topic.DEAD_LETTER) == 2
    assert _bus_value(metrics, "messages_published_total", Topic.STATUS) == 3
    assert _bus_value(metrics, "messages_consumed_total", Topic.STATUS) == 2
    assert _bus_value(metrics, "handler_errors_total", Topic.STATUS) == 3  # max attempts
    assert _bus_value(metrics, "messages_consumed_total", Topic.DEAD_LETTER) == 2


def _make_dead_letter_topic(bus: KafkaBus, max_message_bytes: int) -> None:
    """Create the bus's dead-letter topic before the bus does, with a message limit."""
    name = bus.topic_name(Topic.DEAD_LETTER)
    admin = AdminClient({"bootstrap.servers": bus.bootstrap})
    new = NewTopic(name, num_partitions=PARTITIONS, replication_factor=1,
                   config={"max.message.bytes": str(max_message_bytes)})
    admin.create_topics([new])[name].result(timeout=WAIT)


async def test_a_big_message_is_dead_lettered_within_the_message_limit(
        buses: Buses) -> None:
    """400 KB of \\x00 became 2.4 MB as a dead letter (JSON escapes), over the broker's
    1 MB limit, and the publish was retried until the partition was revoked: the
    consumer stood still. Now the letter is base64, cut, with the size and digest."""
    metrics = Metrics.create((), process=False)
    bus = buses.make(metrics=metrics.bus)
    dead = Collector(buses, bus, "dead", [Topic.DEAD_LETTER])
    consumer = Collector(buses, bus, "frontier", [Topic.STATUS])
    await dead.assigned_once()
    await consumer.assigned_once()
    payload = b"\x00" * 400_000
    await bus.publish_raw(Topic.STATUS, "big.example", payload)
    await bus.publish(Topic.STATUS, "big.example", status("big.example", 1))
    await consumer.wait_for(1)
    [letter] = await dead.wait_for(1)
    message = letter.message
    assert isinstance(message, DeadLetter)
    assert message.encoding is PayloadEncoding.BASE64 and message.truncated
    assert message.size == len(payload)
    assert message.digest == "sha256:" + hashlib.sha256(payload).hexdigest()
    assert payload.startswith(dead_letter_payload(message))
    await _eventually(lambda: _bus_value(metrics, "dead_lettered_messages_total",
                                         Topic.STATUS) == 1, "the dead letter counted")
    assert _bus_value(metrics, "dead_letters_dropped_total", Topic.STATUS) == 0


async def test_a_dead_letter_the_broker_refuses_goes_without_its_payload(
        buses: Buses) -> None:
    """The broker's limit on the dead-letter topic is lower than the letter (the
    delivery report says MSG_SIZE_TOO_LARGE): retrying cannot help, so the letter goes
    once more with only the size and digest of the payload. (The broker compares the
    compressed batch with its limit.)"""
    metrics = Metrics.create((), process=False)
    bus = buses.make(metrics=metrics.bus)
    _make_dead_letter_topic(bus, 4000)
    dead = Collector(buses, bus, "dead", [Topic.DEAD_LETTER])
    consumer = Collector(buses, bus, "frontier", [Topic.STATUS])
    await dead.assigned_once()
    await consumer.assigned_once()
    payload = b"\x80" + os.urandom(20_000)  # not UTF-8; random, so lz4 cannot shrink it
    await bus.publish_raw(Topic.STATUS, "refused.example", payload)
    await bus.publish(Topic.STATUS, "refused.example", status("refused.example", 1))
    await consumer.wait_for(1)  # the consumer went on
    [letter] = await dead.wait_for(1)
    message = letter.message
    assert isinstance(message, DeadLetter)
    assert (message.payload, message.truncated, message.size) == ("", True, len(payload))
    assert message.digest == "sha256:" + hashlib.sha256(payload).hexdigest()
    assert "MessageError" in message.error and message.key == "refused.example"
    await _eventually(lambda: _bus_value(metrics, "dead_lettered_messages_total",
                                         Topic.STATUS) == 1, "the dead letter counted")
    assert _bus_value(metrics, "dead_letters_dropped_total", Topic.STATUS) == 0


async def test_a_dead_letter_the_producer_refuses_goes_without_its_payload(
        buses: Buses) -> None:
    """The same when librdkafka refuses the letter itself (message.max.bytes), at
    produce() time rather than in a delivery report."""
    publisher = buses.make()
    bus = buses.make(producer_config={"message.max.bytes": 3000})
    dead = Collector(buses, publisher, "dead", [Topic.DEAD_LETTER])
    consumer = Collector(buses, bus, "frontier", [Topic.STATUS])
    await dead.assigned_once()
    await consumer.assigned_once()
    payload = b"\xff" * 10_000
    await publisher.publish_raw(Topic.STATUS, "local.example", payload)
    await publisher.publish(Topic.STATUS, "local.example", status("local.example", 1))
    await consumer.wait_for(1)
    [letter] = await dead.wait_for(1)
    message = letter.message
    assert isinstance(message, DeadLetter)
    assert (message.payload, message.truncated, message.size) == ("", True, len(payload))


async def test_a_dead_letter_refused_even_without_payload_is_counted_and_dropped(
        buses: Buses, caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics.create((), process=False)
    bus = buses.make(metrics=metrics.bus)
    _make_dead_letter_topic(bus, 100)  # smaller than any letter
    consumer = Collector(buses, bus, "frontier", [Topic.STATUS])
    await consumer.assigned_once()
    await bus.publish_raw(Topic.STATUS, "drop.example", b"\x80" * 5000)
    await bus.publish(Topic.STATUS, "drop.example", status("drop.example", 1))
    await consumer.wait_for(1)  # the consumer went on
    await _eventually(lambda: _bus_value(metrics, "dead_letters_dropped_total",
                                         Topic.STATUS) == 1, "the dropped letter counted")
    assert _bus_value(metrics, "dead_lettered_messages_total", Topic.STATUS) == 0
    assert any("refused a dead letter for good" in r.getMessage() for r in caplog.records)


async def test_publish_after_stop_fails_and_consume_returns(buses: Buses) -> None:
    bus = buses.make()
    await bus.publish(Topic.STATUS, "a.example", status("a.example", 1))
    await bus.stop()
    with pytest.raises(KafkaBusError, match="stopped"):
        await bus.publish(Topic.STATUS, "a.example", status("a.example", 2))
    async with asyncio.timeout(1):
        await bus.consume("late", [Topic.STATUS], _ignore)


async def _ignore(delivery: Delivery) -> None:
    return None


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("operation", ["start", "publish", "consume"])
async def test_unreachable_broker_is_a_clear_error(operation: str) -> None:
    bootstrap = f"127.0.0.1:{_closed_port()}"
    bus = KafkaBus(BusSettings(backend="kafka", kafka_bootstrap=bootstrap), start_timeout=1)
    calls: dict[str, Callable[[], Awaitable[None]]] = {
        "start": bus.start,
        "publish": lambda: bus.publish(Topic.STATUS, "a.example", status("a.example", 1)),
        "consume": lambda: bus.consume("g", [Topic.STATUS], _ignore),
    }
    started = time.monotonic()
    with pytest.raises(KafkaBusError, match=f"did not answer at {bootstrap}"):
        await calls[operation]()
    assert time.monotonic() - started < 10
    await bus.stop()


def test_ring_must_match_the_partitions() -> None:
    with pytest.raises(ValueError, match="ring has 3 partitions"):
        KafkaBus(BusSettings(partitions=4), ring=HostRing(3))
