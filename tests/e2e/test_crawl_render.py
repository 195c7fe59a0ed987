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
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from common.messages import Reason, UrlStatus
from common.rendering import RenderWhy
from parser.service import ToRender
from render.browser import ChromiumRenderer, RenderError
from simweb import SimWeb
from simweb.scenarios import RENDER_ITEMS, build_rendering
from tests.e2e.crawl_support import DELAY, hits, key, run, settings_for
from tests.render_support import ForbiddenListener, require_browser

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
    # the style sheet and the sendBeacon are blocked by type; the images are not even
    # asked for (the browser runs with images off) and the WebSocket is not an
    # intercepted request: it dies at the dead proxy (the listener saw nothing)
    assert counts == {"page": "1", "fetch": "2", "blocked_robots": "1", "blocked_ssrf": "1",
                      "blocked_type": "2"}
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
    from fetcher.http import HttpFetcher
    from fetcher.robots_cache import RobotsCache
    from fetcher.service import FetcherStage
    from render.service import RenderStage

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
        stage = RenderStage(settings.replace(render={"auto": False}), bus, store, blobs,
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
