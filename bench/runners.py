"""Running one crawl as a child process and measuring it.

Every crawler runs as a child of the benchmark. Its CPU time comes from the kernel's
resource usage for that child and the children it waited for (``wait4``), its peak
memory from sampling the resident memory of its process tree (at least ``wait4``'s
``ru_maxrss``, which is one process's peak), its output size from the files
it wrote, and what it fetched from the web server's access log, so every tool is
measured the same way: pages per second over the whole run (start-up included), CPU
seconds per 1,000 pages, peak resident memory, bytes written, and the fetched URL set
against the expected one (missing, extra, fetched more than once). The access log also
gives the politeness each tool kept: the smallest gap between the end of one response
and the start of the next request to the same host.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.servers import LogLine, Nginx, cpu_sample, cpu_seconds

ROBOTS = "/robots.txt"


@dataclass(slots=True)
class Crawl:
    """What one tool needs to crawl the benchmark web."""

    name: str
    command: list[str]
    env: dict[str, str]
    out_dir: Path
    cwd: Path
    log_path: Path
    timeout: float
    report_file: Path | None = None
    """Cluster mode: the supervisor's report of its services' CPU and memory, which
    replaces the supervisor's own figures."""
    infra_pids: Callable[[], dict[str, int]] | None = None
    """Processes outside the crawl whose CPU over the run is recorded beside it
    (Kafka, Cassandra)."""


@dataclass(slots=True)
class RunResult:
    tool: str
    run: int
    exit_code: int | None
    timed_out: bool
    wall_seconds: float
    cpu_user_seconds: float
    cpu_system_seconds: float
    max_rss_bytes: int
    bytes_written: int
    pages: int
    unique_pages: int
    robots_requests: int
    missing: int
    extra: int
    refetched: int
    statuses: dict[str, int]
    min_gap_seconds: float | None
    p01_gap_seconds: float | None
    median_gap_seconds: float | None
    max_host_concurrency: int
    active_seconds: float | None
    """From the first request's start to the last response's end, at the server: the
    crawl without start-up and shut-down."""
    server_cpu_seconds: float
    infra_cpu_seconds: float | None
    loadavg_before: list[float]
    started_at: str
    missing_sample: list[str] = field(default_factory=list)
    extra_sample: list[str] = field(default_factory=list)
    notes: str = ""
    service_cpu: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    infra_cpu_by_server: dict[str, float] = field(default_factory=dict)
    start_seconds: float | None = None
    """Cluster mode: from spawning the services to every one answering /readyz. The
    crawl's wall time (``wall_seconds``) is then from the seed to the crawl seen done,
    as for a crawl seeded into running services; the child process's whole time,
    start-up, shut-down and the benchmark's keyspace and topic clean-up included, is
    ``process_wall_seconds``."""
    process_wall_seconds: float | None = None
    max_pss_bytes: int | None = None
    """The process tree's peak PSS (sampled with the RSS; not for cluster mode, whose
    services are measured by their own peaks): shared pages counted once."""
    max_processes: int | None = None
    """The most processes of the tree seen at once (sampled with the RSS): in embedded
    mode the main process and its parse workers, so it shows when the parse lane grew.
    Not for cluster mode (the tree sampled is the supervisor's)."""

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_user_seconds + self.cpu_system_seconds

    @property
    def pages_per_second(self) -> float:
        return self.pages / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def cpu_per_1000_pages(self) -> float:
        return 1000 * self.cpu_seconds / self.pages if self.pages else float("nan")

    @property
    def active_pages_per_second(self) -> float | None:
        return self.pages / self.active_seconds if self.active_seconds else None

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__slots__}
        d["active_pages_per_second"] = self.active_pages_per_second
        d["cpu_seconds"] = self.cpu_seconds
        d["pages_per_second"] = self.pages_per_second
        d["cpu_seconds_per_1000_pages"] = self.cpu_per_1000_pages
        return d



def tree_memory(pid: int) -> tuple[int, int, int]:
    """(RSS, PSS, processes) of ``pid`` and all its descendants now, in bytes ((0, 0, 0)
    once it is gone). RSS counts a page in every process that maps it (the shared
    libraries, a model file each worker maps); PSS splits it between them, so the
    tree's PSS is what the processes take from the machine together."""
    rss = pss = processes = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
            processes += 1
            for task in os.listdir(f"/proc/{p}/task"):
                children = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                todo.extend(int(c) for c in children)
    return rss, pss, processes


