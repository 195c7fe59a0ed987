"""The front of the Kafka bus: :class:`KafkaBus`, the :class:`~common.ports.Bus` that
services use. It names topics and groups, picks partitions, starts the topic setup
(:mod:`~common.adapters.kafka.admin`) and the producer
(:mod:`~common.adapters.kafka.producer`), runs one
:class:`~common.adapters.kafka.consumer.Consumption` per ``consume``, sends dead letters
and sums the consumer lag its consumptions report. How the bus behaves as a whole is
described in :mod:`common.adapters.kafka`."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from common.adapters.handling import BUS, DEPENDENCIES
from common.adapters.kafka.admin import TopicAdmin
from common.adapters.kafka.client import (
    KafkaBusError,
    KafkaPublishRejectedError,
    client_log,
    log_client_error,
)
from common.adapters.kafka.consumer import Consumption, Record, log_commit
from common.adapters.kafka.producer import ProducerSide
from common.messages import TOPIC_TYPES, Message, Topic, dead_letter, encode
from common.metrics import BusMetrics
from common.ports import AssignCallback, Handler
from common.ring import HostRing
from common.settings import BusSettings

log = logging.getLogger(__name__)


class KafkaBus:
    """:class:`~common.ports.Bus` on Apache Kafka (see :mod:`common.adapters.kafka`).

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
        self._lags: dict[Consumption, dict[Topic, int]] = {}
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
        self._producer: ProducerSide | None = None
        self._consumptions: set[Consumption] = set()
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
                "logger": client_log, "error_cb": log_client_error,
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
            await asyncio.to_thread(self._topic_admin().prepare_topics,
                                    list(self._names.values()))
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
            self._producer = ProducerSide.start(config, bootstrap=self.bootstrap,
                                                delivery_timeout=self.delivery_timeout)
            await asyncio.to_thread(self._producer.connect, min(self.start_timeout, 5.0))
            self._started = True

    def _topic_admin(self) -> TopicAdmin:
        return TopicAdmin(self.bootstrap, self._base_config(), self.partitions,
                          self.settings.replication_factor, self.start_timeout)

    async def stop(self) -> None:
        """End every :meth:`consume`, commit what is done, close the clients."""
        self._stopped = True
        self._stop_event.set()
        await self._no_consumers.wait()
        if self._producer is not None:
            await self._producer.stop()

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
        await asyncio.to_thread(self._topic_admin().delete, list(self._names.values()),
                                groups)

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
        await producer.produce(self._names[topic], key, self.partition_of(topic, key),
                               payload)
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
        consumption = Consumption(self, group, [Topic(t) for t in topics], handler,
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
            "on_commit": log_commit,
        } | self._consumer_overrides

    async def _dead_letter(self, record: Record, error: str, attempts: int) -> bool:
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

    def _report_lag(self, consumption: Consumption, lags: Mapping[Topic, int]) -> None:
        """Record the lag of one consume's topics and set each topic's gauge to the
        sum over every consume that reads it (called from polling threads)."""
        metrics = self._metrics
        if metrics is None:
            return
        with self._lag_lock:
            self._lags[consumption] = dict(lags)
            for topic in lags:
                metrics.set_lag(topic, sum(v.get(topic, 0) for v in self._lags.values()))

    def _forget_lag(self, consumption: Consumption) -> None:
        """A consume ended: its partitions no longer count."""
        metrics = self._metrics
        if metrics is None:
            return
        with self._lag_lock:
            gone = self._lags.pop(consumption, {})
            for topic in gone:
                metrics.set_lag(topic, sum(v.get(topic, 0) for v in self._lags.values()))
