"""scripts/servers without servers: Kafka's group-to-coordinator hash (scripts/lib/probes.py,
which scripts/servers and the tests' servers share), and a readiness wait that gives up
naming the step that was not ready (the live check is in tests/integration/test_servers.py)."""

from __future__ import annotations

import importlib.util
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from scripts.lib import probes

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "servers.d" / "servers.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_servers_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


servers = _load()


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("hello", 99162322),  # "hello".hashCode() in Java
    ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
    ("é", 233),
])
def test_java_string_hash(text: str, expected: int) -> None:
    assert probes.java_string_hash(text) == expected


def test_offsets_partition_follows_kafka() -> None:
    assert probes.offsets_partition("hello", 50) == 99162322 % 50
    assert probes.offsets_partition("polygenelubricants", 50) == 0  # Utils.abs(MIN) is 0
    negative = next(g for g in (f"a-longer-group-{n}" for n in range(1000))
                    if probes.java_string_hash(g) < 0)
    assert probes.offsets_partition(negative, 7) == -probes.java_string_hash(negative) % 7


def test_groups_covering_names_one_group_per_partition() -> None:
    groups = probes.groups_covering("probe-", 50)
    assert sorted(groups) == list(range(50))
    assert all(probes.offsets_partition(g, 50) == p for p, g in groups.items())


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


class NeverReady(servers.Server):  # type: ignore[misc,name-defined]
    def __init__(self, port: int) -> None:
        super().__init__(name="never-ready-test", version="0", main_class="x", port=port,
                         external_var="NEVER_READY_TEST_SERVER", default_stop_timeout=1)
        self.calls = 0

    def ready(self, host: str, port: int) -> str | None:
        self.calls += 1
        self.problem = f"consumer group probe-{self.calls} got no partition within 1 s"
        return None


def test_waiting_gives_up_naming_the_last_problem(listening_port: int) -> None:
    server = NeverReady(listening_port)
    started = servers.time.monotonic()
    with pytest.raises(servers.ServerError) as info:
        server.wait_ready(None, 0.6, started)
    text = str(info.value)
    assert f"not ready on 127.0.0.1:{listening_port} within 1 s" in text
    assert (f"(last check: consumer group probe-{server.calls} got no partition "
            "within 1 s)") in text
    assert server.calls >= 1


def test_kafka_ready_reports_what_the_check_found(monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = servers.Kafka()

    def not_ready(bootstrap: str, budget: float) -> str:
        assert bootstrap == "127.0.0.1:1" and 0 < budget <= servers.KAFKA_CHECK_SECONDS
        raise servers.NotReadyError("the group coordinator of __consumer_offsets "
                                    "partition 7 is not ready: Coordinator load in progress")

    monkeypatch.setattr(servers, "kafka_ready", not_ready)
    assert kafka.ready("127.0.0.1", 1) is None
    assert "partition 7 is not ready" in kafka.problem
    monkeypatch.setattr(servers, "kafka_ready", lambda bootstrap, budget: "fine")
    assert kafka.ready("127.0.0.1", 1) == "fine"
    assert kafka.problem is None


def test_kafka_ready_on_a_port_that_never_speaks_kafka(listening_port: int) -> None:
    started = servers.time.monotonic()
    with pytest.raises(servers.NotReadyError, match=r"no metadata from 127\.0\.0\.1"):
        servers.kafka_ready(f"127.0.0.1:{listening_port}", 5.0)
    assert servers.time.monotonic() - started < 10
