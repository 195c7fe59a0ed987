"""The consuming side of the Kafka bus: one :class:`Consumption` per ``consume`` call.

A thread polls Kafka and hands records and rebalance events to the event loop, where
``concurrency`` workers run the handler. Messages of one (topic, partition, key) run one
at a time in order; different keys run concurrently. Past ``prefetch`` messages waiting
or in progress, the thread stops reading until half of them are done (after
``pause_after``, it pauses its partitions so that it keeps serving rebalances
meanwhile). Offsets are committed (periodically, on revocation and on stop) only up to
the first message of each partition not yet fully handled
(:class:`~common.adapters.offset_tracker.OffsetTracker`). A handler that raises is
called again with back-off; after ``max_delivery_attempts`` failures, or at once for
bytes that do not decode, the message goes to the dead-letter topic through the bus.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from common.adapters.handling import (
    BUS,
    DEPENDENCIES,
    MAX_OUTAGE_BACKOFF,
    call_handler,
    dependency_down,
    describe,
    outage_backoff,
)
from common.adapters.kafka.client import (
    PAUSED_POLL_SECONDS,
    POLL_SECONDS,
    KafkaBusError,
    call_in_loop,
    decode_key,
    kafka_text,
    resolve,
)
from common.adapters.kafka.lag import consumer_lag
from common.adapters.offset_tracker import OffsetTracker
from common.messages import MessageError, Topic, decode_topic
from common.metrics import BusMetrics
from common.ports import AssignCallback, Delivery, Handler

log = logging.getLogger(__name__)


class ConsumerHost(Protocol):
    """What a :class:`Consumption` uses of its bus
    (:class:`~common.adapters.kafka.bus.KafkaBus`)."""

    bootstrap: str
    prefetch: int
    pause_after: float
    revoke_timeout: float
    commit_interval: float
    max_delivery_attempts: int
    _metrics: BusMetrics | None
    _names: dict[Topic, str]
    _topics_by_name: dict[str, Topic]
    _stop_event: asyncio.Event

    def group_id(self, group: str) -> str: ...

    def _consumer_config(self, group: str,
                         stats_cb: Callable[[str], None] | None = None) -> dict[str, Any]: ...

    async def _dead_letter(self, record: Record, error: str, attempts: int) -> bool: ...

    def _backoff(self, attempt: int) -> float: ...

    def _report_lag(self, consumption: Consumption, lags: Mapping[Topic, int]) -> None: ...

    def _forget_lag(self, consumption: Consumption) -> None: ...


def log_commit(error: KafkaError | None, partitions: list[TopicPartition]) -> None:
    """librdkafka's ``on_commit`` callback: a failed commit is logged."""
    if error is not None:
        log.warning("offset commit failed: %s", error)
        return
    for tp in partitions:
        if tp.error is not None:
            log.warning("offset commit failed", extra={"topic": tp.topic,
                                                       "partition": tp.partition,
                                                       "error": str(tp.error)})


@dataclass(eq=False, slots=True)
class _Partition:
    """One assigned (topic, partition) for one assignment; replaced when re-assigned."""

    name: str  # Kafka topic name
    topic: Topic
    partition: int
    tracker: OffsetTracker = field(default_factory=OffsetTracker)
    revoked: bool = False


@dataclass(eq=False, slots=True)
class Record:
    """One message read from an assigned partition, on its way to a handler."""

    topic: Topic
    part: _Partition
    offset: int
    key: str
    value: bytes


@dataclass(eq=False, slots=True)
class _Lane:
    """The waiting records of one (topic, partition, key): handled one at a time."""

    key: tuple[Topic, int, str]
    queue: deque[Record] = field(default_factory=deque)


@dataclass(frozen=True, slots=True)
class _Assigned:
    partitions: frozenset[int]


@dataclass(frozen=True, slots=True)
class _Revoked:
    parts: tuple[_Partition, ...]
    remaining: frozenset[int]  # the partitions still owned
    done: threading.Event | None  # set once handlers on them and on_assign are over


_Event = list[Record] | _Assigned | _Revoked


