"""One cluster-mode crawl: ``python -m bench.cluster_child CONFIG.json``.

Starts one process per service (``python -m crawler frontier`` and ``fetcher``, which parses and
judges pages itself; also ``parser`` and ``dedup`` when
``CRAWLER_FETCHER_PARSE_INLINE=false``) on the local Kafka and Cassandra with a topic
prefix and keyspace of its own, waits until every service answers ``/readyz`` (the
start-up, timed on its own), seeds the crawl (``crawler seed``), waits until nothing
is queued, in flight or awaiting parse (read from Cassandra, several polls in a row),
stops the services with SIGTERM and waits for each. It writes ``report.json`` into
``meta_dir``: CPU and peak memory of every service process (from ``wait4``, start-up
and shut-down included), its own CPU, which the benchmark leaves out, the start-up
time, the crawl time (from the seed to the first of the quiet polls) and the CPU the
Kafka and Cassandra servers spent in that time (``infra_pids`` of the config). Finally
the keyspace and topics of the run are dropped: that is the benchmark's housekeeping,
outside every figure.

Settings come from the CRAWLER_* environment (the same as the embedded runs) plus the
config's ``env`` (backends, topics, keyspace).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.servers import cpu_sample
from common.settings import Settings
from frontier.stats import collect

SERVICES = ("frontier", "fetcher", "parser", "dedup")
INLINE_SERVICES = ("frontier", "fetcher")  # the fetcher parses and judges (parse_inline)

COUNTED = ("crawler_bus_messages_published_total", "crawler_bus_messages_consumed_total",
           "crawler_store_statements_sent_total", "crawler_store_batch_rows_total",
           "crawler_store_request_duration_seconds_count")
"""The services' own counters the report reads: Kafka messages by topic, Cassandra
statements by kind, store calls by operation."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """The :data:`COUNTED` samples of one service's /metrics, as ``name{labels}``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in COUNTED:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}"] = float(sample.value)
    return out


def wait_ready(procs: dict[str, subprocess.Popen[bytes]], ports: dict[str, int], *,
               limit: float) -> None:
    """Wait until every service answers ``GET /readyz`` with 200 (connected to the bus
    and the store), as a deployed cluster is before a crawl is seeded into it."""
    deadline = time.monotonic() + limit
    waiting = set(procs)
    while waiting:
        gone = exited(procs)
        if gone:
            raise RuntimeError(f"service {gone} exited while starting")
        for name in sorted(waiting):
            with contextlib.suppress(OSError, ValueError):
                url = f"http://127.0.0.1:{ports[name]}/readyz"
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        waiting.discard(name)
        if waiting and time.monotonic() > deadline:
            raise TimeoutError(f"not ready after {limit:.0f} s: {', '.join(sorted(waiting))}")
        if waiting:
            time.sleep(0.05)


def exited(procs: dict[str, subprocess.Popen[bytes]]) -> str | None:
    """The name of a service that ended, looking without reaping it (WNOWAIT), so
    ``wait4`` can still collect its resource usage."""
    for name, proc in procs.items():
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is not None and info.si_pid == proc.pid:
            return name
    return None


async def wait_done(settings: Settings, procs: dict[str, subprocess.Popen[bytes]],
                    limit: float, quiet_polls: int = 3,
                    poll: float = 0.5) -> tuple[Any, float]:
    """Poll the crawl's figures (one store connection for every poll) until nothing
    is queued, in flight or awaiting parse ``quiet_polls`` times in a row; the last
    figures and the monotonic time of the first poll of that quiet run (when the crawl
    was seen to be done)."""
    from common.runtime import make_store

    store = make_store(settings)
    await store.open()
    try:
        return await _wait_done(store, procs, limit, quiet_polls, poll)
    finally:
        await store.close()


async def _wait_done(store: Any, procs: dict[str, subprocess.Popen[bytes]], limit: float,
                     quiet_polls: int, poll: float) -> tuple[Any, float]:
    deadline = time.monotonic() + limit
    quiet = 0
    stats = None
    idle_since = 0.0
    while time.monotonic() < deadline:
        await asyncio.sleep(poll)
        polled = time.monotonic()
        gone = exited(procs)
        if gone:
            raise RuntimeError(f"service {gone} exited")
        stats = await collect(store)
        print(f"{limit - (deadline - time.monotonic()):7.1f} s  known {stats.known_urls} "
              f"fetched {stats.fetched} queued {stats.queued} in flight {stats.in_flight} "
              f"awaiting parse {stats.awaiting_parse}", flush=True)
        idle = (stats.known_urls > 0 and stats.queued == 0 and stats.in_flight == 0
                and stats.awaiting_parse == 0)
        quiet = quiet + 1 if idle else 0
        if quiet == 1:
            idle_since = polled
        if quiet >= quiet_polls:
            return stats, idle_since
    raise TimeoutError(f"the cluster crawl did not finish in {limit:.0f} s: {stats}")


