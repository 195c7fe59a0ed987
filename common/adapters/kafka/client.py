"""What the Kafka bus's clients share: its errors, the client log (librdkafka's own
lines, each kind at most once per 30 s) and error callback, and the hand-over of results
from the clients' threads to the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from common.adapters.handling import BUS, DEPENDENCIES

client_log = logging.getLogger("common.adapters.kafka.rdkafka")  # librdkafka's own log lines

POLL_SECONDS = 0.1  # longest a client thread blocks before it checks for stop
PAUSED_POLL_SECONDS = 0.01


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


def publish_error(name: str, bootstrap: str, error: KafkaError) -> KafkaBusError:
    """The error a failed publish to topic ``name`` raises: a
    :class:`KafkaPublishRejectedError` when sending the same bytes again cannot help."""
    text = f"publish to {name} at {bootstrap} failed: {error.str()}"
    if error.code() in PERMANENT_PUBLISH_ERRORS:
        return KafkaPublishRejectedError(text, error.code())
    return KafkaBusError(text)


def decode_key(raw: bytes | str | None) -> str:
    """A message's key as text (bytes that are not UTF-8 are replaced, never refused)."""
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def call_in_loop(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Schedule ``fn(*args)`` on ``loop`` from another thread; a closed loop is ignored."""
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(fn, *args)


def resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    """Settle ``future`` with ``error``, or success without one (on the loop's thread)."""
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def log_client_error(error: KafkaError) -> None:
    """librdkafka's error callback of the producer and the consumers."""
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


def quiet(error: KafkaError) -> None:
    """The admin client's error callback: a debug line only."""
    client_log.debug("kafka admin client error: %s", error.str())


def kafka_text(exc: KafkaException) -> str:
    """The text of a client exception (its :class:`KafkaError`'s, when it holds one)."""
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)