def wait_with_usage(proc: subprocess.Popen[bytes], deadline: float, *, grace: float,
                    poll: float, on_poll: Callable[[], None] | None = None
                    ) -> tuple[int, Any, bool]:
    """Wait for ``proc`` and collect its resource usage (``os.wait4``): (wait status,
    rusage, timed out). Past ``deadline`` it gets SIGINT, and SIGKILL ``grace`` seconds
    later. ``os.kill``, not ``Popen.send_signal``, which would reap the process before
    wait4 collects its usage. ``on_poll`` is called between polls (a sampler)."""
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            return status, rusage, False
        if on_poll is not None:
            on_poll()
        if time.monotonic() > deadline:
            break
        time.sleep(poll)
    os.kill(proc.pid, signal.SIGINT)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            return status, rusage, True
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    _, status, rusage = os.wait4(proc.pid, 0)
    return status, rusage, True

def folder_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def analyse_log(lines: Sequence[LogLine], port: int, expected: set[str]) -> dict[str, Any]:
    """Fetched set against the expected one, and the politeness kept per host."""
    pages = [x for x in lines if x.target != ROBOTS]
    robots = len(lines) - len(pages)
    urls = [f"http://{x.host}:{port}{x.target}" for x in pages]
    fetched = set(urls)
    missing = sorted(expected - fetched)
    extra = sorted(fetched - expected)
    statuses = Counter(str(x.status) for x in lines)
    by_host: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for x in pages:
        by_host[x.host].append((x.time - x.request_time, x.time))
    gaps: list[float] = []
    max_conc = 0
    for spans in by_host.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            gaps.append(start - end)
        # requests in flight at once (sweep over starts and ends)
        # (an end and a start at the same logged millisecond do not overlap)
        events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
        cur = 0
        max_conc = max(max_conc, 1)
        for _, delta in events:
            cur += delta
            max_conc = max(max_conc, cur)
    gaps.sort()
    active = (max(x.time for x in lines) - min(x.time - x.request_time for x in lines)
              if lines else None)
    return {
        "active_seconds": active,
        "pages": len(pages), "unique_pages": len(fetched), "robots_requests": robots,
        "missing": len(missing), "extra": len(extra),
        "refetched": len(pages) - len(fetched), "statuses": dict(statuses),
        "missing_sample": missing[:5], "extra_sample": extra[:5],
        "min_gap_seconds": gaps[0] if gaps else None,
        "p01_gap_seconds": gaps[len(gaps) // 100] if gaps else None,
        "median_gap_seconds": statistics.median(gaps) if gaps else None,
        "max_host_concurrency": max_conc,
    }


def run_crawl(crawl: Crawl, run: int, nginx: Nginx, expected: set[str],
              log: Callable[[str], None]) -> RunResult:
    """Run one crawl to its end (or its timeout) and measure it."""
    if crawl.out_dir.exists():
        shutil.rmtree(crawl.out_dir)
    crawl.out_dir.mkdir(parents=True)
    crawl.log_path.parent.mkdir(parents=True, exist_ok=True)
    load = loadavg()
    offset = nginx.log_offset()
    workers = nginx.worker_pids()
    server_cpu0 = sum(cpu_seconds(p) for p in workers)
    infra = crawl.infra_pids() if crawl.infra_pids else {}
    infra0 = {p: cpu_sample(p) for p in infra.values()}
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    started = time.monotonic()
    with crawl.log_path.open("wb") as out:
        proc = subprocess.Popen(crawl.command, cwd=crawl.cwd, env=crawl.env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        tree_peak = pss_peak = processes_peak = 0

        def sample() -> None:  # ru_maxrss is one process's peak; this sums the tree's
            nonlocal tree_peak, pss_peak, processes_peak
            rss_now, pss_now, processes_now = tree_memory(proc.pid)
            tree_peak = max(tree_peak, rss_now)
            pss_peak = max(pss_peak, pss_now)
            processes_peak = max(processes_peak, processes_now)

        status, rusage, timed_out = wait_with_usage(proc, started + crawl.timeout,
                                                    grace=30.0, poll=0.05, on_poll=sample)
        if timed_out:
            log(f"    {crawl.name} run {run}: timed out after {crawl.timeout:.0f} s; "
                "stopped it")
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    time.sleep(0.2)  # the access log line of the last response
    server_cpu = sum(cpu_seconds(p) for p in workers) - server_cpu0
    infra_cpu: float | None = None
    infra_by_server: dict[str, float] = {}
    if infra:
        infra1 = {p: cpu_sample(p) for p in infra.values()}
        if all(infra0[p][0] and infra0[p][0] == infra1[p][0] for p in infra.values()):
            infra_by_server = {name: infra1[p][1] - infra0[p][1] for name, p in infra.items()}
            infra_cpu = sum(infra_by_server.values())
        else:  # a server stopped or restarted during the run
            infra_cpu = None
    facts = analyse_log(nginx.log_since(offset), nginx.port, expected)
    assert rusage is not None
    user, system = rusage.ru_utime, rusage.ru_stime
    rss = max(rusage.ru_maxrss * 1024, tree_peak)
    notes = ""
    service_cpu: dict[str, float] = {}
    counters: dict[str, float] = {}
    start_seconds: float | None = None
    process_wall: float | None = None
    if crawl.report_file is not None:
        try:
            report = json.loads(crawl.report_file.read_text())
        except (OSError, ValueError) as exc:
            notes = f"no supervisor report: {exc}"
        else:
            services = report.get("services", {})
            user = sum(float(u["cpu_user"]) for u in services.values())
            system = sum(float(u["cpu_system"]) for u in services.values())
            rss = sum(int(u["max_rss_bytes"]) for u in services.values() if u is not None)
            pss_peak = processes_peak = 0  # the tree sampled is the supervisor's
            service_cpu = {name: float(u["cpu_user"]) + float(u["cpu_system"])
                           for name, u in services.items() if u is not None}
            for per_service in (report.get("counters") or {}).values():
                for key, value in per_service.items():
                    counters[key] = counters.get(key, 0.0) + float(value)
            notes = "; ".join([*(report.get("cleanup") or []),
                               *([report["error"]] if report.get("error") else [])])
            if report.get("crawl_seconds") is not None:
                process_wall = wall
                wall = float(report["crawl_seconds"])
                start_seconds = float(report.get("start_seconds") or 0.0)
            during = report.get("infra_cpu_during_crawl")
            if during:  # the servers' CPU from the seed to the crawl done, not the
                # keyspace and topics the benchmark makes and drops around it
                infra_by_server = {k: float(v) for k, v in during.items()}
                infra_cpu = sum(infra_by_server.values())
    return RunResult(
        tool=crawl.name, run=run, exit_code=proc.returncode, timed_out=timed_out,
        wall_seconds=wall, cpu_user_seconds=user, cpu_system_seconds=system,
        max_rss_bytes=rss, max_pss_bytes=pss_peak or None,
        max_processes=processes_peak or None,
        bytes_written=folder_bytes(crawl.out_dir),
        server_cpu_seconds=server_cpu, infra_cpu_seconds=infra_cpu,
        loadavg_before=load, started_at=started_at, notes=notes, service_cpu=service_cpu,
        counters=counters, infra_cpu_by_server=infra_by_server,
        start_seconds=start_seconds, process_wall_seconds=process_wall, **facts)


def summarize(results: Sequence[RunResult]) -> dict[str, Any]:
    """Median and spread (min, max) of each figure over the completed runs of one tool
    (exit code 0, not timed out); failed runs are counted, and listed in the runs."""
    keys = ["pages_per_second", "cpu_seconds_per_1000_pages", "max_rss_bytes", "max_pss_bytes",
            "bytes_written", "wall_seconds", "pages", "missing", "extra", "refetched",
            "cpu_seconds", "min_gap_seconds", "server_cpu_seconds", "active_seconds",
            "active_pages_per_second", "start_seconds", "process_wall_seconds",
            "max_processes"]
    completed = [r for r in results if r.exit_code == 0 and not r.timed_out]
    out: dict[str, Any] = {"runs": len(results), "completed": len(completed),
                           "failed": len(results) - len(completed)}
    rows = [r.as_dict() for r in completed]
    for k in keys:
        values = [row[k] for row in rows if row[k] is not None]
        if not values:
            out[k] = None
            continue
        out[k] = {"median": statistics.median(values), "min": min(values),
                  "max": max(values)}
    out["all_ok"] = len(completed) == len(results)
    return out


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False, default=str))
    tmp.replace(path)
