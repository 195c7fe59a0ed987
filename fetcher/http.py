"""HTTP fetching: one GET, never following redirects, classified into a FetchOutcome.

:class:`HttpFetcher` owns one aiohttp session for the whole fetcher. Each fetch:

1. resolves the host through the DNS cache and checks every address with the SSRF
   guard (a refusal ends the fetch before any connection: ``SSRF_BLOCKED``);
2. connects to exactly the checked addresses (:class:`fetcher.dns.CheckedResolver`),
   and the connector checks the connected peer once more; inside
   :meth:`HttpFetcher.only_address` (``ip`` politeness keying) to the one address the
   task's key names, or to none (a recorded ``DNS_ERROR``), never to another;
3. sends ``User-Agent``, ``Accept``, ``Accept-Encoding: gzip, deflate, br`` and the
   conditional headers, with ``allow_redirects=False`` (each hop goes back to the
   frontier so robots.txt and politeness apply to it);
4. for a 2xx, checks the media type against the allowed list *before* reading the
   body, then reads the decompressed body in chunks and stops as soon as it passes
   the cap, so a compression bomb never inflates in memory.

A body is read in full, or cut (``truncated`` says why, in the WARC-Truncated values:
``length`` at a cap, ``time`` at the total timeout, ``disconnect`` when the connection
ended early, ``unspecified`` for another failure mid-body; ``body`` holds what
arrived), or refused unread (``body_refused``: a media type not allowed, or a declared
Content-Length over the cap; the fetcher stage then archives nothing for it).

Decisions:

- Missing ``Content-Type``: the first bytes are sniffed (:func:`sniff_media_type`, a
  small subset of the WHATWG MIME sniffing rules: HTML tags, XML, PDF, binary control
  bytes, else ``text/plain``) and the sniffed type is checked against the list.
- 429 is always ``THROTTLED``; 503 is ``THROTTLED`` when it carries a usable
  Retry-After, else ``SERVER_ERROR`` (as :class:`~common.messages.FetchOutcome` defines).
- A 3xx other than 304 with a usable Location is ``REDIRECT`` (absolute target in
  ``location``); without one it is ``HTTP_ERROR``.
- Bodies of non-2xx responses are kept (for the WARC) up to :data:`ERROR_BODY_CAP`,
  cut with ``truncated="length"``; a 2xx body over the cap ends as ``TOO_LARGE`` with
  the first ``cap`` bytes and ``truncated="length"``, or, when its Content-Length
  already says so (and no Content-Encoding changes the size), unread: an empty
  ``body``, ``truncated="length"`` and ``body_refused``.
- Cookies are never stored or sent; proxies from the environment are ignored.
- The whole fetch, DNS included, ends at ``total_timeout``; connecting at
  ``connect_timeout``. A slow-drip server therefore ends as ``TIMEOUT``, with the
  bytes that had arrived and ``truncated="time"``.
- ``headers`` are the response headers as received (so ``Content-Encoding`` may say
  gzip while ``body`` is already decoded); a WARC writer must account for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import ipaddress
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import aiohttp
import yarl
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.tracing import Trace

from common import urls
from common.addresses import normalise_host
from common.archive import Truncation
from common.clock import wall_clock as crawl_clock
from common.messages import FetchOutcome
from common.settings import Settings
from fetcher.dns import CheckedResolver, DnsError, Resolver, only_address
from fetcher.ssrf import Guard, SsrfBlockedError

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
"""Bytes read from the decompressed stream at a time."""

ERROR_BODY_CAP = 64 * 1024
"""Bytes of a non-2xx body kept for the archive."""

SNIFF_BYTES = 1024
"""Bytes looked at when a 2xx response has no Content-Type."""

MAX_ROBOTS_REDIRECTS = 5
"""Redirect hops followed for robots.txt (RFC 9309 section 2.3.1.2)."""

ACCEPT_ENCODING = "gzip, deflate, br"

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Response:
    """The result of one GET. Never raised; every failure is an ``outcome``."""

    url: str
    outcome: FetchOutcome
    status: int = 0  # 0 when no response arrived
    reason: str = ""
    http_version: str = ""  # "1.1"
    headers: tuple[tuple[str, str], ...] = ()  # response headers as received
    body: bytes = b""  # decoded (decompressed) body as received, at most the cap
    truncated: Truncation | None = None  # why ``body`` is not all of it; None: complete
    body_refused: bool = False  # the body was refused before it was read (not archived)
    content_type: str | None = None  # lower-case media type, or the sniffed one
    charset: str | None = None
    content_type_sniffed: bool = False
    location: str | None = None  # absolute redirect target (REDIRECT only)
    retry_after: float | None = None  # seconds, from Retry-After
    peer_ip: str | None = None  # the address connected to
    request_headers: tuple[tuple[str, str], ...] = ()  # as sent, Host included
    request_target: str = ""  # path and query of the request line
    started_at: float = 0.0  # wall clock when the request started
    fetched_at: float = 0.0  # wall clock when the response (or failure) ended
    elapsed: float = 0.0  # seconds from request start to body end
    error: str | None = None  # what went wrong, for logs and the frontier

    def header(self, name: str) -> str | None:
        """The first response header called ``name`` (case-insensitive)."""
        low = name.lower()
        for key, value in self.headers:
            if key.lower() == low:
                return value
        return None

    @property
    def etag(self) -> str | None:
        return self.header("ETag")

    @property
    def last_modified(self) -> str | None:
        return self.header("Last-Modified")

    @property
    def x_robots_tag(self) -> str | None:
        values = [v for k, v in self.headers if k.lower() == "x-robots-tag"]
        return ", ".join(values) if values else None


@dataclass(frozen=True, slots=True)
class RobotsResponse:
    """robots.txt as fetched for an origin, redirects followed."""

    status: int | None  # final HTTP status; None when no response arrived
    body: bytes  # the 2xx body, at most robots_max_bytes; else empty
    error: str | None
    outcome: FetchOutcome  # of the last hop (TIMEOUT, SSRF_BLOCKED, ... when status is None)
    responses: tuple[Response, ...] = ()  # every hop, for the archive


# --- pure helpers -------------------------------------------------------------------


#: Largest Retry-After returned (about 31,700 years); callers cap it far lower.
MAX_RETRY_AFTER_SECONDS = 1e12


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or an HTTP date).

    ``now`` is the wall-clock time (epoch seconds) the response arrived. A date in the
    past gives 0.0; an empty or unreadable value gives ``None``. Not capped here.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if not text.isascii():
        return None  # HTTP's digits and dates are ASCII; float() would take other digits
    if text.isdigit():
        # delta-seconds of any length: past 12 digits it is longer than anyone waits,
        # and the caller caps it (int() of thousands of digits would raise)
        return float(text) if len(text) <= 12 else MAX_RETRY_AFTER_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # asctime form: HTTP dates are GMT
    return max(0.0, when.timestamp() - now)


def classify_status(status: int, *, location: str | None = None,
                    retry_after: float | None = None) -> FetchOutcome:
    """The outcome of a response by status; ``location`` is the resolved target."""
    if status == 304:
        return FetchOutcome.NOT_MODIFIED
    if 200 <= status < 300:
        return FetchOutcome.OK
    if 300 <= status < 400:
        return FetchOutcome.REDIRECT if location else FetchOutcome.HTTP_ERROR
    if status == 429 or (status == 503 and retry_after is not None):
        return FetchOutcome.THROTTLED
    if 500 <= status < 600:
        return FetchOutcome.SERVER_ERROR
    if 400 <= status < 500:
        return FetchOutcome.HTTP_ERROR
    return FetchOutcome.NETWORK_ERROR  # 1xx final or out of range: a broken server


def media_type_allowed(media_type: str, allowed: Sequence[str]) -> bool:
    """Whether ``media_type`` matches one of ``allowed`` (``type/*`` and ``*/*`` work)."""
    mt = media_type.strip().lower()
    major = mt.partition("/")[0]
    for pattern in allowed:
        p = pattern.strip().lower()
        if p in (mt, "*/*") or (p.endswith("/*") and p[:-2] == major):
            return True
    return False


def accept_header(types: Sequence[str]) -> str:
    """An Accept header preferring ``types`` in order."""
    if not types:
        return "*/*"
    parts = [types[0]]
    parts += [f"{t};q=0.9" for t in types[1:]]
    return ", ".join([*parts, "*/*;q=0.1"])


_HTML_TAGS = (b"<!doctype html", b"<html", b"<head", b"<script", b"<iframe", b"<h1",
              b"<div", b"<font", b"<table", b"<a", b"<style", b"<title", b"<b",
              b"<body", b"<br", b"<p", b"<!--")
_BINARY = frozenset([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])


def sniff_media_type(head: bytes) -> str:
    """A media type for a body without Content-Type, from its first bytes."""
    for bom in (b"\xef\xbb\xbf", b"\xfe\xff", b"\xff\xfe"):
        if head.startswith(bom):
            return "text/plain"
    text = head.lstrip(b"\t\n\x0c\r ").lower()
    for tag in _HTML_TAGS:
        if text.startswith(tag) and (tag == b"<!--" or text[len(tag):len(tag) + 1] in (
                b" ", b">")):
            return "text/html"
    if text.startswith(b"<?xml"):
        return "text/xml"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if any(b in _BINARY for b in head):
        return "application/octet-stream"
    return "text/plain"


def _clean_header_value(value: str | None) -> str | None:
    """A value safe to send back (validators come from servers)."""
    if not value or any(c in value for c in "\r\n\x00") or not value.isprintable():
        return None
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return None
    return value


# --- the connector: records (and re-checks) the peer ---------------------------------


@dataclass(slots=True)
class _Attempt:
    peer_ip: str | None = None
    request_headers: tuple[tuple[str, str], ...] = ()


_ATTEMPT: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar(
    "fetcher_http_attempt", default=None)

# (host name, the one address its fetches may connect to; None: none)
_ONLY: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar(
    "fetcher_http_only_address", default=None)

STALE_POOLED = 8
"""Pooled connections to another address than a fetch's pinned one closed at most
before the fetch gives up (they are left from before its host's answer changed)."""


def _same_address(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a.split("%", 1)[0]) == ipaddress.ip_address(
            b.strip("[]").split("%", 1)[0])
    except ValueError:
        return False


class _GuardedConnector(aiohttp.TCPConnector):
    """A TCPConnector that checks the connected peer with the guard and notes it.

    The resolver already hands out only checked addresses; this check also covers
    pooled connections and IP-literal URLs, and tells the fetch which address it got.
    """

    def __init__(self, guard: Guard, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._guard = guard

    async def connect(self, req: ClientRequest, traces: list[Trace],
                      timeout: aiohttp.ClientTimeout) -> Connection:  # noqa: ASYNC109
        only = _ONLY.get()
        pinned = only[1] if only is not None and only[0] == normalise_host(
            req.url.host or "") else None
        for _ in range(STALE_POOLED + 1):
            conn = await super().connect(req, traces, timeout)
            transport = conn.transport
            peer = transport.get_extra_info("peername") if transport is not None else None
            ip = peer[0] if isinstance(peer, tuple) and peer else None
            if ip is None or not self._guard.check(ip).allowed:
                conn.close()
                raise SsrfBlockedError(req.url.host or "", [self._guard.check(ip or "?")])
            if pinned is None or _same_address(ip, pinned):
                break
            # a pooled connection made before the host's answer changed: closed, not
            # used (the request must reach the address its politeness key names)
            conn.close()
        else:
            raise aiohttp.ClientConnectionError(
                f"{req.url.host}: no connection to {pinned}, the address its politeness "
                "key names")
        attempt = _ATTEMPT.get()
        if attempt is not None:
            attempt.peer_ip = ip
        return conn


# --- the fetcher -----------------------------------------------------------------------


@dataclass(slots=True)
class _Partial:
    """What is known so far about a fetch, so a failure still reports it."""

    url: str
    status: int = 0
    reason: str = ""
    http_version: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str | None = None
    charset: str | None = None
    attempt: _Attempt = field(default_factory=_Attempt)
    body: bytearray = field(default_factory=bytearray)  # decoded bytes read so far
    request_target: str = ""
    started_at: float = 0.0
    started: float = 0.0  # monotonic


class HttpFetcher:
    """One shared aiohttp session; :meth:`fetch` and :meth:`fetch_robots`.

    Use ``async with HttpFetcher(settings) as f:`` or :meth:`start` / :meth:`close`.
    ``resolver`` and ``guard`` default to ones built from ``settings``; a passed-in
    resolver is not closed by :meth:`close`.
    """

    def __init__(self, settings: Settings, *, resolver: Resolver | None = None,
                 guard: Guard | None = None, wall_clock: Clock | None = None,
                 monotonic: Clock = time.monotonic, verify_tls: bool = True) -> None:
        self.settings = settings
        fs = settings.fetcher
        self.guard = guard if guard is not None else Guard(fs.allow_networks)
        self._own_resolver = resolver is None
        self.resolver = resolver if resolver is not None else Resolver.from_settings(fs)
        self.checked = CheckedResolver(self.resolver, self.guard)
        self._wall = wall_clock if wall_clock is not None else crawl_clock(settings)
        self._mono = monotonic
        self._verify_tls = verify_tls
        self._session: aiohttp.ClientSession | None = None
        self.user_agent = settings.crawl.user_agent

    async def __aenter__(self) -> HttpFetcher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._session is not None:
            return
        fs = self.settings.fetcher
        connector = _GuardedConnector(
            self.guard, limit=fs.concurrency, limit_per_host=fs.concurrency,
            resolver=self.checked, use_dns_cache=False,
            ssl=None if self._verify_tls else False)
        self._session = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
            auto_decompress=True, raise_for_status=False,
            timeout=aiohttp.ClientTimeout(total=None, connect=fs.connect_timeout,
                                          sock_connect=fs.connect_timeout))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._own_resolver:
            await self.resolver.close()

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("HttpFetcher.start() was not called")
        return self._session

    @contextlib.contextmanager
    def only_address(self, host: str, address: str | None) -> Iterator[None]:
        """Within: fetches of ``host`` (a name, any port) connect to ``address`` alone, one
        of its checked addresses, and to nothing when it is not among them or is None
        (the fetch ends as ``DNS_ERROR``, no request sent); a failed connection is not
        tried at another address. What ``ip`` politeness keying needs: the request
        counts under the address its task's key names. Robots.txt fetched meanwhile
        for the host is pinned the same way; other hosts (a redirect's) are not."""
        token = _ONLY.set((normalise_host(host), address))
        try:
            yield
        finally:
            _ONLY.reset(token)

    async def ssrf_refusal(self, url: str) -> str | None:
        """Why the guard refuses the host of ``url``, or None when it does not.

        Resolves (through the DNS cache, within ``total_timeout``) and checks every
        address; connects nowhere. A DNS failure, a time-out or a URL without a host is
        not a refusal (None): a fetch reports those.
        """
        try:
            target = yarl.URL(url, encoded=True)
            if not target.host:
                return None
            async with asyncio.timeout(self.settings.fetcher.total_timeout):
                await self.checked.resolve_checked(target.host, target.port)
        except SsrfBlockedError as exc:
            return str(exc)
        except (DnsError, TimeoutError, ValueError, TypeError):
            return None
        return None

    async def fetch(self, url: str, *, etag: str | None = None,
                    last_modified: str | None = None,
                    accept_types: Sequence[str] | None = None,
                    cap: int | None = None) -> Response:
        """GET ``url`` once. Never raises for network, HTTP or content problems.
        ``accept_types`` and ``cap`` replace the settings' media types and body cap."""
        fs = self.settings.fetcher
        types = tuple(accept_types) if accept_types is not None else fs.allowed_content_types
        headers = {"Accept": accept_header(types)}
        if (value := _clean_header_value(etag)) is not None:
            headers["If-None-Match"] = value
        if (value := _clean_header_value(last_modified)) is not None:
            headers["If-Modified-Since"] = value
        return await self._get(url, headers, check_types=types,
                               cap=fs.max_body_bytes if cap is None else cap, truncate=False)

    async def fetch_robots(self, origin: str) -> RobotsResponse:
        """GET ``origin``/robots.txt, following up to five redirects (each hop guarded).

        Any media type is accepted and the body is cut at ``robots_max_bytes``. More
        than five redirects, or a redirect without a usable target, report the last
        3xx status with an error: robots.txt is then unavailable (RFC 9309 2.3.1.2).
        """
        fs = self.settings.fetcher
        try:
            url = urls.robots_url(origin)
        except ValueError as exc:
            return RobotsResponse(None, b"", f"bad origin: {exc}", FetchOutcome.UNSUPPORTED)
        hops: list[Response] = []
        headers = {"Accept": "text/plain, */*;q=0.1"}
        for _ in range(MAX_ROBOTS_REDIRECTS + 1):
            resp = await self._get(url, headers, check_types=None, cap=fs.robots_max_bytes,
                                   truncate=True)
            hops.append(resp)
            if resp.outcome is FetchOutcome.REDIRECT and resp.location is not None:
                url = resp.location
                continue
            break
        last = hops[-1]
        if last.status == 0:
            return RobotsResponse(None, b"", last.error, last.outcome, tuple(hops))
        if last.outcome is FetchOutcome.REDIRECT:
            return RobotsResponse(last.status, b"", "too many redirects", last.outcome,
                                  tuple(hops))
        body = last.body if 200 <= last.status < 300 else b""
        return RobotsResponse(last.status, body, last.error, last.outcome, tuple(hops))

    async def _get(self, url: str, extra: dict[str, str], *,
                   check_types: Sequence[str] | None, cap: int, truncate: bool) -> Response:
        part = _Partial(url=url, started_at=self._wall(), started=self._mono())
        try:
            target = yarl.URL(url, encoded=True)
        except (ValueError, TypeError) as exc:
            return self._fail(part, FetchOutcome.UNSUPPORTED, f"bad URL: {exc}")
        if target.scheme not in ("http", "https") or not target.host:
            return self._fail(part, FetchOutcome.UNSUPPORTED, "not an http(s) URL with a host")
        part.request_target = target.raw_path_qs
        headers = {"User-Agent": self.user_agent, "Accept-Encoding": ACCEPT_ENCODING, **extra}
        try:
            async with asyncio.timeout(self.settings.fetcher.total_timeout):
                addresses = await self.checked.resolve_checked(target.host, target.port)
                only = _ONLY.get()
                if only is not None and only[0] == normalise_host(target.host):
                    addresses = only_address(target.host, addresses, only[1])
                token = _ATTEMPT.set(part.attempt)
                try:
                    with self.checked.pin(target.host, addresses):
                        return await self._request(part, target, headers, check_types, cap,
                                                   truncate)
                finally:
                    _ATTEMPT.reset(token)
        except SsrfBlockedError as exc:
            return self._fail(part, FetchOutcome.SSRF_BLOCKED, str(exc))
        except DnsError as exc:
            return self._fail(part, FetchOutcome.DNS_ERROR, str(exc))
        except TimeoutError as exc:
            return self._fail(part, FetchOutcome.TIMEOUT, "timed out", exc)
        except aiohttp.ClientConnectorDNSError as exc:
            if isinstance(exc.os_error, SsrfBlockedError):
                return self._fail(part, FetchOutcome.SSRF_BLOCKED, str(exc.os_error))
            return self._fail(part, FetchOutcome.DNS_ERROR, str(exc))
        except aiohttp.InvalidURL as exc:
            return self._fail(part, FetchOutcome.UNSUPPORTED, f"bad URL: {exc}")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            if isinstance(exc.__cause__, SsrfBlockedError):
                return self._fail(part, FetchOutcome.SSRF_BLOCKED, str(exc.__cause__))
            return self._fail(part, FetchOutcome.NETWORK_ERROR,
                              f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                              exc)

    async def _request(self, part: _Partial, target: yarl.URL, headers: dict[str, str],
                       check_types: Sequence[str] | None, cap: int,
                       truncate: bool) -> Response:
        part.started_at = self._wall()
        part.started = self._mono()
        async with self._sess().get(target, headers=headers, allow_redirects=False) as resp:
            part.status = resp.status
            part.reason = resp.reason or ""
            part.http_version = f"{resp.version.major}.{resp.version.minor}" if resp.version \
                else ""
            part.headers = tuple((k.decode("latin-1"), v.decode("latin-1"))
                                 for k, v in resp.raw_headers)
            part.attempt.request_headers = tuple(resp.request_info.headers.items())
            status = resp.status
            retry_after = parse_retry_after(resp.headers.get("Retry-After"), self._wall())
            location: str | None = None
            error: str | None = None
            if 300 <= status < 400 and status != 304:
                raw_location = resp.headers.get("Location")
                location = urls.resolve(raw_location, str(part.url)) if raw_location else None
                if location is None:
                    error = ("redirect without a usable Location"
                             if raw_location else "redirect without a Location")
            outcome = classify_status(status, location=location, retry_after=retry_after)
            ctype_header = resp.headers.get("Content-Type", "").strip()
            if ctype_header:
                part.content_type = resp.content_type.lower()
                part.charset = resp.charset
            if outcome is not FetchOutcome.OK:
                cut = await _read_capped(resp, min(cap, ERROR_BODY_CAP), part.body)
                return self._done(part, outcome, body=bytes(part.body),
                                  truncated="length" if cut else None, location=location,
                                  retry_after=retry_after, error=error)
            # 2xx: decide on the media type before reading the body.
            sniffed = False
            if check_types is not None:
                if not ctype_header:
                    await _read_head(resp, SNIFF_BYTES, part.body)
                    part.content_type = sniff_media_type(bytes(part.body))
                    sniffed = True
                if not media_type_allowed(part.content_type or "", check_types):
                    resp.close()
                    return self._done(part, FetchOutcome.BAD_CONTENT_TYPE, refused=True,
                                      sniffed=sniffed, error=f"media type {part.content_type}"
                                      " not allowed")
            declared = _content_length(resp)
            if (not truncate and declared is not None and declared > cap
                    and not resp.headers.get("Content-Encoding")):
                resp.close()
                return self._done(part, FetchOutcome.TOO_LARGE, truncated="length",
                                  refused=True, sniffed=sniffed,
                                  error=f"Content-Length {declared} over the cap of {cap} bytes")
            cut = await _read_capped(resp, cap, part.body)
            if cut and not truncate:
                return self._done(part, FetchOutcome.TOO_LARGE, body=bytes(part.body),
                                  truncated="length", sniffed=sniffed,
                                  error=f"body over the cap of {cap} bytes")
            return self._done(part, FetchOutcome.OK, body=bytes(part.body),
                              truncated="length" if cut else None, sniffed=sniffed,
                              retry_after=retry_after)

    def _done(self, part: _Partial, outcome: FetchOutcome, *, body: bytes = b"",
              truncated: Truncation | None = None, refused: bool = False,
              sniffed: bool = False, location: str | None = None,
              retry_after: float | None = None, error: str | None = None) -> Response:
        return Response(
            url=part.url, outcome=outcome, status=part.status, reason=part.reason,
            http_version=part.http_version, headers=part.headers, body=body,
            truncated=truncated, body_refused=refused, content_type=part.content_type,
            charset=part.charset,
            content_type_sniffed=sniffed, location=location, retry_after=retry_after,
            peer_ip=part.attempt.peer_ip, request_headers=part.attempt.request_headers,
            request_target=part.request_target, started_at=part.started_at,
            fetched_at=self._wall(), elapsed=max(0.0, self._mono() - part.started),
            error=error)

    def _fail(self, part: _Partial, outcome: FetchOutcome, error: str,
              exc: BaseException | None = None) -> Response:
        if outcome in (FetchOutcome.TIMEOUT, FetchOutcome.NETWORK_ERROR):
            log.debug("fetch failed", extra={"url": part.url, "outcome": outcome.value,
                                             "error": error})
        if part.status and exc is not None:
            # the response head had arrived: keep what came of the body, marked as cut
            return self._done(part, outcome, body=bytes(part.body), truncated=_cut_by(exc),
                              error=error)
        return self._done(part, outcome, error=error)


def _content_length(resp: aiohttp.ClientResponse) -> int | None:
    raw = resp.headers.get("Content-Length")
    if raw is None or not raw.strip().isdigit():
        return None
    return int(raw.strip())


def _cut_by(exc: BaseException) -> Truncation:
    """The WARC-Truncated reason of a body that ended with ``exc`` after the head."""
    if isinstance(exc, TimeoutError):
        return "time"
    causes: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(causes) < 8:
        causes.append(seen)
        seen = seen.__cause__ or seen.__context__
    if any(isinstance(c, ContentEncodingError) for c in causes):
        return "unspecified"  # undecodable bytes, not a short body
    if any(isinstance(c, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                          aiohttp.ClientOSError, ConnectionError)) for c in causes):
        return "disconnect"
    return "unspecified"


async def _read_head(resp: aiohttp.ClientResponse, n: int, buf: bytearray) -> None:
    """Append to ``buf`` the start of the (decoded) body, until it holds ``n`` bytes."""
    while len(buf) < n:
        chunk = await resp.content.read(n - len(buf))
        if not chunk:
            break
        buf += chunk


async def _read_capped(resp: aiohttp.ClientResponse, cap: int, buf: bytearray) -> bool:
    """Append the rest of the decoded body to ``buf``, keeping at most ``cap`` bytes.

    Stops reading (and closes the connection) as soon as more than ``cap`` bytes have
    arrived, so at most ``cap`` plus one chunk is ever held. Returns whether the body
    was cut. ``buf`` keeps what arrived even when reading fails (a time-out, a reset).
    """
    if len(buf) > cap:
        del buf[cap:]
        resp.close()
        return True
    async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
        room = cap - len(buf)
        if len(chunk) > room:
            buf += chunk[:room]
            resp.close()
            return True
        buf += chunk
    return False

