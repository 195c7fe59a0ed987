"""The simulated web's HTTP server: many virtual hosts on one loopback port.

The virtual host is chosen by the Host header (or by the absolute URL of a proxy-style
request), so ``http://news.test:PORT/`` works once news.test resolves to 127.0.0.1:
through the optional DNS responder, a static resolver, or a host:port:address mapping.

Usage::

    async with SimWeb(seed(), dns=True) as web:
        web.port, web.dns_port, web.base_url("news.test"), web.log

    handle = SimWeb.run_in_thread(seed())   # for synchronous callers
    ...
    handle.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from simweb.dns import DnsResponder
from simweb.log import RequestLog, RequestRecord
from simweb.model import Scenario
from simweb.scenarios import seed
from simweb.site import Reply, SimRequest, Site

log = logging.getLogger(__name__)



class _Response(web.StreamResponse):
    """A response that may go out without any Content-Type header."""

    omit_content_type = False


def _split_host(value: str) -> str:
    """'news.test:8080' -> 'news.test'; '[::1]:80' -> '::1'."""
    value = value.strip()
    if value.startswith("["):
        return value[1:].split("]", 1)[0].lower()
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.lower().rstrip(".")


def _host_and_target(request: web.BaseRequest) -> tuple[str, str]:
    raw = request.raw_path
    if raw.startswith(("http://", "https://")):  # absolute form: used as a proxy
        rest = raw.split("://", 1)[1]
        authority, slash, path = rest.partition("/")
        return _split_host(authority), slash + path if slash else "/"
    return _split_host(request.headers.get("Host", "")), raw or "/"


class SimWeb:
    """The simulated web: an aiohttp server on loopback plus an optional DNS responder.

    ``max_stall`` bounds every delay, hang and drip of a single answer (seconds); all of
    them also end at once when the server stops.
    """

    def __init__(self, scenario: Scenario | None = None, *, port: int = 0,
                 host: str = "127.0.0.1", dns: bool = False, dns_port: int = 0,
                 max_stall: float = 30.0,
                 clock: Callable[[], float] | None = None) -> None:
        if scenario is None:
            scenario = seed()
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"the simulated web binds to loopback only, not {host!r}")
        if max_stall < 0:
            raise ValueError("max_stall must be >= 0")
        self.scenario = scenario
        self.host = host
        self.max_stall = max_stall
        self.clock = clock or time.time  # pages with change_every change on it
        self.log = RequestLog()
        self._want_port = port
        self._want_dns = dns
        self._dns_port = dns_port
        self._port: int | None = None
        self._site: Site | None = None
        self._runner: web.AppRunner | None = None
        self._dns: DnsResponder | None = None
        self._stopping: asyncio.Event | None = None

    # --- life cycle ---------------------------------------------------------------

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("already started")
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        app.on_response_prepare.append(self._on_prepare)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True,
                               shutdown_timeout=2.0)
        await runner.setup()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._want_port))
            self._port = int(sock.getsockname()[1])
            self._site = Site(self.scenario, self._port, clock=self.clock)
            # Compression bombs are made once, before the first request needs one.
            await asyncio.to_thread(self._site.warm)
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            self._port = self._site = None
            raise
        self._runner = runner
        if self._want_dns:
            self._dns = DnsResponder(self.addresses(), ttl=self.scenario.dns_ttl,
                                     host=self.host, port=self._dns_port)
            try:
                await self._dns.start()
            except BaseException:
                await self.stop()
                raise

    async def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        if self._dns is not None:
            await self._dns.stop()
            self._dns = None
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> SimWeb:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()

    @classmethod
    def run_in_thread(cls, scenario: Scenario | None = None, *, timeout: float = 30.0,
                      **kwargs: Any) -> SimWebThread:
        """Start a SimWeb in a background thread with its own event loop; returns once
        it is serving. Stop it with ``handle.stop()`` (or use it as a context manager)."""
        handle = SimWebThread(cls(scenario, **kwargs))
        handle.start(timeout)
        return handle

    # --- addresses ----------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the simulated web is not running")
        return self._port

    @property
    def dns_port(self) -> int:
        """UDP port of the DNS responder (start with dns=True)."""
        if self._dns is None:
            raise RuntimeError("no DNS responder: start SimWeb with dns=True")
        return self._dns.port

    @property
    def dns(self) -> DnsResponder:
        if self._dns is None:
            raise RuntimeError("no DNS responder: start SimWeb with dns=True")
        return self._dns

    @property
    def dns_servers(self) -> list[str]:
        """['127.0.0.1:PORT'], as aiodns/pycares and the fetcher's dns_servers take it."""
        return [self.dns.server]

    @property
    def site(self) -> Site:
        if self._site is None:
            raise RuntimeError("the simulated web is not running")
        return self._site

    def base_url(self, host: str) -> str:
        """'http://news.test:PORT' (no trailing slash)."""
        return self.site.base_url(host)

    def url(self, host: str, target: str = "/") -> str:
        return self.base_url(host) + target

    def seed_urls(self) -> list[str]:
        """The scenario's seed URLs with this server's port."""
        return self.site.seed_urls()

    def addresses(self) -> dict[str, str]:
        """host -> the address DNS gives it (127.0.0.1 unless the scenario says else)."""
        return {h.name: h.address for h in self.scenario.hosts}

    def resolve_entries(self) -> list[str]:
        """'host:port:address' for every host, like curl --resolve (and the fetcher's
        ``resolve`` setting)."""
        return [f"{h}:{self.port}:{a}" for h, a in self.addresses().items()]

    def resolver(self) -> StaticResolver:
        """An aiohttp resolver that answers the scenario's hosts without DNS."""
        return StaticResolver(self.addresses())

    def crawler_env(self) -> dict[str, str]:
        """CRAWLER_* variables that point the crawler's fetcher at this web: fixed
        answers for every host (or the DNS responder when running) and loopback allowed
        through the SSRF guard."""
        env = {"CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.0/8"}
        if self._dns is not None:
            env["CRAWLER_FETCHER_DNS_SERVERS"] = ",".join(self.dns_servers)
        else:
            env["CRAWLER_FETCHER_RESOLVE"] = ",".join(self.resolve_entries())
        return env

    def visits(self, host: str, target: str) -> int:
        return self.site.visits(host, target)

    # --- serving ------------------------------------------------------------------

    async def _pause(self, seconds: float) -> None:
        """Sleep up to ``seconds`` (at most max_stall); wakes early when stopping."""
        seconds = min(seconds, self.max_stall)
        if seconds <= 0 or self._stopping is None or self._stopping.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        # aiohttp adds application/octet-stream to bodies without a type; undo that for
        # pages that are meant to have none.
        if isinstance(response, _Response) and response.omit_content_type:
            response.headers.popall("Content-Type", None)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        started, started_wall = time.monotonic(), time.time()
        host, target = _host_and_target(request)
        remote = f"{request.remote or ''}:{_peer_port(request)}"
        seq = self.log.begin(host)
        status, sent, completed = 0, 0, False
        # ``handoff``: the moment just before the last bytes went to the transport, so never
        # later than the client could have seen the end of the answer (the server thread
        # may be scheduled late after a write; a later stamp would shorten measured gaps)
        handoff: list[float] = []
        try:
            reply = self.site.respond(SimRequest(host, target, request.method,
                                                 dict(request.headers)))
            status = reply.status
            await self._pause(reply.delay)
            response = _Response(status=reply.status)
            for name, value in reply.headers:
                response.headers.add(name, value)
            response.headers["Server"] = "simweb"
            response.omit_content_type = reply.header("Content-Type") is None
            no_content = reply.status in (204, 304) or reply.status < 200
            bodyless = no_content or request.method == "HEAD"
            if not no_content:
                response.content_length = len(reply.body)
            handoff.append(time.monotonic())
            await response.prepare(request)
            if not bodyless:
                sent = await self._send_body(response, reply, handoff)
            await response.write_eof()
            completed = True
            return response
        except ConnectionError:
            log.debug("client went away: %s %s", host, target)
            raise
        finally:
            ended = handoff[-1] if completed else time.monotonic()
            self.log.finish(RequestRecord(
                seq=seq, host=host, target=target, method=request.method,
                headers=tuple(request.headers.items()), started=started,
                ended=ended, started_wall=started_wall,
                ended_wall=started_wall + (ended - started),
                status=status, bytes_sent=sent, completed=completed,
                remote=remote))

    async def _send_body(self, response: web.StreamResponse, reply: Reply,
                         handoff: list[float]) -> int:
        body = reply.body
        if reply.drip_seconds <= 0 or reply.drip_chunks <= 1 or len(body) <= 1:
            handoff.append(time.monotonic())
            await response.write(body)
            return len(body)
        chunks = min(reply.drip_chunks, len(body))
        size = -(-len(body) // chunks)
        interval = min(reply.drip_seconds, self.max_stall) / max(1, chunks - 1)
        sent = 0
        for i in range(0, len(body), size):
            if i:
                await self._pause(interval)
            handoff.append(time.monotonic())
            await response.write(body[i:i + size])
            sent += len(body[i:i + size])
        return sent


def _peer_port(request: web.BaseRequest) -> int:
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    return int(peer[1]) if peer else 0


class StaticResolver(AbstractResolver):
    """aiohttp resolver with fixed answers (host -> address); other names fail."""

    def __init__(self, addresses: dict[str, str]) -> None:
        self._addresses = {k.lower(): v for k, v in addresses.items()}

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        address = self._addresses.get(host.lower().rstrip("."))
        if address is None:
            raise OSError(socket.EAI_NONAME, f"simweb: no such host {host!r}")
        fam = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [ResolveResult(hostname=host, host=address, port=port, family=fam,
                              proto=0, flags=socket.AI_NUMERICHOST)]

    async def close(self) -> None:
        return None


class SimWebThread:
    """A SimWeb running in a background thread, for synchronous callers."""

    def __init__(self, simweb: SimWeb) -> None:
        self.web = simweb
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None

    def start(self, timeout: float = 30.0) -> None:
        self._thread = threading.Thread(target=self._run, name="simweb", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the simulated web did not start in time")
        if self._error is not None:
            self._thread.join(timeout)
            raise self._error

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            try:
                loop.run_until_complete(self.web.start())
                self._stop_event = asyncio.Event()
            except BaseException as exc:  # reported to the starting thread
                self._error = exc
                return
            finally:
                self._ready.set()
            loop.run_until_complete(self._stop_event.wait())
            loop.run_until_complete(self.web.stop())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server and wait for its thread to end."""
        if self._thread is None:
            return
        loop, event = self._loop, self._stop_event
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the simulated web did not stop in time")
        self._thread = None

    def __enter__(self) -> SimWebThread:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # Shortcuts to the running server.
    @property
    def port(self) -> int:
        return self.web.port

    @property
    def dns_port(self) -> int:
        return self.web.dns_port

    @property
    def log(self) -> RequestLog:
        return self.web.log

    def base_url(self, host: str) -> str:
        return self.web.base_url(host)

    def url(self, host: str, target: str = "/") -> str:
        return self.web.url(host, target)

    def seed_urls(self) -> Sequence[str]:
        return self.web.seed_urls()
