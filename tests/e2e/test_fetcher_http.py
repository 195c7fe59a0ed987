"""The HTTP fetcher against real servers on loopback, and DNS through a local server.

Every server binds 127.0.0.x only; the fetcher is allowed 127.0.0.1/32 and nothing
else, so servers on 127.0.0.2 and 127.0.0.3 stand for internal hosts the guard must
never connect to (they count connections at the TCP level).
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, cast

import brotli
import pytest
from aiohttp import web
from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler, DNSLogger, DNSServer

from common.messages import FetchOutcome
from common.ports import RobotsRecord, StateStore
from common.settings import Settings
from fetcher.http import HttpFetcher
from fetcher.robots_cache import RobotsCache

HTML = b"<!doctype html><html><head><title>t</title></head><body>hello</body></html>"
CAP = 1_000_000


# --- servers ------------------------------------------------------------------------


@dataclass
class Seen:
    requests: list[web.Request] = field(default_factory=list)
    events: dict[str, Any] = field(default_factory=dict)

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]


def gzip_bomb(total: int) -> bytes:
    """gzip of ``total`` zero bytes, built without holding them."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    out = [comp.compress(block) for _ in range(total >> 20)]
    out.append(comp.flush())
    return b"".join(out)


BOMB_SIZE = 200 << 20  # 200 MiB decompressed
BR_BOMB_SIZE = 256 << 20


@functools.cache
def bombs() -> dict[str, bytes]:
    """Built on first use (about a second), not at import."""
    return {"gzip": gzip_bomb(BOMB_SIZE),
            "br": brotli.compress(bytes(BR_BOMB_SIZE), quality=1)}


