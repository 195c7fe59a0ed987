"""The cluster-mode :class:`~common.ports.Bus`: Apache Kafka through confluent-kafka.

How it behaves:

- **Topics.** Every :class:`~common.messages.Topic` is the Kafka topic
  ``{topic_prefix}.{topic}`` (``crawl.discovered``). :meth:`KafkaBus.start` (called by
  the first ``publish`` or ``consume`` when not called before) checks that the brokers
  answer within ``start_timeout`` seconds and creates every topic, the dead-letter
  topic included, with ``partitions`` partitions and ``replication_factor`` replicas;
  a topic that exists already is fine when it has at least that many partitions.
- **Partitions.** The producer picks the partition itself with the consistent-hash ring
  :class:`common.ring.HostRing` and passes it explicitly, so every producer agrees and
  topics are co-partitioned; :meth:`KafkaBus.partition_of` says the same. The key is the
  host, the value the message encoded with :func:`common.messages.encode`.
- **Publishing.** ``publish`` returns when the broker has acknowledged the message
  (``acks=all``, idempotent producer); it raises :class:`KafkaBusError` when delivery
  fails or times out (``delivery_timeout``), :class:`KafkaPublishRejectedError` (a
  subclass) when the error is one that sending the same message again cannot cure. A
  dedicated thread serves the producer's delivery reports; the event loop never blocks
  on the client.
- **Consuming.** ``consume`` joins the consumer group ``{group_prefix}-{group}`` (range
  assignment, so co-partitioned topics give a consumer the same partition numbers). A
  thread polls Kafka and hands messages to the event loop, where ``concurrency``
  workers run the handler. Messages of one (topic, partition, key) run one at a time in
  order; different keys run concurrently. Past ``prefetch`` messages waiting or in
  progress, the thread stops reading until half of them are done (after a second, it
  pauses its partitions so that it keeps serving rebalances meanwhile).
- **At-least-once.** Offsets are committed (periodically, on revocation and on stop) only
  up to the first message of each partition not yet fully handled (see
  :class:`~common.adapters.offset_tracker.OffsetTracker`): a crash redelivers what was
  not done, never loses it. Handlers must be idempotent.
- **Retries and dead letters.** A handler that raises is called again with the same
  message (``Delivery.attempt`` counts up, exponential back-off from ``retry_backoff``
  up to ``max_retry_backoff``) before the next message of its key. After
  ``max_delivery_attempts`` failures a :class:`~common.messages.DeadLetter` with the
  error goes to the dead-letter topic (same key) and the message counts as handled.
  Bytes that do not decode as the topic's message type (numbers out of range included)
  are dead-lettered at once. A dead letter carries the original bytes compactly and
  bounded (:func:`common.messages.dead_letter`), so it fits in Kafka's default message
  limit however the bytes escape in JSON. Publishing a dead letter is retried (with
  back-off, until the partition is revoked) while the error may pass; an error that
  will not (:data:`PERMANENT_PUBLISH_ERRORS`, e.g. a broker whose message limit is
  lower still) is not: the letter is sent once more without its payload (size, digest
  and error only), and if that is refused too it is logged, counted
  (``crawler_bus_dead_letters_dropped_total``) and dropped, and the consumer moves on.
  A dead letter that itself fails is dropped (logged), never re-lettered.
- **Rebalances.** ``on_assign`` is awaited with the partition numbers this consumer owns
  whenever they change: after every assignment, before any message of it is handled,
  and after a revocation, before the partitions go to another consumer. On revocation
  the bus stops handing out messages of the revoked partitions, waits up to
  ``revoke_timeout`` seconds for handlers in progress on them, awaits ``on_assign``
  with what is left (with Kafka's eager rebalancing: nothing, until the new
  assignment), and commits what is done. So a partition, and each host on it, has one
  owner at a time as long as handlers and ``on_assign`` finish within
  ``revoke_timeout``. Partitions lost without a revocation (a missed session timeout)
  are dropped the same way, but nothing is committed for them (they may already
  belong to another consumer).
- **Stopping.** :meth:`KafkaBus.stop` ends every ``consume`` promptly: handlers in
  progress are cancelled (their messages stay uncommitted and are redelivered), done
  work is committed, consumers leave their groups, the producer is flushed and closed.
  ``consume`` after ``stop`` returns at once; ``publish`` after ``stop`` raises.
- **Metrics.** With ``metrics`` (a :class:`~common.metrics.BusMetrics`), the bus counts
  per topic the messages published (when the broker acknowledged them), the messages
  handed to a handler (once per delivery, not per retry; a message redelivered after a
  rebalance or a restart counts again), every handler call that raised and every
  message sent to the dead-letter topic. Consumer lag comes from librdkafka's
  statistics (``statistics.interval.ms`` = ``lag_interval``): for each partition the
  consumer owns, the end of the log minus the group's committed offset, summed per
  topic (and over every ``consume`` of the process that reads the topic). A partition
  the group never committed counts from the low watermark, since consuming starts
  there (``auto.offset.reset=earliest``). Offsets are committed only up to what
  handlers finished, so the lag counts messages waiting or in progress; it is as fresh
  as the last statistics (and the high watermark of a paused partition is not
  refreshed until it resumes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from common.adapters.handling import (
    BUS,
    DEPENDENCIES,
    MAX_OUTAGE_BACKOFF,
    call_handler,
    dependency_down,
    describe,
    outage_backoff,
)
from common.adapters.offset_tracker import OffsetTracker
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
from common.ring import HostRing
from common.settings import BusSettings

__all__ = ["PERMANENT_PUBLISH_ERRORS", "KafkaBus", "KafkaBusError", "KafkaPublishRejectedError",
           "consumer_lag"]

log = logging.getLogger(__name__)
client_log = logging.getLogger(__name__ + ".rdkafka")  # librdkafka's own log lines

_POLL_SECONDS = 0.1  # longest a client thread blocks before it checks for stop
_PAUSED_POLL_SECONDS = 0.01


class KafkaBusError(RuntimeError):
    """Kafka did not answer, refused a request or lost a message; the text says which."""


class KafkaPublishRejectedError(KafkaBusError):
    """Kafka refused a message for good (:data:`PERMANENT_PUBLISH_ERRORS`): the same
    bytes will be refused again. ``code`` is the :class:`KafkaError` code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# Produce errors about the message itself that no retry cures: librdkafka's own check
