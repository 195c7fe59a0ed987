"""The benchmark: ``python -m bench [--quick | --full] [options]`` (or ``bench/run``).

One invocation prepares everything it needs (nginx and wrk from the distribution's
packages, Scrapy and py-spy in virtual environments of their own under var/bench/),
generates the web, measures the web server alone, runs every crawler alternating and
repeated, measures how the embedded crawler's cost grows with the number of known
URLs, measures the seen filter, profiles an embedded crawl and a cluster crawl, and
writes the raw numbers to bench/results/<name>.json and the report to
docs/benchmarks.md. Only the default
and full presets, unchanged, write docs/benchmarks.md; a ``--quick`` run or one with
other sizes, tools or steps writes var/bench/report-<name>.md and its own results
file, so a smoke run never replaces the committed report.

All traffic stays on 127.0.0.1: nginx, the DNS responder and the crawlers bind or
connect to loopback only, and the crawler's SSRF guard is opened for 127.0.0.1/32 alone.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import report
from bench.realweb import RealWeb, ensure_real_web
from bench.runners import Crawl, RunResult, loadavg, run_crawl, summarize, write_json
from bench.servers import (
    BenchError,
    DnsServer,
    Nginx,
    apt_install,
    port_free,
    server_ceiling,
)
from bench.web import Web, WebSpec, ensure_web

REPO = Path(__file__).resolve().parents[1]
VAR = REPO / "var" / "bench"
RESULTS = REPO / "bench" / "results"
REPORT = REPO / "docs" / "benchmarks.md"
SCRAPY_REQUIREMENT = "scrapy>=2.13,<3"
PYSPY_REQUIREMENT = "py-spy>=0.4,<0.5"
TOOLS = ("embedded", "cluster", "scrapy")
STEPS = ("ceiling", "compare", "scaling", "profile", "cluster-profile", "seen")
WEBS = ("generated", "real", "both")


@dataclass(slots=True)
class Config:
    preset: str = "default"
    hosts: int = 1000
    pages_per_host: int = 10
    links_per_page: int = 40
    words: int = 500
    seed: int = 1
    delay: float = 0.25
    concurrency: int = 64
    max_depth: int = 16
    runs: int = 3
    warmup: int = 1
    """Unmeasured runs of each tool before the measured ones, on each web compared."""
    server_warmup: int = 3
    """More unmeasured cluster runs, once, when the benchmark started Kafka and
    Cassandra itself: a JVM just started spends 2-3x its settled CPU per request while
    it compiles its hot code, which a running cluster's servers did long ago."""
    port: int = 18080
    tools: list[str] = field(default_factory=lambda: ["embedded", "scrapy", "cluster"])
    steps: list[str] = field(default_factory=lambda: list(STEPS))
    scale_sizes: list[int] = field(default_factory=lambda: [10_000, 100_000, 1_000_000])
    scale_budget: int = 2000
    scale_runs: int = 3
    """Runs of each known-URL size, in rounds over the sizes; the report gives each
    size's median (one crawl of 1,500 pages per size spread 0.92x to 1.24x in its
    largest-to-smallest ratio on the test machine, wider than the goal's 15%)."""
    filler_hosts: int = 1000
    profile_pages: int = 3000
    profile_rate: int = 100
    seen_sizes: list[int] = field(default_factory=lambda: [100_000, 1_000_000, 10_000_000])
    seen_probes: int = 200_000
    ceiling_seconds: float = 8.0
    cluster_partitions: int = 4
    scrapy_jobdir: bool = False
    report_path: str = ""
    name: str = ""
    render: str = ""
    web: str = "both"
    """The webs the crawlers are compared on: the generated one, the real-HTML one
    (Debian's documentation packages, bench/realweb.py) or both."""
    real_quick: bool = False
    """The real web's small subset (the --quick preset)."""
    one_host_sites: list[str] = field(
        default_factory=lambda: ["pgdoc.test", "pydoc.test", "djangodoc.test"])
    one_host_depth: int = 3
    real_profile_pages: int = 3000
    """Results file name: the preset's, or preset-HOSTSxPAGES[-partial] when sizes,
    tools or steps were changed, so such a run never replaces the preset's results."""


PRESETS: dict[str, dict[str, Any]] = {
    "quick": {"hosts": 60, "pages_per_host": 10, "runs": 3,
              "scale_sizes": [1_000, 10_000, 50_000], "scale_budget": 300, "scale_runs": 1,
              "filler_hosts": 100, "profile_pages": 600,
              "seen_sizes": [100_000, 1_000_000], "seen_probes": 100_000,
              "ceiling_seconds": 4.0, "real_quick": True,
              "one_host_sites": ["eximdoc.test", "zshdoc.test"], "one_host_depth": 3,
              "real_profile_pages": 300},
    "default": {"hosts": 300, "pages_per_host": 10, "scale_budget": 1500,
                "profile_pages": 3000},
    # the cluster profile would be one more cluster crawl of 100,000 pages: not in full
    "full": {"hosts": 1000, "pages_per_host": 100, "scale_budget": 5000,
             "profile_pages": 10_000,
             "steps": [s for s in STEPS if s != "cluster-profile"]},
}


