"""Cluster mode renders pages that build themselves with JavaScript: the roles as
separate processes on real Kafka and Cassandra, the render service (``python -m
render``) among them, headless Chromium (Debian's ``chromium``; under CI=true a missing
browser fails) and the simulated web.

Two layouts: the default one (two fetchers that parse and judge inline, handing shells
to the render service) and the one with separate parser and dedup services. What the
server saw and what the WARC files hold are the evidence: the pages only a script links
to are fetched, each page once; each rendered page has its DOM as a conversion record
and a text record that refers to it; the host's politeness gap holds at the server
across the fetchers' requests and the render service's (scripts, XHR), one request at
a time; nothing is left queued or awaiting parse; and the 127.0.0.2 origin the shell
aims its scripts, WebSocket and beacons at never sees a connection.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from simweb import Page, SimWeb
from simweb.model import Scenario
from simweb.scenarios import RENDER_ITEMS, build_rendering
from tests.e2e.crawl_support import WarcRecord, host, key, warc_records
from tests.integration.cluster import Cluster, cluster, crawl_env, require_cluster_servers
from tests.render_support import ForbiddenListener, require_browser

pytestmark = pytest.mark.integration

DELAY = 1.0
SHELLS = 3  # mix.test's shells, among its plain pages
PLAIN = 8

# mix.test's script: fetch the data of the page it runs on and build its text and the
# link to the page only it names (/hidden/N)
_MIX_JS = """
var n = location.pathname.split('/').pop();
fetch('/api/' + n + '.json').then(function (r) { return r.json(); }).then(function (d) {
  var app = document.getElementById('app');
  var h = document.createElement('h1');
  h.textContent = d.title;
  app.appendChild(h);
  var p = document.createElement('p');
  p.textContent = d.text;
  app.appendChild(p);
  var a = document.createElement('a');
  a.href = d.href;
  a.textContent = 'Read more';
  app.appendChild(a);
});
"""


def _shell(script: str, n: int) -> str:
    # shells differ in a byte: an exact duplicate of a shell is never rendered
    return ("<!DOCTYPE html>\n<html><head><title>Loading</title>"
            f'<script src="{script}"></script></head>\n'
            f'<body><div id="app" data-page="{n}"></div></body></html>\n')


def mix_host() -> tuple[str, list[Page]]:
    """A home page that links shells and plain pages alike: the fetchers fetch the
    plain pages while the render service requests the shells' scripts and data."""
    shells = [f"/shell/{n}" for n in range(1, SHELLS + 1)]
    plain = [f"/plain/{n}" for n in range(1, PLAIN + 1)]
    js = "application/javascript; charset=utf-8"
    pages = [Page(path="/", words=120, links=(*shells, *plain)),
             Page(path="/mix.js", content_type=js, body=_MIX_JS),
             *[Page(path=p, words=150, links=("/",)) for p in plain]]
    for n in range(1, SHELLS + 1):
        data = json.dumps({"title": f"Shell {n}", "href": f"/hidden/{n}",
                           "text": f"The text of shell {n} came from its script. " * 4})
        pages += [Page(path=f"/shell/{n}", body=_shell("/mix.js", n)),
                  Page(path=f"/api/{n}.json", content_type="application/json", body=data),
                  Page(path=f"/hidden/{n}", words=150, links=("/",))]
    return "mix.test", pages


def scenario(forbidden: str) -> Scenario:
    spa = build_rendering(forbidden=forbidden)
    # /hog (a page over its memory cap) is linked from nowhere: the e2e test covers it
    name, pages = mix_host()
    return Scenario(name="cluster-rendering", seed=7,
                    hosts=(*spa.hosts, host(name, *pages)), dns_ttl=60)


@pytest.fixture
async def forbidden() -> AsyncIterator[tuple[ForbiddenListener, int]]:
    listener = ForbiddenListener()
    port = await listener.start()
    yield listener, port
    await listener.stop()


def text_records(root: Path) -> list[WarcRecord]:
    out: list[WarcRecord] = []
    for path in sorted(root.glob("*-text-*.warc.gz")):
        with path.open("rb") as fh:
            for rec in ArchiveIterator(fh):
                out.append(WarcRecord(
                    type=rec.rec_type, uri=rec.rec_headers.get_header("WARC-Target-URI") or "",
                    headers=dict(rec.rec_headers.headers), http_status=None,
                    http_headers={}))
    return out


def start_roles(c: Cluster, layout: str) -> None:
    c.start("frontier", "frontier")
    if layout == "inline":
        c.start("fetcher-1", "fetcher")
        c.start("fetcher-2", "fetcher")
    else:
        c.start("fetcher", "fetcher")
        c.start("parser", "parser")
        c.start("dedup", "dedup")
    c.start("render", "render")


