"""Where the integration tests get Apache Kafka and Apache Cassandra: one fixture, two sources.

- ``local``: the servers of ``scripts/servers`` on 127.0.0.1 (what ``scripts/test`` starts),
  or existing ones named by the environment (``CRAWLER_BUS_KAFKA_BOOTSTRAP`` /
  ``KAFKA_BOOTSTRAP``, ``CRAWLER_STORE_CASSANDRA_HOSTS`` / ``CASSANDRA_HOSTS``,
  ``CRAWLER_STORE_CASSANDRA_PORT`` / ``CASSANDRA_PORT``).
- ``docker``: the same servers as containers started with testcontainers, from the images
  that docker-compose.yml names (``apache/kafka``, ``cassandra:5.0``: upstream where a
  registry answers, else the stand-ins ``scripts/docker images`` builds), published on
  127.0.0.1 ports of their own, so they never collide with ``scripts/servers``.

``CRAWLER_TEST_SERVERS`` chooses: ``docker``, ``local``, or ``auto`` (the default): local
when the environment names servers or something answers on 127.0.0.1:9092 and :9042,
else docker when a Docker engine answers and has both images, else local (the tests then
skip, or fail under ``CI=true``, naming the server that does not answer).

The session fixture ``integration_servers`` (tests/conftest.py) starts the chosen source
once, when the run selects a test that needs the servers, and exports the variables of
:meth:`Servers.env`, which every integration test reads.

No registry answers here, so testcontainers' reaper (Ryuk) has no image and is turned off
(``TESTCONTAINERS_RYUK_DISABLED``): the fixture removes its containers itself. After a
run that was killed, ``docker rm -f $(docker ps -q --filter label=org.testcontainers.lang=python)``
removes what it left.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scripts.lib import probes

ROOT = Path(__file__).resolve().parents[1]
LOCALHOST = "127.0.0.1"
KAFKA_START_TIMEOUT = 180.0
CASSANDRA_START_TIMEOUT = 300.0


class ServersError(RuntimeError):
    """The chosen source could not provide the servers."""


@dataclass(frozen=True)
class Servers:
    """A Kafka bootstrap address and a Cassandra contact point, and where they come from."""

    source: str  # "local" or "docker"
    kafka_bootstrap: str
    cassandra_host: str
    cassandra_port: int

    def env(self) -> dict[str, str]:
        """The variables the integration tests (and scripts/servers) read."""
        return {
            "CRAWLER_BUS_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "CRAWLER_STORE_CASSANDRA_HOSTS": self.cassandra_host,
            "CASSANDRA_HOSTS": self.cassandra_host,
            "CRAWLER_STORE_CASSANDRA_PORT": str(self.cassandra_port),
            "CASSANDRA_PORT": str(self.cassandra_port),
        }


def local_servers() -> Servers:
    """The servers the environment names, else scripts/servers' defaults on 127.0.0.1."""
    env = os.environ
    bootstrap = (env.get("CRAWLER_BUS_KAFKA_BOOTSTRAP", "").strip()
                 or env.get("KAFKA_BOOTSTRAP", "").strip()
                 or f"{LOCALHOST}:{env.get('KAFKA_PORT', '').strip() or 9092}")
    hosts = (env.get("CRAWLER_STORE_CASSANDRA_HOSTS", "").strip()
             or env.get("CASSANDRA_HOSTS", "").strip() or LOCALHOST)
    port = int(env.get("CRAWLER_STORE_CASSANDRA_PORT", "").strip()
               or env.get("CASSANDRA_PORT", "").strip() or 9042)
    return Servers("local", bootstrap, hosts.split(",")[0].strip(), port)


def _environment_names_servers() -> bool:
    return any(os.environ.get(name, "").strip() for name in (
        "CRAWLER_BUS_KAFKA_BOOTSTRAP", "KAFKA_BOOTSTRAP", "CRAWLER_STORE_CASSANDRA_HOSTS",
        "CASSANDRA_HOSTS"))


def compose_images() -> tuple[str, str]:
    """The Kafka and Cassandra images of docker-compose.yml."""
    import yaml

    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    return doc["services"]["kafka"]["image"], doc["services"]["cassandra"]["image"]


def docker_problem() -> str | None:
    """Why testcontainers cannot run the servers here, or None when it can."""
    try:
        proc = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no Docker engine answers ({exc})"
    if proc.returncode != 0:
        return f"no Docker engine answers ({proc.stderr.strip().splitlines()[-1:]})"
    missing = [ref for ref in compose_images()
               if subprocess.run(["docker", "image", "inspect", ref], capture_output=True,
                                 timeout=30, check=False).returncode != 0]
    if missing:
        return f"images missing: {', '.join(missing)} (scripts/docker images)"
    return None