def make_app(seen: Seen) -> web.Application:
    routes = web.RouteTableDef()

    @routes.get("/page")
    async def page(_: web.Request) -> web.Response:
        return web.Response(body=HTML, content_type="text/html", charset="utf-8",
                            headers={"X-Robots-Tag": "noarchive"})

    @routes.get("/gzip")
    async def gz(_: web.Request) -> web.Response:
        return web.Response(body=gzip.compress(HTML * 100), content_type="text/html",
                            headers={"Content-Encoding": "gzip"})

    @routes.get("/br")
    async def br(_: web.Request) -> web.Response:
        return web.Response(body=brotli.compress(HTML * 100), content_type="text/html",
                            headers={"Content-Encoding": "br"})

    @routes.get("/bomb")
    async def bomb(_: web.Request) -> web.Response:
        return web.Response(body=bombs()["gzip"], content_type="text/html",
                            headers={"Content-Encoding": "gzip"})

    @routes.get("/br-bomb")
    async def br_bomb(_: web.Request) -> web.Response:
        return web.Response(body=bombs()["br"], content_type="text/html",
                            headers={"Content-Encoding": "br"})

    @routes.get("/big")
    async def big(_: web.Request) -> web.Response:
        return web.Response(body=b"a" * (CAP + 1), content_type="text/plain")

    @routes.get("/exact")
    async def exact(_: web.Request) -> web.Response:
        return web.Response(body=b"a" * CAP, content_type="text/plain")

    @routes.get("/big-chunked")
    async def big_chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            for _ in range(64):
                await resp.write(b"b" * 65536)
        except (ConnectionError, RuntimeError):
            seen.events["big_chunked_aborted"] = True
        return resp

    @routes.get("/image")
    async def image(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "image/png"})
        resp.content_length = 32 << 20
        await resp.prepare(request)
        sent = 0
        try:
            while sent < (32 << 20):
                await resp.write(b"\x89" * 65536)
                sent += 65536
            seen.events["image_complete"] = True
        except (ConnectionError, RuntimeError):
            seen.events["image_complete"] = False
        finally:
            seen.events["image_sent"] = sent
            seen.events["image_done"].set()
        return resp

    @routes.get("/slow")
    async def slow(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        await resp.prepare(request)
        try:
            for _ in range(100):  # at most 10 s
                await resp.write(b"x")
                await asyncio.sleep(0.1)
        except (ConnectionError, RuntimeError):
            pass
        return resp

    @routes.get("/redirect")
    async def redirect(_: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "/target?x=1"})

    @routes.get("/target")
    async def target(_: web.Request) -> web.Response:
        return web.Response(text="target", content_type="text/html")

    @routes.get("/bad-redirect")
    async def bad_redirect(_: web.Request) -> web.Response:
        return web.Response(status=301, headers={"Location": "http://[::1"})

    @routes.get("/429")
    async def too_many(_: web.Request) -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "120"})

    @routes.get("/503-date")
    async def unavailable_date(_: web.Request) -> web.Response:
        when = formatdate(time.time() + 3600, usegmt=True)
        return web.Response(status=503, headers={"Retry-After": when})

    @routes.get("/503")
    async def unavailable(_: web.Request) -> web.Response:
        return web.Response(status=503, text="down")

    @routes.get("/500")
    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=500, text="x" * 200_000)

    @routes.get("/404")
    async def missing(_: web.Request) -> web.Response:
        return web.Response(status=404, text="nope")

    @routes.get("/etag")
    async def etag(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"'})
        return web.Response(body=HTML, content_type="text/html",
                            headers={"ETag": '"v1"', "Last-Modified": "Wed, 01 May 2024 "
                                                                      "12:00:00 GMT"})

    @routes.get("/robots.txt")
    async def robots(_: web.Request) -> web.Response:
        hops = seen.events.get("robots_hops", 0)
        if hops:
            return web.Response(status=301, headers={"Location": f"/r/{hops - 1}"})
        return robots_body()

    @routes.get("/r/{n}")
    async def robots_hop(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n:
            return web.Response(status=302, headers={"Location": f"/r/{n - 1}"})
        if "robots_elsewhere" in seen.events:
            return web.Response(status=302, headers={"Location": seen.events["robots_elsewhere"]})
        return robots_body()

    def robots_body() -> web.Response:
        body = seen.events.get("robots_body",
                               b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n")
        return web.Response(body=body, content_type="text/plain")

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.requests.append(request)
        result: web.StreamResponse = await handler(request)
        return result

    app = web.Application(middlewares=[record])
    app.add_routes(routes)
    return app


@dataclass
class Server:
    port: int
    seen: Seen

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    seen = Seen()
    seen.events["image_done"] = asyncio.Event()
    runner = web.AppRunner(make_app(seen), shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Server(port, seen)
    finally:
        await runner.cleanup()


@dataclass
class Counter:
    """A raw TCP server that counts connections and answers any request with 200."""

    host: str
    port: int = 0
    connections: int = 0
    server: asyncio.Server | None = None

    async def start(self) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                             b"Content-Length: 6\r\nConnection: close\r\n\r\nsecret")
                await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def internal() -> AsyncIterator[tuple[Counter, Counter]]:
    """Servers on 127.0.0.2 and 127.0.0.3: internal hosts the fetcher must not reach."""
    two, three = Counter("127.0.0.2"), Counter("127.0.0.3")
    await two.start()
    await three.start()
    try:
        yield two, three
    finally:
        await two.stop()
        await three.stop()


class Zone(BaseResolver):  # type: ignore[misc]
    """A tiny authoritative zone for dnslib's server: name -> [(type, address)]."""

    def __init__(self, records: dict[str, list[tuple[str, str]]], ttl: int = 300) -> None:
        self.records = records
        self.ttl = ttl
        self.queries: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        reply = request.reply()
        q = request.q
        name = str(q.qname).rstrip(".").lower()
        qtype = QTYPE[q.qtype]
        with self.lock:
            self.queries.append((name, qtype))
        if name == "broken.test":
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        if name not in self.records:
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        for rtype, addr in self.records[name]:
            if rtype == qtype:
                rdata = A(addr) if rtype == "A" else AAAA(addr)
                reply.add_answer(RR(q.qname, q.qtype, rdata=rdata, ttl=self.ttl))
        return reply


@pytest.fixture
def dns() -> Iterator[tuple[Zone, int]]:
    zone = Zone({
        "good.test": [("A", "127.0.0.1")],
        "evil.test": [("A", "127.0.0.2")],
        "mixed.test": [("A", "127.0.0.1"), ("A", "127.0.0.2")],
        "v6.test": [("AAAA", "::1")],
    })
    srv = DNSServer(zone, address="127.0.0.1", port=0,
                    logger=DNSLogger("-request,-reply,-truncated,-error,-recv,-send,-data"))
    srv.start_thread()
    try:
        yield zone, srv.server.server_address[1]
    finally:
        srv.stop()
        srv.server.server_close()


def settings(**fetcher: Any) -> Settings:
    values: dict[str, Any] = {"allow_networks": ("127.0.0.1/32",), "connect_timeout": 1.0,
                              "total_timeout": 3.0, "max_body_bytes": CAP}
    values.update(fetcher)
    return Settings().replace(fetcher=values, crawl={"user_agent_product": "TestCrawler"})


@pytest.fixture
async def fetcher() -> AsyncIterator[HttpFetcher]:
    async with HttpFetcher(settings()) as f:
        yield f


# --- pages ----------------------------------------------------------------------------


async def test_normal_page(server: Server, fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(server.url("/page"))
    assert r.outcome is FetchOutcome.OK
    assert r.status == 200
    assert r.reason == "OK"
    assert r.http_version == "1.1"
    assert r.body == HTML
    assert r.content_type == "text/html"
    assert r.charset == "utf-8"
    assert r.peer_ip == "127.0.0.1"
    assert r.x_robots_tag == "noarchive"
    assert r.truncated is None and not r.body_refused
    assert r.request_target == "/page"
    assert 0 < r.elapsed < 3
    assert r.started_at <= r.fetched_at
    sent = {k.lower(): v for k, v in r.request_headers}
    assert sent["host"] == f"127.0.0.1:{server.port}"
    assert sent["user-agent"].startswith("TestCrawler/")
    assert sent["accept-encoding"] == "gzip, deflate, br"
    assert sent["accept"].startswith("text/html")
    got = server.seen.requests[0].headers
    assert got["User-Agent"] == sent["user-agent"]
    assert got["Accept-Encoding"] == "gzip, deflate, br"
    assert "Cookie" not in got


@pytest.mark.parametrize("path", ["/gzip", "/br"])
async def test_compressed_pages_are_decoded(server: Server, fetcher: HttpFetcher,
                                            path: str) -> None:
    r = await fetcher.fetch(server.url(path))
    assert r.outcome is FetchOutcome.OK
    assert r.body == HTML * 100
    assert r.header("Content-Encoding") in ("gzip", "br")


@pytest.mark.parametrize(("path", "bomb_size"), [("/bomb", BOMB_SIZE), ("/br-bomb", BR_BOMB_SIZE)])
async def test_compression_bomb_stops_at_the_cap(server: Server, fetcher: HttpFetcher,
                                                 path: str, bomb_size: int) -> None:
    bombs()  # build it before measuring
    tracemalloc.start()
    try:
        r = await fetcher.fetch(server.url(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.outcome is FetchOutcome.TOO_LARGE
    assert r.truncated == "length" and not r.body_refused
    assert len(r.body) == CAP
    assert r.body == bytes(CAP)
    # Far below the decompressed size: the cap plus a few chunks, not the bomb.
    assert peak < 4 * CAP < bomb_size
    assert r.elapsed < 3


async def test_oversize_body_is_too_large(server: Server, fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(server.url("/big"))
    assert r.outcome is FetchOutcome.TOO_LARGE
    assert r.truncated == "length"
    assert "Content-Length" in (r.error or "")
    # refused on its Content-Length: nothing read, so nothing to archive
    assert r.body_refused and r.body == b""
    chunked = await fetcher.fetch(server.url("/big-chunked"))
    assert chunked.outcome is FetchOutcome.TOO_LARGE
    # cut while reading: the bytes up to the cap, to be archived as truncated
    assert chunked.truncated == "length" and not chunked.body_refused
    assert chunked.body == b"b" * CAP
    exact = await fetcher.fetch(server.url("/exact"))
    assert exact.outcome is FetchOutcome.OK
    assert len(exact.body) == CAP
    assert not exact.truncated and not exact.body_refused


async def test_bad_content_type_is_not_downloaded(server: Server,
                                                  fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(server.url("/image"))
    assert r.outcome is FetchOutcome.BAD_CONTENT_TYPE
    assert r.content_type == "image/png"
    assert r.body == b""
    assert r.body_refused and r.truncated is None
    await asyncio.wait_for(server.seen.events["image_done"].wait(), 10)
    assert server.seen.events["image_complete"] is False
    assert server.seen.events["image_sent"] < 32 << 20
    # accept_types replaces the settings' list for one fetch.
    assert (await fetcher.fetch(server.url("/page"), accept_types=("image/*",))).outcome \
        is FetchOutcome.BAD_CONTENT_TYPE


async def test_missing_content_type_is_sniffed() -> None:
    bodies = {b"/html": b"  <html><body>x</body></html>", b"/bin": b"\x00\x01\x02binary"}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        body = bodies[head.split(b" ")[1]]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                     % len(body) + body)
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        async with HttpFetcher(settings()) as f:
            html = await f.fetch(f"http://127.0.0.1:{port}/html")
            binary = await f.fetch(f"http://127.0.0.1:{port}/bin")
    finally:
        srv.close()
        await srv.wait_closed()
    assert html.outcome is FetchOutcome.OK
    assert html.content_type == "text/html"
    assert html.content_type_sniffed
    assert html.body == bodies[b"/html"]
    assert binary.outcome is FetchOutcome.BAD_CONTENT_TYPE
    assert binary.content_type == "application/octet-stream"
    assert binary.body_refused and binary.body == b""  # the sniffed bytes are not kept


async def test_slow_drip_ends_at_the_total_timeout(server: Server) -> None:
    async with HttpFetcher(settings(total_timeout=1.0, connect_timeout=0.5)) as f:
        started = time.monotonic()
        r = await f.fetch(server.url("/slow"))
        took = time.monotonic() - started
    assert r.outcome is FetchOutcome.TIMEOUT
    assert r.status == 200  # the headers had arrived
    assert 0.9 < took < 2.0
    # what had arrived is kept, marked as cut by the time-out (not an empty 200)
    assert r.truncated == "time" and not r.body_refused
    assert 1 <= len(r.body) <= 12 and set(r.body) == {ord("x")}


async def test_connection_dropped_mid_body_keeps_what_arrived() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                     b"Content-Length: 18076\r\n\r\n" + b"<p>" + b"y" * 997)
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        async with HttpFetcher(settings()) as f:
            r = await f.fetch(f"http://127.0.0.1:{port}/cut")
    finally:
        srv.close()
        await srv.wait_closed()
    assert (r.outcome, r.status) == (FetchOutcome.NETWORK_ERROR, 200)
    assert r.truncated == "disconnect" and not r.body_refused
    assert r.body == b"<p>" + b"y" * 997


async def test_redirect_is_reported_not_followed(server: Server,
                                                 fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(server.url("/redirect"))
    assert r.outcome is FetchOutcome.REDIRECT
    assert r.status == 302
    assert r.location == server.url("/target?x=1")
    assert server.seen.paths() == ["/redirect"]
    bad = await fetcher.fetch(server.url("/bad-redirect"))
    assert bad.outcome is FetchOutcome.HTTP_ERROR
    assert bad.location is None


async def test_throttling_and_errors(server: Server, fetcher: HttpFetcher) -> None:
    r429 = await fetcher.fetch(server.url("/429"))
    assert (r429.outcome, r429.status, r429.retry_after) == (
        FetchOutcome.THROTTLED, 429, 120.0)
    r503 = await fetcher.fetch(server.url("/503-date"))
    assert r503.outcome is FetchOutcome.THROTTLED
    assert r503.retry_after is not None
    assert 3590 < r503.retry_after <= 3600
    plain = await fetcher.fetch(server.url("/503"))
    assert (plain.outcome, plain.retry_after) == (FetchOutcome.SERVER_ERROR, None)
    r500 = await fetcher.fetch(server.url("/500"))
    assert r500.outcome is FetchOutcome.SERVER_ERROR
    assert r500.body == b"x" * (64 * 1024)  # kept for the archive, cut short
    assert r500.truncated == "length"
    r404 = await fetcher.fetch(server.url("/404"))
    assert (r404.outcome, r404.body) == (FetchOutcome.HTTP_ERROR, b"nope")
    assert r404.truncated is None


async def test_conditional_get(server: Server, fetcher: HttpFetcher) -> None:
    first = await fetcher.fetch(server.url("/etag"))
    assert first.outcome is FetchOutcome.OK
    assert first.etag == '"v1"'
    again = await fetcher.fetch(server.url("/etag"), etag=first.etag,
                                last_modified=first.last_modified)
    assert again.outcome is FetchOutcome.NOT_MODIFIED
    assert again.status == 304
    assert again.body == b""
    got = server.seen.requests[1].headers
    assert got["If-None-Match"] == '"v1"'
    assert got["If-Modified-Since"] == "Wed, 01 May 2024 12:00:00 GMT"
    # A validator that could split headers is not sent.
    await fetcher.fetch(server.url("/etag"), etag='"v1"\r\nX-Evil: 1')
    assert "If-None-Match" not in server.seen.requests[2].headers
    assert "X-Evil" not in server.seen.requests[2].headers


async def test_connection_refused_and_unsupported(fetcher: HttpFetcher) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = await fetcher.fetch(f"http://127.0.0.1:{port}/")
    assert refused.outcome is FetchOutcome.NETWORK_ERROR
    assert refused.status == 0
    assert refused.error
    for url in ("ftp://127.0.0.1/x", "not a url", "http:///nohost"):
        assert (await fetcher.fetch(url)).outcome is FetchOutcome.UNSUPPORTED, url


# --- SSRF -------------------------------------------------------------------------------


async def test_ssrf_override_to_internal_address_is_refused(
        internal: tuple[Counter, Counter], server: Server) -> None:
    two, _ = internal
    s = settings(resolve=(f"evil.test:{two.port}:127.0.0.2",
                          f"fine.test:{server.port}:127.0.0.1"))
    async with HttpFetcher(s) as f:
        r = await f.fetch(f"http://evil.test:{two.port}/")
        ok = await f.fetch(f"http://fine.test:{server.port}/page")
    assert r.outcome is FetchOutcome.SSRF_BLOCKED
    assert "127.0.0.2" in (r.error or "")
    assert r.peer_ip is None
    assert two.connections == 0
    assert ok.outcome is FetchOutcome.OK
    assert server.seen.requests[0].headers["Host"] == f"fine.test:{server.port}"


async def test_ssrf_literal_addresses_are_refused(internal: tuple[Counter, Counter],
                                                  fetcher: HttpFetcher) -> None:
    two, three = internal
    for url in (f"http://127.0.0.3:{three.port}/", f"http://127.3:{three.port}/",
                f"http://0x7f.0.0.3:{three.port}/", f"http://127.0.0.2:{two.port}/",
                f"http://[::ffff:127.0.0.3]:{three.port}/", f"http://[::1]:{two.port}/"):
        r = await fetcher.fetch(url)
        assert r.outcome is FetchOutcome.SSRF_BLOCKED, url
    assert three.connections == 0
    assert two.connections == 0


async def test_ssrf_default_allows_no_loopback(server: Server) -> None:
    async with HttpFetcher(settings(allow_networks=())) as f:
        r = await f.fetch(server.url("/page"))
    assert r.outcome is FetchOutcome.SSRF_BLOCKED
    assert server.seen.requests == []


async def test_robots_redirect_to_internal_host_is_refused(
        server: Server, internal: tuple[Counter, Counter], fetcher: HttpFetcher) -> None:
    two, _ = internal
    server.seen.events["robots_hops"] = 1
    server.seen.events["robots_elsewhere"] = f"http://127.0.0.2:{two.port}/robots.txt"
    r = await fetcher.fetch_robots(f"http://127.0.0.1:{server.port}")
    assert r.status is None
    assert r.outcome is FetchOutcome.SSRF_BLOCKED
    assert [h.status for h in r.responses] == [301, 302, 0]  # robots.txt, /r/0, refused
    assert two.connections == 0


# --- DNS --------------------------------------------------------------------------------


async def test_dns_through_local_server(dns: tuple[Zone, int], server: Server,
                                        internal: tuple[Counter, Counter]) -> None:
    zone, dns_port = dns
    two, _ = internal
    s = settings(dns_servers=(f"127.0.0.1:{dns_port}",))
    async with HttpFetcher(s) as f:
        good = await f.fetch(f"http://good.test:{server.port}/page")
        again = await f.fetch(f"http://GOOD.test:{server.port}/page")
        evil = await f.fetch(f"http://evil.test:{two.port}/")
        mixed = await f.fetch(f"http://mixed.test:{server.port}/page")
        v6 = await f.fetch(f"http://v6.test:{server.port}/page")
        missing = await f.fetch(f"http://missing.test:{server.port}/page")
        stats = f.resolver.stats
    assert good.outcome is FetchOutcome.OK
    assert good.peer_ip == "127.0.0.1"
    assert again.outcome is FetchOutcome.OK
    assert evil.outcome is FetchOutcome.SSRF_BLOCKED
    assert mixed.outcome is FetchOutcome.SSRF_BLOCKED  # one bad address refuses all
    assert v6.outcome is FetchOutcome.SSRF_BLOCKED
    assert missing.outcome is FetchOutcome.DNS_ERROR
    assert two.connections == 0
    hosts = [r.headers["Host"] for r in server.seen.requests]
    assert hosts == [f"good.test:{server.port}", f"GOOD.test:{server.port}"]
    # One A and one AAAA query per name: the second fetch came from the cache.
    assert sorted(q for q in zone.queries if q[0] == "good.test") == [
        ("good.test", "A"), ("good.test", "AAAA")]
    assert stats.hits >= 1
    assert stats.misses == 5


async def test_dns_temporary_failure_is_retried(dns: tuple[Zone, int], server: Server) -> None:
    zone, dns_port = dns
    async with HttpFetcher(settings(dns_servers=(f"127.0.0.1:{dns_port}",))) as f:
        first = await f.fetch(f"http://broken.test:{server.port}/page")
        asked = len([q for q in zone.queries if q[0] == "broken.test"])
        second = await f.fetch(f"http://broken.test:{server.port}/page")
    assert first.outcome is second.outcome is FetchOutcome.DNS_ERROR
    assert asked >= 2
    assert len([q for q in zone.queries if q[0] == "broken.test"]) > asked  # not cached
    assert server.seen.requests == []


# --- robots.txt ---------------------------------------------------------------------------


async def test_fetch_robots_follows_up_to_five_redirects(server: Server,
                                                          fetcher: HttpFetcher) -> None:
    origin = f"http://127.0.0.1:{server.port}"
    server.seen.events["robots_hops"] = 5
    ok = await fetcher.fetch_robots(origin)
    assert ok.status == 200
    assert b"Disallow: /private" in ok.body
    assert len(ok.responses) == 6
    server.seen.events["robots_hops"] = 6
    too_many = await fetcher.fetch_robots(origin)
    assert too_many.status == 302
    assert too_many.error == "too many redirects"
    assert too_many.body == b""


async def test_fetch_robots_cuts_the_body(server: Server) -> None:
    server.seen.events["robots_body"] = b"User-agent: *\nDisallow: /x\n" * 200
    async with HttpFetcher(settings(robots_max_bytes=1000)) as f:
        r = await f.fetch_robots(f"http://127.0.0.1:{server.port}")
    assert r.status == 200
    assert r.outcome is FetchOutcome.OK
    assert len(r.body) == 1000
    assert r.responses[-1].truncated == "length"  # archived as cut


class MemoryRobotsStore:
    def __init__(self) -> None:
        self.rows: dict[str, RobotsRecord] = {}

    async def get_robots(self, origin: str) -> RobotsRecord | None:
        return self.rows.get(origin)

    async def put_robots(self, row: RobotsRecord) -> None:
        self.rows[row.origin] = row


async def test_robots_cache_over_http(server: Server, fetcher: HttpFetcher) -> None:
    store = MemoryRobotsStore()
    cache = RobotsCache(cast(StateStore, store), fetcher, fetcher.settings)
    decisions = await asyncio.gather(*(cache.for_url(server.url(f"/p{i}")) for i in range(5)))
    assert server.seen.paths().count("/robots.txt") == 1
    first = decisions[0]
    assert first.fetched
    assert first.available
    assert first.allowed(server.url("/public"))
    assert not first.allowed(server.url("/private/page"))
    assert first.crawl_delay == 2.0
    later = await cache.for_url(server.url("/x"))
    assert not later.fetched
    assert server.seen.paths().count("/robots.txt") == 1
    assert f"http://127.0.0.1:{server.port}" in store.rows


# --- one address per fetch (ip politeness keying) ----------------------------------------


@pytest.fixture
async def twin() -> AsyncIterator[tuple[Server, Settings]]:
    """The page server on 127.0.0.5 and 127.0.0.6 (one port, keep-alive), and settings
    in which twin.test answers both, 127.0.0.5 first, and only these two are allowed."""
    seen = Seen()
    runner = web.AppRunner(make_app(seen), shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    try:
        first = web.TCPSite(runner, "127.0.0.5", 0)
        await first.start()
        port = runner.addresses[0][1]
        await web.TCPSite(runner, "127.0.0.6", port).start()
        yield Server(port, seen), settings(
            allow_networks=("127.0.0.5/32", "127.0.0.6/32"),
            resolve=("twin.test:*:127.0.0.5", "twin.test:*:127.0.0.6"))
    finally:
        await runner.cleanup()


async def test_only_address_connects_to_that_address_alone(
        twin: tuple[Server, Settings]) -> None:
    server, fs = twin
    async with HttpFetcher(fs) as f:
        with f.only_address("twin.test", "127.0.0.6"):
            pinned = await f.fetch(server.url("/page", "twin.test"))
        unpinned = await f.fetch(server.url("/page", "twin.test"))
    assert (pinned.outcome, pinned.peer_ip) == (FetchOutcome.OK, "127.0.0.6")
    assert unpinned.peer_ip in ("127.0.0.5", "127.0.0.6")


async def test_only_address_does_not_reuse_a_pooled_connection_to_another(
        twin: tuple[Server, Settings]) -> None:
    """A kept-alive connection to the host's earlier address is closed, not used, once
    its fetches are pinned to another (the host's answer, and key, changed)."""
    server, fs = twin
    async with HttpFetcher(fs) as f:
        with f.only_address("twin.test", "127.0.0.5"):
            before = await f.fetch(server.url("/page", "twin.test"))
        with f.only_address("twin.test", "127.0.0.6"):
            after = await f.fetch(server.url("/page", "twin.test"))
    assert (before.outcome, before.peer_ip) == (FetchOutcome.OK, "127.0.0.5")
    assert (after.outcome, after.peer_ip) == (FetchOutcome.OK, "127.0.0.6")


async def test_only_address_not_in_the_answer_sends_nothing(
        twin: tuple[Server, Settings]) -> None:
    server, fs = twin
    async with HttpFetcher(fs) as f:
        with f.only_address("twin.test", "127.0.0.7"):
            moved = await f.fetch(server.url("/page", "twin.test"))
        with f.only_address("twin.test", None):
            unkeyed = await f.fetch(server.url("/page", "twin.test"))
        with f.only_address("twin.test", "127.0.0.7"):
            robots = await f.fetch_robots(server.url("/", "twin.test"))
    assert moved.outcome is FetchOutcome.DNS_ERROR
    assert moved.error is not None and "127.0.0.7" in moved.error
    assert unkeyed.outcome is FetchOutcome.DNS_ERROR
    assert robots.outcome is FetchOutcome.DNS_ERROR
    assert server.seen.requests == []