# against message.max.bytes and the broker's (both MSG_SIZE_TOO_LARGE), a batch over
# the broker's limit, a record the broker refuses (InvalidRecordException) or whose
# timestamp it refuses, and a message librdkafka cannot build. Not here: INVALID_MSG
# (CORRUPT_MESSAGE, a CRC mismatch on the way, which Kafka marks retriable and
# librdkafka retries), timeouts and broker or leader changes, which pass; and
# authorization or configuration errors, which no single message causes.
PERMANENT_PUBLISH_ERRORS = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_TIMESTAMP,
    KafkaError._BAD_MSG,
})


def _publish_error(name: str, bootstrap: str, error: KafkaError) -> KafkaBusError:
    text = f"publish to {name} at {bootstrap} failed: {error.str()}"
    if error.code() in PERMANENT_PUBLISH_ERRORS:
        return KafkaPublishRejectedError(text, error.code())
    return KafkaBusError(text)


def _decode_key(raw: bytes | str | None) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def _call_in_loop(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Schedule ``fn(*args)`` on ``loop`` from another thread; a closed loop is ignored."""
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(fn, *args)


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _log_client_error(error: KafkaError) -> None:
    # Connection failures repeat on every reconnect and librdkafka logs them already;
    # only "all brokers down" and fatal errors are worth more than a debug line.
    if error.fatal():
        level = logging.ERROR
    elif error.code() == KafkaError._ALL_BROKERS_DOWN:
        level = logging.WARNING
        DEPENDENCIES.down(BUS, error.str())  # /readyz: not ready until Kafka answers
    else:
        level = logging.DEBUG
    client_log.log(level, "kafka client error: %s", error.str())


class _OncePer(logging.Filter):
    """Let one of each kind of line through per ``seconds`` (digits do not count), so
    an outage logs that the client cannot connect, not every reconnect attempt."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.last: dict[str, float] = {}
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.CRITICAL:
            return True
        kind = re.sub(r"\d+", "#", record.getMessage())[:200]
        now = time.monotonic()
        with self.lock:
            if now - self.last.get(kind, -self.seconds) < self.seconds:
                return False
            if len(self.last) > 1000:
                self.last.clear()
            self.last[kind] = now
        return True


client_log.addFilter(_OncePer(30.0))


def _quiet(error: KafkaError) -> None:
    client_log.debug("kafka admin client error: %s", error.str())


def _kafka_text(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)


def _offset(info: Mapping[str, Any], name: str) -> int | None:
    value = info.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _partition_lag(info: Mapping[str, Any], *, read_committed: bool,
                   from_start: bool) -> int | None:
    """The lag of one partition's statistics, or None when it is not known yet."""
    lag = _offset(info, "consumer_lag")  # end of the log - committed offset; -1: unknown
    if lag is not None and lag >= 0:
        return lag
    if not from_start or info.get("fetch_state") != "active":
        return None
    # Never committed by the group: consuming started at the low watermark.
    committed = _offset(info, "committed_offset")
    low = _offset(info, "lo_offset")
    end = _offset(info, "ls_offset" if read_committed else "hi_offset")
    if committed is None or committed >= 0 or low is None or end is None:
        return None
    return end - low if 0 <= low <= end else None


def consumer_lag(stats: Mapping[str, Any], owned: Iterable[tuple[str, int]], *,
                 read_committed: bool = True, from_start: bool = True) -> dict[str, int]:
    """Messages not yet committed, per Kafka topic, summed over the ``owned``
    (topic, partition) pairs, from one librdkafka statistics object (its
    ``topics.<name>.partitions.<p>`` entries). A partition whose lag is not known yet
    counts 0. ``read_committed`` says which end of the log librdkafka measures from
    (``isolation.level``); ``from_start`` that a group without a committed offset
    starts at the low watermark (``auto.offset.reset=earliest``).
    """
    topics = stats.get("topics")
    out: dict[str, int] = {}
    for name, partition in owned:
        out.setdefault(name, 0)
        if partition < 0 or not isinstance(topics, Mapping):
            continue
        topic = topics.get(name)
        partitions = topic.get("partitions") if isinstance(topic, Mapping) else None
        info = partitions.get(str(partition)) if isinstance(partitions, Mapping) else None
        if isinstance(info, Mapping):
            out[name] += _partition_lag(info, read_committed=read_committed,
                                        from_start=from_start) or 0
    return out


class KafkaBus:
    """:class:`~common.ports.Bus` on Apache Kafka (see the module docstring).

    ``ring`` defaults to ``HostRing(settings.partitions)`` and must have that many
    partitions. The other options (seconds unless said otherwise):

    - ``start_timeout``: how long :meth:`start` waits for the brokers and the topics;
    - ``delivery_timeout``: how long ``publish`` waits for the broker's acknowledgement;
    - ``retry_backoff``, ``max_retry_backoff``: first and longest wait before a failed
      handler is called again (doubling in between);
    - ``revoke_timeout``: how long a revocation waits for handlers in progress;
    - ``commit_interval``: how often progress is committed while consuming;
    - ``prefetch``: messages (waiting or in progress) one ``consume`` holds at most;
    - ``pause_after``: how long a full ``consume`` stops reading before it pauses;
    - ``session_timeout``: after this long without heartbeats a consumer's partitions
      go to the rest of its group;
    - ``metrics``: where to count traffic, errors and consumer lag (none by default);
    - ``lag_interval``: how often librdkafka reports statistics, from which the
      consumer lag is taken (only with ``metrics``);
    - ``producer_config``, ``consumer_config``: librdkafka settings that add to or
      override the ones this class sets;
    - ``instance_id``: makes this process's consumers *static members* of their groups
      (``group.instance.id`` = ``<instance_id>-<group>``, KIP-345): a consumer that
      loses its session (a broker outage longer than ``session_timeout``) rejoins with
      the same partitions instead of a rebalance that may hand them, and the messages
      it had not committed, to another member. The price: a static member that stops
      does not leave its group, so its partitions wait ``session_timeout`` before they
      go to the others (as after a crash). Unique per process.
    """

    def __init__(self, settings: BusSettings, *, ring: HostRing | None = None,
                 client_id: str = "crawler",
                 start_timeout: float = 15.0,
                 delivery_timeout: float = 120.0,
                 retry_backoff: float = 0.1,
                 max_retry_backoff: float = 5.0,
                 revoke_timeout: float = 10.0,
                 commit_interval: float = 0.5,
                 prefetch: int = 1000,
                 pause_after: float = 1.0,
                 session_timeout: float = 15.0,
                 producer_config: Mapping[str, Any] | None = None,
                 consumer_config: Mapping[str, Any] | None = None,
                 metrics: BusMetrics | None = None,
                 lag_interval: float = 5.0,
                 instance_id: str | None = None) -> None:
        if ring is None:
            ring = HostRing(settings.partitions)
        if ring.partitions != settings.partitions:
            raise ValueError(f"the ring has {ring.partitions} partitions but the bus is "
                             f"configured for {settings.partitions}")
        for name, value in (("start_timeout", start_timeout),
                            ("delivery_timeout", delivery_timeout),
                            ("commit_interval", commit_interval),
                            ("session_timeout", session_timeout),
                            ("lag_interval", lag_interval)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if min(retry_backoff, max_retry_backoff, revoke_timeout, pause_after) < 0:
            raise ValueError("back-off, revoke and pause times must not be negative")
        if prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, got {prefetch}")
        self.settings = settings
        self.ring = ring
        self.client_id = client_id
        self.bootstrap = settings.kafka_bootstrap
        self.partitions = settings.partitions
        self.max_delivery_attempts = settings.max_delivery_attempts
        self.start_timeout = start_timeout
        self.delivery_timeout = delivery_timeout
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.revoke_timeout = revoke_timeout
        self.commit_interval = commit_interval
        self.prefetch = prefetch
        self.pause_after = pause_after
        self.session_timeout = session_timeout
        self.lag_interval = lag_interval
        self._metrics = metrics
        self._lag_lock = threading.Lock()  # poll threads of several consumes report lag
        self._lags: dict[_Consumption, dict[Topic, int]] = {}
        self._producer_overrides = dict(producer_config or {})
        self._consumer_overrides = dict(consumer_config or {})
        self.instance_id = instance_id
        self._instances: Counter[str] = Counter()  # consumers per group, for their ids
        self._names = {topic: self.topic_name(topic) for topic in Topic}
        self._topics_by_name = {name: topic for topic, name in self._names.items()}
        self._start_lock = asyncio.Lock()
        self._started = False
        self._stopped = False
        self._stop_event = asyncio.Event()
        self._producer: Producer | None = None
        self._producer_stop = threading.Event()
        self._producer_done: asyncio.Future[None] | None = None
        self._producer_thread: threading.Thread | None = None
        self._consumptions: set[_Consumption] = set()
        self._no_consumers = asyncio.Event()
        self._no_consumers.set()
        self._groups: set[str] = set()

    # ------------------------------------------------------------------- naming

    def topic_name(self, topic: Topic) -> str:
        """The Kafka topic of ``topic``: ``{topic_prefix}.{topic}``."""
        return f"{self.settings.topic_prefix}.{Topic(topic).value}"

    def group_id(self, group: str) -> str:
        """The Kafka consumer group of ``group``: ``{group_prefix}-{group}``."""
        return f"{self.settings.group_prefix}-{group}"

    def partition_of(self, topic: Topic, key: str) -> int:
        """The partition of ``key``: the ring's answer, the same for every topic."""
        return self.ring(key)

    def _base_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "client.id": self.client_id,
                "logger": client_log, "error_cb": _log_client_error,
                # a broker that comes back is found within a second, not after
                # librdkafka's default growing wait (up to 10 s)
                "reconnect.backoff.max.ms": 1000}

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Check that Kafka answers, create the topics and the producer (once).

        Raises :class:`KafkaBusError` naming the bootstrap servers when they do not
        answer within ``start_timeout`` seconds or refuse to create the topics.
        """
        async with self._start_lock:
            if self._stopped:
                raise KafkaBusError("the Kafka bus is stopped")
            if self._started:
                return
            await asyncio.to_thread(self._prepare_topics)
            if self._stopped:
                raise KafkaBusError("the Kafka bus was stopped while it started")
            config = self._base_config() | {
                "acks": "all",
                "enable.idempotence": True,
                # publish waits for the acknowledgement, so a lone message pays the
                # linger in full (about 1.3 ms at 1, 5.4 ms at 5 on one local broker);
                # concurrent publishers still share batches.
                "linger.ms": 1,
                "compression.type": "lz4",
                "delivery.timeout.ms": int(self.delivery_timeout * 1000),
            } | self._producer_overrides
            try:
                producer = Producer(config)
            except KafkaException as exc:
                raise KafkaBusError(f"cannot create a Kafka producer for {self.bootstrap}: "
                                    f"{_kafka_text(exc)}") from None
            loop = asyncio.get_running_loop()
            self._producer = producer
            self._producer_done = loop.create_future()
            self._producer_thread = threading.Thread(
                target=self._serve_producer, args=(producer, loop, self._producer_done),
                name="kafka-bus-producer", daemon=True)
            self._producer_thread.start()
            self._started = True

    def _admin(self) -> AdminClient:
        # Its failures are reported by the caller's exception; librdkafka's own log
        # lines would repeat every reconnect attempt.
        return AdminClient(self._base_config() | {"error_cb": _quiet, "log_level": 0})

    def _prepare_topics(self) -> None:
        """Blocking: wait for the brokers, create missing topics, wait until they serve."""
        admin = self._admin()
        try:
            deadline = time.monotonic() + self.start_timeout
            try:
                metadata = admin.list_topics(timeout=self.start_timeout)
            except KafkaException as exc:
                raise KafkaBusError(
                    f"Kafka did not answer at {self.bootstrap} within "
                    f"{self.start_timeout:g} s ({_kafka_text(exc)}); "
                    f"check CRAWLER_BUS_KAFKA_BOOTSTRAP") from None
            missing = [name for name in self._names.values() if name not in metadata.topics]
            if missing:
                new = [NewTopic(name, num_partitions=self.partitions,
                                replication_factor=self.settings.replication_factor)
                       for name in missing]
                futures = admin.create_topics(new, request_timeout=self.start_timeout)
                for name, future in futures.items():
                    try:
                        future.result(timeout=max(0.1, deadline - time.monotonic()))
                    except KafkaException as exc:
                        error = exc.args[0] if exc.args else None
                        if (isinstance(error, KafkaError)
                                and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                            continue
                        raise KafkaBusError(f"cannot create topic {name} on "
                                            f"{self.bootstrap}: {_kafka_text(exc)}") from None
                    except TimeoutError:
                        raise KafkaBusError(f"creating topic {name} on {self.bootstrap} took "
                                            f"more than {self.start_timeout:g} s") from None
                    log.info("created topic", extra={"topic": name,
                                                     "partitions": self.partitions})
            self._wait_topics_ready(admin, deadline)
        finally:
            admin.poll(0)  # hand queued client log lines to logging

    def _wait_topics_ready(self, admin: AdminClient, deadline: float) -> None:
        """Until every topic has its partitions with a leader (metadata lags creation)."""
        while True:
            problem = None
            try:
                metadata = admin.list_topics(timeout=max(0.1, deadline - time.monotonic()))
            except KafkaException as exc:
                problem = str(exc)
            else:
                for name in self._names.values():
                    info = metadata.topics.get(name)
                    if info is None or info.error is not None:
                        problem = f"topic {name} is not ready"
                        break
                    count = len(info.partitions)
                    if count < self.partitions:
                        raise KafkaBusError(
                            f"topic {name} on {self.bootstrap} has {count} partitions; the "
                            f"bus is configured for {self.partitions} "
                            f"(CRAWLER_BUS_PARTITIONS)")
                    if any(p.leader < 0 for p in info.partitions.values()):
                        problem = f"topic {name} has partitions without a leader"
                        break
            if problem is None:
                for name in self._names.values():
                    count = len(metadata.topics[name].partitions)
                    if count > self.partitions:
                        log.warning("topic has more partitions than the bus uses",
                                    extra={"topic": name, "partitions": count,
                                           "used": self.partitions})
                return
            if time.monotonic() >= deadline:
                raise KafkaBusError(f"Kafka at {self.bootstrap}: {problem} after "
                                    f"{self.start_timeout:g} s")
            time.sleep(0.05)

    def _serve_producer(self, producer: Producer, loop: asyncio.AbstractEventLoop,
                        done: asyncio.Future[None]) -> None:
        """Thread: serve delivery reports until stop, then flush and close."""
        error: BaseException | None = None
        try:
            while not self._producer_stop.is_set():
                producer.poll(_POLL_SECONDS)
            left = producer.flush(self.delivery_timeout)
            if left:
                log.error("messages not delivered before stop; purged",
                          extra={"count": left})
                producer.purge()
                producer.flush(0)  # delivery reports of the purged messages
            close = getattr(producer, "close", None)  # confluent-kafka 2.13 and later
            if close is not None:
                close()
        except BaseException as exc:
            error = exc
        finally:
            _call_in_loop(loop, _resolve, done, error)

    async def stop(self) -> None:
        """End every :meth:`consume`, commit what is done, close the clients."""
        self._stopped = True
        self._stop_event.set()
        await self._no_consumers.wait()
        if self._producer_done is not None:
            self._producer_stop.set()
            await asyncio.shield(self._producer_done)
        if self._producer_thread is not None:
            self._producer_thread.join(1.0)  # it resolved _producer_done as its last act

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def __aenter__(self) -> KafkaBus:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()

    async def delete_topics(self) -> None:
        """Delete this bus's topics and the consumer groups it joined (tests, tools).

        Call after :meth:`stop`. Topics and groups that do not exist are skipped.
        """
        groups = sorted(self.group_id(g) for g in self._groups)
        await asyncio.to_thread(self._delete, list(self._names.values()), groups)

    def _delete(self, topics: list[str], groups: list[str]) -> None:
        admin = self._admin()
        try:
            waits = list(admin.delete_topics(topics, operation_timeout=self.start_timeout,
                                              request_timeout=self.start_timeout).items())
            if groups:
                waits += list(admin.delete_consumer_groups(
                    groups, request_timeout=self.start_timeout).items())
            for name, future in waits:
                try:
                    future.result(timeout=self.start_timeout)
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    if isinstance(error, KafkaError) and error.code() in (
                            KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.GROUP_ID_NOT_FOUND):
                        continue
                    raise KafkaBusError(f"cannot delete {name} on {self.bootstrap}: "
                                        f"{_kafka_text(exc)}") from None
        finally:
            admin.poll(0)

    # --------------------------------------------------------------- publishing

    async def publish(self, topic: Topic, key: str, message: Message) -> None:
        """Publish ``message`` under ``key``; returns once the broker acknowledged it.

        Raises :class:`TypeError` when the message is not the topic's message type and
        :class:`KafkaBusError` when it could not be delivered.
        """
        expected = TOPIC_TYPES[topic]
        if not isinstance(message, expected):
            raise TypeError(f"topic {topic.value!r} carries {expected.__name__}, "
                            f"not {type(message).__name__}")
        await self._produce(Topic(topic), key, encode(message))

    async def publish_raw(self, topic: Topic, key: str, payload: bytes) -> None:
        """Publish already-encoded bytes, unchecked (tools and tests of bad input)."""
        await self._produce(Topic(topic), key, bytes(payload))

    async def _produce(self, topic: Topic, key: str, payload: bytes) -> None:
        await self.start()
        producer = self._producer
        if self._stopped or producer is None:
            raise KafkaBusError("the Kafka bus is stopped")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        name = self._names[topic]

        def delivered(error: KafkaError | None, _msg: KafkaMessage) -> None:
            failure = None if error is None else _publish_error(name, self.bootstrap, error)
            _call_in_loop(loop, _resolve, future, failure)

        partition = self.partition_of(topic, key)
        deadline = time.monotonic() + self.delivery_timeout
        while True:
            try:
                producer.produce(name, value=payload, key=key.encode("utf-8", "surrogatepass"),
                                 partition=partition, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: wait for deliveries
                if time.monotonic() >= deadline:
                    raise KafkaBusError(f"publish to {name}: the producer queue stayed full "
                                        f"for {self.delivery_timeout:g} s") from None
                await asyncio.sleep(0.01)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError):
                    raise _publish_error(name, self.bootstrap, error) from None
                raise KafkaBusError(f"publish to {name} at {self.bootstrap} failed: "
                                    f"{_kafka_text(exc)}") from None
        await future
        if DEPENDENCIES.is_down(BUS):
            DEPENDENCIES.up(BUS)  # the broker acknowledged: Kafka is back
        if self._metrics is not None:
            self._metrics.count_published(topic)

    # ---------------------------------------------------------------- consuming

    async def consume(self, group: str, topics: Sequence[Topic], handler: Handler, *,
                      concurrency: int = 1,
                      on_assign: AssignCallback | None = None) -> None:
        """Run ``handler`` on the group's messages until :meth:`stop` (or cancellation)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if not topics:
            raise ValueError("consume needs at least one topic")
        if self._stopped:
            return
        try:
            await self.start()
        except KafkaBusError:
            if self._stopped:  # stopped while starting
                return
            raise
        if self._stopped:
            return
        self._groups.add(group)
        consumption = _Consumption(self, group, [Topic(t) for t in topics], handler,
                                   concurrency, on_assign)
        self._consumptions.add(consumption)
        self._no_consumers.clear()
        try:
            await consumption.run()
        finally:
            self._consumptions.discard(consumption)
            if not self._consumptions:
                self._no_consumers.set()

    def _consumer_config(self, group: str,
                         stats_cb: Callable[[str], None] | None = None) -> dict[str, Any]:
        session_ms = int(self.session_timeout * 1000)
        config = self._base_config()
        if stats_cb is not None and self._metrics is not None:
            config |= {"statistics.interval.ms": max(1, round(self.lag_interval * 1000)),
                       "stats_cb": stats_cb}
        if self.instance_id is not None:
            self._instances[group] += 1
            n = self._instances[group]
            config["group.instance.id"] = (f"{self.instance_id}-{group}"
                                           + (f"-{n}" if n > 1 else ""))
        return config | {
            "group.id": self.group_id(group),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
            # The broker holds an empty fetch this long; it also bounds how long a
            # resumed partition waits for its first fetch (see _flow_control).
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(100, min(1000, session_ms // 3)),
            "on_commit": _log_commit,
        } | self._consumer_overrides

    async def _dead_letter(self, record: _Record, error: str, attempts: int) -> bool:
        """Publish a dead letter for ``record``; False when its partition was revoked first."""
        if record.topic is Topic.DEAD_LETTER:
            log.error("a dead letter could not be handled; dropped",
                      extra={"topic": record.topic.value, "key": record.key, "error": error})
            return True
        letter = dead_letter(record.topic.value, record.key, record.value, error, attempts)
        context = {"topic": record.topic.value, "key": record.key,
                   "partition": record.part.partition, "offset": record.offset}
        failures = 0
        while True:
            try:
                await self.publish(Topic.DEAD_LETTER, record.key, letter)
                if self._metrics is not None:
                    self._metrics.count_dead_lettered(record.topic)
                return True
            except KafkaPublishRejectedError as exc:
                if letter.payload:  # once more with only the size and digest
                    log.warning("Kafka refused a dead letter; sending it without its "
                                "payload", extra=context | {"error": str(exc),
                                                            "size": letter.size,
                                                            "digest": letter.digest})
                    letter = dead_letter(record.topic.value, record.key, record.value,
                                         error, attempts, limit=0)
                    continue
                log.error("Kafka refused a dead letter for good; dropped",
                          extra=context | {"error": str(exc), "size": letter.size,
                                           "digest": letter.digest})
                if self._metrics is not None:
                    self._metrics.count_dead_letter_dropped(record.topic)
                return True
            except KafkaBusError as exc:
                failures += 1
                log.error("cannot publish a dead letter; retrying", extra={
                    "topic": record.topic.value, "key": record.key, "error": str(exc)})
                if self._stopped or record.part.revoked:
                    return False
                await asyncio.sleep(self._backoff(failures))

    def _backoff(self, attempt: int) -> float:
        return float(min(self.retry_backoff * 2 ** (attempt - 1), self.max_retry_backoff))

    def _report_lag(self, consumption: _Consumption, lags: Mapping[Topic, int]) -> None:
        """Record the lag of one consume's topics and set each topic's gauge to the
        sum over every consume that reads it (called from polling threads)."""
        metrics = self._metrics
        if metrics is None:
            return
        with self._lag_lock:
            self._lags[consumption] = dict(lags)
            for topic in lags:
                metrics.set_lag(topic, sum(v.get(topic, 0) for v in self._lags.values()))

    def _forget_lag(self, consumption: _Consumption) -> None:
        """A consume ended: its partitions no longer count."""
        metrics = self._metrics
        if metrics is None:
            return
        with self._lag_lock:
            gone = self._lags.pop(consumption, {})
            for topic in gone:
                metrics.set_lag(topic, sum(v.get(topic, 0) for v in self._lags.values()))


def _log_commit(error: KafkaError | None, partitions: list[TopicPartition]) -> None:
    if error is not None:
        log.warning("offset commit failed: %s", error)
        return
    for tp in partitions:
        if tp.error is not None:
            log.warning("offset commit failed", extra={"topic": tp.topic,
                                                       "partition": tp.partition,
                                                       "error": str(tp.error)})


# ------------------------------------------------------------------- internals


@dataclass(eq=False, slots=True)
class _Partition:
    """One assigned (topic, partition) for one assignment; replaced when re-assigned."""

    name: str  # Kafka topic name
    topic: Topic
    partition: int
    tracker: OffsetTracker = field(default_factory=OffsetTracker)
    revoked: bool = False


@dataclass(eq=False, slots=True)
class _Record:
    topic: Topic
    part: _Partition
    offset: int
    key: str
    value: bytes


@dataclass(eq=False, slots=True)
class _Lane:
    """The waiting records of one (topic, partition, key): handled one at a time."""

    key: tuple[Topic, int, str]
    queue: deque[_Record] = field(default_factory=deque)


@dataclass(frozen=True, slots=True)
class _Assigned:
    partitions: frozenset[int]


@dataclass(frozen=True, slots=True)
class _Revoked:
    parts: tuple[_Partition, ...]
    remaining: frozenset[int]  # the partitions still owned
    done: threading.Event | None  # set once handlers on them and on_assign are over


_Event = list[_Record] | _Assigned | _Revoked


class _Consumption:
    """One ``consume`` call: a polling thread and the event-loop side that runs handlers.

    All calls on the Kafka consumer happen on the thread. The thread hands records and
    rebalance events to the loop in order through ``inbox``; the loop acknowledges
    records in their partition's tracker, and the thread commits from the trackers.
    ``lock`` guards the trackers and the ``outstanding`` count, which both sides touch.
    """

    def __init__(self, bus: KafkaBus, group: str, topics: list[Topic], handler: Handler,
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

    def _route(self, record: _Record) -> None:
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

    def _ack(self, record: _Record) -> None:
        with self.lock:
            record.part.tracker.ack(record.offset)

    async def _handle(self, record: _Record) -> None:
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
        _call_in_loop(self.loop, self.inbox.put_nowait, event)

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
                f"{self.bus.bootstrap} failed: {_kafka_text(exc)}")
        finally:
            self.stopping.set()
            if consumer is not None:
                try:
                    consumer.close()
                except Exception as exc:  # closing is best effort
                    log.warning("closing the consumer failed: %s", exc)
            self.bus._forget_lag(self)  # after close: no statistics come any more
            _call_in_loop(self.loop, _resolve, self.thread_done, error)

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
            if self.room.wait(min(_POLL_SECONDS, max(0.0, deadline - time.monotonic()))):
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
        first = consumer.poll(_PAUSED_POLL_SECONDS if self.paused else _POLL_SECONDS)
        if first is None:
            return
        with self.lock:
            room = self.high - self.outstanding - 1
        messages = [first]
        if room > 0:
            messages += consumer.consume(num_messages=min(room, 1000), timeout=0)
        batch: list[_Record] = []
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
            batch.append(_Record(part.topic, part, offset, _decode_key(msg.key()),
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