def choose() -> tuple[str, str]:
    """The source to use, and why."""
    wanted = os.environ.get("CRAWLER_TEST_SERVERS", "").strip().lower() or "auto"
    if wanted not in ("auto", "docker", "local"):
        raise ServersError(f"CRAWLER_TEST_SERVERS={wanted!r}: expected auto, docker or local")
    if wanted != "auto":
        return wanted, f"CRAWLER_TEST_SERVERS={wanted}"
    if _environment_names_servers():
        return "local", "the environment names the servers"
    if probes.port_open(LOCALHOST, 9092) and probes.port_open(LOCALHOST, 9042):
        return "local", "servers answer on 127.0.0.1:9092 and :9042"
    problem = docker_problem()
    if problem is None:
        return "docker", "no local servers; a Docker engine answers"
    return "local", f"no local servers, and testcontainers cannot run them: {problem}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


def _wait(what: str, ready: object, container: object, timeout: float) -> float:
    """Poll ``ready()`` until it is true; the seconds it took."""
    from testcontainers.core.container import DockerContainer

    assert isinstance(container, DockerContainer)
    started = time.monotonic()
    while True:
        if ready():  # type: ignore[operator]
            return time.monotonic() - started
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status in ("exited", "dead"):
            out, err = container.get_logs()
            raise ServersError(f"{what} container exited:\n"
                               f"{(out + err).decode(errors='replace')[-3000:]}")
        if time.monotonic() - started > timeout:
            out, err = container.get_logs()
            raise ServersError(f"{what} not ready within {timeout:.0f} s:\n"
                               f"{(out + err).decode(errors='replace')[-3000:]}")
        time.sleep(1.0)


def kafka_ready(bootstrap: str) -> bool:
    """Ready as scripts/servers means it (scripts/lib/probes.py: a client can produce, join
    a group, consume and commit, every group coordinator has loaded)."""
    try:
        probes.kafka_ready(bootstrap, probes.KAFKA_CHECK_SECONDS)
    except Exception:
        return False
    return True


def cassandra_ready(host: str, port: int) -> bool:
    """Ready as scripts/servers means it: a CQL session reads system.local."""
    return probes.port_open(host, port) and probes.cassandra_release(host, port) is not None


@contextlib.contextmanager
def docker_servers() -> Iterator[Servers]:
    """Kafka and Cassandra started with testcontainers, removed at the end."""
    # No registry here: Ryuk (testcontainers' reaper) has no image, so the containers are
    # removed by this context manager instead.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.container import DockerContainer

    problem = docker_problem()
    if problem:
        raise ServersError(f"testcontainers cannot run the servers: {problem}")
    kafka_image, cassandra_image = compose_images()
    kafka_port, cassandra_port = _free_port(), _free_port()
    bootstrap = f"{LOCALHOST}:{kafka_port}"
    kafka = (DockerContainer(kafka_image)
             .with_env("KAFKA_NODE_ID", "1")
             .with_env("KAFKA_PROCESS_ROLES", "broker,controller")
             .with_env("KAFKA_LISTENERS", "PLAINTEXT://:9092,CONTROLLER://:9093")
             .with_env("KAFKA_ADVERTISED_LISTENERS", f"PLAINTEXT://{bootstrap}")
             .with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
             .with_env("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                       "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT")
             .with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
             .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
             .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
             .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
             .with_env("KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR", "1")
             .with_env("KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR", "1")
             .with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
             .with_env("KAFKA_LOG_DIRS", "/var/lib/kafka/data")
             .with_env("KAFKA_HEAP_OPTS", "-Xms512m -Xmx512m"))
    cassandra = (DockerContainer(cassandra_image)
                 .with_env("CASSANDRA_CLUSTER_NAME", "crawler-tests")
                 .with_env("MAX_HEAP_SIZE", "1G")
                 .with_env("HEAP_NEWSIZE", "200M"))
    # Published on loopback only: with_bind_ports takes no host address, so the port map
    # goes to the Docker SDK as it accepts it, (address, port).
    kafka.ports["9092/tcp"] = (LOCALHOST, kafka_port)  # type: ignore[assignment]
    cassandra.ports["9042/tcp"] = (LOCALHOST, cassandra_port)  # type: ignore[assignment]
    started: list[DockerContainer] = []
    try:
        t0 = time.monotonic()
        for container in (cassandra, kafka):  # Cassandra first: it takes longest
            container.start()
            started.append(container)
        took = _wait("Kafka", lambda: kafka_ready(bootstrap), kafka, KAFKA_START_TIMEOUT)
        print(f"\ntestcontainers: Kafka ({kafka_image}) ready on {bootstrap} "
              f"after {took:.1f} s", flush=True)
        took = _wait("Cassandra", lambda: cassandra_ready(LOCALHOST, cassandra_port),
                     cassandra, CASSANDRA_START_TIMEOUT)
        print(f"testcontainers: Cassandra ({cassandra_image}) ready on "
              f"{LOCALHOST}:{cassandra_port} after {time.monotonic() - t0:.1f} s",
              flush=True)
        yield Servers("docker", bootstrap, LOCALHOST, cassandra_port)
    finally:
        for container in reversed(started):
            with contextlib.suppress(Exception):
                container.stop()


@contextlib.contextmanager
def servers() -> Iterator[Servers]:
    """The servers of the chosen source, for the whole test session."""
    source, why = choose()
    print(f"\nintegration servers: {source} ({why})", flush=True)
    if source == "docker":
        with docker_servers() as found:
            yield found
    else:
        yield local_servers()