class Consumption:
    """One ``consume`` call: a polling thread and the event-loop side that runs handlers.

    All calls on the Kafka consumer happen on the thread. The thread hands records and
    rebalance events to the loop in order through ``inbox``; the loop acknowledges
    records in their partition's tracker, and the thread commits from the trackers.
    ``lock`` guards the trackers and the ``outstanding`` count, which both sides touch.
    """

    def __init__(self, bus: ConsumerHost, group: str, topics: list[Topic], handler: Handler,
                 concurrency: int, on_assign: AssignCallback | None) -> None:
        self.bus = bus
        self.group = group
        self.topics = topics
        self.handler = handler
        self.concurrency = concurrency
        self.on_assign = on_assign
        self.loop = asyncio.get_running_loop()
        self.lock = threading.Lock()
        self.parts: dict[tuple[str, int], _Partition] = {}  # owned now (thread's view)
        self.outstanding = 0  # records handed to the loop and not finished
        self.stopping = threading.Event()
        self.high = max(bus.prefetch, concurrency)
        self.low = self.high // 2
        self.paused = False
        self.room = threading.Event()  # set by the loop when outstanding falls to low
        self.read_committed = True  # the consumer's isolation.level (set by the thread)
        self.from_start = True  # auto.offset.reset is earliest (set by the thread)
        self.inbox: asyncio.Queue[_Event] = asyncio.Queue()
        self.thread_done: asyncio.Future[None] = self.loop.create_future()
        self.thread = threading.Thread(target=self._poll_thread,
                                       name=f"kafka-bus-consume-{group}", daemon=True)
        # loop side
        self.lanes: dict[tuple[Topic, int, str], _Lane] = {}
        self.ready: asyncio.Queue[_Lane] = asyncio.Queue()
        self.in_progress: dict[_Partition, int] = {}
        self.progress = asyncio.Event()

    # ------------------------------------------------------------- loop side

    async def run(self) -> None:
        self.thread.start()
        tasks: list[asyncio.Future[Any]] = [
            asyncio.create_task(self._pump(), name=f"bus:{self.group}:pump"),
            *(asyncio.create_task(self._worker(), name=f"bus:{self.group}:{i}")
              for i in range(self.concurrency))]
        stopping = asyncio.create_task(self.bus._stop_event.wait(),
                                       name=f"bus:{self.group}:stop")
        try:
            done, _ = await asyncio.wait([*tasks, stopping, self.thread_done],
                                         return_when=asyncio.FIRST_COMPLETED)
            for finished in done:
                if finished is not stopping and not finished.cancelled():
                    error = finished.exception()
                    if error is not None:
                        raise error
        finally:
            for task in (*tasks, stopping):
                task.cancel()
            await asyncio.wait([*tasks, stopping])
            self.stopping.set()
            await asyncio.shield(self.thread_done)
            self.thread.join(1.0)  # it resolved thread_done as its last act

    async def _pump(self) -> None:
        """Route records to lanes and run rebalance events, in the thread's order."""
        while True:
            event = await self.inbox.get()
            if isinstance(event, list):
                for record in event:
                    if record.part.revoked:
                        self._finished()
                    else:
                        self._route(record)
            elif isinstance(event, _Assigned):
                if self.on_assign is not None:
                    await self.on_assign(event.partitions)
            else:
                await self._revoke(event)

    def _route(self, record: Record) -> None:
        key = (record.topic, record.part.partition, record.key)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = _Lane(key)
            self.ready.put_nowait(lane)
        lane.queue.append(record)  # a known lane is already waiting in `ready` or running

    async def _revoke(self, event: _Revoked) -> None:
        revoked = set(event.parts)
        for lane in self.lanes.values():
            if lane.queue and lane.queue[0].part in revoked:
                for _ in range(len(lane.queue)):
                    self._finished()
                lane.queue.clear()
        try:
            async with asyncio.timeout(self.bus.revoke_timeout):
                while any(self.in_progress.get(p) for p in revoked):
                    self.progress.clear()
                    await self.progress.wait()
        except TimeoutError:
            log.warning("handlers still running on revoked partitions; committing without "
                        "them", extra={"group": self.group})
        try:
            if self.on_assign is not None:
                await self.on_assign(event.remaining)
        finally:
            if event.done is not None:
                event.done.set()

    async def _worker(self) -> None:
        while True:
            lane = await self.ready.get()
            if not lane.queue:  # emptied by a revocation
                if self.lanes.get(lane.key) is lane:
                    del self.lanes[lane.key]
                continue
            record = lane.queue.popleft()
            part = record.part
            self.in_progress[part] = self.in_progress.get(part, 0) + 1
            try:
                await self._handle(record)
            finally:
                left = self.in_progress[part] - 1
                if left:
                    self.in_progress[part] = left
                else:
                    del self.in_progress[part]
                self.progress.set()
            self._finished()
            if lane.queue:
                self.ready.put_nowait(lane)
            elif self.lanes.get(lane.key) is lane:
                del self.lanes[lane.key]
            await asyncio.sleep(0)  # let others run between messages

    def _finished(self) -> None:
        with self.lock:
            self.outstanding -= 1
            if self.outstanding <= self.low:
                self.room.set()

    def _ack(self, record: Record) -> None:
        with self.lock:
            record.part.tracker.ack(record.offset)

    async def _handle(self, record: Record) -> None:
        bus = self.bus
        context = {"topic": record.topic.value, "key": record.key,
                   "partition": record.part.partition, "offset": record.offset}
        try:
            message = decode_topic(record.topic, record.value)
        except MessageError as exc:
            log.warning("undecodable message sent to dead letters",
                        extra=context | {"error": str(exc)})
            if await bus._dead_letter(record, describe(exc), attempts=1):
                self._ack(record)
            return
        metrics = bus._metrics
        attempt = 1
        outage = 0  # failures in a row because a dependency was down (not counted)
        down: set[str] = set()
        # while Kafka or Cassandra is down, a new message waits (consumption pauses);
        # the messages already failing try again with back-off and find out when it
        # is back
        await DEPENDENCIES.wait_healthy(MAX_OUTAGE_BACKOFF)
        calls = 0
        while True:
            if record.part.revoked:
                return  # the partition's next owner handles it
            calls += 1
            delivery = Delivery(topic=record.topic, key=record.key, message=message,
                                partition=record.part.partition, offset=record.offset,
                                attempt=attempt, calls=calls)
            if metrics is not None and attempt == 1 and not outage:
                metrics.count_consumed(record.topic)
            error = await call_handler(self.handler, delivery)
            if error is None:
                for name in down:
                    DEPENDENCIES.up(name)
                self._ack(record)
                return
            if metrics is not None:
                metrics.count_handler_error(record.topic)
            dependency = dependency_down(error)
            if dependency is not None:
                # not the message's fault: wait for the dependency, same message
                outage += 1
                down.add(dependency)
                DEPENDENCIES.down(dependency, describe(error))
                log.log(logging.WARNING if outage == 1 else logging.DEBUG,
                        "handler failed because %s is down; waiting", dependency,
                        extra=context | {"error": describe(error), "tries": outage})
                await asyncio.sleep(outage_backoff(outage))
                continue
            outage = 0
            if attempt >= bus.max_delivery_attempts:
                log.error("message failed %d times; sent to dead letters", attempt,
                          extra=context | {"error": describe(error)})
                if await bus._dead_letter(record, describe(error), attempts=attempt):
                    self._ack(record)
                return
            log.warning("handler failed; retrying", exc_info=error,
                        extra=context | {"attempt": attempt})
            await asyncio.sleep(bus._backoff(attempt))
            attempt += 1

    # ----------------------------------------------------------- thread side

    def _post(self, event: _Event) -> None:
        call_in_loop(self.loop, self.inbox.put_nowait, event)

    def _poll_thread(self) -> None:
        error: BaseException | None = None
        consumer: Consumer | None = None
        try:
            config = self.bus._consumer_config(self.group, stats_cb=self._on_stats)
            self.read_committed = config.get("isolation.level",
                                             "read_committed") == "read_committed"
            self.from_start = config.get("auto.offset.reset") in ("earliest", "smallest",
                                                                  "beginning")
            consumer = Consumer(config)
            consumer.subscribe([self.bus._names[t] for t in self.topics],
                               on_assign=self._on_assign, on_revoke=self._on_revoke,
                               on_lost=self._on_lost)
            last_commit = time.monotonic()
            last_probe = 0.0
            while not self.stopping.is_set():
                if DEPENDENCIES.is_down(BUS) and time.monotonic() - last_probe >= 1.0:
                    self._probe(consumer)
                    last_probe = time.monotonic()
                self._flow_control(consumer)
                self._read(consumer)
                if time.monotonic() - last_commit >= self.bus.commit_interval:
                    self._commit(consumer, list(self.parts.values()), final=False)
                    last_commit = time.monotonic()
            self._commit(consumer, list(self.parts.values()), final=True)
        except BaseException as exc:
            error = exc if not isinstance(exc, KafkaException) else KafkaBusError(
                f"consumer of group {self.bus.group_id(self.group)} at "
                f"{self.bus.bootstrap} failed: {kafka_text(exc)}")
        finally:
            self.stopping.set()
            if consumer is not None:
                try:
                    consumer.close()
                except Exception as exc:  # closing is best effort
                    log.warning("closing the consumer failed: %s", exc)
            self.bus._forget_lag(self)  # after close: no statistics come any more
            call_in_loop(self.loop, resolve, self.thread_done, error)

    def _on_stats(self, text: str) -> None:
        """librdkafka's statistics (on the polling thread, inside ``poll``): set the lag
        of this consume's topics over the partitions it owns now."""
        try:
            stats = json.loads(text)
            if not isinstance(stats, dict):
                return
            by_name = consumer_lag(stats, list(self.parts),
                                   read_committed=self.read_committed,
                                   from_start=self.from_start)
            lags = {topic: 0 for topic in self.topics}
            for name, lag in by_name.items():
                topic = self.bus._topics_by_name.get(name)
                if topic is not None:
                    lags[topic] = lags.get(topic, 0) + lag
            self.bus._report_lag(self, lags)
        except Exception as exc:  # statistics are best effort; never break the consumer
            log.warning("cannot read the consumer statistics: %r", exc,
                        extra={"group": self.group})

    def _flow_control(self, consumer: Consumer) -> None:
        """Hold reading while ``high`` records are outstanding, until ``low`` are.

        A short stall just stops reading: librdkafka keeps its own bounded prefetch, and
        reading goes on at once. Past ``pause_after`` seconds the partitions are paused
        instead, so that polling goes on and rebalances are served; resuming costs a
        fresh fetch (librdkafka drops what it had prefetched for paused partitions).
        """
        with self.lock:
            outstanding = self.outstanding
            if not self.paused and outstanding >= self.high:
                self.room.clear()
        if self.paused:
            if outstanding <= self.low:
                consumer.resume(consumer.assignment())
                self.paused = False
            return
        if outstanding < self.high:
            return
        deadline = time.monotonic() + self.bus.pause_after
        while not self.stopping.is_set():
            if self.room.wait(min(POLL_SECONDS, max(0.0, deadline - time.monotonic()))):
                return
            if time.monotonic() >= deadline:
                break
        if not self.stopping.is_set():
            consumer.pause(consumer.assignment())
            self.paused = True

    def _probe(self, consumer: Consumer) -> None:
        """While Kafka is reported down: does a broker answer metadata again?"""
        try:
            consumer.list_topics(timeout=1.0)
        except KafkaException:
            return
        DEPENDENCIES.up(BUS)

    def _read(self, consumer: Consumer) -> None:
        # While paused, look at the loop's progress often so reading resumes soon.
        first = consumer.poll(PAUSED_POLL_SECONDS if self.paused else POLL_SECONDS)
        if first is None:
            return
        with self.lock:
            room = self.high - self.outstanding - 1
        messages = [first]
        if room > 0:
            messages += consumer.consume(num_messages=min(room, 1000), timeout=0)
        batch: list[Record] = []
        for msg in messages:
            problem = msg.error()
            if problem is not None:
                if problem.fatal():
                    raise KafkaException(problem)
                if dependency_down(KafkaException(problem)) is not None:
                    # logged once by DEPENDENCIES, not on every poll of the outage
                    DEPENDENCIES.down(BUS, problem.str())
                    log.debug("consumer error: %s", problem, extra={"group": self.group})
                else:
                    log.warning("consumer error: %s", problem, extra={"group": self.group})
                continue
            if DEPENDENCIES.is_down(BUS):
                DEPENDENCIES.up(BUS)  # a message arrived: Kafka is back
            name, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if name is None or partition is None or offset is None:
                continue
            part = self.parts.get((name, partition))
            if part is None:
                continue  # not ours any more
            value = msg.value()
            with self.lock:
                try:
                    part.tracker.add(offset)
                except ValueError:
                    log.warning("offset seen twice; skipped", extra={
                        "topic": name, "partition": partition, "offset": offset})
                    continue
                self.outstanding += 1
            batch.append(Record(part.topic, part, offset, decode_key(msg.key()),
                                value if isinstance(value, bytes) else b""))
        if batch:
            self._post(batch)

    def _commit(self, consumer: Consumer, parts: list[_Partition], *, final: bool) -> None:
        """Commit what is done: asynchronously and only progress, or synchronously all."""
        offsets: list[tuple[_Partition, int]] = []
        with self.lock:
            for part in parts:
                offset = part.tracker.committable() if final else part.tracker.due()
                if offset is not None:
                    offsets.append((part, offset))
        if not offsets:
            return
        request = [TopicPartition(part.name, part.partition, offset) for part, offset in offsets]
        try:
            if final:
                for tp in consumer.commit(offsets=request, asynchronous=False):
                    if tp.error is not None:
                        log.warning("offset commit failed", extra={
                            "topic": tp.topic, "partition": tp.partition,
                            "error": str(tp.error)})
            else:
                consumer.commit(offsets=request, asynchronous=True)
        except KafkaException as exc:
            log.warning("offset commit failed: %s", exc, extra={"group": self.group})
            return
        with self.lock:
            for part, offset in offsets:
                part.tracker.mark_committed(offset)

    def _on_assign(self, consumer: Consumer, assigned: list[TopicPartition]) -> None:
        for tp in assigned:
            topic = self.bus._topics_by_name.get(tp.topic)
            if topic is not None:
                self.parts[(tp.topic, tp.partition)] = _Partition(tp.topic, topic,
                                                                  tp.partition)
        self.paused = False  # new partitions start unpaused; flow control re-checks
        self._post(_Assigned(self._owned()))

    def _take(self, revoked: list[TopicPartition]) -> tuple[_Partition, ...]:
        parts = []
        for tp in revoked:
            part = self.parts.pop((tp.topic, tp.partition), None)
            if part is not None:
                part.revoked = True
                parts.append(part)
        return tuple(parts)

    def _owned(self) -> frozenset[int]:
        return frozenset(p.partition for p in self.parts.values())

    def _on_revoke(self, consumer: Consumer, revoked: list[TopicPartition]) -> None:
        parts = self._take(revoked)
        if not parts:
            return
        if not self.stopping.is_set():
            done = threading.Event()
            self._post(_Revoked(parts, self._owned(), done))
            deadline = time.monotonic() + self.bus.revoke_timeout + 1.0
            while not done.wait(0.05):
                if self.stopping.is_set() or time.monotonic() >= deadline:
                    break
        self._commit(consumer, list(parts), final=True)

    def _on_lost(self, consumer: Consumer, lost: list[TopicPartition]) -> None:
        parts = self._take(lost)
        if parts:
            log.warning("partitions lost without a clean revocation",
                        extra={"group": self.group, "count": len(parts)})
            self._post(_Revoked(parts, self._owned(), None))
