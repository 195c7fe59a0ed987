"""The compose stack, started for real as its users start it: ``docker compose up`` of
docker-compose.yml with the self-seeding demo (deploy/compose/demo.env) and the stack's
own S3 server for the WARC files (deploy/compose/s3.env), every service but Grafana.

One test, in order: ``up -d --wait`` until every service is healthy; the demo seeds
itself and the crawl runs through Kafka, Cassandra and the crawler containers; the
busiest fetcher container is killed with SIGKILL mid-crawl (its main process, by PID, as
a crash would) and comes back by its restart policy, and so does the simulated web in
its network namespace (two causes of short crawls were found and fixed: a page stored
by the killed fetcher and fetched again was parsed from its bodiless revisit record; and
the page in flight at the kill, failing once while the simulated web restarted, was
retried and taken for an unchanged refresh, so it was not parsed from the dead
fetcher's copy and its links were lost (tests/e2e/test_fetcher_redelivery.py); on a
short crawl the test prints the store's rows and the fetchers' logs); the
crawl ends with the seed figures (162 fetched, 132 kept, 30 exact duplicates, 1
robots-blocked, 1 host capped) read through the control API and nothing lost; the
stack's Prometheus has every target up, saw a crawl rate above 0, and answers every
query of every panel of both Grafana dashboards with data; once the crawler services
stop, the bucket holds WARC files with a response record for every page kept;
``down -v`` leaves no container, volume or network of the project behind.

Needs a Docker engine, Compose v2 and the images: ``scripts/docker prepare`` (which
``scripts/test`` runs) makes them and writes var/docker/status.json. Where no engine
can be had the test is skipped with that reason, also under CI=true: a machine without
Docker is not a failure of the project. Kafka and Cassandra stay inside the compose
network (no host ports), the API and Prometheus are published on free loopback ports,
and the project name is the test's own, so the stack never meets scripts/servers'
servers on 127.0.0.1:9092 and :9042 or another compose project.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STATUS = ROOT / "var" / "docker" / "status.json"
DEMO_ENV = ROOT / "deploy" / "compose" / "demo.env"
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
PROJECT = "polite-crawler-smoke"
# Every service of the demo but Grafana (no image of it can be had here). The fetchers
# parse and judge the pages (CRAWLER_FETCHER_PARSE_INLINE, default true): the parser and
# dedup services are in the profile separate-parse, not started here.
SERVICES = ["kafka", "cassandra", "s3", "frontier", "fetcher-1", "fetcher-2", "api",
            "prometheus", "simweb-1", "simweb-2", "demo-seed"]
CRAWLERS = ["frontier", "fetcher-1", "fetcher-2", "api"]
# The stack's S3 server (profile s3, deploy/compose/s3.env) holds the WARC files; the
# keys are the test's own, given to the server and the crawler services alike.
S3_ENV = ROOT / "deploy" / "compose" / "s3.env"
S3_KEYS = {"AWS_ACCESS_KEY_ID": "smoke-test-key",
           "AWS_SECRET_ACCESS_KEY": "smoke-test-secret-4f1c9a"}
FETCHERS = {"fetcher-1": "simweb-1", "fetcher-2": "simweb-2"}
# Prometheus finds parser and dedup through DNS: no target of theirs while they do not run
TARGETS = {("frontier", "frontier:9100"), ("fetcher", "fetcher-1:9100"),
           ("fetcher", "fetcher-2:9100"), ("api", "api:9100"),
           ("prometheus", "127.0.0.1:9090")}
UP_TIMEOUT = 900  # seconds for every service to be healthy (Cassandra is the slowest)
KILL_AFTER = 40  # pages fetched before a fetcher is killed
CRAWL_TIMEOUT = 600
# the stack's Prometheus scrapes every this many seconds
SCRAPE_INTERVAL = float(re.search(
    r"^\s*scrape_interval:\s*(\d+)s\s*$",
    (ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"),
    re.M).group(1))  # type: ignore[union-attr]
RATE_WINDOW = "5m"  # stands for Grafana's $__rate_interval, $__interval and $__range


def say(message: str) -> None:
    print(f"compose test: {message}", flush=True)


def _demo_token() -> str:
    match = re.search(r"^CRAWLER_API_TOKEN=(\S+)", DEMO_ENV.read_text(), re.MULTILINE)
    assert match, "deploy/compose/demo.env sets no CRAWLER_API_TOKEN"
    return match.group(1)


def _docker_ready() -> None:
    """Skip, with the reason, unless an engine, Compose v2 and the images are here."""
    why = _docker_problem()
    if why is None:
        return
    if STATUS.is_file():  # scripts/docker prepare said why it could not make them
        status = json.loads(STATUS.read_text(encoding="utf-8"))
        if not status.get("ready"):
            why = f"{why}; {status.get('reason')}"
    pytest.skip(f"no Docker engine for the compose stack: {why}")


def _docker_problem() -> str | None:
    try:
        engine = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                                capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no Docker engine answers ({exc}); run scripts/docker prepare"
    if engine.returncode != 0:
        return "no Docker engine answers; run scripts/docker prepare"
    compose = subprocess.run(["docker", "compose", "version", "--short"],
                             capture_output=True, text=True, timeout=30, check=False)
    if compose.returncode != 0:
        return "Compose v2 is missing; run scripts/docker prepare"
    missing = [ref for ref in _images()
               if subprocess.run(["docker", "image", "inspect", ref], capture_output=True,
                                 timeout=60, check=False).returncode != 0]
    if missing:
        return f"images missing: {', '.join(missing)}; run scripts/docker prepare"
    return None


def _images() -> list[str]:
    import yaml

    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    refs = {doc["services"][name].get("image", "") for name in SERVICES}
    image = os.environ.get("CRAWLER_IMAGE", "").strip()
    # ${CRAWLER_IMAGE:-polite-crawler:<version>}: the variable, else the default
    return sorted(re.sub(r"\$\{CRAWLER_IMAGE:-([^}]+)\}",
                         lambda m: image or m.group(1), ref) for ref in refs if ref)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Stack:
    """``docker compose`` on docker-compose.yml with the demo's env file, as project PROJECT."""

    def __init__(self) -> None:
        self.api_port = _free_port()
        self.prometheus_port = _free_port()
        # Only what the compose file reads from the shell: nothing of this test session's
        # own CRAWLER_* settings (scripts/servers' addresses, say) may leak in.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("CRAWLER_", "COMPOSE_", "GRAFANA_", "PROMETHEUS_"))}
        self.s3_port = _free_port()
        self.env = {k: v for k, v in self.env.items() if not k.startswith(("AWS_", "S3_"))}
        self.env.update({"CRAWLER_API_HOST_PORT": str(self.api_port),
                         "PROMETHEUS_HOST_PORT": str(self.prometheus_port),
                         "GRAFANA_HOST_PORT": str(_free_port()),
                         # required by the compose file, which sets no default
                         "GRAFANA_ADMIN_PASSWORD": secrets.token_hex(16),
                         "S3_HOST_PORT": str(self.s3_port),
                         "COMPOSE_PROFILES": "demo,s3", **S3_KEYS})
        if os.environ.get("CRAWLER_IMAGE"):
            self.env["CRAWLER_IMAGE"] = os.environ["CRAWLER_IMAGE"]
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.prometheus = f"http://127.0.0.1:{self.prometheus_port}"

    def compose(self, *args: str, timeout: float = 300,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["docker", "compose", "--project-name", PROJECT, "--project-directory",
               str(ROOT), "--file", str(ROOT / "docker-compose.yml"), "--env-file",
               str(DEMO_ENV), "--env-file", str(S3_ENV), *args]
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd[10:])} failed ({proc.returncode}):\n"
                                 f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        return proc

    def container(self, service: str) -> dict[str, Any]:
        """``docker inspect`` of the service's one container."""
        cid = self.compose("ps", "--all", "--quiet", service, timeout=60).stdout.split()
        assert len(cid) == 1, (service, cid)
        out = subprocess.run(["docker", "inspect", cid[0]], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        info: dict[str, Any] = json.loads(out)[0]
        return info

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, volumes and networks of the project that still exist."""
        label = f"label=com.docker.compose.project={PROJECT}"
        found = {}
        for kind, args in (("containers", ["ps", "--all", "--quiet", "--filter", label]),
                           ("volumes", ["volume", "ls", "--quiet", "--filter", label]),
                           ("networks", ["network", "ls", "--quiet", "--filter", label])):
            out = subprocess.run(["docker", *args], capture_output=True, text=True,
                                 timeout=60, check=True).stdout.split()
            found[kind] = out
        return found

    def bucket_records(self, folder: Path) -> dict[str, Any]:
        """The WARC records in the stack's bucket, read over its published port: the
        objects by name, the target URIs of the response records (robots.txt aside),
        and how many revisit records there are."""
        import obstore
        from warcio.archiveiterator import ArchiveIterator

        from common.adapters.s3_blobs import S3Config, open_bucket

        creds = folder / "credentials"
        creds.write_text(f"[default]\naws_access_key_id = {S3_KEYS['AWS_ACCESS_KEY_ID']}\n"
                         f"aws_secret_access_key = {S3_KEYS['AWS_SECRET_ACCESS_KEY']}\n")
        bucket = open_bucket(S3Config(bucket="crawl", endpoint=f"http://127.0.0.1:"
                                      f"{self.s3_port}", path_style=True,
                                      credentials_file=str(creds)))
        keys = sorted(meta["path"] for batch in obstore.list(bucket) for meta in batch)
        responses: list[str] = []
        revisits = 0
        for key in keys:
            if not key.endswith(".warc.gz"):
                continue
            body = bytes(obstore.get(bucket, key).bytes())
            for record in ArchiveIterator(io.BytesIO(body)):
                uri = record.rec_headers.get_header("WARC-Target-URI") or ""
                if record.rec_type == "response" and not uri.endswith("/robots.txt"):
                    responses.append(uri)
                elif record.rec_type == "revisit":
                    revisits += 1
        return {"keys": keys, "responses": responses, "revisits": revisits}

    def store_rows(self) -> str:
        """The store's URL and content rows, read inside the frontier container (for a
        crawl that ended short: which pages were fetched, and from which record)."""
        script = (
            "import os\n"
            "from cassandra.cluster import Cluster\n"
            "ks = os.environ.get('CRAWLER_STORE_KEYSPACE', 'crawl')\n"
            "s = Cluster([os.environ['CRAWLER_STORE_CASSANDRA_HOSTS']]).connect(ks)\n"
            "for r in sorted(s.execute('SELECT url, status, reason, depth, attempts, "
            "record_file, record_offset, content_hash, duplicate_of FROM url_state')):\n"
            "    print('url', *r)\n"
            "for r in sorted(s.execute('SELECT content_hash, url, record_file, "
            "record_offset FROM content')):\n"
            "    print('content', *r)\n")
        out = self.compose("exec", "-T", "frontier", "python", "-c", script, check=False,
                           timeout=120)
        return out.stdout + out.stderr

    def diagnostics(self) -> str:
        parts = []
        ps = self.compose("ps", "--all", "--format",
                          "table {{.Service}}\t{{.State}}\t{{.Status}}", check=False,
                          timeout=60)
        parts.append(ps.stdout + ps.stderr)
        for service in SERVICES:
            logs = self.compose("logs", "--no-color", "--tail", "25", service, check=False,
                                timeout=60)
            parts.append(f"--- {service}\n{logs.stdout[-2500:]}{logs.stderr[-500:]}")
        return "\n".join(parts)

    # -- HTTP on the published loopback ports
    def get_json(self, url: str, *, token: str | None = None, timeout: float = 10) -> Any:
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.get_json(f"{self.api}/v1/stats", token=_demo_token())
        return stats

    def query(self, expr: str) -> list[Any]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        body = self.get_json(url)
        assert body.get("status") == "success", (expr, body)
        result: list[Any] = body["data"]["result"]
        return result


def _fetched_by(stack: Stack, service: str) -> float:
    """Pages the fetcher counted so far, read from its own metrics endpoint."""
    code = ("import urllib.request as u, re; t = u.urlopen('http://127.0.0.1:9100/metrics', "
            "timeout=5).read().decode(); print(sum(float(v) for v in re.findall("
            "r'^crawler_fetcher_pages_fetched_total\\{[^}]*\\} (\\S+)', t, re.M)))")
    proc = stack.compose("exec", "-T", service, "python", "-c", code, timeout=60,
                         check=False)
    try:
        return float(proc.stdout.strip())
    except ValueError:
        return -1.0


def _crawl_rate(stack: Stack) -> float:
    with_rate = stack.query("sum(rate(crawler_fetcher_pages_fetched_total[1m]))")
    return float(with_rate[0]["value"][1]) if with_rate else 0.0


def _dashboard_queries() -> list[tuple[str, str]]:
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text(encoding="utf-8"))
        stack = list(board["panels"])
        while stack:
            panel = stack.pop()
            stack.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                out.append((f"{path.name} / {panel['title']}", target["expr"]))
    return out


def _wait(what: str, done: Any, limit: float, poll: float = 2.0) -> Any:
    deadline = time.monotonic() + limit
    while True:
        value = done()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {limit:.0f} s")
        time.sleep(poll)


def _kill_a_fetcher(stack: Stack) -> None:
    """SIGKILL the busiest fetcher's main process and wait until it and its simulated
    web are back by their restart policy."""
    busiest = max(FETCHERS, key=lambda name: _fetched_by(stack, name))
    web = FETCHERS[busiest]
    before = {name: stack.container(name)["RestartCount"] for name in (busiest, web)}
    pid = int(stack.container(busiest)["State"]["Pid"])
    fetched_at_kill = int(stack.stats()["fetched"])
    os.kill(pid, signal.SIGKILL)
    say(f"killed {busiest} (pid {pid}) with SIGKILL at {fetched_at_kill} pages")
    assert fetched_at_kill < 162, "the crawl ended before the fetcher could be killed"

    def back() -> bool:
        info = {name: stack.container(name) for name in (busiest, web)}
        return all(info[n]["RestartCount"] > before[n] and info[n]["State"]["Running"]
                   for n in info) and (
            info[busiest]["State"].get("Health", {}).get("Status") == "healthy")
    _wait(f"{busiest} and {web} restarted and healthy", back, 180)
    say(f"{busiest} and {web} back after the kill")


@pytest.mark.timeout(2400)
def test_compose_stack_crawls_the_demo_and_survives_a_fetcher_crash(tmp_path: Path) -> None:
    _docker_ready()
    stack = Stack()
    t0 = time.monotonic()
    stack.compose("down", "--volumes", "--remove-orphans", "--timeout", "10", timeout=300)
    downed = False
    try:
        # -- up: every service but Grafana healthy (demo-seed runs once and exits 0)
        stack.compose("up", "--detach", "--no-build", "--wait", "--wait-timeout",
                      str(UP_TIMEOUT), *SERVICES, timeout=UP_TIMEOUT + 120)
        say(f"every service healthy after {time.monotonic() - t0:.0f} s")
        seed = _wait("demo-seed done", lambda: (
            lambda state: state if state["Status"] == "exited" else None)(
            stack.container("demo-seed")["State"]), 180, poll=1.0)
        assert seed["ExitCode"] == 0, seed

        # -- mid-crawl: SIGKILL the busiest fetcher's main process, as a crash would
        rates: list[float] = []

        def crawling() -> bool:
            try:
                rates.append(_crawl_rate(stack))
                return int(stack.stats()["fetched"]) >= KILL_AFTER
            except (OSError, urllib.error.URLError):
                return False
        _wait(f"{KILL_AFTER} pages fetched", crawling, 300, poll=0.5)
        _kill_a_fetcher(stack)

        # -- the crawl ends: nothing queued, in flight or awaiting parse, several polls
        quiet = 0
        deadline = time.monotonic() + CRAWL_TIMEOUT
        stats: dict[str, Any] = {}
        while quiet < 4:
            assert time.monotonic() < deadline, f"crawl not done in {CRAWL_TIMEOUT} s: {stats}"
            time.sleep(1.0)
            with_rate = _crawl_rate(stack)
            rates.append(with_rate)
            try:
                stats = stack.stats()
            except urllib.error.URLError as exc:
                # the API answers 500 while Cassandra sheds load (ConnectionBusy on its
                # count scan); a poll that fails is not a quiet one
                say(f"stats poll failed: {exc}")
                quiet = 0
                continue
            idle = (stats["known_urls"] > 0 and stats["queued"] == 0
                    and stats["in_flight"] == 0 and stats["awaiting_parse"] == 0)
            quiet = quiet + 1 if idle else 0
        say(f"crawl done after {time.monotonic() - t0:.0f} s: {stats}")

        # -- the seed figures, and nothing lost
        figures = {k: stats[k] for k in ("fetched", "kept", "exact_duplicates",
                                         "near_duplicates", "robots_blocked",
                                         "hosts_capped", "host_capped_urls", "dead",
                                         "queued", "in_flight", "known_urls")}
        if figures["fetched"] != 162:
            print(stack.store_rows(), flush=True)
            for service in FETCHERS:
                logs = stack.compose("logs", "--no-color", service, check=False,
                                     timeout=60)
                print(f"--- {service} (whole log)\n{logs.stdout[-20000:]}", flush=True)
        assert figures == {"fetched": 162, "kept": 132, "exact_duplicates": 30,
                           "near_duplicates": 0, "robots_blocked": 1, "hosts_capped": 1,
                           "host_capped_urls": 1, "dead": 0, "queued": 0, "in_flight": 0,
                           "known_urls": 164}, stats
        assert stats["errors"] == {}, stats

        # -- Prometheus in the stack: every target up, a crawl rate above 0
        def all_up() -> list[Any] | None:
            up = stack.query("up")
            found = {(r["metric"]["job"], r["metric"]["instance"]) for r in up}
            ok = found == TARGETS and all(r["value"][1] == "1" for r in up)
            return up if ok else None
        up = _wait("every Prometheus target up", all_up, 90)
        assert max(rates) > 0, "Prometheus saw no crawl rate while the crawl ran"
        say(f"{len(up)} targets up; peak crawl rate {max(rates):.2f} pages/s")

        # -- every query of every panel of both dashboards returns data
        queries = _dashboard_queries()
        assert len(queries) > 40
        # A rate needs two samples of a series: one that appeared in the crawl's last
        # scrape interval (a counter created by its first message, on a crawl of 20 s
        # against scrapes every 15 s) has data one or two scrapes later
        pending = {f"{where}: {expr}": re.sub(r"\$__(rate_interval|interval|range)\b",
                                              RATE_WINDOW, expr)
                   for where, expr in queries}
        waited = time.monotonic()
        deadline = waited + 2 * SCRAPE_INTERVAL + 15
        while True:
            pending = {name: promql for name, promql in pending.items()
                       if not stack.query(promql)}
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(5.0)
        if pending:  # what Prometheus holds of those metrics, to tell why
            for name in sorted({m for promql in pending.values()
                                for m in re.findall(r"\bcrawler_[a-z0-9_]+", promql)}):
                held = stack.query(f"count_over_time({name}[{RATE_WINDOW}])")
                say(f"{name}: samples per series in the last {RATE_WINDOW}: "
                    + (", ".join(f"{r['metric']} {r['value'][1]}" for r in held)
                       or "no series"))
        assert not pending, "panels without data:\n" + "\n".join(pending)
        say(f"{len(queries)} dashboard queries answered with data "
            f"(after {time.monotonic() - waited:.0f} s)")

        # -- the WARC files are in the stack's bucket once the crawler services stopped
        # (a stopping service uploads what its spool holds)
        stack.compose("stop", "--timeout", "90", *CRAWLERS, timeout=300)
        found = stack.bucket_records(tmp_path)
        warcs = [k for k in found["keys"] if k.endswith(".warc.gz")]
        say(f"bucket: {len(found['keys'])} objects, {len(warcs)} WARC files, "
            f"{len(found['responses'])} response records "
            f"({len(set(found['responses']))} URLs), {found['revisits']} revisits")
        assert warcs, found["keys"]
        assert len(set(found["responses"])) == stats["kept"], found["responses"]

        # -- down -v leaves nothing behind
        stack.compose("down", "--volumes", "--remove-orphans", "--timeout", "20",
                      timeout=300)
        downed = True
        leftovers = stack.leftovers()
        assert leftovers == {"containers": [], "volumes": [], "networks": []}, leftovers
        say(f"down -v left nothing; whole test {time.monotonic() - t0:.0f} s")
    except BaseException:
        print(stack.diagnostics(), flush=True)
        raise
    finally:
        if not downed:
            stack.compose("down", "--volumes", "--remove-orphans", "--timeout", "10",
                          timeout=300, check=False)
