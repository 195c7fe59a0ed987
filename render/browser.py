"""Headless Chromium over the DevTools protocol: load a stored page, return its DOM.

The browser is Debian's ``chromium`` (the system one; nothing is downloaded), started
here as a child process in a session of its own with ``--remote-debugging-port=0`` and
driven through Playwright's ``connect_over_cdp``. Starting it ourselves keeps its PID,
so a browser that hangs is killed with all its processes (its process group), and one
that died is noticed and started again.

The browser itself reaches no network: it runs behind a proxy address where nothing
listens (``--proxy-server`` at port 9 of 127.0.0.1, loopback included), and every request
it makes is intercepted (Playwright routing, the DevTools Fetch domain) and answered
here:

- the page itself from the stored response: the server sees no second request;
- requests :func:`common.rendering.subresource_verdict` lets through (scripts and
  XHR/fetch of the page's host) after the SSRF guard, robots.txt and the host's
  politeness gate, fetched by the crawler's own HTTP client (size cap, time-outs,
  User-Agent, the guarded connector against DNS rebinding);
- everything else is aborted.

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
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from common import urls
from common.messages import FetchOutcome
from common.rendering import Verdict, subresource_verdict
from common.settings import Settings

if TYPE_CHECKING:
    from playwright.async_api import Browser, Playwright, Request, Route

    from common.metrics import ParserMetrics
    from fetcher.gate import HostGate
    from fetcher.http import HttpFetcher
    from fetcher.robots_cache import RobotsCache

log = logging.getLogger(__name__)

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
STDERR_LINES = 20  # last lines of a browser's stderr kept for the reason it died
START_TIMEOUT = 30.0  # seconds for a new browser to print its DevTools address
_DEVTOOLS_RE = re.compile(rb"DevTools listening on (ws://\S+)")
# response headers handed to the browser with a body (the rest describe the transfer)
_PASSED_HEADERS = frozenset({"content-type", "content-language"})
# verdicts of requests that passed the rule: they count against a page's budget
_PASSED_RULE = frozenset({Verdict.FETCH, Verdict.FAILED, Verdict.BLOCKED_SSRF,
                          Verdict.BLOCKED_ROBOTS})


class RenderError(RuntimeError):
    """A page could not be rendered: time limit, crashed tab, dead browser."""

    def __init__(self, message: str, *, crashed: bool = False,
                 browser_died: bool = False) -> None:
        super().__init__(message)
        self.crashed = crashed
        self.browser_died = browser_died


class BrowserMissingError(RenderError):
    """No Chromium executable was found."""


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
    """The stored response a page is rendered from (:class:`parser.service.ToRender`)."""

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

    def __init__(self, settings: Settings, *, http: HttpFetcher, robots: RobotsCache,
                 gate: HostGate, metrics: ParserMetrics | None = None) -> None:
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
        profile = tempfile.mkdtemp(prefix="crawler-render-")
        args = [
            exe, "--headless=new", "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check",
            "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-default-apps", "--mute-audio",
            "--disable-breakpad", "--disable-crash-reporter",
            "--disable-features=Translate,MediaRouter,OptimizationHints",
            # nothing reaches the network on its own: every request is intercepted
            "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            # ...and what does not go through a proxy: WebRTC's UDP, DNS prefetching
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
            "--dns-prefetch-disable", "--no-pings",
            f"--js-flags=--max-old-space-size={self.rs.js_heap_mb}",
            "--blink-settings=imagesEnabled=false",
        ]
        if os.geteuid() == 0 or not self.rs.sandbox:
            # Chromium's sandbox refuses to run as root; a container without user
            # namespaces cannot give it one (CRAWLER_RENDER_SANDBOX=false)
            args.append("--no-sandbox")
        args.append("about:blank")
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
        requests: list[tuple[str, Verdict]] = []
        crashed = asyncio.Event()
        settle = _Settle()
        context = None
        try:
            async with asyncio.timeout(self.rs.page_timeout):
                context = await b.browser.new_context(
                    user_agent=self.settings.crawl.user_agent, service_workers="block",
                    accept_downloads=False)

                async def route(route: Route, request: Request) -> None:
                    await self._route(source, delay, requests, settle, route, request)

                await context.route("**/*", route)
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
            if context is not None:
                try:
                    async with asyncio.timeout(5):
                        await context.close()
                except Exception:
                    # a browser that cannot close a tab is not trusted with the next
                    log.warning("render: closing the page of %s failed; restarting the "
                                "browser", source.url)
                    await self._retire(b)
        for _, verdict in requests:
            self.counters.verdicts[verdict.value] += 1
        return Rendered(html=html, requests=tuple(requests),
                        elapsed=time.monotonic() - started,
                        browser=f"Chromium/{b.browser.version}")

    async def _route(self, source: PageSource, delay: float,
                     requests: list[tuple[str, Verdict]], settle: _Settle,
                     route: Route, request: Request) -> None:
        url = request.url
        sent = sum(1 for _, v in requests if v in _PASSED_RULE)
        verdict = subresource_verdict(
            source.url, url, request.resource_type,
            is_navigation=request.is_navigation_request(), sent=sent,
            budget=self.rs.max_requests, third_party=self.rs.third_party)
        try:
            if verdict is Verdict.PAGE:
                requests.append((url, verdict))
                await route.fulfill(status=source.status or 200,
                                    headers=_passed(source.headers), body=source.body)
                return
            if verdict is Verdict.FETCH:
                with settle.fetching():
                    verdict, answer = await self._fetch(url, delay)
                    requests.append((url, verdict))
                    if answer is not None:
                        status, headers, body = answer
                        await route.fulfill(status=status, headers=headers, body=body)
                        return
            else:
                requests.append((url, verdict))
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

