"""Rendering in headless Chromium, end to end against the simulated web (Debian's
``chromium``; scripts/test installs it, and under CI=true a missing browser fails).

What the server saw is the evidence: the links a script built from an XHR are crawled,
the page itself is requested once (the browser is answered from the stored response),
and the script robots.txt disallows, the style sheet and the image are never requested;
a script at 127.0.0.2 (refused by the SSRF guard) never reaches the listener there.
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
from render.browser import ChromiumRenderer, RenderError, find_browser
from simweb import SimWeb
from simweb.scenarios import RENDER_ITEMS, build_rendering
from tests.conftest import unavailable
from tests.e2e.crawl_support import DELAY, hits, key, run, settings_for

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _browser_installed() -> None:
    if find_browser() is None:
        unavailable("chromium not installed (apt-get install chromium)")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        unavailable("playwright not installed (pip install -e '.[render]')")


class _Listener:
    """A TCP listener on 127.0.0.2 that counts connections (it must see none)."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        async def accept(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.connections += 1
            w.close()

        self.server = await asyncio.start_server(accept, "127.0.0.2", 0)
        return int(self.server.sockets[0].getsockname()[1])


@pytest.fixture
async def forbidden() -> AsyncIterator[tuple[_Listener, int]]:
    listener = _Listener()
    port = await listener.start()
    yield listener, port
    assert listener.server is not None
    listener.server.close()
    await listener.server.wait_closed()


RENDER = {"enabled": True, "third_party": True, "settle_ms": 200, "page_timeout": 15.0}


async def test_rendering_crawls_script_links_and_fetches_nothing_forbidden(
        tmp_path: Path, forbidden: tuple[_Listener, int]) -> None:
    listener, port = forbidden
    scenario = build_rendering(forbidden=f"http://127.0.0.2:{port}/steal.js")
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
    # the style sheet is blocked by type; the image is not even asked for (the browser
    # runs with images off)
    assert counts == {"page": "1", "fetch": "2", "blocked_robots": "1", "blocked_ssrf": "1",
                      "blocked_type": "1"}
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
