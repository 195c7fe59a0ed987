"""What both buses do around one handler call: run it, tell a failure from a stop, tell
an outage of a dependency (Kafka, Cassandra) from a failure of the message, and
describe the error for logs and dead letters."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from common.ports import Delivery, Handler

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_ERROR_CHARS = 4000


def describe(exc: BaseException) -> str:
    """``Type: message``, cut to :data:`MAX_ERROR_CHARS` (it travels in a dead letter)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "..."


async def call_handler(handler: Handler, delivery: Delivery) -> BaseException | None:
    """Run ``handler``; None when it returned, else the error it raised.

    A cancellation of the consuming task itself propagates (the bus is stopping or the
    partition was taken away); a stray ``CancelledError`` raised inside the handler is a
    failure like any other, so it is retried and, in the end, dead-lettered.
    """
    try:
        await handler(delivery)
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        return exc
    except Exception as exc:
        return exc
    return None


# ------------------------------------------------------------------ outages
#
# An outage of the bus or the store is not a poison message: a handler that fails
# because Kafka or Cassandra does not answer is retried with back-off, without counting
# towards the dead-letter limit, and the service reports not ready meanwhile. Which
# errors mean "a dependency is down" is decided here, and only here.

BUS = "bus"
STORE = "store"

OUTAGE_BACKOFF = 0.5  # first wait after a dependency failed
MAX_OUTAGE_BACKOFF = 10.0  # longest wait between tries while it stays down

# cassandra-driver's errors that say the cluster cannot serve now (not: the request is
# wrong). Named, not imported: embedded mode never loads the driver.
_CASSANDRA_DOWN = frozenset({
    "NoHostAvailable", "OperationTimedOut", "Unavailable", "ReadTimeout", "WriteTimeout",
    "CoordinationFailure", "ReadFailure", "WriteFailure", "ConnectionException",
    "ConnectionShutdown", "ConnectionBusy", "OverloadedErrorMessage",
    "IsBootstrappingErrorMessage", "CassandraUnavailableError",
})
# librdkafka error codes (KafkaError) that say the brokers cannot be reached now
_KAFKA_DOWN = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_MSG_TIMED_OUT", "_TIMED_OUT",
                         "_TIMED_OUT_QUEUE", "_RESOLVE", "_WAIT_COORD", "_NOT_COORDINATOR",
                         "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE",
                         "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION",
                         "REQUEST_TIMED_OUT", "NETWORK_EXCEPTION"})


def _names(exc: BaseException) -> set[tuple[str, str]]:
    return {(c.__module__.split(".")[0], c.__name__) for c in type(exc).__mro__}


def _kafka_code_name(exc: BaseException) -> str | None:
    error = exc.args[0] if exc.args else None
    name = getattr(error, "name", None)
    if callable(name):
        try:
            text = name()
        except Exception:  # not a KafkaError after all
            return None
        return text if isinstance(text, str) else None
    return None


def dependency_down(exc: BaseException) -> str | None:
    """:data:`BUS` or :data:`STORE` when ``exc`` (or an error it was raised from) says
    that Kafka or Cassandra cannot be reached now, else None (a failure of the message
    itself, which counts towards the dead-letter limit)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        names = _names(current)
        modules = {module for module, _ in names}
        if any(module == "cassandra" and name in _CASSANDRA_DOWN for module, name in names):
            return STORE
        if ("common", "CassandraUnavailableError") in names:
            return STORE
        if ("common", "KafkaBusError") in names:
            if ("common", "KafkaPublishRejectedError") in names or "stopped" in str(current):
                return None  # refused for good, or this process is stopping
            return BUS
        if (("confluent_kafka" in modules or "cimpl" in modules)
                and _kafka_code_name(current) in _KAFKA_DOWN):
            return BUS
        current = current.__cause__ or current.__context__
    return None


def outage_backoff(tries: int) -> float:
    """Seconds to wait after the ``tries``-th failure of one outage: 0.5, 1, 2 ... 10."""
    return float(min(OUTAGE_BACKOFF * 2 ** max(0, tries - 1), MAX_OUTAGE_BACKOFF))


class Dependencies:
    """Which dependencies of this process are down now; ``/readyz`` reads it.

    Any thread may report (the Kafka client threads do); the event loop reads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down: dict[str, tuple[float, str]] = {}

    def down(self, name: str, error: str = "") -> None:
        with self._lock:
            first = name not in self._down
            if first:
                self._down[name] = (time.monotonic(), error)
        if first:
            log.warning("%s is down: %s; waiting for it (not ready)", name, error or "?")

    def up(self, name: str) -> None:
        with self._lock:
            since = self._down.pop(name, None)
        if since is not None:
            log.warning("%s is back after %.1f s", name, time.monotonic() - since[0])

    def is_down(self, name: str) -> bool:
        return name in self._down

    @property
    def healthy(self) -> bool:
        return not self._down

    def describe(self) -> str:
        with self._lock:
            return ", ".join(f"{name} down for {time.monotonic() - since:.1f} s ({error})"
                             for name, (since, error) in self._down.items())

    async def wait_healthy(self, limit: float) -> None:
        """Until nothing is down, or ``limit`` seconds (then the caller tries anyway:
        its own call is the probe)."""
        deadline = time.monotonic() + limit
        # polled: reports come from other threads too (the Kafka client's)
        while self._down and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)


DEPENDENCIES = Dependencies()
"""This process's view of its dependencies (one per process, like its metrics)."""


async def while_down(call: Callable[[], Awaitable[T]], what: str) -> T:
    """``await call()``, tried again with back-off for as long as it fails because a
    dependency is down (other errors propagate at once). For work that must not be
    repeated from the start, e.g. storing a page already fetched."""
    tries = 0
    failed: set[str] = set()
    while True:
        try:
            result = await call()
        except Exception as exc:
            name = dependency_down(exc)
            if name is None:
                raise
            tries += 1
            failed.add(name)
            DEPENDENCIES.down(name, describe(exc))
            (log.warning if tries == 1 else log.debug)(
                "%s failed (%s down); trying again", what, name)
            await asyncio.sleep(outage_backoff(tries))
            continue
        for name in failed:
            DEPENDENCIES.up(name)
        return result
