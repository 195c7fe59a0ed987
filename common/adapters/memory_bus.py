"""The embedded-mode :class:`~common.ports.Bus`: in-process topics, Kafka-like groups.

How it behaves, and where it differs from Kafka:

- **Serialization.** Every message is encoded to bytes on :meth:`MemoryBus.publish` and
  decoded on delivery, exactly as over Kafka; bytes that do not decode as the topic's
  message type (numbers out of range included) go straight to the dead-letter topic.
  A dead letter carries the original bytes as :func:`common.messages.dead_letter`
  packs them (text or base64, cut to a bounded size, with their size and digest).
- **Partitions.** ``partition_of(topic, key)`` is ``partitioner(key)``, the same for
  every topic (topics are co-partitioned). The default partitioner is
  ``zlib.crc32(key) % partitions``, stable across processes; pass
  :class:`common.ring.HostRing` to match the cluster. Each delivery carries its
  partition and its offset within (topic, partition).
- **Consumer groups.** Each group has its own queue and gets every message of its
  topics (fan-out per group). A group gets the messages published from the moment it
  is *declared*, by :meth:`MemoryBus.declare_group` or by its first
  :meth:`MemoryBus.consume`. Messages published to a topic that no group has declared
  yet are held in the topic's backlog (at most ``backlog_limit``, oldest dropped
  first) and handed to the *first* group that declares the topic; later groups do not
  see them. A runner with several groups on one topic therefore declares every group
  before it publishes anything. Topics nobody consumes (the dead-letter topic, pages
  without an indexer) keep only the bounded backlog, so memory stays bounded.
- **One consumer per group.** A group is consumed by one :meth:`consume` call at a time,
  which owns every partition (``on_assign`` is called once with all of them). A second
  concurrent ``consume`` of the same group is an error.
- **Acknowledgement and retries.** A message is acknowledged when its handler returns.
  A handler that raises is called again with the same message (``Delivery.attempt``
  counts up, with a short exponential back-off) before the group's next message, so
  with ``concurrency=1`` messages keep their publish order, per key and overall. After
  ``max_delivery_attempts`` failures the message is replaced by a
  :class:`~common.messages.DeadLetter` on :attr:`Topic.DEAD_LETTER` carrying the error.
  A dead letter that itself fails is dropped (counted and logged), never re-lettered.
  With ``concurrency`` N > 1, N workers take messages from the group's queue in order
  and run them concurrently; same-key order is then not guaranteed.
- **Stopping.** :meth:`stop` ends every running ``consume`` promptly: handlers in
  progress are cancelled and their messages stay queued, unacknowledged (at-least-once).
  ``consume`` after ``stop`` returns at once; ``publish`` still queues.
- **Idleness.** :meth:`pending` counts deliveries not yet acknowledged in all groups
  (queued and in progress; so declare only groups that will consume); backlogs of
  undeclared topics are not counted. :meth:`wait_idle` returns when it is zero. A
  handler publishes its follow-up messages before it returns, so ``pending`` does not
  touch zero between a message and the work it causes; work that waits on a timer
  outside the bus is not counted.
- **Metrics.** With ``metrics`` (a :class:`~common.metrics.BusMetrics`), the bus counts
  per topic the messages published, the messages handed to a handler (once per
  delivery, not per retry), every handler call that raised and every message sent to
  the dead-letter topic; its consumer lag is the number of deliveries of the topic not
  yet acknowledged (queued or in progress), summed over the groups. Backlogs of
  undeclared topics are not lag: no group consumes them.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import msgspec

from common.adapters.handling import call_handler, describe
from common.messages import (
    TOPIC_TYPES,
    Message,
    MessageError,
    Topic,
    dead_letter,
    decode_topic,
    encode,
)
from common.metrics import BusMetrics
from common.ports import AssignCallback, Delivery, Handler
from common.settings import BusSettings

__all__ = ["MemoryBus", "TopicCounters"]

log = logging.getLogger(__name__)



@dataclass(slots=True)
class TopicCounters:
    """What happened to one topic's messages, summed over all groups."""

    published: int = 0  # messages published to the topic
    handled: int = 0  # deliveries whose handler returned
    retried: int = 0  # handler failures that were retried
    dead_lettered: int = 0  # deliveries given up: sent to the dead-letter topic
    dropped: int = 0  # backlog overflow, and dead letters that failed themselves