def parse_args(argv: list[str] | None) -> Config:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark the crawler against Scrapy on a generated web served by "
                    "nginx on loopback, and write docs/benchmarks.md.")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="smoke run: 60 hosts x 10 pages, small scaling sizes (a few minutes)")
    size.add_argument("--full", action="store_true",
                      help="the issue's full size: 1,000 hosts x 100 pages (several hours "
                           "on two cores, most of it in cluster mode)")
    p.add_argument("--hosts", type=int, help="hosts in the web")
    p.add_argument("--pages", type=int, dest="pages_per_host", help="pages per host")
    p.add_argument("--links", type=int, dest="links_per_page", help="links per page")
    p.add_argument("--words", type=int, help="words of text per page")
    p.add_argument("--runs", type=int, help="runs per crawler (at least 3 for a report)")
    p.add_argument("--warmup", type=int,
                   help="unmeasured runs per crawler before the measured ones (default 1)")
    p.add_argument("--server-warmup", type=int,
                   help="more unmeasured cluster runs when the benchmark started Kafka and "
                        "Cassandra itself (default 3)")
    p.add_argument("--delay", type=float, help="per-host delay in seconds, for every crawler")
    p.add_argument("--concurrency", type=int, help="requests in flight, for every crawler")
    p.add_argument("--port", type=int, help="nginx port on 127.0.0.1 (default 18080)")
    p.add_argument("--tools", help=f"comma-separated subset of {','.join(TOOLS)}")
    p.add_argument("--steps", help=f"comma-separated subset of {','.join(STEPS)}")
    p.add_argument("--scale-sizes", help="known-URL counts, comma-separated")
    p.add_argument("--scale-budget", type=int, help="pages crawled at each scaling size")
    p.add_argument("--scale-runs", type=int,
                   help="runs of each scaling size (the report gives their median)")
    p.add_argument("--profile-pages", type=int, help="pages crawled under the profiler")
    p.add_argument("--seen-sizes", help="seen-filter sizes, comma-separated")
    p.add_argument("--web", choices=WEBS,
                   help="compare the crawlers on the generated web, the real-HTML web "
                        "(Debian documentation packages) or both (default: both)")
    p.add_argument("--one-host", dest="one_host_sites",
                   help="real-web hosts crawled one at a time, comma-separated "
                        "(empty: none)")
    p.add_argument("--one-host-depth", type=int, help="depth limit of the one-host crawls")
    p.add_argument("--scrapy-jobdir", action="store_true",
                   help="run Scrapy with JOBDIR (durable, resumable state, as the crawler)")
    p.add_argument("--report", dest="report_path", help="where to write the markdown report")
    p.add_argument("--render", metavar="RESULTS_JSON",
                   help="run nothing: write the report again from a results file (the "
                        "profile is folded again from its raw stacks when they are there)")
    a = p.parse_args(argv)
    preset = "quick" if a.quick else "full" if a.full else "default"
    cfg = Config(preset=preset, **PRESETS[preset])
    for name in ("hosts", "pages_per_host", "links_per_page", "words", "runs", "delay",
                 "concurrency", "port", "scale_budget", "scale_runs", "profile_pages",
                 "report_path",
                 "warmup", "server_warmup"):
        value = getattr(a, name)
        if value is not None:
            setattr(cfg, name, value)
    if a.tools:
        cfg.tools = [t.strip() for t in a.tools.split(",") if t.strip()]
        unknown = set(cfg.tools) - set(TOOLS)
        if unknown:
            p.error(f"unknown tools: {', '.join(sorted(unknown))}")
    if a.steps:
        cfg.steps = [s.strip() for s in a.steps.split(",") if s.strip()]
        unknown = set(cfg.steps) - set(STEPS)
        if unknown:
            p.error(f"unknown steps: {', '.join(sorted(unknown))}")
    if a.scale_sizes:
        cfg.scale_sizes = [int(float(x)) for x in a.scale_sizes.split(",")]
    if a.seen_sizes:
        cfg.seen_sizes = [int(float(x)) for x in a.seen_sizes.split(",")]
    cfg.scrapy_jobdir = a.scrapy_jobdir
    if a.web:
        cfg.web = a.web
    if a.one_host_sites is not None:
        cfg.one_host_sites = [h.strip() for h in a.one_host_sites.split(",") if h.strip()]
    if a.one_host_depth is not None:
        cfg.one_host_depth = a.one_host_depth
    cfg.render = a.render or ""
    changed = any(getattr(a, k) is not None
                  for k in ("hosts", "pages_per_host", "links_per_page", "words"))
    partial = bool(a.tools or a.steps or (a.web and a.web != "both"))
    cfg.name = cfg.preset
    if changed or partial:
        cfg.name = f"{cfg.preset}-{cfg.hosts}x{cfg.pages_per_host}" + ("-partial" if partial
                                                                        else "")
    if cfg.runs < 1 or cfg.hosts < 1 or cfg.pages_per_host < 2:
        p.error("runs and hosts must be at least 1, pages at least 2")
    if cfg.warmup < 0 or cfg.server_warmup < 0:
        p.error("warm-up runs cannot be negative")
    return cfg