def cleanup(settings: Settings) -> list[str]:
    notes = []
    try:
        from cassandra.cluster import Cluster

        cc = Cluster(list(settings.store.cassandra_hosts), port=settings.store.cassandra_port)
        session = cc.connect()
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.store.keyspace}", timeout=120)
        cc.shutdown()
    except Exception as exc:
        notes.append(f"keyspace not dropped: {exc}")
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": settings.bus.kafka_bootstrap})
        prefix = settings.bus.topic_prefix + "."
        topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
        if topics:
            for fut in admin.delete_topics(topics).values():
                fut.result(timeout=60)
    except Exception as exc:
        notes.append(f"topics not deleted: {exc}")
    return notes


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[0]).read_text())
    meta = Path(cfg["meta_dir"])
    logs = meta / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **cfg["env"]}
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CRAWLER_")})
    procs: dict[str, subprocess.Popen[bytes]] = {}
    usage: dict[str, dict[str, float]] = {}
    counters: dict[str, dict[str, float]] = {}
    services = INLINE_SERVICES if settings.fetcher.parse_inline else SERVICES
    ports = {name: free_port() for name in services}
    report: dict[str, Any] = {"services": usage, "counters": counters}
    files = []

    def reap(name: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            while True:
                pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid == proc.pid:
                    break
                if time.monotonic() > deadline:
                    os.kill(proc.pid, signal.SIGKILL)
                    pid, status, ru = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.05)
        except ChildProcessError:  # already collected elsewhere: no usage to report
            usage[name] = {"cpu_user": 0.0, "cpu_system": 0.0, "max_rss_bytes": 0,
                           "exit_code": proc.returncode if proc.returncode is not None
                           else -1}
            return
        proc.returncode = os.waitstatus_to_exitcode(status)
        usage[name] = {"cpu_user": ru.ru_utime, "cpu_system": ru.ru_stime,
                       "max_rss_bytes": ru.ru_maxrss * 1024,
                       "exit_code": proc.returncode}

    code = 0
    try:
        for name in services:
            f = (logs / f"{name}.log").open("wb")
            files.append(f)
            procs[name] = subprocess.Popen([sys.executable, "-m", "crawler", name],
                                           env={**env, "CRAWLER_METRICS_PORT": str(ports[name])},
                                           stdout=f,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        spawned = time.monotonic()
        wait_ready(procs, ports, limit=120.0)
        report["start_seconds"] = time.monotonic() - spawned
        seeds = [s for s in Path(cfg["seeds_file"]).read_text().splitlines() if s.strip()]
        infra = {name: int(pid) for name, pid in (cfg.get("infra_pids") or {}).items()}
        infra0 = {name: cpu_sample(pid) for name, pid in infra.items()}
        started = time.monotonic()
        seed = subprocess.Popen([sys.executable, "-m", "crawler.cli", "seed", *seeds], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        reap("seed", seed, 300)
        stats, done_at = asyncio.run(wait_done(settings, procs,
                                               float(cfg.get("timeout", 3600))))
        report["crawl_seconds"] = done_at - started
        infra1 = {name: cpu_sample(pid) for name, pid in infra.items()}
        if infra and all(infra0[n][0] and infra0[n][0] == infra1[n][0] for n in infra):
            report["infra_cpu_during_crawl"] = {n: infra1[n][1] - infra0[n][1]
                                                for n in infra}
        report["stats"] = {"fetched": stats.fetched, "known_urls": stats.known_urls,
                           "exact_duplicates": stats.exact_duplicates,
                           "robots_blocked": stats.robots_blocked}
    except Exception as exc:
        report["error"] = str(exc)
        code = 1
    finally:
        for name in procs:
            try:
                counters[name] = scrape(ports[name])
            except (OSError, ValueError) as exc:
                report.setdefault("counter_errors", []).append(f"{name}: {exc}")
        for name, proc in procs.items():
            # os.kill, not Popen.send_signal: that polls, and polling reaps the
            # process before wait4 can collect its resource usage
            if name not in usage and exited({name: proc}) is None:
                os.kill(proc.pid, signal.SIGTERM)
        for name, proc in procs.items():
            reap(name, proc, 60)
        for f in files:
            f.close()
        report["cleanup"] = cleanup(settings)
        me = resource.getrusage(resource.RUSAGE_SELF)
        report["supervisor"] = {"cpu_user": me.ru_utime, "cpu_system": me.ru_stime}
        (meta / "report.json").write_text(json.dumps(report))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