@pytest.mark.timeout(480)
@pytest.mark.parametrize("layout", ["inline", "services"])
async def test_cluster_renders_script_built_pages(
        tmp_path: Path, layout: str, forbidden: tuple[ForbiddenListener, int]) -> None:
    require_cluster_servers()
    require_browser()
    listener, port = forbidden
    async with SimWeb(scenario(f"http://127.0.0.2:{port}"), dns=True) as web:
        env = crawl_env(web.dns_servers, DELAY) | {
            "CRAWLER_RENDER_ENABLED": "true",
            "CRAWLER_RENDER_THIRD_PARTY": "true",  # the 127.0.0.2 script meets the guard
            "CRAWLER_RENDER_SETTLE_MS": "200",
            "CRAWLER_POLITENESS_RESPONSE_TIME_FACTOR": "0",
            "CRAWLER_FETCHER_PARSE_INLINE": "true" if layout == "inline" else "false",
        }
        with cluster(tmp_path, env) as c:
            start_roles(c, layout)
            c.seed([web.url("spa.test"), web.url("mix.test")])
            stats = await c.wait_done(360)
            log_text = c.log_text()
        spa = Counter(r.path for r in web.log.records("spa.test"))
        mix = Counter(r.path for r in web.log.records("mix.test"))
        gaps = {h: web.log.min_gap(h) for h in ("spa.test", "mix.test")}
        in_flight = {h: web.log.max_in_flight(h, exclude_paths=("/robots.txt",))
                     for h in ("spa.test", "mix.test")}
        shells = [key(web, "spa.test/"), *(key(web, f"mix.test/shell/{n}")
                                            for n in range(1, SHELLS + 1))]

    # spa.test: the page once, its script and XHR, the pages the script linked (and
    # /plain, linked from /about); never the disallowed script, the style or the image
    items = [f"/item/{n}" for n in range(1, RENDER_ITEMS + 1)]
    assert set(spa) == {"/robots.txt", "/", "/app.js", "/api/items.json", "/about",
                        "/plain", *items}, spa
    assert listener.connections == 0
    # mix.test: every page, the hidden ones only a script links to among them
    hidden = [f"/hidden/{n}" for n in range(1, SHELLS + 1)]
    assert set(hidden) <= set(mix), mix
    assert mix["/mix.js"] == SHELLS  # once per rendered page (a fresh context each)
    # each page and each script answer once; at most one request twice (a task
    # delivered again after a consumer-group rebalance)
    again = {p: n for counts in (spa, mix) for p, n in counts.items()
             if p not in ("/robots.txt", "/mix.js") and n > 1}
    assert sum(again.values()) - len(again) <= 1, again
    assert spa["/robots.txt"] == mix["/robots.txt"] == 1

    # politeness at the server: the fetchers' requests and the render service's kept
    # the host's gap and came one at a time
    for name, gap in gaps.items():
        assert gap is not None and gap >= DELAY * 0.9, (name, gap, log_text)
    assert in_flight == {"spa.test": 1, "mix.test": 1}, in_flight

    # nothing left over; nothing failed to render
    assert (stats.queued, stats.in_flight, stats.awaiting_parse) == (0, 0, 0), stats
    assert stats.errors == {}, stats
    spa_pages = 3 + RENDER_ITEMS  # /, /about, /plain and the items
    assert stats.fetched == spa_pages + 1 + 2 * SHELLS + PLAIN, stats

    # each rendered page: its response, the DOM as a conversion record that refers to
    # it, and a text record that refers to the DOM
    records = warc_records(tmp_path / "warc")
    responses = {r.uri: r for r in records if r.type == "response"}
    rendered = [r for r in records if r.type == "conversion"]
    assert sorted(r.uri for r in rendered) == sorted(shells), [r.uri for r in rendered]
    texts = {r.uri: r for r in text_records(tmp_path / "warc") if r.type == "conversion"
             and r.headers["Content-Type"].startswith("text/plain")}
    for dom in rendered:
        assert dom.headers["WARC-Refers-To"] == responses[dom.uri].headers["WARC-Record-ID"]
        assert dom.headers["Content-Type"].startswith("text/html")
        assert dom.headers["Crawler-Rendered-By"].startswith("Chromium/")
        assert texts[dom.uri].headers["WARC-Refers-To"] == dom.headers["WARC-Record-ID"]
    # every page fetched has its text record
    assert set(texts) == {u for u, r in responses.items() if r.http_status == 200
                          and not u.endswith((".js", ".json", "robots.txt"))}