@dataclass(frozen=True, slots=True)
class _Entry:
    """One published message as the bus holds it: the encoded bytes and where it went."""

    topic: Topic
    key: str
    payload: bytes
    partition: int
    offset: int


@dataclass(eq=False)
class _Group:
    name: str
    topics: set[Topic] = field(default_factory=set)
    queue: deque[_Entry] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: int = 0
    consuming: bool = False


class MemoryBus:
    """In-process :class:`~common.ports.Bus` (see the module docstring for semantics).

    ``partitions`` and ``max_delivery_attempts`` default to ``settings`` (or 1 and 5
    without settings); explicit arguments win. ``partitioner`` maps a key to a
    partition in ``range(partitions)``. ``metrics``, when given, records the bus's
    traffic, errors and lag (see the module docstring).
    """

    def __init__(self, settings: BusSettings | None = None, *,
                 partitions: int | None = None,
                 max_delivery_attempts: int | None = None,
                 partitioner: Callable[[str], int] | None = None,
                 retry_backoff: float = 0.05,
                 max_retry_backoff: float = 1.0,
                 backlog_limit: int = 100_000,
                 metrics: BusMetrics | None = None) -> None:
        if partitions is None:
            partitions = settings.partitions if settings is not None else 1
        if max_delivery_attempts is None:
            max_delivery_attempts = (settings.max_delivery_attempts
                                     if settings is not None else 5)
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {partitions}")
        if max_delivery_attempts < 1:
            raise ValueError(
                f"max_delivery_attempts must be at least 1, got {max_delivery_attempts}")
        if retry_backoff < 0 or max_retry_backoff < 0:
            raise ValueError("retry back-off must not be negative")
        if backlog_limit < 0:
            raise ValueError(f"backlog_limit must not be negative, got {backlog_limit}")
        self.partitions = partitions
        self.max_delivery_attempts = max_delivery_attempts
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.backlog_limit = backlog_limit
        self._partitioner = partitioner or self._crc32
        self._groups: dict[str, _Group] = {}
        self._subscribers: dict[Topic, list[_Group]] = defaultdict(list)
        self._backlog: dict[Topic, deque[_Entry]] = defaultdict(deque)
        self._offsets: dict[tuple[Topic, int], int] = defaultdict(int)
        self._counters: dict[Topic, TopicCounters] = defaultdict(TopicCounters)
        self._metrics = metrics
        self._unacknowledged: dict[Topic, int] = defaultdict(int)  # per topic, all groups
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopped = False
        self._stop_event = asyncio.Event()
        self._consumers = 0
        self._no_consumers = asyncio.Event()
        self._no_consumers.set()

    def _crc32(self, key: str) -> int:
        return zlib.crc32(key.encode("utf-8", "surrogatepass")) % self.partitions

    # ---------------------------------------------------------------- publishing

    def partition_of(self, topic: Topic, key: str) -> int:
        """The partition of ``key``; the same for every topic."""
        partition = self._partitioner(key)
        if not 0 <= partition < self.partitions:
            raise ValueError(f"partitioner gave {partition!r} for {key!r}; "
                             f"expected 0..{self.partitions - 1}")
        return partition

    async def publish(self, topic: Topic, key: str, message: Message) -> None:
        """Encode ``message`` and queue it for every group of ``topic``.

        Raises :class:`TypeError` when the message is not the topic's message type.
        """
        expected = TOPIC_TYPES[topic]
        if not isinstance(message, expected):
            raise TypeError(f"topic {topic.value!r} carries {expected.__name__}, "
                            f"not {type(message).__name__}")
        self._append(topic, key, encode(message))

    async def publish_raw(self, topic: Topic, key: str, payload: bytes) -> None:
        """Queue already-encoded bytes, unchecked (tools and tests of bad input)."""
        self._append(topic, key, bytes(payload))

    def _append(self, topic: Topic, key: str, payload: bytes) -> None:
        partition = self.partition_of(topic, key)
        offset = self._offsets[(topic, partition)]
        self._offsets[(topic, partition)] = offset + 1
        entry = _Entry(topic, key, payload, partition, offset)
        self._counters[topic].published += 1
        if self._metrics is not None:
            self._metrics.count_published(topic)
        groups = self._subscribers.get(topic)
        if not groups:
            backlog = self._backlog[topic]
            backlog.append(entry)
            if len(backlog) > self.backlog_limit:
                backlog.popleft()
                self._counters[topic].dropped += 1
            return
        for group in groups:
            self._enqueue(group, entry)

    def _enqueue(self, group: _Group, entry: _Entry) -> None:
        group.queue.append(entry)
        group.wakeup.set()
        self._pending += 1
        self._idle.clear()
        self._unacknowledged[entry.topic] += 1
        self._report_lag(entry.topic)

    def _acknowledged(self, topic: Topic) -> None:
        self._pending -= 1
        if self._pending == 0:
            self._idle.set()
        self._unacknowledged[topic] -= 1
        self._report_lag(topic)

    def _report_lag(self, topic: Topic) -> None:
        if self._metrics is not None:
            self._metrics.set_lag(topic, self._unacknowledged[topic])

    # ----------------------------------------------------------------- consuming

    def declare_group(self, group: str, topics: Sequence[Topic]) -> None:
        """Subscribe ``group`` to ``topics`` now: it gets every message published from here.

        A topic's backlog (messages published before any group declared it) goes to the
        first group that declares the topic. Declaring again is harmless.
        """
        self._declare(group, topics)

    def _declare(self, name: str, topics: Sequence[Topic]) -> _Group:
        group = self._groups.get(name)
        if group is None:
            group = self._groups[name] = _Group(name)
        for topic in topics:
            topic = Topic(topic)
            if topic in group.topics:
                continue
            group.topics.add(topic)
            first = not self._subscribers[topic]
            self._subscribers[topic].append(group)
            if first:
                backlog = self._backlog.pop(topic, None)
                for entry in backlog or ():
                    self._enqueue(group, entry)
        return group

    async def consume(self, group: str, topics: Sequence[Topic], handler: Handler, *,
                      concurrency: int = 1,
                      on_assign: AssignCallback | None = None) -> None:
        """Run ``handler`` on the group's messages with ``concurrency`` workers until
        :meth:`stop` (or until this call is cancelled)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if not topics:
            raise ValueError("consume needs at least one topic")
        if self._stopped:
            return
        state = self._declare(group, topics)
        if state.consuming:
            raise RuntimeError(f"group {group!r} is already being consumed")
        state.consuming = True
        self._consumers += 1
        self._no_consumers.clear()
        tasks: list[asyncio.Task[object]] = []
        try:
            if on_assign is not None:
                await on_assign(frozenset(range(self.partitions)))
            if self._stopped:
                return
            tasks = [asyncio.create_task(self._worker(state, handler),
                                         name=f"bus:{group}:{i}")
                     for i in range(concurrency)]
            stopping = asyncio.create_task(self._stop_event.wait(), name=f"bus:{group}:stop")
            tasks.append(stopping)
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopping and not task.cancelled():
                    error = task.exception()
                    if error is not None:
                        raise error
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
            state.consuming = False
            self._consumers -= 1
            if self._consumers == 0:
                self._no_consumers.set()

    async def _worker(self, group: _Group, handler: Handler) -> None:
        while True:
            while not group.queue:
                group.wakeup.clear()
                await group.wakeup.wait()
            entry = group.queue.popleft()
            group.in_flight += 1
            try:
                await self._deliver(entry, handler)
            except BaseException:
                # Cancelled (stop) or broken: not acknowledged, so it is delivered again.
                group.queue.appendleft(entry)
                raise
            finally:
                group.in_flight -= 1
            self._acknowledged(entry.topic)
            await asyncio.sleep(0)  # let others run between messages

    async def _deliver(self, entry: _Entry, handler: Handler) -> None:
        counters = self._counters[entry.topic]
        try:
            message = decode_topic(entry.topic, entry.payload)
        except MessageError as exc:
            log.warning("undecodable message sent to dead letters",
                        extra={"topic": entry.topic.value, "key": entry.key,
                               "partition": entry.partition, "error": str(exc)})
            self._dead_letter(entry, describe(exc), attempts=1)
            return
        delivery = Delivery(topic=entry.topic, key=entry.key, message=message,
                            partition=entry.partition, offset=entry.offset, attempt=1)
        metrics = self._metrics
        if metrics is not None:
            metrics.count_consumed(entry.topic)
        while True:
            error = await call_handler(handler, delivery)
            if error is None:
                counters.handled += 1
                return
            if metrics is not None:
                metrics.count_handler_error(entry.topic)
            if delivery.attempt >= self.max_delivery_attempts:
                log.error("message failed %d times; sent to dead letters", delivery.attempt,
                          extra={"topic": entry.topic.value, "key": entry.key,
                                 "partition": entry.partition, "error": describe(error)})
                self._dead_letter(entry, describe(error), attempts=delivery.attempt)
                return
            counters.retried += 1
            log.warning("handler failed; retrying", exc_info=error,
                        extra={"topic": entry.topic.value, "key": entry.key,
                               "partition": entry.partition, "attempt": delivery.attempt})
            await asyncio.sleep(min(self.retry_backoff * 2 ** (delivery.attempt - 1),
                                    self.max_retry_backoff))
            delivery = msgspec.structs.replace(delivery, attempt=delivery.attempt + 1,
                                               calls=delivery.calls + 1)

    def _dead_letter(self, entry: _Entry, error: str, attempts: int) -> None:
        counters = self._counters[entry.topic]
        if entry.topic is Topic.DEAD_LETTER:
            counters.dropped += 1
            log.error("a dead letter could not be handled; dropped",
                      extra={"topic": entry.topic.value, "key": entry.key, "error": error})
            return
        counters.dead_lettered += 1
        if self._metrics is not None:
            self._metrics.count_dead_lettered(entry.topic)
        letter = dead_letter(entry.topic.value, entry.key, entry.payload, error, attempts)
        self._append(Topic.DEAD_LETTER, entry.key, encode(letter))

    # ------------------------------------------------------------------ lifecycle

    async def stop(self) -> None:
        """End every running :meth:`consume`; returns once they have all returned."""
        self._stopped = True
        self._stop_event.set()
        await self._no_consumers.wait()

    @property
    def stopped(self) -> bool:
        return self._stopped

    # ------------------------------------------------------------------- progress

    def pending(self) -> int:
        """Deliveries not yet acknowledged, over all groups (queued or in progress)."""
        return self._pending

    async def drained(self) -> bool:
        """True when every delivery of every group has been acknowledged."""
        return self._pending == 0

    async def wait_idle(self) -> None:
        """Return once :meth:`pending` is zero (wrap in ``asyncio.timeout`` to bound it)."""
        while self._pending:
            await self._idle.wait()

    def waiting(self, group: str) -> int:
        """Messages queued for ``group`` and not yet taken by one of its consumers (0
        for a group not declared)."""
        found = self._groups.get(group)
        return len(found.queue) if found is not None else 0

    def backlog(self, topic: Topic) -> int:
        """Messages held for ``topic`` until a group declares it."""
        queue = self._backlog.get(topic)
        return len(queue) if queue is not None else 0

    def counters(self) -> dict[Topic, TopicCounters]:
        """A snapshot of the per-topic counters."""
        return {topic: replace(c) for topic, c in self._counters.items()}

