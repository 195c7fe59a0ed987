"""Helpers to run the crawler as separate service processes on real Kafka and Cassandra."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from common.settings import Settings
from frontier.stats import CrawlStats, collect
from tests.conftest import unavailable


# Read when used, not at import: the session fixture integration_servers (tests/conftest.py)
# may export testcontainers' addresses after the test modules were imported.
def kafka_bootstrap() -> str:
    return os.environ.get("CRAWLER_BUS_KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def cassandra_endpoint() -> tuple[str, int]:
    host = os.environ.get("CRAWLER_STORE_CASSANDRA_HOSTS", "127.0.0.1").split(",")[0]
    return host, int(os.environ.get("CRAWLER_STORE_CASSANDRA_PORT", "9042"))


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_cluster_servers() -> None:
    kafka = kafka_bootstrap()
    host, _, port = kafka.partition(",")[0].rpartition(":")
    if not _answers(host, int(port)):
        unavailable(f"Kafka does not answer at {kafka} (scripts/servers start)")
    cassandra_host, cassandra_port = cassandra_endpoint()
    if not _answers(cassandra_host, cassandra_port):
        unavailable(f"Cassandra does not answer at {cassandra_host}:{cassandra_port}")


@dataclass
class Cluster:
    """Service processes sharing one crawl's settings (topics and keyspace unique)."""

    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    files: list[IO[bytes]] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        return Settings.from_env({k: v for k, v in self.env.items()
                                  if k.startswith("CRAWLER_")})

    def start(self, name: str, role: str,
              env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("ab")
        self.files.append(log)
        proc = subprocess.Popen([sys.executable, "-m", "crawler", role, "-v"],
                                env={**self.env, **(env or {})}, stdout=log,
                                stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def free_port(self) -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for f in self.files:
            f.close()
        self.files.clear()

    def seed(self, urls: list[str]) -> None:
        subprocess.run([sys.executable, "-m", "crawler.cli", "seed", *urls], env=self.env,
                       check=True, capture_output=True, timeout=120)

    def log_text(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-4000:]}"
                         for p in sorted(self.logs.glob("*.log")))

    async def stats(self) -> CrawlStats:
        from common.runtime import make_store

        store = make_store(self.settings)
        await store.open()
        try:
            return await collect(store)
        finally:
            await store.close()

    async def wait_done(self, limit: float, *, quiet_polls: int = 4,
                        poll: float = 1.0) -> CrawlStats:
        """Until nothing is queued, in flight or awaiting parse, several polls in a row."""
        deadline = time.monotonic() + limit
        quiet = 0
        stats = await self.stats()
        while time.monotonic() < deadline:
            await asyncio.sleep(poll)
            for name, proc in self.procs.items():
                if proc.poll() is not None and proc.returncode not in (0, -9, -15):
                    raise AssertionError(f"{name} exited {proc.returncode}\n{self.log_text()}")
            stats = await self.stats()
            idle = (stats.known_urls > 0 and stats.queued == 0 and stats.in_flight == 0
                    and stats.awaiting_parse == 0)
            quiet = quiet + 1 if idle else 0
            if quiet >= quiet_polls:
                return stats
        raise AssertionError(f"crawl did not finish in {limit}s: {stats}\n{self.log_text()}")


def crawl_env(dns_servers: list[str], delay: float) -> dict[str, str]:
    """Settings of a cluster crawl of the simulated web: its DNS, loopback allowed, a
    short politeness delay and quick retries."""
    return {
        "CRAWLER_FETCHER_DNS_SERVERS": ",".join(dns_servers),
        "CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.1/32",
        "CRAWLER_POLITENESS_DEFAULT_DELAY": str(delay),
        "CRAWLER_POLITENESS_MAX_CRAWL_DELAY": "1",
        "CRAWLER_POLITENESS_BACKOFF_BASE": "1",
        "CRAWLER_FETCHER_TOTAL_TIMEOUT": "5",
        "CRAWLER_FETCHER_CONCURRENCY": "32",
        "CRAWLER_BUS_PARTITIONS": "6",
    }


@contextmanager
def cluster(tmp: Path, extra: Mapping[str, str]) -> Iterator[Cluster]:
    run = uuid.uuid4().hex[:10]
    cassandra_host, cassandra_port = cassandra_endpoint()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env.update({
        "CRAWLER_BUS_BACKEND": "kafka",
        "CRAWLER_BUS_KAFKA_BOOTSTRAP": kafka_bootstrap(),
        "CRAWLER_BUS_TOPIC_PREFIX": f"t{run}",
        "CRAWLER_BUS_GROUP_PREFIX": f"g{run}",
        "CRAWLER_BUS_PARTITIONS": "4",
        "CRAWLER_STORE_BACKEND": "cassandra",
        "CRAWLER_STORE_CASSANDRA_HOSTS": cassandra_host,
        "CRAWLER_STORE_CASSANDRA_PORT": str(cassandra_port),
        "CRAWLER_STORE_KEYSPACE": f"k{run}",
        "CRAWLER_STORE_WRITE_CONSISTENCY": "ONE",
        "CRAWLER_STORE_READ_CONSISTENCY": "ONE",
        "CRAWLER_BLOB_ROOT": str(tmp / "warc"),
        "CRAWLER_CRAWL_OUT_DIR": str(tmp),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    })
    env.update(extra)
    logs = tmp / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    c = Cluster(env=env, logs=logs)
    try:
        yield c
    finally:
        c.stop_all()
        _cleanup(c)


def _cleanup(c: Cluster) -> None:
    """Drop the keyspace and the topics this run created."""
    settings = c.settings
    try:
        from cassandra.cluster import Cluster as CassCluster

        host, port = cassandra_endpoint()
        cc = CassCluster([host], port=port, protocol_version=5)
        session = cc.connect()
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.store.keyspace}", timeout=60)
        cc.shutdown()
    except Exception as exc:  # cleanup must not hide the test's own result
        print(f"cleanup: keyspace not dropped: {exc}")
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": kafka_bootstrap()})
        prefix = settings.bus.topic_prefix + "."
        topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
        if topics:
            for fut in admin.delete_topics(topics).values():
                fut.result(timeout=30)
    except Exception as exc:
        print(f"cleanup: topics not deleted: {exc}")
