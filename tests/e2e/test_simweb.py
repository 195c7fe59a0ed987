"""The simulated web over real HTTP and DNS on loopback.

A small breadth-first crawler walks the seed scenario through the DNS responder and
the server's request log is checked; then single behaviours are checked on the wire.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import zlib
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import aiodns
import aiohttp
import pycares
import pytest
from protego import Protego

from common.settings import Settings
from simweb import SimWeb, canonical, expected_crawl
from simweb.scenarios import features, generated, seed

ROOT = Path(__file__).resolve().parents[2]
USER_AGENT = "PoliteCrawler/0.1 (+https://example.com/crawler-info)"
GAP = 0.02  # seconds the test crawler waits between two requests to one host


@dataclass
class CrawlResult:
    fetched: Counter[str] = field(default_factory=Counter)
    duplicates: list[str] = field(default_factory=list)
    blocked: set[str] = field(default_factory=set)
    links: dict[str, list[str]] = field(default_factory=dict)
    robots: dict[str, str] = field(default_factory=dict)


def _a_records(result: pycares.DNSResult) -> list[tuple[str, int]]:
    return [(rr.data.addr, rr.ttl) for rr in result.answer
            if isinstance(rr.data, pycares.ARecordData)]


def _hrefs(body: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]+)"', body)]


async def bfs_crawl(web: SimWeb, session: aiohttp.ClientSession, *, cap: int = 80,
                    gap: float = GAP, deadline: float = 60.0) -> CrawlResult:
    """Canonicalise, obey robots.txt, skip the links of exact duplicates, cap each host;
    one request at a time per host, hosts in parallel."""
    result = CrawlResult()
    queues: dict[str, deque[str]] = defaultdict(deque)
    seen: set[str] = set()
    bodies: set[bytes] = set()
    rules: dict[str, Protego | None] = {}
    known = set(web.addresses())
    stop_at = time.monotonic() + deadline

    def push(url: str) -> None:
        url = canonical(url)
        host = urlsplit(url).hostname or ""
        if url not in seen and host in known:
            seen.add(url)
            queues[host].append(url)

    async def worker(host: str) -> None:
        if host not in rules:
            async with session.get(web.url(host, "/robots.txt")) as resp:
                text = await resp.text()
                result.robots[host] = text if resp.status == 200 else ""
                rules[host] = Protego.parse(text) if resp.status == 200 else None
            await asyncio.sleep(gap)
        rule = rules[host]
        queue = queues[host]
        while queue and time.monotonic() < stop_at:
            url = queue.popleft()
            if rule is not None and not rule.can_fetch(url, "PoliteCrawler"):
                result.blocked.add(url)
                continue
            if result.fetched[host] >= cap:
                continue
            async with session.get(url, allow_redirects=False) as resp:
                body = await resp.read()
                location = resp.headers.get("Location")
                status = resp.status
            result.fetched[host] += 1
            await asyncio.sleep(gap)
            if location and 300 <= status < 400:
                push(urljoin(url, location))
                continue
            digest = hashlib.sha256(body).digest()
            if digest in bodies:
                result.duplicates.append(url)
                continue
            bodies.add(digest)
            links = [urljoin(url, h) for h in _hrefs(body.decode("utf-8", "replace"))]
            result.links[url] = links
            for link in links:
                push(link)

    for url in web.seed_urls():
        push(url)
    while any(queues.values()) and time.monotonic() < stop_at:
        await asyncio.gather(*(worker(h) for h, q in list(queues.items()) if q))
    return result


@pytest.fixture
async def seed_web() -> AsyncIterator[SimWeb]:
    async with SimWeb(seed(), dns=True) as web:
        yield web


@pytest.fixture
async def lab_web() -> AsyncIterator[SimWeb]:
    async with SimWeb(features(), dns=True, max_stall=10.0) as web:
        yield web


@pytest.fixture
async def session(lab_web: SimWeb) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(resolver=lab_web.resolver())
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as s:
        yield s


# --- the seed scenario, crawled through the DNS responder ---------------------------

async def test_seed_crawl_through_dns_and_request_log(seed_web: SimWeb) -> None:
    web = seed_web
    resolver = aiohttp.AsyncResolver(nameservers=web.dns_servers, timeout=2, tries=1)
    connector = aiohttp.TCPConnector(resolver=resolver, limit_per_host=1)
    async with aiohttp.ClientSession(connector=connector,
                                     headers={"User-Agent": USER_AGENT}) as session:
        result = await bfs_crawl(web, session, cap=80)
    await resolver.close()
    log = web.log

    pages = log.counts_by_host(exclude_paths=("/robots.txt",))
    assert pages == {"news.test": 61, "shop.test": 21, "trap.test": 80}
    assert dict(result.fetched) == pages
    for host in pages:
        assert log.count(host, "/robots.txt") == 1
        gap = log.min_gap(host)
        assert gap is not None and gap >= GAP * 0.9, (host, gap)
        assert log.max_in_flight(host) == 1
    assert log.counts_by_path("shop.test")["/robots.txt"] == 1
    assert all(r.status == 404 for r in log.records("shop.test") if r.path == "/robots.txt")

    # /private/secret is linked from the home page, disallowed by robots.txt, never asked
    home = f"{web.base_url('news.test')}/"
    secret = f"{web.base_url('news.test')}/private/secret"
    assert secret in result.links[home]
    assert not Protego.parse(result.robots["news.test"]).can_fetch(secret, "PoliteCrawler")
    assert result.blocked == {secret}
    assert log.count("news.test", "/private/secret") == 0

    # print copies are byte-identical duplicates; tracking parameters never reach the wire
    assert len(result.duplicates) == 30
    assert all("/print/" in u for u in result.duplicates)
    assert not any("utm_" in r.target for r in log.records())
    assert all(r.header("User-Agent") == USER_AGENT for r in log.records())
    assert all(r.status == 200 for r in log.records() if r.path != "/robots.txt")
    assert all(r.completed and r.bytes_sent > 0 for r in log.records())

    # the log and the scenario's own expectation agree URL for URL
    expected = expected_crawl(seed(), port=web.port, max_pages_per_host=80)
    served = {canonical(f"http://{r.host}:{web.port}{r.target}") for r in log.records()
              if r.path != "/robots.txt"}
    assert served == expected.fetched

    # names were resolved through the responder
    asked = {q.name for q in web.dns.queries()}
    assert {"news.test", "shop.test", "trap.test"} <= asked


async def test_generated_web_is_crawled_completely() -> None:
    scenario = generated(4, 150, 11)
    async with SimWeb(scenario) as web:
        connector = aiohttp.TCPConnector(resolver=web.resolver())
        async with aiohttp.ClientSession(connector=connector) as session:
            start = time.monotonic()
            result = await bfs_crawl(web, session, cap=10_000, gap=0.0)
            elapsed = time.monotonic() - start
        expected = expected_crawl(scenario, port=web.port)
        assert sum(result.fetched.values()) == len(expected.fetched) == 4 * 150
        served = {canonical(f"http://{r.host}:{web.port}{r.target}")
                  for r in web.log.records() if r.path != "/robots.txt"}
        assert served == expected.fetched
        assert not any(r.path.startswith("/private/") for r in web.log.records())
        assert elapsed < 30, "600 cached pages should be served quickly"


# --- DNS ------------------------------------------------------------------------------

async def test_aiodns_through_the_responder(seed_web: SimWeb) -> None:
    port = seed_web.dns_port
    # pycares >= 4.2 (c-ares >= 1.x CSV syntax) takes "ip:port" server strings ...
    resolver = aiodns.DNSResolver(nameservers=[f"127.0.0.1:{port}"], timeout=2, tries=1)
    answer = await resolver.query_dns("news.test", "A")
    assert _a_records(answer) == [("127.0.0.1", seed().dns_ttl)]
    with pytest.raises(aiodns.error.DNSError) as err:
        await resolver.query_dns("missing.test", "A")
    assert err.value.args[0] == aiodns.error.ARES_ENOTFOUND
    info = await resolver.getaddrinfo("shop.test", family=socket.AF_INET)
    assert [node.addr[0] for node in info.nodes] == [b"127.0.0.1"]
    await resolver.close()
    # ... and the udp_port option points every server at the port.
    other = aiodns.DNSResolver(nameservers=["127.0.0.1"], udp_port=port, timeout=2, tries=1)
    answer = await other.query_dns("trap.test", "A")
    assert [a for a, _ in _a_records(answer)] == ["127.0.0.1"]
    await other.close()


async def test_dns_gives_configured_addresses(lab_web: SimWeb) -> None:
    resolver = aiodns.DNSResolver(nameservers=lab_web.dns_servers, timeout=2, tries=1)
    answer = await resolver.query_dns("internal.test", "A")
    assert _a_records(answer) == [("127.0.0.2", 60)]
    await resolver.close()


async def test_crawler_settings_and_static_resolver(seed_web: SimWeb) -> None:
    settings = Settings.from_env(seed_web.crawler_env())
    assert settings.fetcher.dns_servers == (f"127.0.0.1:{seed_web.dns_port}",)
    assert settings.fetcher.allow_networks == ("127.0.0.0/8",)
    assert f"news.test:{seed_web.port}:127.0.0.1" in seed_web.resolve_entries()
    async with SimWeb(seed()) as without_dns:
        env = without_dns.crawler_env()
        assert Settings.from_env(env).fetcher.resolve == tuple(without_dns.resolve_entries())
    resolver = seed_web.resolver()
    answers = await resolver.resolve("news.test", seed_web.port)
    assert [(a["host"], a["port"]) for a in answers] == [("127.0.0.1", seed_web.port)]
    with pytest.raises(OSError, match="no such host"):
        await resolver.resolve("example.com", 80)


# --- single behaviours on the wire ---------------------------------------------------

async def test_slow_drip_takes_its_time_and_ends(lab_web: SimWeb,
                                                 session: aiohttp.ClientSession) -> None:
    start = time.monotonic()
    arrivals = []
    async with session.get(lab_web.url("lab.test", "/drip")) as resp:
        async for chunk in resp.content.iter_any():
            arrivals.append((time.monotonic() - start, len(chunk)))
    elapsed = time.monotonic() - start
    assert 2.5 <= elapsed < 6.0
    assert len(arrivals) >= 10
    assert sum(n for _, n in arrivals) == int(resp.headers["Content-Length"])


async def test_hang_is_bounded_by_max_stall() -> None:
    async with SimWeb(features(), max_stall=0.5) as web:
        connector = aiohttp.TCPConnector(resolver=web.resolver())
        async with aiohttp.ClientSession(connector=connector) as s:
            start = time.monotonic()
            async with s.get(web.url("lab.test", "/hang")) as resp:
                await resp.read()
            assert resp.status == 200
            assert 0.4 <= time.monotonic() - start < 3.0
            start = time.monotonic()
            async with s.get(web.url("robots-slow.test", "/robots.txt")) as resp:
                assert "User-agent" in await resp.text()
            assert time.monotonic() - start < 3.0


async def test_client_timeout_is_logged_as_incomplete(lab_web: SimWeb,
                                                      session: aiohttp.ClientSession) -> None:
    with pytest.raises(asyncio.TimeoutError):
        async with session.get(lab_web.url("lab.test", "/hang"),
                               timeout=aiohttp.ClientTimeout(total=0.3)) as resp:
            await resp.read()
    async with asyncio.timeout(5):
        await lab_web.log.wait_until(lambda lg: lg.count("lab.test", "/hang") == 1)
    record = lab_web.log.records("lab.test")[-1]
    assert not record.completed
    assert record.duration < 3.0


async def test_stop_ends_hanging_requests() -> None:
    web = SimWeb(features(), max_stall=30.0)
    await web.start()
    connector = aiohttp.TCPConnector(resolver=web.resolver())
    async with aiohttp.ClientSession(connector=connector) as s:
        task = asyncio.create_task(s.get(web.url("lab.test", "/hang")))
        await asyncio.sleep(0.3)
        start = time.monotonic()
        await web.stop()
        assert time.monotonic() - start < 5.0
        done, _ = await asyncio.wait({task}, timeout=5.0)
        assert task in done  # answered at once or cut off, but not left hanging
        if task.exception() is None:
            task.result().close()


async def test_missing_and_wrong_content_types(lab_web: SimWeb,
                                               session: aiohttp.ClientSession) -> None:
    async with session.get(lab_web.url("lab.test", "/no-type")) as resp:
        assert "Content-Type" not in resp.headers
        assert b"<html" in await resp.read()
    async with session.get(lab_web.url("lab.test", "/wrong-type")) as resp:
        assert resp.headers["Content-Type"] == "image/png"


async def test_compression_bomb_on_the_wire(lab_web: SimWeb,
                                            session: aiohttp.ClientSession) -> None:
    async with session.get(lab_web.url("lab.test", "/bomb")) as resp:
        raw = await resp.read()
    assert resp.headers["Content-Encoding"] == "gzip"
    assert len(raw) < 100_000
    inflater = zlib.decompressobj(31)
    inflated = len(inflater.decompress(raw, 6_000_000))
    assert inflated == 6_000_000  # far more than a 5 MB cap remains
    assert lab_web.log.records("lab.test")[-1].bytes_sent == len(raw)


async def test_conditional_requests_over_http(lab_web: SimWeb,
                                              session: aiohttp.ClientSession) -> None:
    url = lab_web.url("lab.test", "/cached")
    async with session.get(url) as resp:
        etag, modified = resp.headers["ETag"], resp.headers["Last-Modified"]
    async with session.get(url, headers={"If-None-Match": etag}) as resp:
        assert resp.status == 304
        assert await resp.read() == b""
    async with session.get(url, headers={"If-Modified-Since": modified}) as resp:
        assert resp.status == 304
    assert [r.status for r in lab_web.log.records("lab.test")] == [200, 304, 304]


async def test_retry_after_and_redirects_over_http(lab_web: SimWeb,
                                                   session: aiohttp.ClientSession) -> None:
    async with session.get(lab_web.url("lab.test", "/busy")) as resp:
        assert (resp.status, resp.headers["Retry-After"]) == (429, "2")
    async with session.get(lab_web.url("lab.test", "/busy")) as resp:
        assert resp.status == 200
    async with session.get(lab_web.url("lab.test", "/redirect/cross"),
                           allow_redirects=False) as resp:
        assert resp.status == 301
        assert resp.headers["Location"] == lab_web.url("other.test", "/")
    async with session.get(lab_web.url("lab.test", "/redirect/cross")) as resp:
        assert resp.status == 200  # followed to other.test on the same server
    assert lab_web.log.count("other.test", "/") == 1


async def test_host_latency(lab_web: SimWeb, session: aiohttp.ClientSession) -> None:
    async with session.get(lab_web.url("latency.test", "/")) as resp:
        await resp.read()
    record = lab_web.log.records("latency.test")[-1]
    assert record.duration >= 0.3


async def test_head_unknown_host_and_proxy_form(lab_web: SimWeb,
                                                session: aiohttp.ClientSession) -> None:
    async with session.head(lab_web.url("lab.test", "/cached")) as resp:
        assert resp.status == 200
        assert int(resp.headers["Content-Length"]) > 0
    async with aiohttp.ClientSession() as plain:
        url = f"http://127.0.0.1:{lab_web.port}/"
        async with plain.get(url, headers={"Host": "nowhere.test"}) as resp:
            assert resp.status == 404
        async with plain.get("http://lab.test/dup/a",
                             proxy=f"http://127.0.0.1:{lab_web.port}") as resp:
            assert resp.status == 200
    assert lab_web.log.count("lab.test", "/dup/a") == 1
    assert lab_web.log.count("nowhere.test") == 1


def test_run_in_thread_for_synchronous_callers() -> None:
    before = set(threading.enumerate())
    with SimWeb.run_in_thread(seed()) as handle:
        started = set(threading.enumerate()) - before
        assert any(t.name == "simweb" for t in started)
        request = urllib.request.Request(f"http://127.0.0.1:{handle.port}/story/2",
                                         headers={"Host": "news.test"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
        assert handle.log.wait_for(lambda lg: lg.count("news.test", "/story/2") == 1, 30)
        assert handle.seed_urls()[0] == f"http://news.test:{handle.port}/"
    # the server's thread is gone (other threads of the process, such as a driver's or an
    # executor's, may start and stay meanwhile: only the server's own are checked)
    assert not [t for t in started if t.name == "simweb" and t.is_alive()]


def test_binds_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        SimWeb(seed(), host="0.0.0.0")


def test_cli_serves_until_terminated() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "simweb", "--scenario", "seed", "--port", "0", "--dns"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["seeds"] == [f"http://{h}:{info['port']}/"
                                 for h in ("news.test", "shop.test", "trap.test")]
        assert isinstance(info["dns_port"], int)
        request = urllib.request.Request(f"http://127.0.0.1:{info['port']}/robots.txt",
                                         headers={"Host": "news.test"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.read() == b"User-agent: *\nDisallow: /private/\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0
    assert json.loads(err.strip().splitlines()[-1]) == {"requests": {"news.test": 1}}


def test_cli_rejects_a_bad_scenario(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "hosts": [{"name": "a.test", "pagez": []}]}')
    for name in ("no-such-scenario", str(bad)):
        proc = subprocess.run([sys.executable, "-m", "simweb", "--scenario", name],
                              cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 2
        assert proc.stderr.startswith("simweb: ")


async def test_port_in_use_is_an_error() -> None:
    async with SimWeb(seed()) as first:
        with pytest.raises(OSError, match="in use"):
            await SimWeb(seed(), port=first.port).start()
        connector = aiohttp.TCPConnector(resolver=first.resolver())
        async with aiohttp.ClientSession(connector=connector) as s, \
                s.get(first.url("news.test", "/")) as resp:
            assert resp.status == 200
