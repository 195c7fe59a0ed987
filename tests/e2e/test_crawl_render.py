"""Rendering in headless Chromium, end to end against the simulated web (Debian's
``chromium``; scripts/test installs it, and under CI=true a missing browser fails).

What the server saw is the evidence: the links a script built from an XHR are crawled,
the page itself is requested once (the browser is answered from the stored response),
and the script robots.txt disallows, the style sheet and the image are never requested;
a script, a WebSocket and beacons aimed at 127.0.0.2 (refused by the SSRF guard) never
reach the listener there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from common.messages import Reason, UrlStatus
from common.rendering import RenderWhy
from parser.results import ToRender
from render.browser import ChromiumRenderer, RenderError
from simweb import Page, SimWeb
from simweb.scenarios import RENDER_ITEMS, build_rendering
from tests.e2e.crawl_support import DELAY, hits, host, key, run, scenario, settings_for
from tests.render_support import ForbiddenListener, ForbiddenUdp, require_browser

if TYPE_CHECKING:
    from common.metrics import ParserMetrics

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _browser_installed() -> None:
    require_browser()


@pytest.fixture
async def forbidden() -> AsyncIterator[tuple[ForbiddenListener, int]]:
    listener = ForbiddenListener()
    port = await listener.start()
    yield listener, port
    await listener.stop()


RENDER = {"enabled": True, "third_party": True, "settle_ms": 200, "page_timeout": 15.0}


async def test_rendering_crawls_script_links_and_fetches_nothing_forbidden(
        tmp_path: Path, forbidden: tuple[ForbiddenListener, int]) -> None:
    listener, port = forbidden
    scenario = build_rendering(forbidden=f"http://127.0.0.2:{port}")
    async with SimWeb(scenario, dns=True) as web:
        out = await run(web, tmp_path, ["spa.test/"], render=RENDER)
        requested = [r.path for r in hits(web, "spa.test", robots=True)]

    # exactly what rendering should fetch: the page once, its script and the script's
    # XHR, then the pages whose links the script built (and /plain, linked from /about)
    items = [f"/item/{n}" for n in range(1, RENDER_ITEMS + 1)]
    expected = {"/robots.txt", "/", "/app.js", "/api/items.json", "/about", "/plain",
                *items}
    assert set(requested) == expected, requested
    assert requested.count("/") == 1  # the browser was answered from the stored page
    for never in ("/private/tracker.js", "/private/leak", "/style.css", "/logo.png"):
        assert never not in requested
    assert listener.connections == 0
    for path in [*items, "/about"]:
        assert out.row(key(web, f"spa.test{path}")).status is UrlStatus.DONE

    # the rendered DOM is a conversion record that refers to the page's response
    records = out.warc()
    home = key(web, "spa.test/")
    response = next(r for r in records if r.type == "response" and r.uri == home)
    rendered = [r for r in records if r.type == "conversion"]
    assert [r.uri for r in rendered] == [home]  # /plain and the items were not shells
    fields = rendered[0].headers
    assert fields["WARC-Refers-To"] == response.headers["WARC-Record-ID"]
    assert fields["Content-Type"].startswith("text/html")
    counts = dict(part.split("=") for part in fields["Crawler-Render-Requests"].split())
    # the style sheet, the sendBeacon and the WebSocket (caught in the page, never
    # connected) are blocked by type; the images are not even asked for (the browser
    # runs with images off)
    assert counts == {"page": "1", "fetch": "2", "blocked_robots": "1", "blocked_ssrf": "1",
                      "blocked_type": "3"}
    assert "Everything on this page was built by a script." in out.texts()[home]

    # the script's requests kept the host's politeness gap like any page request
    gap = web.log.min_gap("spa.test")
    assert gap is not None and gap >= DELAY * 0.9, gap


async def test_a_page_over_its_memory_cap_ends_as_render_error(tmp_path: Path) -> None:
    async with SimWeb(build_rendering(), dns=True) as web:
        out = await run(web, tmp_path, ["spa.test/hog"],
                        render={**RENDER, "js_heap_mb": 32, "page_timeout": 20.0},
                        traps={"max_depth": 0})
        requested = [r.path for r in hits(web, "spa.test")]
    row = out.row(key(web, "spa.test/hog"))
    assert row.status is UrlStatus.DONE
    assert row.reason is Reason.RENDER_ERROR, row
    assert row.detail is not None and "crashed" in row.detail, row.detail
    assert requested.count("/hog.js") == 1


async def test_a_killed_browser_is_started_again(tmp_path: Path) -> None:
    from common.adapters.sqlite_store import SqliteStateStore
    from common.metrics import Metrics
    from fetcher.gate import HostGate
    from fetcher.http import HttpFetcher
    from fetcher.robots_cache import RobotsCache

    async with SimWeb(build_rendering(), dns=True) as web:
        settings = settings_for(web, tmp_path, render=RENDER)
        store = SqliteStateStore(tmp_path / "state.sqlite")
        await store.open()
        http = HttpFetcher(settings)
        await http.start()
        metrics = Metrics.create(roles=("parser",), process=False).parser
        renderer = ChromiumRenderer(settings, http=http, robots=RobotsCache(store, http,
                                                                            settings),
                                    gate=HostGate(), metrics=metrics)
        page = ToRender(why=RenderWhy.HOST, url=web.url("spa.test", "/"), status=200,
                        headers=[("Content-Type", "text/html")],
                        body=b"<div id=x></div><script>x.textContent='built'</script>",
                        record_id="<urn:uuid:00000000-0000-0000-0000-000000000000>")
        try:
            first = await renderer.render_page(page, delay=0.0)
            assert "built" in first.html
            pid = renderer.browser_pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)  # the browser this renderer started
            for _ in range(100):
                if renderer.browser_pid is None:
                    break
                await asyncio.sleep(0.05)
            again = await renderer.render_page(page, delay=0.0)
            assert "built" in again.html
            assert renderer.browser_pid not in (None, pid)
            assert renderer.counters.browsers_started == 2
            assert metrics.browser_starts._value.get() == 2
            assert metrics.rendered_pages.labels("rendered")._value.get() == 2
            # the page itself, answered from the stored response; nothing else asked
            assert metrics.render_requests.labels("page")._value.get() == 2
        except RenderError as exc:  # pragma: no cover - the assertion message
            pytest.fail(f"rendering failed: {exc}")
        finally:
            await renderer.close()
            await http.close()
            await store.close()


async def test_cluster_stages_hand_shells_to_the_render_service(tmp_path: Path) -> None:
    """Cluster mode's wiring, in one process on the in-memory bus: the fetcher's inline
    parser hands the shell to topic render (no verdict with its fetch result) and
    judges a plain page itself; the render stage renders the shell and sends its
    verdict on topic status, and its links on topic discovered."""
    from common.adapters.memory_bus import MemoryBus
    from common.adapters.sqlite_store import SqliteStateStore
    from common.archive import ArchiveWriter
    from common.messages import Discovered, FetchResult, FetchTask, StatusUpdate, Topic
    from common.metrics import Metrics
    from common.pagework import KEEP_RECENT, ThreadPageWork, WorkContext
    from common.ports import Delivery
    from common.runtime import make_blobs
    from crawler.inline import page_judge
    from crawler.roles.render import render_stage
    from fetcher.http import HttpFetcher
    from fetcher.robots_cache import RobotsCache
    from fetcher.service import FetcherStage

    async with SimWeb(build_rendering(), dns=True) as web:
        settings = settings_for(web, tmp_path, render=RENDER)
        metrics = Metrics.create(("parser", "dedup"), process=False)
        store = SqliteStateStore(tmp_path / "state.sqlite")
        await store.open()
        blobs = make_blobs(settings, "cluster-test")
        archive = ArchiveWriter(blobs, software=settings.crawl.user_agent)
        bus = MemoryBus(settings.bus, partitions=1)
        seen: dict[Topic, list[object]] = {t: [] for t in
                                           (Topic.FETCHED, Topic.RENDER, Topic.STATUS,
                                            Topic.DISCOVERED)}
        for topic in seen:
            bus.declare_group(f"watch-{topic.value}", (topic,))

        def watcher(topic: Topic):  # type: ignore[no-untyped-def]
            async def watch(d: Delivery) -> None:
                seen[topic].append(d.message)
            return watch

        watchers = [asyncio.create_task(bus.consume(f"watch-{t.value}", (t,), watcher(t)))
                    for t in seen]
        http = HttpFetcher(settings)
        await http.start()
        robots = RobotsCache(store, http, settings)
        work = ThreadPageWork(WorkContext(settings, blobs, archive, keep_recent=KEEP_RECENT))
        judge = page_judge(settings, bus, store, blobs, archive, work, metrics)
        fetcher = FetcherStage(settings, bus, store, blobs, archive, http, robots,
                               metrics=metrics, work=work, judge=judge)
        renderer = ChromiumRenderer(settings, http=http, robots=robots, gate=fetcher.gate,
                                    metrics=metrics.parser)
        # a render service renders what it is handed, whatever its own rules say
        stage = render_stage(settings.replace(render={"auto": False}), bus, store, blobs,
                             archive, renderer, metrics=metrics)
        try:
            for n, path in enumerate(("/", "/about")):
                task = FetchTask(task_id=f"t{n}", url=web.url("spa.test", path),
                                 host="spa.test", delay=DELAY)
                await fetcher.handle(Delivery(topic=Topic.FETCH, key="spa.test",
                                              message=task))
            await bus.wait_idle()
            fetched = {r.task.url: r for r in seen[Topic.FETCHED]
                       if isinstance(r, FetchResult)}
            home, about = web.url("spa.test", "/"), web.url("spa.test", "/about")
            assert fetched[home].verdict is None  # the render service sends it
            assert fetched[about].verdict is not None  # judged inline as before
            handed = [r for r in seen[Topic.RENDER] if isinstance(r, FetchResult)]
            assert [r.task.url for r in handed] == [home]
            assert not any(isinstance(m, StatusUpdate) for m in seen[Topic.STATUS])

            await stage.handle(Delivery(topic=Topic.RENDER, key="spa.test",
                                        message=handed[0]))
            await bus.wait_idle()
            verdicts = [m for m in seen[Topic.STATUS] if isinstance(m, StatusUpdate)]
            assert [(v.url, v.reason) for v in verdicts] == [(home, None)]
            links = {link.url for m in seen[Topic.DISCOVERED] if isinstance(m, Discovered)
                     for link in m.links}
            assert {web.url("spa.test", f"/item/{n}") for n in range(1, 4)} <= links
        finally:
            await bus.stop()
            for t in watchers:
                t.cancel()
            await renderer.close()
            await http.close()
            blobs.flush()
            blobs.close()
            await store.close()
        requested = [r.path for r in hits(web, "spa.test")]
    assert requested.count("/") == 1
    assert "/app.js" in requested and "/api/items.json" in requested
    assert "/private/tracker.js" not in requested


async def test_the_operators_render_rule_from_the_control_row(tmp_path: Path) -> None:
    """PUT /v1/render's rules (the store's control row) choose a page the automatic
    signal would not: /plain has text and links of its own."""
    from common.adapters.sqlite_store import SqliteStateStore
    from crawler.api import with_render_rules

    async with SimWeb(build_rendering(), dns=True) as web:
        settings = settings_for(web, tmp_path, render={**RENDER, "auto": False},
                                traps={"max_depth": 0})
        store = SqliteStateStore(tmp_path / "state.sqlite")
        await store.open()
        control = with_render_rules(await store.get_control(),
                                    b'{"hosts": [], "patterns": ["^/plain$"]}', 0.0)
        await store.put_control(control)
        await store.close()
        out = await run(web, tmp_path, ["spa.test/plain", "spa.test/about"],
                        render={**RENDER, "auto": False}, traps={"max_depth": 0})
    rendered = [r.uri for r in out.warc() if r.type == "conversion"]
    assert rendered == [key(web, "spa.test/plain")]
    assert settings.render.auto is False


# -- what gets past the interception ---------------------------------------------------

@contextlib.asynccontextmanager
async def _renderer(web: SimWeb, tmp_path: Path, **render: Any
                    ) -> AsyncIterator[tuple[ChromiumRenderer, ParserMetrics]]:
    """A renderer of its own (the crawler's HTTP client, robots.txt and a gate) with
    the page's scripts' requests counted in ``metrics``."""
    from common.adapters.sqlite_store import SqliteStateStore
    from common.metrics import Metrics
    from fetcher.gate import HostGate
    from fetcher.http import HttpFetcher
    from fetcher.robots_cache import RobotsCache

    settings = settings_for(web, tmp_path, render={**RENDER, **render})
    store = SqliteStateStore(tmp_path / "state.sqlite")
    await store.open()
    http = HttpFetcher(settings)
    await http.start()
    metrics = Metrics.create(roles=("parser",), process=False).parser
    renderer = ChromiumRenderer(settings, http=http,
                                robots=RobotsCache(store, http, settings),
                                gate=HostGate(), metrics=metrics)
    try:
        yield renderer, metrics
    finally:
        await renderer.close()
        await http.close()
        await store.close()


def _page(url: str, body: str) -> ToRender:
    return ToRender(why=RenderWhy.HOST, url=url, status=200,
                    headers=[("Content-Type", "text/html")], body=body.encode(),
                    record_id="<urn:uuid:00000000-0000-0000-0000-000000000000>")


_ESCAPE_PATHS = ("/shared-fetch", "/beacon-pagehide", "/keepalive-pagehide", "/prefetched",
                 "/prerendered", "/ws", "/worker-ws")


def _escapes_page(base: str, forbidden: str) -> str:
    """A page that tries the ways out the interception does not see: a SharedWorker's
    fetch, a sendBeacon and a keepalive fetch at pagehide, WebSockets (the page's and a
    worker's), and WebRTC's STUN to ``forbidden``; it writes what the browser let it
    try into #tried."""
    ws = "ws" + base[len("http"):]
    shared = f"fetch('{base}/shared-fetch')"
    worker = f"try {{ new WebSocket('{ws}/worker-ws'); }} catch (e) {{}}"
    return f"""<!DOCTYPE html><html><head><title>escapes</title></head><body>
<div id="tried"></div><script>
var tried = [];
function attempt(name, f) {{ try {{ f(); tried.push(name); }} catch (e) {{}} }}
attempt('shared', function () {{
  var w = new SharedWorker(URL.createObjectURL(new Blob(["{shared}"],
      {{type: 'text/javascript'}})));
  w.port.start();
}});
addEventListener('pagehide', function () {{
  navigator.sendBeacon('/beacon-pagehide', 'x');
  fetch('/keepalive-pagehide', {{method: 'POST', body: 'x', keepalive: true}});
}});
attempt('ws', function () {{ new WebSocket('{ws}/ws'); }});
attempt('ws-forbidden', function () {{ new WebSocket('ws://{forbidden}/ws'); }});
attempt('worker', function () {{
  new Worker(URL.createObjectURL(new Blob(["{worker}"], {{type: 'text/javascript'}})));
}});
attempt('rtc', function () {{
  var pc = new RTCPeerConnection({{iceServers: [{{urls: 'stun:{forbidden}'}}]}});
  pc.createDataChannel('x');
  pc.createOffer().then(function (o) {{ return pc.setLocalDescription(o); }});
}});
document.getElementById('tried').textContent = tried.join(' ');
</script></body></html>"""


_SPECULATION_PAGE = """<!DOCTYPE html><html><head><title>speculation</title>
<script type="speculationrules">{"prefetch": [{"source": "list", "eagerness": "immediate",
 "urls": ["/prefetched"]}], "prerender": [{"source": "list", "eagerness": "immediate",
 "urls": ["/prerendered"]}]}</script></head><body><p>Prefetching.</p>
<a href="/prefetched">next</a></body></html>"""


async def test_requests_the_interception_cannot_see_are_switched_off_or_end_at_the_trap(
        tmp_path: Path, forbidden: tuple[ForbiddenListener, int]) -> None:
    """A SharedWorker's fetch, beacons at pagehide, a speculation-rules prefetch (an
    https page: Chromium prefetches https only), WebSockets and WebRTC: none reaches
    the server or 127.0.0.2; the browser's proxy port is the crawler's own listener,
    which refuses and counts whatever arrives."""
    listener, port = forbidden
    udp = ForbiddenUdp()
    await udp.start(port)
    pages = [Page(path=p, body="x", content_type="text/plain") for p in _ESCAPE_PATHS]
    try:
        async with SimWeb(scenario(host("spa.test", *pages)), dns=True) as web:
            base = web.base_url("spa.test")
            async with _renderer(web, tmp_path, settle_ms=1500) as (renderer, metrics):
                out = await renderer.render_page(
                    _page(web.url("spa.test", "/"),
                          _escapes_page(base, f"127.0.0.2:{port}")), delay=0.0)
                https = "https" + base[len("http"):]
                await renderer.render_page(_page(f"{https}/", _SPECULATION_PAGE),
                                           delay=0.0)
                await asyncio.sleep(2.0)  # anything the closed pages left behind
                arrived = list(renderer.trap.last_lines)
                refused = dict(renderer.trap.refused_by)
                counted = {t: metrics.render_proxy_refused.labels(t)._value.get()
                           for t in ("browser_services", "other")}
            escaped = [r.target for r in web.log.records() if r.path in _ESCAPE_PATHS]
    finally:
        udp.stop()
    tried = out.html.split('<div id="tried">', 1)[1].split("</div>", 1)[0].split()
    assert "shared" not in tried  # switched off: its requests are not intercepted
    assert {"ws", "ws-forbidden", "worker", "rtc"} <= set(tried), tried
    assert escaped == []
    assert listener.connections == 0
    assert udp.datagrams == 0
    # the one thing of the pages' that reached the trap: the worker's WebSocket (not
    # intercepted, as documented), refused and counted; the page's own WebSockets were
    # closed inside the browser, the speculation rules found preloading off, and the
    # page's renderer was ended before its tab closed, so its pagehide handler (a
    # beacon and a keepalive fetch) never ran
    from_pages = [line for line in arrived if "spa.test" in line or "127.0.0.2:" in line]
    assert from_pages == [f"CONNECT spa.test:{web.port} HTTP/1.1"], arrived
    assert refused.get("other") == 1, arrived
    assert counted == {"browser_services": refused.get("browser_services", 0), "other": 1}
    verdicts = {(url.rsplit("/", 1)[-1], v.value) for url, v in out.requests}
    assert ("ws", "blocked_type") in verdicts, out.requests


@pytest.mark.parametrize(("calls", "delay", "limit"), [(40, 0.05, 15.0), (500, 0.2, 3.0)])
async def test_parallel_fetches_keep_to_the_budget_and_stop_with_the_render(
        tmp_path: Path, calls: int, delay: float, limit: float) -> None:
    """``calls`` fetch() at once: at most CRAWLER_RENDER_MAX_REQUESTS reach the server,
    and none starts after the render ended (with a delay, the render's time limit ends
    it while most of them wait at the host's gate)."""
    budget = 20
    api = Page(path="/api/n", body="{}", content_type="application/json")
    async with SimWeb(scenario(host("spa.test", api)), dns=True) as web:
        body = (f"<div id=app></div><script>for (var i = 0; i < {calls}; i++) "
                f"fetch('/api/n?i=' + i).catch(function () {{}});</script>")
        async with _renderer(web, tmp_path, max_requests=budget,
                             page_timeout=limit) as (renderer, _metrics):
            with contextlib.suppress(RenderError):
                await renderer.render_page(_page(web.url("spa.test", "/"), body),
                                           delay=delay)
            ended = time.monotonic()
            await asyncio.sleep(max(1.0, 3 * delay))
        calls_seen = [r for r in web.log.records("spa.test") if r.path == "/api/n"]
    assert calls_seen, "the page's fetches never reached the server"
    assert len(calls_seen) <= budget, len(calls_seen)
    late = [r.target for r in calls_seen if r.started > ended]
    assert late == [], late