class Bench:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.started = time.monotonic()
        self.python = sys.executable
        self.results: dict[str, Any] = {
            "preset": cfg.preset, "config": asdict(cfg),
            "command": " ".join(["bench/run", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
        self.nginx: Nginx | None = None
        self.dns: DnsServer | None = None
        self.web: Web | None = None
        self.real: RealWeb | None = None
        self.target = Target()
        self.started_servers = False
        self.servers_warm = False  # the cluster's warm-up runs have been done
        self.tools_info: dict[str, str] = {}

    # ------------------------------------------------------------------ helpers

    def log(self, msg: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.0f}s] {msg}", file=sys.stderr, flush=True)

    def crawler_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        assert self.dns is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
        env.update({
            "PYTHONPATH": str(REPO),
            "CRAWLER_FETCHER_DNS_SERVERS": self.dns.server,
            "CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.1/32",
            "CRAWLER_POLITENESS_DEFAULT_DELAY": f"{self.target.delay:g}",
            "CRAWLER_POLITENESS_MAX_IN_FLIGHT_PER_HOST": "1",
            "CRAWLER_FETCHER_CONCURRENCY": str(self.cfg.concurrency),
            "CRAWLER_TRAPS_MAX_DEPTH": str(self.target.max_depth),
        })
        env.update(self.target.env)
        env.update(extra or {})
        return env

    def seeds_file(self) -> Path:
        path = VAR / "seeds.txt"
        path.write_text("\n".join(self.target.seeds) + "\n")
        return path

    def use_generated(self) -> None:
        assert self.web is not None
        self.target = Target(seeds=list(self.web.seeds), expected=list(self.web.expected),
                             delay=self.cfg.delay, max_depth=self.cfg.max_depth)

    def use_real(self, seeds: list[str], expected: list[str], max_depth: int) -> None:
        """The real web: no delay, one request in flight per host (each tool sets its
        own pace), links kept to the seeds' hosts by both tools."""
        self.target = Target(seeds=seeds, expected=expected, delay=0.0, max_depth=max_depth,
                             env={"CRAWLER_POLITENESS_RESPONSE_TIME_FACTOR": "0",
                                  "CRAWLER_SCOPE_MODE": "seed-hosts"},
                             same_host=True)

    # ------------------------------------------------------------------ preparation

    def prepare(self) -> None:
        VAR.mkdir(parents=True, exist_ok=True)
        self.tools_info["nginx_binary"] = apt_install("nginx-light|nginx", "nginx", self.log)
        if "ceiling" in self.cfg.steps:
            try:
                self.tools_info["wrk_binary"] = apt_install("wrk", "wrk", self.log)
            except (BenchError, subprocess.CalledProcessError) as exc:
                self.log(f"wrk unavailable ({exc}); the server ceiling is skipped")
        if "scrapy" in self.cfg.tools:
            self.tools_info["scrapy"] = str(self.venv_tool("scrapy-venv", SCRAPY_REQUIREMENT,
                                                           "scrapy"))
        if "profile" in self.cfg.steps or "cluster-profile" in self.cfg.steps:
            try:
                self.tools_info["py-spy"] = str(self.venv_tool("tools-venv", PYSPY_REQUIREMENT,
                                                               "py-spy"))
            except subprocess.CalledProcessError as exc:
                self.log(f"py-spy unavailable ({exc}); the profile is skipped")

    def venv_tool(self, name: str, requirement: str, binary: str) -> Path:
        venv = VAR / name
        tool = venv / "bin" / binary
        if not tool.exists():
            self.log(f"installing {requirement} into {venv.relative_to(REPO)}")
            if not (venv / "bin" / "python").exists():
                subprocess.run([self.python, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                            requirement], check=True)
        return tool

    def machine(self) -> dict[str, Any]:
        info: dict[str, Any] = {"cores": os.cpu_count(), "kernel": platform.release(),
                                "python": platform.python_version()}
        with contextlib.suppress(OSError):
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with contextlib.suppress(OSError):
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal"):
                    info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
        with contextlib.suppress(OSError):
            for line in Path("/etc/os-release").read_text().splitlines():
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip('"')
        info["loadavg_at_start"] = Path("/proc/loadavg").read_text().split()[:3]
        busy = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
                name = Path(cmd[0].decode(errors="replace")).name if cmd and cmd[0] else ""
                if name == "java":
                    kind = ("Kafka" if any(b"kafka" in c.lower() for c in cmd)
                            else "Cassandra" if any(b"cassandra" in c.lower() for c in cmd)
                            else "a JVM")
                    busy.append(kind)
        info["other_servers_running"] = sorted(set(busy))
        versions: dict[str, str] = {}
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([self.tools_info["nginx_binary"], "-v"], capture_output=True,
                                 text=True)
            versions["nginx"] = out.stderr.strip().split("/")[-1]
        if "scrapy" in self.tools_info:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                out = subprocess.run([self.tools_info["scrapy"], "version"],
                                     capture_output=True, text=True)
                versions["scrapy"] = out.stdout.strip().split()[-1]
        if "py-spy" in self.tools_info:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                out = subprocess.run([self.tools_info["py-spy"], "--version"],
                                     capture_output=True, text=True)
                versions["py-spy"] = out.stdout.strip().split()[-1]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True)
            versions["crawler_commit"] = out.stdout.strip()
        info["versions"] = versions
        return info

    # ------------------------------------------------------------------ web and servers

    def start_servers(self) -> None:
        cfg = self.cfg
        port = cfg.port
        if not port_free(port):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            self.log(f"port {cfg.port} is taken; using {port} (the web is generated for it)")
        spec = WebSpec(hosts=cfg.hosts, pages_per_host=cfg.pages_per_host,
                       links_per_page=cfg.links_per_page, words=cfg.words, seed=cfg.seed,
                       port=port)
        self.web = ensure_web(spec, VAR, workers=max(1, os.cpu_count() or 1), log=self.log)
        self.results["web"] = self.web.summary()
        self.use_generated()
        root = self.web.root
        hosts = list(self.web.host_names)
        if cfg.web in ("real", "both"):
            self.real = ensure_real_web(VAR, port, quick=cfg.real_quick,
                                        max_depth=cfg.max_depth,
                                        workers=max(1, os.cpu_count() or 1), log=self.log)
            self.results.setdefault("real", {})["web"] = self.real.summary()
            # one root for both webs: a link per host
            root = VAR / "webroot"
            if root.exists():
                shutil.rmtree(root)
            root.mkdir(parents=True)
            for host in self.web.host_names:
                (root / host).symlink_to((self.web.root / host).resolve())
            for host in self.real.host_names:
                (root / host).symlink_to((self.real.root / host).resolve())
            hosts += self.real.host_names
        self.nginx = Nginx(self.tools_info["nginx_binary"], VAR / "nginx", root, port)
        self.nginx.start()
        names = VAR / "names.txt"
        names.write_text("".join(f"{h}\n" for h in hosts))
        self.dns = DnsServer(self.python, REPO, names)
        self.dns.start()
        self.log(f"nginx on 127.0.0.1:{port}, DNS responder on {self.dns.server}")

    def stop_servers(self) -> None:
        if self.nginx is not None:
            self.nginx.stop()
        if self.dns is not None:
            self.dns.stop()

    def ceiling(self) -> None:
        assert self.nginx is not None and self.web is not None
        wrk = self.tools_info.get("wrk_binary")
        politeness = self.cfg.hosts / self.cfg.delay
        self.results["politeness_ceiling_pages_per_second"] = politeness
        if not wrk:
            self.results["ceiling"] = None
            return
        targets = []
        for url in self.web.expected[: 20_000]:
            rest = url.split("//", 1)[1]
            hostport, _, path = rest.partition("/")
            targets.append((hostport.split(":")[0], "/" + path))
        self.log(f"server ceiling: wrk, {self.cfg.ceiling_seconds:g} s, 64 connections")
        result = server_ceiling(wrk, VAR / "wrk", self.nginx.port, targets,
                                seconds=self.cfg.ceiling_seconds)
        self.results["ceiling"] = result
        self.log(f"  nginx serves {result['requests_per_second']:.0f} requests/s; "
                 f"politeness allows {politeness:.0f} pages/s "
                 f"({self.cfg.hosts} hosts / {self.cfg.delay:g} s)")

    # ------------------------------------------------------------------ crawlers

    def embedded_crawl(self, run: int) -> Crawl:
        out = VAR / "runs" / f"embedded-{run}"
        return Crawl(name="embedded", cwd=REPO, out_dir=out,
                     log_path=VAR / "logs" / f"embedded-{run}.log",
                     command=[self.python, "-m", "crawler.cli", "crawl", "--no-progress",
                              "--out", str(out), *self.target.seeds],
                     env=self.crawler_env(), timeout=self.run_timeout())

    def scrapy_crawl(self, run: int) -> Crawl:
        assert self.dns is not None
        out = VAR / "runs" / f"scrapy-{run}"
        config = VAR / "runs" / f"scrapy-{run}.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({
            "out_dir": str(out), "seeds_file": str(self.seeds_file()),
            "dns_server": self.dns.server, "delay": self.target.delay,
            "concurrency": self.cfg.concurrency, "max_depth": self.target.max_depth,
            "jobdir": self.cfg.scrapy_jobdir, "same_host": self.target.same_host}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
        env.update({"BENCH_SCRAPY_CONFIG": str(config),
                    "PYTHONPATH": str(REPO / "bench" / "scrapyside")})
        return Crawl(name="scrapy", cwd=REPO, out_dir=out,
                     log_path=VAR / "logs" / f"scrapy-{run}.log",
                     command=[self.tools_info["scrapy"], "runspider",
                              str(REPO / "bench" / "scrapyside" / "scrapy_bench.py"),
                              "-s", "TWISTED_DNS_RESOLVER=scrapy_bench.BenchResolver",
                              "-s", f"BENCH_DNS_SERVER={self.dns.server}"],
                     env=env, timeout=self.run_timeout())

    def cluster_crawl(self, run: int) -> Crawl:
        out = VAR / "runs" / f"cluster-{run}"
        meta = VAR / "runs" / f"cluster-{run}-meta"
        if meta.exists():
            shutil.rmtree(meta)
        meta.mkdir(parents=True)
        tag = uuid.uuid4().hex[:10]
        kafka = os.environ.get("CRAWLER_BUS_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
        cass = os.environ.get("CRAWLER_STORE_CASSANDRA_HOSTS", "127.0.0.1")
        cass_port = os.environ.get("CRAWLER_STORE_CASSANDRA_PORT", "9042")
        env = {
            "CRAWLER_BUS_BACKEND": "kafka", "CRAWLER_BUS_KAFKA_BOOTSTRAP": kafka,
            "CRAWLER_BUS_TOPIC_PREFIX": f"bench{tag}", "CRAWLER_BUS_GROUP_PREFIX": f"bench{tag}",
            "CRAWLER_BUS_PARTITIONS": str(self.cfg.cluster_partitions),
            "CRAWLER_STORE_BACKEND": "cassandra", "CRAWLER_STORE_CASSANDRA_HOSTS": cass,
            "CRAWLER_STORE_CASSANDRA_PORT": cass_port,
            "CRAWLER_STORE_KEYSPACE": f"bench{tag}",
            "CRAWLER_STORE_WRITE_CONSISTENCY": "ONE", "CRAWLER_STORE_READ_CONSISTENCY": "ONE",
            "CRAWLER_BLOB_ROOT": str(out / "warc"), "CRAWLER_CRAWL_OUT_DIR": str(out),
        }
        config = meta / "config.json"
        config.write_text(json.dumps({"meta_dir": str(meta), "env": env,
                                      "seeds_file": str(self.seeds_file()),
                                      "infra_pids": infra_pids(),
                                      "timeout": self.run_timeout() - 60}))
        return Crawl(name="cluster", cwd=REPO, out_dir=out,
                     log_path=VAR / "logs" / f"cluster-{run}.log",
                     command=[self.python, "-m", "bench.cluster_child", str(config)],
                     env=self.crawler_env(env), timeout=self.run_timeout(),
                     report_file=meta / "report.json", infra_pids=infra_pids)

    def run_timeout(self) -> float:
        return max(600.0, len(self.target.expected) * 0.1)

    def cluster_ready(self) -> str | None:
        """None when cluster mode can run; else why not."""
        missing = [svc for svc in ("frontier", "fetcher", "parser", "dedup")
                   if not (REPO / "crawler" / "roles" / f"{svc}.py").exists()]
        if missing:
            return (f"no cluster role for {', '.join(missing)} "
                    "(python -m crawler <role>)")
        cli = (REPO / "crawler" / "cli.py").read_text()
        if '"seed"' not in cli:
            return "no `crawler seed` command to put seeds into a running cluster"
        probe = subprocess.run([self.python, "-c", "import cassandra.cluster, confluent_kafka"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            return "the cluster extras (cassandra-driver, confluent-kafka) are not installed"
        if not (_answers(os.environ.get("CRAWLER_BUS_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
                and _answers(os.environ.get("CRAWLER_STORE_CASSANDRA_HOSTS", "127.0.0.1")
                             + ":" + os.environ.get("CRAWLER_STORE_CASSANDRA_PORT", "9042"))):
            self.log("Kafka or Cassandra does not answer; starting them (scripts/servers)")
            done = subprocess.run([str(REPO / "scripts" / "servers"), "start",
                                   "kafka", "cassandra"],
                                  cwd=REPO)
            if done.returncode != 0:
                return "Kafka and Cassandra could not be started (scripts/servers start)"
            self.started_servers = True
        return None

    def compare(self) -> None:
        self.use_generated()
        self.results.update(self.compare_tools("generated web"))

    def compare_tools(self, label: str) -> dict[str, Any]:
        """Every tool on the current target, alternating: {"runs": [...], "summary": {}}."""
        assert self.nginx is not None
        tools = [t for t in self.cfg.tools if t != "cluster" or label == "generated web"]
        if "cluster" in tools:
            reason = self.cluster_ready()
            self.results["cluster"] = {"available": reason is None, "reason": reason,
                                       "started_servers": self.started_servers}
            if reason is not None:
                self.log(f"cluster mode not run: {reason}")
                tools.remove("cluster")
        makers = {"embedded": self.embedded_crawl, "scrapy": self.scrapy_crawl,
                  "cluster": self.cluster_crawl}
        expected = set(self.target.expected)
        runs: list[RunResult] = []
        out: dict[str, Any] = {"runs": [], "warmup_runs": self.warm_up(label, tools, makers)}
        for i in range(1, self.cfg.runs + 1):
            order = tools if i % 2 == 1 else list(reversed(tools))
            for tool in order:
                self.log(f"{label}, run {i}/{self.cfg.runs}: {tool}")
                result = run_crawl(makers[tool](i), i, self.nginx, expected, self.log)
                runs.append(result)
                out["runs"].append(result.as_dict())
                self.log(f"  {result.pages} pages in {result.wall_seconds:.1f} s = "
                         f"{result.pages_per_second:.1f}/s, "
                         f"{result.cpu_per_1000_pages:.2f} CPU s per 1000, "
                         f"{result.max_rss_bytes / 2**20:.0f} MiB peak, "
                         f"missing {result.missing}, extra {result.extra}, "
                         f"exit {result.exit_code}")
                shutil.rmtree(VAR / "runs" / f"{tool}-{i}", ignore_errors=True)
                self.checkpoint()
        out["summary"] = {t: summarize([r for r in runs if r.tool == t]) for t in tools}
        return out

    def warm_up(self, label: str, tools: list[str],
                makers: Mapping[str, Callable[[int], Crawl]]) -> list[dict[str, Any]]:
        """Unmeasured runs before the measured ones: ``warmup`` of each tool, and
        ``server_warmup`` more of the cluster the first time when this benchmark started
        Kafka and Cassandra. What each run measured is kept (``warmup_runs``) but
        counts in no figure."""
        assert self.nginx is not None
        expected = set(self.target.expected)
        plan = [t for _ in range(self.cfg.warmup) for t in tools]
        if "cluster" in tools and self.started_servers and not self.servers_warm:
            plan += ["cluster"] * self.cfg.server_warmup
        if "cluster" in plan:
            self.servers_warm = True
        kept: list[dict[str, Any]] = []
        for n, tool in enumerate(plan, 1):
            self.log(f"{label}, warm-up {n}/{len(plan)}: {tool} (not counted)")
            result = run_crawl(makers[tool](0), 0, self.nginx, expected, self.log)
            self.log(f"  {result.pages} pages in {result.wall_seconds:.1f} s = "
                     f"{result.pages_per_second:.1f}/s, "
                     f"{result.cpu_per_1000_pages:.2f} CPU s per 1000"
                     + (f", servers {result.infra_cpu_seconds:.2f} CPU s"
                        if result.infra_cpu_seconds else ""))
            kept.append({"tool": tool, "pages": result.pages,
                         "pages_per_second": result.pages_per_second,
                         "cpu_seconds_per_1000_pages": result.cpu_per_1000_pages,
                         "infra_cpu_by_server": result.infra_cpu_by_server})
            shutil.rmtree(VAR / "runs" / f"{tool}-0", ignore_errors=True)
        return kept

    def compare_real(self) -> None:
        """The real web: every host at once (throughput), then one host at a time,
        depth-limited (the per-page latency is the pace)."""
        assert self.real is not None
        real = self.results.setdefault("real", {})
        self.use_real(list(self.real.seeds), list(self.real.expected), self.cfg.max_depth)
        real["many_hosts"] = self.compare_tools("real web, every host")
        self.checkpoint()
        one: dict[str, Any] = {}
        real["one_host"] = one
        for host in self.cfg.one_host_sites:
            if host not in self.real.host_names:
                self.log(f"one host: {host} is not in the real web; skipped")
                continue
            seed, expected = self.real.one_host(host, self.cfg.one_host_depth)
            self.use_real([seed], expected, self.cfg.one_host_depth)
            found = self.compare_tools(f"real web, {host} alone")
            found.update({"depth": self.cfg.one_host_depth, "expected_fetches": len(expected),
                          "seed": seed})
            one[host] = found
            self.checkpoint()

    # ------------------------------------------------------------------ scaling

    def scaling(self) -> None:
        assert self.web is not None
        self.use_generated()
        budget = min(self.cfg.scale_budget, max(10, len(self.web.expected) // 2))
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in self.cfg.scale_sizes}
        rounds = max(1, self.cfg.scale_runs)
        self.results["scaling"] = []
        for round_ in range(1, rounds + 1):
            for n in self.cfg.scale_sizes:
                if runs[n] and "error" in runs[n][-1]:
                    continue  # a size that failed once is not run again
                label = f" (run {round_}/{rounds})" if rounds > 1 else ""
                self.log(f"scaling: {n} known URLs, then {budget} pages{label}")
                row = self._scale_run(n, budget)
                runs[n].append(row)
                if "error" in row:
                    self.log(f"  failed: {row['error']}")
                else:
                    self.log(f"  seeding {row['seeding_urls_per_second']:.0f} URLs/s; "
                             f"{row['ms_per_page']:.1f} ms and {row['cpu_ms_per_page']:.1f} "
                             f"CPU ms per page; RSS {row['rss_seeded_bytes'] / 2**20:.0f} MiB "
                             "after seeding")
                self.results["scaling"] = [report.scaling_row(r) for r in runs.values() if r]
                self.checkpoint()

    def _scale_run(self, n: int, budget: int) -> dict[str, Any]:
        """One scaling child: ``n`` known URLs, then ``budget`` pages crawled."""
        out = VAR / "scale" / f"known-{n}"
        if out.exists():
            shutil.rmtree(out)
        config = VAR / "scale" / f"known-{n}.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({"out_dir": str(out), "known": n,
                                      "filler_hosts": self.cfg.filler_hosts,
                                      "budget": budget,
                                      "seeds_file": str(self.seeds_file())}))
        load = loadavg()
        done = subprocess.run([self.python, "-m", "bench.scale_child", str(config)],
                              cwd=REPO, env=self.crawler_env(), capture_output=True,
                              text=True, timeout=3600)
        try:
            if done.returncode != 0:
                return {"known_filler": n, "error": done.stderr[-2000:]}
            row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
            row["bytes_on_disk"] = _folder_size(out)
            row["loadavg_before"] = load
            return row
        finally:
            shutil.rmtree(out, ignore_errors=True)

    # ------------------------------------------------------------------ profile

    def profile(self) -> None:
        self.use_generated()
        self.results["profile"] = self.profile_target(self.cfg.profile_pages, "profile")

    def profile_real(self) -> None:
        assert self.real is not None
        self.use_real(list(self.real.seeds), list(self.real.expected), self.cfg.max_depth)
        self.results.setdefault("real", {})["profile"] = self.profile_target(
            self.cfg.real_profile_pages, "profile-real")

    def profile_target(self, max_pages: int, name: str) -> dict[str, Any] | None:
        spy = self.tools_info.get("py-spy")
        if not spy:
            return None
        from bench.cpu_profile import summarize_file

        out = VAR / f"{name}-out"
        if out.exists():
            shutil.rmtree(out)
        raw = VAR / f"{name}.txt"
        pages = min(max_pages, len(self.target.expected))
        self.log(f"profile: embedded crawl of {pages} pages under py-spy "
                 f"({self.cfg.profile_rate} Hz, every thread and process)")
        cmd = [spy, "record", "--subprocesses", "--rate", str(self.cfg.profile_rate),
               "--format", "raw",
               "--output", str(raw), "--", self.python, "-m", "crawler.cli", "crawl",
               "--no-progress", "--max-pages", str(pages), "--out", str(out),
               *self.target.seeds]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env=self.crawler_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        if proc.returncode != 0 or not raw.exists():
            err = proc.stderr.read().decode(errors="replace")[-1500:] if proc.stderr else ""
            self.log(f"  py-spy failed ({proc.returncode}): {err}")
            return {"error": err}
        if proc.stderr:
            proc.stderr.close()
        summary = summarize_file(raw, self.cfg.profile_rate)
        summary.update({"pages": pages, "wall_seconds": wall,
                        "process_cpu_seconds": ru.ru_utime + ru.ru_stime,
                        "raw_file": str(raw.relative_to(REPO)),
                        "raw_sha256": file_digest(raw)})
        shutil.rmtree(out, ignore_errors=True)
        top = ", ".join(f"{r['name'].split(' (')[0]} {100 * r['share']:.0f}%"
                        for r in summary["components"][:4])
        self.log(f"  {summary['cpu_seconds']:.1f} CPU s sampled: {top}")
        return summary

    def cluster_profile(self) -> None:
        """A cluster crawl of the generated web under py-spy: the command line and
        environment of the cluster runs, every process of the run sampled (the services,
        the seeding command, the benchmark's supervisor, which is left out)."""
        spy = self.tools_info.get("py-spy")
        if not spy or self.nginx is None:
            return
        from bench.cpu_profile import summarize_cluster_file

        reason = self.cluster_ready()
        if reason is not None:
            self.log(f"cluster profile not run: {reason}")
            self.results["cluster_profile"] = {"error": f"cluster mode not run: {reason}"}
            return
        self.use_generated()
        raw = VAR / "cluster-profile.txt"
        raw.unlink(missing_ok=True)
        crawl = self.cluster_crawl(0)
        crawl.name = "cluster-profile"
        # --gil: a sample per process only from the thread that holds the GIL. Without
        # it the services' many blocked threads (the driver's and Kafka's, page work,
        # threads waiting for the GIL) are taken for running in a share of the samples,
        # which came to several times the kernel's CPU count.
        crawl.command = [spy, "record", "--subprocesses", "--gil", "--rate",
                         str(self.cfg.profile_rate), "--format", "raw", "--output", str(raw),
                         "--", *crawl.command]
        self.log(f"cluster profile: cluster crawl of the generated web "
                 f"({len(self.target.expected):,} fetches) under py-spy "
                 f"({self.cfg.profile_rate} Hz, every process)")
        result = run_crawl(crawl, 0, self.nginx, set(self.target.expected), self.log)
        shutil.rmtree(crawl.out_dir, ignore_errors=True)
        if result.exit_code != 0 or result.timed_out or not raw.exists():
            log = crawl.log_path.read_text(errors="replace")[-1500:]
            self.log(f"  failed (exit {result.exit_code}): {log}")
            self.results["cluster_profile"] = {"error": log or result.notes}
            return
        summary = summarize_cluster_file(raw, self.cfg.profile_rate)
        # pages: the crawl's own count (the services' store), which another server
        # sharing the port cannot change; the server's count is kept beside it
        fetched = result.pages
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            assert crawl.report_file is not None
            fetched = int(json.loads(crawl.report_file.read_text())["stats"]["fetched"])
        summary.update({"pages": fetched, "server_pages": result.pages,
                        "wall_seconds": result.wall_seconds,
                        "service_cpu": result.service_cpu, "missing": result.missing,
                        "raw_file": str(raw.relative_to(REPO)),
                        "raw_sha256": file_digest(raw)})
        self.results["cluster_profile"] = summary
        top = ", ".join(f"{r['name'].split(' (')[0]} {100 * r['share']:.0f}%"
                        for r in summary["components"][:4])
        self.log(f"  {fetched} pages ({result.pages} at the server, {result.missing} "
                 f"expected not seen there), {summary['cpu_seconds']:.1f} CPU s sampled: {top}")

    # ------------------------------------------------------------------ seen filter

    def seen(self) -> None:
        from bench.seen import table

        self.log(f"seen filter: {', '.join(f'{n:,}' for n in self.cfg.seen_sizes)} URLs")
        self.results["seen_filter"] = table(self.cfg.seen_sizes, self.cfg.seen_probes)

    # ------------------------------------------------------------------ the whole run

    def checkpoint(self) -> None:
        write_json(RESULTS / f"{self.cfg.name}.json", self.results)

    def run(self) -> int:
        try:
            self.prepare()
            self.results["machine"] = self.machine()
            self.start_servers()
            steps = self.cfg.steps
            if "ceiling" in steps:
                self.ceiling()
            else:
                self.results["politeness_ceiling_pages_per_second"] = (
                    self.cfg.hosts / self.cfg.delay)
            if "compare" in steps and self.cfg.web in ("generated", "both"):
                self.compare()
            if "compare" in steps and self.real is not None:
                self.compare_real()
            if "scaling" in steps:
                self.scaling()
            if "profile" in steps and self.cfg.web in ("generated", "both"):
                self.profile()
            if "profile" in steps and self.real is not None:
                self.profile_real()
            if "cluster-profile" in steps and "cluster" not in self.cfg.tools:
                self.log("cluster profile not run: cluster is not among --tools")
            elif "cluster-profile" in steps:
                self.cluster_profile()
                self.checkpoint()
            if "seen" in steps:
                self.seen()
        except BenchError as exc:
            self.log(f"bench: {exc}")
            return 1
        finally:
            self.stop_servers()
            if self.started_servers:
                subprocess.run([str(REPO / "scripts" / "servers"), "stop", "kafka",
                                "cassandra"], cwd=REPO)
        self.results["wall_seconds"] = time.monotonic() - self.started
        self.checkpoint()
        if self.cfg.report_path:
            target = Path(self.cfg.report_path)
        elif self.cfg.name in ("default", "full"):
            target = REPORT
        else:
            target = VAR / f"report-{self.cfg.name}.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        results_file = f"bench/results/{self.cfg.name}.json"
        target.write_text(report.render(self.results, results_file=results_file))
        self.log(f"report: {target}; raw numbers: {results_file}")
        for line in [*report.headline(self.results), *report.real_headline(self.results)]:
            print(line)
        return 0


@dataclass(slots=True)
class Target:
    """What the crawlers are run on next: seeds, the expected fetches and the rules."""

    seeds: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    delay: float = 0.25
    max_depth: int = 16
    env: dict[str, str] = field(default_factory=dict)
    same_host: bool = False
    """Links are followed on the seeds' hosts only (both tools)."""


def _answers(address: str) -> bool:
    host, _, port = address.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def _folder_size(path: Path) -> int:
    from bench.runners import folder_bytes

    return folder_bytes(path) if path.exists() else 0


def infra_pids() -> dict[str, int]:
    pids = {}
    for name in ("kafka", "cassandra"):
        pid_file = REPO / "var" / name / f"{name}.pid"
        with contextlib.suppress(OSError, ValueError):
            pids[name] = int(pid_file.read_text().strip())
    return pids


def file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _raw_is_this_runs(prof: dict[str, Any]) -> bool:
    """Whether a profile's raw stacks are still those it was folded from: a later run
    (another preset's, say) writes the same file, and folding that one would put its
    samples under this report's figures. Results without the stacks' digest are left
    as they are."""
    raw = REPO / str(prof.get("raw_file") or "")
    return (bool(prof.get("raw_file")) and bool(prof.get("raw_sha256")) and raw.is_file()
            and file_digest(raw) == prof["raw_sha256"])


def render_only(cfg: Config) -> int:
    """Write the report again from a results file."""
    from bench.cpu_profile import summarize_cluster_file, summarize_file

    path = Path(cfg.render)
    results = json.loads(path.read_text())
    for holder in (results, results.get("real") or {}):
        prof = holder.get("profile")
        if prof and _raw_is_this_runs(prof):
            keep = {k: prof[k] for k in ("pages", "wall_seconds", "process_cpu_seconds",
                                         "raw_file", "raw_sha256") if k in prof}
            prof = summarize_file(REPO / prof["raw_file"], int(prof.get("rate_hz", 100)))
            prof.update(keep)
            holder["profile"] = prof
    prof = results.get("cluster_profile")
    if prof and _raw_is_this_runs(prof):
        keep = {k: prof[k] for k in ("pages", "server_pages", "wall_seconds", "service_cpu",
                                     "missing", "raw_file", "raw_sha256") if k in prof}
        prof = summarize_cluster_file(REPO / prof["raw_file"], int(prof.get("rate_hz", 100)))
        prof.update(keep)
        results["cluster_profile"] = prof
    write_json(path, results)
    name = path.stem
    target = (Path(cfg.report_path) if cfg.report_path
              else REPORT if name in ("default", "full") else VAR / f"report-{name}.md")
    target.write_text(report.render(results, results_file=f"bench/results/{path.name}"))
    print(f"report: {target}", file=sys.stderr)
    for line in [*report.headline(results), *report.real_headline(results)]:
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    if cfg.render:
        return render_only(cfg)
    return Bench(cfg).run()
