"""Headless Chromium over the DevTools protocol: load a stored page, return its DOM.

The browser is Debian's ``chromium`` (the system one; nothing is downloaded), started
here as a child process in a session of its own with ``--remote-debugging-port=0`` and
driven through Playwright's ``connect_over_cdp``. Starting it ourselves keeps its PID,
so a browser that hangs is killed with all its processes (its process group), and one
that died is noticed and started again.

The browser itself reaches no network: its proxy (``--proxy-server``, loopback
included) is :class:`ProxyTrap`, a listener of the crawler's own on an ephemeral port of
127.0.0.1 that refuses, counts and logs whatever reaches it, and every request it makes
is intercepted (Playwright routing, the DevTools Fetch domain) and answered here:

- the page itself from the stored response: the server sees no second request;
- requests :func:`common.rendering.subresource_verdict` lets through (scripts and
  XHR/fetch of the page's host) after the SSRF guard, robots.txt and the host's
  politeness gate, fetched by the crawler's own HTTP client (size cap, time-outs,
  User-Agent, the guarded connector against DNS rebinding);
- everything else is aborted.

What the interception cannot see is switched off (:func:`launch_args`,
:data:`PREFERENCES`: SharedWorkers, preloading, WebRTC's UDP), closed in the page (its
WebSockets) or never run (a page's pagehide and unload handlers: its renderer is ended
before the tab closes). A request passes the page's budget the moment the rule lets it
through, and none is sent after the render ended (:class:`_PageRequests`).

Each page gets a fresh browser context (no cookies, storage or cache shared between
pages), a time limit (``CRAWLER_RENDER_PAGE_TIMEOUT``) and a JavaScript heap cap
(``CRAWLER_RENDER_JS_HEAP_MB``, V8's ``--max-old-space-size``): a page over it crashes
its own tab, which ends as :class:`RenderError`. A browser that died (crashed, killed)
under a page is started again and the page tried once more in it (another page may have
been the cause); a second death ends the page as :class:`RenderError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import shutil
import signal
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar
from urllib.parse import urlsplit

from common import urls
from common.messages import FetchOutcome
from common.rendering import Verdict, subresource_verdict
from common.settings import Settings

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page, Playwright, Request, Route, WebSocketRoute

    from common.metrics import ParserMetrics
    from render.needs import Gate, Http, Robots

log = logging.getLogger(__name__)
_T = TypeVar("_T")

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
STDERR_LINES = 20  # last lines of a browser's stderr kept for the reason it died
START_TIMEOUT = 30.0  # seconds for a new browser to print its DevTools address
_DEVTOOLS_RE = re.compile(rb"DevTools listening on (ws://\S+)")
# response headers handed to the browser with a body (the rest describe the transfer)
_PASSED_HEADERS = frozenset({"content-type", "content-language"})
PAGEHIDE_TIMEOUT = 2.0  # seconds for a page's renderer to be ended before its tab closes


class RenderError(RuntimeError):
    """A page could not be rendered: time limit, crashed tab, dead browser."""

    def __init__(self, message: str, *, crashed: bool = False,
                 browser_died: bool = False) -> None:
        super().__init__(message)
        self.crashed = crashed
        self.browser_died = browser_died


class BrowserMissingError(RenderError):
    """No Chromium executable was found."""


class _PageRequests:
    """What became of one page's requests, and its request budget.

    A request the rule lets through takes its place in the budget at once, before the
    handler awaits anything: requests a script makes all at once each see the places
    taken before them (counting only answered ones let every one of 40 parallel
    ``fetch()`` calls through). When the render ends (DOM read, time limit, crash),
    :meth:`end` cancels the fetches still waiting (at the host's gate, say), and no
    request is sent after that."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Verdict]] = []
        self.passed = 0  # requests the rule let through (the budget's count)
        self.ended = False
        self._fetches: set[asyncio.Task[object]] = set()

    def fetching(self, work: Coroutine[object, object, _T]) -> asyncio.Task[_T]:
        task = asyncio.get_running_loop().create_task(work)
        self._fetches.add(task)
        task.add_done_callback(self._fetches.discard)
        return task

    async def end(self) -> None:
        """No request is sent from now on: the waiting ones are cancelled."""
        self.ended = True
        waiting = list(self._fetches)
        for task in waiting:
            task.cancel()
        if waiting:
            await asyncio.wait(waiting, timeout=5)


class _Settle:
    """The requests the crawler is fetching for one page (its wait at the host's gate
    included). The page has settled when none is pending and none started or ended for
    the settle time: a script's XHR that waits out the host's politeness delay (longer
    than the settle time, as it usually is) is answered before the DOM is read."""

    def __init__(self) -> None:
        self.pending = 0
        self.last = time.monotonic()
        self._moved = asyncio.Event()

    @contextlib.contextmanager
    def fetching(self) -> Iterator[None]:
        self._move(1)
        try:
            yield
        finally:
            self._move(-1)

    def _move(self, by: int) -> None:
        self.pending += by
        self.last = time.monotonic()
        self._moved.set()

    async def wait(self, quiet: float) -> None:
        """Until no request is pending and ``quiet`` seconds passed since the last one
        started or ended (and since this call); the page's time limit bounds it."""
        self.last = max(self.last, time.monotonic())
        while True:
            self._moved.clear()
            if self.pending:
                await self._moved.wait()
                continue
            left = self.last + quiet - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._moved.wait()


#: Domains of Chromium's own services. This Chromium (156) still asks two of them at
#: start, whatever the switches say: update.googleapis.com (the component updater's
#: on-demand install of an on-device model's manifest) and accounts.google.com. They
#: end at the trap like the rest, counted apart from everything else.
BROWSER_SERVICE_DOMAINS = ("google.com", "googleapis.com", "gvt1.com", "gstatic.com")


def trap_source(request_line: str) -> str:
    """The ``source`` label of a request that reached the proxy trap (pure):
    ``browser_services`` for a host under :data:`BROWSER_SERVICE_DOMAINS`, else
    ``other`` (a page's request that got past the interception, or something new)."""
    parts = request_line.split()
    if len(parts) < 2:
        return "other"
    target = parts[1]
    if parts[0].upper() == "CONNECT":
        host = target.rsplit(":", 1)[0]
    else:
        host = urlsplit(target).hostname or ""
    host = host.strip("[]").lower().rstrip(".")
    if any(host == d or host.endswith("." + d) for d in BROWSER_SERVICE_DOMAINS):
        return "browser_services"
    return "other"


class ProxyTrap:
    """The browser's proxy address, owned by the crawler: it refuses everything.

    The browser is pointed at this listener (``--proxy-server``) so that a request that
    gets past the interception (a kind of request the DevTools protocol does not see, or
    the browser's own traffic) reaches neither the network nor whatever else listens on
    loopback (a pod's sidecars share it): it ends here, answered 403 and closed, counted
    (:attr:`refused`, the metric ``crawler_parser_render_proxy_refused_total``) and
    logged with its request line (``CONNECT host:port`` for a tunnel, the URL for a
    plain request). Nothing that works arrives here: every arrival is a fault to look
    into (an alert rule watches the metric)."""

    LINE_BYTES = 300  # of a request line kept for the log
    READ_TIMEOUT = 2.0  # seconds to wait for the request line of a connection
    LOG_EVERY = 10.0  # seconds between warnings (each arrival is counted all the same)

    def __init__(self, on_refused: Callable[[str], None] | None = None) -> None:
        self.refused = 0
        self.refused_by: Counter[str] = Counter()  # by :func:`trap_source`
        self.last_lines: deque[str] = deque(maxlen=100)
        self._on_refused = on_refused
        self._server: asyncio.Server | None = None
        self._logged_at = -math.inf
        self._unlogged = 0

    @property
    def port(self) -> int:
        assert self._server is not None, "the proxy trap is not listening"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> int:
        """Listen on an ephemeral port of 127.0.0.1; return the port."""
        if self._server is None:
            self._server = await asyncio.start_server(self._refuse, "127.0.0.1", 0,
                                                      limit=4096)
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self._server.wait_closed()
            self._server = None

    async def _refuse(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        self.refused += 1
        line = b""
        try:
            async with asyncio.timeout(self.READ_TIMEOUT):
                line = await reader.readline()
        except (TimeoutError, ValueError, ConnectionError):
            pass  # nothing, or no line within the limit: refused all the same
        text = line[:self.LINE_BYTES].decode("latin-1").strip() or "(no request line)"
        self.last_lines.append(text)
        source = trap_source(text)
        self.refused_by[source] += 1
        if self._on_refused is not None:
            self._on_refused(source)
        self._log(text)
        with contextlib.suppress(Exception):
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")
            async with asyncio.timeout(self.READ_TIMEOUT):
                await writer.drain()
        writer.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.READ_TIMEOUT):
                await writer.wait_closed()

    def _log(self, line: str) -> None:
        now = time.monotonic()
        if now - self._logged_at < self.LOG_EVERY:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last warning)" if self._unlogged else ""
        self._logged_at, self._unlogged = now, 0
        log.warning("render: refused a request that got past the interception to the "
                    "browser's proxy port: %s%s", line, more)


