"""An outage of Kafka or Cassandra is told apart from a failure of the message
(:mod:`common.adapters.handling`), waited out with back-off, and reported to /readyz."""

from __future__ import annotations

import asyncio

import pytest
from cassandra import OperationTimedOut, Unavailable
from cassandra.cluster import NoHostAvailable
from confluent_kafka import KafkaError, KafkaException

from common.adapters import handling
from common.adapters.handling import (
    BUS,
    STORE,
    Dependencies,
    dependency_down,
    outage_backoff,
    while_down,
)
from common.adapters.kafka import KafkaBusError, KafkaPublishRejectedError


@pytest.mark.parametrize(("error", "expected"), [
    (NoHostAvailable("no host", {}), STORE),
    (OperationTimedOut(), STORE),
    (Unavailable("not enough replicas"), STORE),
    (KafkaException(KafkaError(KafkaError._TRANSPORT)), BUS),
    (KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)), BUS),
    (KafkaBusError("publish to t.fetched failed: Local: Message timed out"), BUS),
    (KafkaPublishRejectedError("too large", KafkaError.MSG_SIZE_TOO_LARGE), None),
    (KafkaBusError("the Kafka bus is stopped"), None),
    (KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)), None),
    (ValueError("bad page"), None),
    (TypeError("wrong message"), None),
])
def test_outages_are_told_from_failures_of_the_message(error: BaseException,
                                                       expected: str | None) -> None:
    assert dependency_down(error) == expected


def test_an_outage_behind_another_error_counts() -> None:
    outer = RuntimeError("storing failed")
    outer.__cause__ = NoHostAvailable("no host", {})
    assert dependency_down(outer) == STORE


def test_backoff_is_bounded() -> None:
    waits = [outage_backoff(n) for n in range(1, 10)]
    assert waits[:3] == [0.5, 1.0, 2.0]
    assert max(waits) == 10.0


def test_dependencies_make_the_process_not_ready_until_back() -> None:
    deps = Dependencies()
    assert deps.healthy
    deps.down(STORE, "NoHostAvailable")
    deps.down(STORE, "again")
    assert not deps.healthy and deps.is_down(STORE) and "store" in deps.describe()
    deps.up(STORE)
    assert deps.healthy


async def test_while_down_keeps_trying_the_same_work(monkeypatch: pytest.MonkeyPatch) -> None:
    deps = Dependencies()
    monkeypatch.setattr(handling, "DEPENDENCIES", deps)
    monkeypatch.setattr(handling, "outage_backoff", lambda tries: 0.01)
    calls = 0
    seen_down = []

    async def store() -> str:
        nonlocal calls
        calls += 1
        seen_down.append(deps.is_down(STORE))
        if calls < 4:
            raise NoHostAvailable("no host", {})
        return "stored"

    assert await while_down(store, "storing") == "stored"
    assert calls == 4 and seen_down == [False, True, True, True] and deps.healthy


async def test_while_down_passes_other_errors_at_once() -> None:
    calls = 0

    async def broken() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        await while_down(broken, "work")
    assert calls == 1


async def test_waiting_for_health_is_bounded() -> None:
    deps = Dependencies()
    deps.down(BUS)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await deps.wait_healthy(0.3)
    assert 0.25 <= loop.time() - started < 2
