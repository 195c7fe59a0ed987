"""The producer side of the Kafka bus: one idempotent producer per bus and a thread
that serves its delivery reports, so the event loop never blocks on the client.
``produce`` returns once the broker acknowledged the message (``acks=all``)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import Message as KafkaMessage

from common.adapters.kafka.client import (
    POLL_SECONDS,
    KafkaBusError,
    call_in_loop,
    kafka_text,
    publish_error,
    resolve,
)

log = logging.getLogger(__name__)


class ProducerSide:
    """A running producer and its delivery-report thread (see :meth:`start`)."""

    def __init__(self, producer: Producer, loop: asyncio.AbstractEventLoop, *,
                 bootstrap: str, delivery_timeout: float) -> None:
        self._producer = producer
        self._bootstrap = bootstrap
        self._delivery_timeout = delivery_timeout
        self._stop = threading.Event()
        self._done: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(
            target=self._serve_producer, args=(producer, loop, self._done),
            name="kafka-bus-producer", daemon=True)

    @classmethod
    def start(cls, config: Mapping[str, Any], *, bootstrap: str,
              delivery_timeout: float) -> ProducerSide:
        """Create the producer with ``config`` and start its thread (on the event loop).

        Raises :class:`KafkaBusError` when librdkafka refuses the configuration.
        """
        try:
            producer = Producer(dict(config))
        except KafkaException as exc:
            raise KafkaBusError(f"cannot create a Kafka producer for {bootstrap}: "
                                f"{kafka_text(exc)}") from None
        side = cls(producer, asyncio.get_running_loop(), bootstrap=bootstrap,
                   delivery_timeout=delivery_timeout)
        side._thread.start()
        return side

    def connect(self, timeout: float) -> None:
        """Blocking: wait (at most ``timeout`` seconds) for one metadata answer, so that
        the producer has a broker connection before its first message. The idempotent
        producer asks for its producer id when it is created; a message produced before
        any connection is up waits for that request's retry, about half a second later
        (a seed command's first publish took 0.5 s; after this, about 0.06 s in all).
        A broker that does not answer in time is not an error here: the messages wait
        for it as they would anyway."""
        try:
            self._producer.list_topics(timeout=timeout)
        except KafkaException as exc:
            log.warning("no metadata from %s within %g s: %s", self._bootstrap, timeout,
                        kafka_text(exc))

    def _serve_producer(self, producer: Producer, loop: asyncio.AbstractEventLoop,
                        done: asyncio.Future[None]) -> None:
        """Thread: serve delivery reports until stop, then flush and close."""
        error: BaseException | None = None
        try:
            while not self._stop.is_set():
                producer.poll(POLL_SECONDS)
            left = producer.flush(self._delivery_timeout)
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
            call_in_loop(loop, resolve, done, error)

    async def produce(self, name: str, key: str, partition: int, payload: bytes) -> None:
        """Send ``payload`` to partition ``partition`` of topic ``name`` under ``key``;
        returns once the broker acknowledged it, raises :class:`KafkaBusError` when it
        could not be delivered within ``delivery_timeout``."""
        producer = self._producer
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        bootstrap = self._bootstrap

        def delivered(error: KafkaError | None, _msg: KafkaMessage) -> None:
            failure = None if error is None else publish_error(name, bootstrap, error)
            call_in_loop(loop, resolve, future, failure)

        deadline = time.monotonic() + self._delivery_timeout
        while True:
            try:
                producer.produce(name, value=payload, key=key.encode("utf-8", "surrogatepass"),
                                 partition=partition, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: wait for deliveries
                if time.monotonic() >= deadline:
                    raise KafkaBusError(f"publish to {name}: the producer queue stayed full "
                                        f"for {self._delivery_timeout:g} s") from None
                await asyncio.sleep(0.01)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError):
                    raise publish_error(name, bootstrap, error) from None
                raise KafkaBusError(f"publish to {name} at {bootstrap} failed: "
                                    f"{kafka_text(exc)}") from None
        await future

    async def stop(self) -> None:
        """Flush what is queued (up to ``delivery_timeout``), close, end the thread."""
        self._stop.set()
        await asyncio.shield(self._done)
        self._thread.join(1.0)  # it resolved _done as its last act