def find_browser(configured: str = "") -> str | None:
    """The Chromium executable: ``configured`` or the first of :data:`BROWSER_NAMES`."""
    if configured:
        return shutil.which(configured) or (configured if os.path.isfile(configured)
                                            else None)
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class PageSource(Protocol):
    """The stored response a page is rendered from (:class:`parser.results.ToRender`)."""

    @property
    def url(self) -> str: ...
    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> list[tuple[str, str]]: ...
    @property
    def body(self) -> bytes: ...


def render_problem(settings: Settings) -> str | None:
    """Why rendering cannot work here (no browser, no driver), or None. Starts nothing."""
    if find_browser(settings.render.browser) is None:
        where = settings.render.browser or "chromium on the PATH"
        return (f"CRAWLER_RENDER_ENABLED: no Chromium found ({where}; Debian: apt-get "
                f"install chromium)")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return ("CRAWLER_RENDER_ENABLED: the playwright package is missing (pip install "
                "'polite-crawler[render]')")
    return None


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered page: its DOM as HTML and what became of each request it made."""

    html: str
    requests: tuple[tuple[str, Verdict], ...]
    elapsed: float
    browser: str  # product/version, e.g. "Chrome/131.0.6778.85"

    def fields(self) -> dict[str, str]:
        """Header fields of the rendered record: the browser and the requests' fates."""
        counts = Counter(v.value for _, v in self.requests)
        return {"Crawler-Rendered-By": self.browser,
                "Crawler-Render-Seconds": f"{self.elapsed:.3f}",
                "Crawler-Render-Requests": " ".join(f"{k}={counts[k]}"
                                                    for k in sorted(counts)) or "none"}


@dataclass(slots=True)
class RenderCounters:
    pages: int = 0
    failed: int = 0
    browsers_started: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)


class _Browser:
    """One Chromium process and its DevTools connection."""

    def __init__(self, proc: asyncio.subprocess.Process, browser: Browser,
                 profile: str) -> None:
        self.proc = proc
        self.browser = browser
        self.profile = profile
        self.stderr_tail: deque[bytes] = deque(maxlen=STDERR_LINES)
        assert proc.stderr is not None
        # the rest of stderr is read (so the browser never blocks on it); the last
        # lines are kept to say why a browser died
        self.drain = asyncio.get_running_loop().create_task(self._drain(proc.stderr))

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception):
            while chunk := await stream.read(65536):
                self.stderr_tail.extend(line[:300] for line in chunk.splitlines() if line)

    def last_words(self) -> str:
        status = self.proc.returncode
        tail = b" | ".join(list(self.stderr_tail)[-3:]).decode("utf-8", "replace")
        return f"exit status {status}; stderr: {tail or 'nothing'}"

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and self.browser.is_connected()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self.browser.close()
        _kill_group(self.proc)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(10):
                await self.proc.wait()
        self.drain.cancel()
        shutil.rmtree(self.profile, ignore_errors=True)


class ChromiumRenderer:
    """Renders pages in one shared headless Chromium; see the module docstring."""

    def __init__(self, settings: Settings, *, http: Http, robots: Robots,
                 gate: Gate, metrics: ParserMetrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.rs = settings.render
        self.http = http
        self.robots = robots
        self.gate = gate
        self.counters = RenderCounters()
        self._pw: Playwright | None = None
        self._browser: _Browser | None = None
        self._lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(self.rs.concurrency)
        self.trap = ProxyTrap(on_refused=self._count_refused)

    def _count_refused(self, source: str) -> None:
        if self.metrics is not None:
            self.metrics.render_proxy_refused.labels(source).inc()

    async def start(self) -> None:
        """Check that a browser is there (it starts with the first page)."""
        if find_browser(self.rs.browser) is None:
            raise BrowserMissingError(
                "no Chromium found (CRAWLER_RENDER_BROWSER, or chromium on the PATH; "
                "Debian: apt-get install chromium)")

    async def close(self) -> None:
        async with self._lock:
            if self._browser is not None:
                await self._browser.close()
                self._browser = None
            if self._pw is not None:
                with contextlib.suppress(Exception):
                    await self._pw.stop()
                self._pw = None
            await self.trap.close()

    @property
    def browser_pid(self) -> int | None:
        """The running browser's process id (None before the first page)."""
        b = self._browser
        return b.proc.pid if b is not None and b.alive else None

    async def _ensure(self) -> _Browser:
        async with self._lock:
            if self._browser is not None and self._browser.alive:
                return self._browser
            if self._browser is not None:
                log.warning("render: the browser died; starting a new one")
                await self._browser.close()
                self._browser = None
            self._browser = await self._launch()
            self.counters.browsers_started += 1
            if self.metrics is not None:
                self.metrics.browser_starts.inc()
            return self._browser

    async def _launch(self) -> _Browser:
        from playwright.async_api import async_playwright

        exe = find_browser(self.rs.browser)
        if exe is None:
            raise BrowserMissingError("no Chromium found")
        if self._pw is None:
            self._pw = await async_playwright().start()
        proxy_port = await self.trap.start()
        profile = tempfile.mkdtemp(prefix="crawler-render-")
        write_preferences(profile)
        args = launch_args(exe, profile=profile, proxy_port=proxy_port,
                           js_heap_mb=self.rs.js_heap_mb,
                           sandbox=self.rs.sandbox and os.geteuid() != 0)
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
        try:
            ws = await asyncio.wait_for(_devtools_address(proc), START_TIMEOUT)
            browser = await self._pw.chromium.connect_over_cdp(ws)
        except BaseException:
            _kill_group(proc)
            await proc.wait()
            shutil.rmtree(profile, ignore_errors=True)
            raise
        log.info("render: started %s (pid %d)", exe, proc.pid)
        return _Browser(proc, browser, profile)

    async def _retire(self, b: _Browser) -> None:
        async with self._lock:
            if self._browser is b:
                self._browser = None
        await b.close()

    async def render_page(self, page: PageSource, *, delay: float) -> Rendered:
        """Load ``page`` (a stored response) in the browser and return the DOM its scripts built.

        ``delay``: the politeness gap of the page's host, kept before each request of
        its own that a script makes. Raises :class:`RenderError`."""
        async with self._slots:
            try:
                try:
                    try:
                        out = await self._render(page, delay)
                    except RenderError as exc:
                        if not exc.browser_died:
                            raise
                        # the browser died under this page: it may have been another
                        # page's doing, so this one gets one more try in a new browser
                        log.warning("render %s: %s; trying once more", page.url, exc)
                        out = await self._render(page, delay)
                except RenderError:
                    raise
                except Exception as exc:  # launching, connecting: still this page's end
                    raise RenderError(f"the browser failed: {exc!r}") from exc
            except RenderError:
                self.counters.failed += 1
                if self.metrics is not None:
                    self.metrics.rendered_pages.labels("render_error").inc()
                raise
            self.counters.pages += 1
            if self.metrics is not None:
                self.metrics.rendered_pages.labels("rendered").inc()
                self.metrics.render_duration.observe(out.elapsed)
                for _, verdict in out.requests:
                    self.metrics.render_requests.labels(verdict.value).inc()
            return out

    async def _render(self, source: PageSource, delay: float) -> Rendered:
        from playwright.async_api import Error as PlaywrightError

        b = await self._ensure()
        started = time.monotonic()
        requests = _PageRequests()
        crashed = asyncio.Event()
        settle = _Settle()
        context = None
        page: Page | None = None
        try:
            async with asyncio.timeout(self.rs.page_timeout):
                context = await b.browser.new_context(
                    user_agent=self.settings.crawl.user_agent, service_workers="block",
                    accept_downloads=False)

                async def route(route: Route, request: Request) -> None:
                    await self._route(source, delay, requests, settle, route, request)

                async def websocket(ws: WebSocketRoute) -> None:
                    # a WebSocket is no request the Fetch domain sees; the page's own
                    # are caught in the page and closed (never connected)
                    requests.seen.append((ws.url, Verdict.BLOCKED_TYPE))
                    with contextlib.suppress(Exception):
                        await ws.close(code=1008, reason="blocked")

                await context.route("**/*", route)
                await context.route_web_socket("**/*", websocket)
                page = await context.new_page()
                page.set_default_timeout(self.rs.page_timeout * 1000)
                page.on("crash", lambda _page: crashed.set())
                await page.goto(source.url, wait_until="load")
                # the scripts' requests answered (each after the host's delay), then
                # settle_ms without a new one
                await settle.wait(self.rs.settle_ms / 1000)
                html = await page.content()
        except TimeoutError:
            raise RenderError(f"render time limit of {self.rs.page_timeout:g} s "
                              f"reached") from None
        except PlaywrightError as exc:
            dead = not b.alive
            what = ("the browser died" if dead else
                    "the page crashed (over its memory cap?)" if crashed.is_set()
                    else "the browser failed")
            if dead:
                what += f" ({b.last_words()})"
            raise RenderError(f"{what}: {str(exc).splitlines()[0][:300]}",
                              crashed=dead or crashed.is_set(), browser_died=dead) from None
        finally:
            await requests.end()
            if page is not None and not crashed.is_set() and b.alive:
                # the page's renderer is ended before its tab is closed: closing runs
                # the page's pagehide and unload handlers, and what they send (a
                # sendBeacon, a keepalive fetch) leaves from the browser process past
                # the interception (leaving the page, or script execution switched
                # off first, did not stop it; a renderer that is gone runs nothing)
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(PAGEHIDE_TIMEOUT):
                        cdp = await page.context.new_cdp_session(page)
                        await cdp.send("Page.crash")
            if context is not None:
                try:
                    async with asyncio.timeout(5):
                        await context.close()
                except Exception:
                    # a browser that cannot close a tab is not trusted with the next
                    log.warning("render: closing the page of %s failed; restarting the "
                                "browser", source.url)
                    await self._retire(b)
        seen = tuple(requests.seen)
        for _, verdict in seen:
            self.counters.verdicts[verdict.value] += 1
        return Rendered(html=html, requests=seen, elapsed=time.monotonic() - started,
                        browser=f"Chromium/{b.browser.version}")

    async def _route(self, source: PageSource, delay: float, requests: _PageRequests,
                     settle: _Settle, route: Route, request: Request) -> None:
        url = request.url
        # no await before the verdict and the budget's count: see _PageRequests
        verdict = subresource_verdict(
            source.url, url, request.resource_type,
            is_navigation=request.is_navigation_request(), sent=requests.passed,
            budget=self.rs.max_requests, third_party=self.rs.third_party)
        if verdict is Verdict.FETCH:
            if requests.ended:
                verdict = Verdict.ENDED
            else:
                requests.passed += 1
        try:
            if verdict is Verdict.PAGE and not requests.ended:
                requests.seen.append((url, verdict))
                await route.fulfill(status=source.status or 200,
                                    headers=_passed(source.headers), body=source.body)
                return
            if verdict is Verdict.FETCH:
                with settle.fetching():
                    fetch = requests.fetching(self._fetch(url, delay))
                    await asyncio.wait([fetch])
                if fetch.cancelled() or requests.ended:
                    verdict, answer = Verdict.ENDED, None
                elif fetch.exception() is not None:
                    log.debug("render %s: fetching %s failed: %r", source.url, url,
                              fetch.exception())
                    verdict, answer = Verdict.FAILED, None
                else:
                    verdict, answer = fetch.result()
                requests.seen.append((url, verdict))
                if answer is not None:
                    status, headers, body = answer
                    await route.fulfill(status=status, headers=headers, body=body)
                    return
            else:
                requests.seen.append((url, verdict))
            log.debug("render %s: %s %s", source.url, verdict.value, url)
            await route.abort("blockedbyclient")
        except Exception as exc:  # the page may be gone (closed, crashed) meanwhile
            log.debug("render %s: routing %s failed: %r", source.url, url, exc)

    async def _fetch(self, url: str, delay: float
                     ) -> tuple[Verdict, tuple[int, dict[str, str], bytes] | None]:
        """A request the rule let through: SSRF guard, robots.txt, gate, then GET."""
        if await self.http.ssrf_refusal(url) is not None:
            return Verdict.BLOCKED_SSRF, None
        try:
            host = urls.host_key(url)
            decision = await self.robots.for_url(url)
        except (ValueError, urls.UrlError):
            return Verdict.BLOCKED_SCHEME, None
        if decision.fetched:
            self.gate.done(host, decision.fetched_at, delay)
        if not decision.available or not decision.allowed(url):
            return Verdict.BLOCKED_ROBOTS, None
        async with self.gate.hold(host):
            await self.gate.wait(host, None, delay)
            resp = await self.http.fetch(url, accept_types=("*/*",))
            self.gate.done(host, resp.fetched_at or time.time(), delay)
        if resp.outcome is FetchOutcome.SSRF_BLOCKED:
            return Verdict.BLOCKED_SSRF, None
        if resp.outcome is not FetchOutcome.OK or resp.truncated is not None:
            return Verdict.FAILED, ((resp.status, {}, b"") if resp.status else None)
        return Verdict.FETCH, (resp.status, _passed(list(resp.headers)), resp.body)


#: Chromium features switched off: each one is a way out to the network that the
#: request interception does not see (checked by tests/e2e/test_crawl_render.py), or
#: the browser's own traffic to its services.
DISABLED_FEATURES = (
    "SharedWorker",  # a shared worker's requests are not intercepted
    "Translate", "MediaRouter", "DialMediaRouteProvider", "OptimizationHints",
    "OptimizationGuideModelDownloading", "NetworkTimeServiceQuerying",
    "AutofillServerCommunication", "CertificateTransparencyComponentUpdater",
    "PreconnectToSearch", "AimEnabled", "InterestFeedContentSuggestions",
    "MediaDrmPreprovisioning", "SafeBrowsingEnhancedProtection",
)
ENABLED_FEATURES = ("SkipListAccountsWithoutGaiaCookies",)

#: The profile's preferences, written before the browser starts (no switch does this).
PREFERENCES: dict[str, object] = {
    # no preloading: speculation rules' prefetch and prerender, <link rel=prerender>
    # and the browser's own predictions (a prefetch is made by the browser, not the
    # page, and is not intercepted)
    "net": {"network_prediction_options": 2},
    # WebRTC: no UDP that does not go through the proxy (there is none), one route
    "webrtc": {"ip_handling_policy": "disable_non_proxied_udp",
               "multiple_routes_enabled": False, "nonproxied_udp_enabled": False},
    "signin": {"allowed": False},
    "safebrowsing": {"enabled": False},
    "search": {"suggest_enabled": False},
    "alternate_error_pages": {"enabled": False},
    "translate": {"enabled": False},
    "autofill": {"profile_enabled": False, "credit_card_enabled": False},
    "credentials_enable_service": False,
    "domain_reliability": {"allowed_by_policy": False},
}


def write_preferences(profile: str) -> None:
    """The :data:`PREFERENCES` into a new profile folder's ``Default/Preferences``."""
    folder = os.path.join(profile, "Default")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "Preferences"), "w", encoding="utf-8") as f:
        json.dump(PREFERENCES, f)


def launch_args(exe: str, *, profile: str, proxy_port: int, js_heap_mb: int,
                sandbox: bool) -> list[str]:
    """The browser's command line (pure): headless, DevTools on an ephemeral loopback
    port, the crawler's proxy trap as its only way out, and everything that would make
    requests of its own (or requests the interception cannot see) switched off."""
    args = [
        exe, "--headless=new", "--remote-debugging-port=0",
        "--remote-debugging-address=127.0.0.1",
        f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check",
        "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions",
        "--disable-component-extensions-with-background-pages",
        "--disable-background-networking", "--disable-component-update",
        "--disable-domain-reliability", "--disable-client-side-phishing-detection",
        "--disable-field-trial-config", "--no-service-autorun",
        "--metrics-recording-only", "--disable-sync", "--disable-default-apps",
        "--mute-audio", "--disable-breakpad", "--disable-crash-reporter",
        "--disable-features=" + ",".join(DISABLED_FEATURES),
        "--enable-features=" + ",".join(ENABLED_FEATURES),
        # nothing reaches the network on its own: every request is intercepted, and
        # what is not ends at the crawler's proxy trap (refused and counted)
        f"--proxy-server=http://127.0.0.1:{proxy_port}",
        "--proxy-bypass-list=<-loopback>",
        # ...and what does not go through a proxy: WebRTC's UDP, DNS prefetching
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--dns-prefetch-disable", "--no-pings",
        f"--js-flags=--max-old-space-size={js_heap_mb}",
        "--blink-settings=imagesEnabled=false",
    ]
    if not sandbox:
        # Chromium's sandbox refuses to run as root; a container without user
        # namespaces cannot give it one (CRAWLER_RENDER_SANDBOX=false)
        args.append("--no-sandbox")
    args.append("about:blank")
    return args


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL to the browser started here and its children: its own process group
    (it was started in a session of its own, so the group id is its PID)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _passed(headers: list[tuple[str, str]]) -> dict[str, str]:
    return {k: v for k, v in headers if k.lower() in _PASSED_HEADERS}


async def _devtools_address(proc: asyncio.subprocess.Process) -> str:
    assert proc.stderr is not None
    while True:
        line = await proc.stderr.readline()
        if not line:
            raise RenderError(f"the browser exited before it listened "
                              f"(status {await proc.wait()})")
        found = _DEVTOOLS_RE.search(line)
        if found:
            return found.group(1).decode()

