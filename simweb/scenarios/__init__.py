"""Ready-made scenarios: the seed web, a catalogue of hostile features, and large
generated webs for crash tests and benchmarks.

``seed()`` and ``features()`` load the JSON files shipped beside this module; the
``build_*`` functions are the code they were written from (``python -m simweb dump seed``
writes the JSON again, and a test keeps the two equal).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

from simweb.model import (
    Host,
    Page,
    Robots,
    Scenario,
    ScenarioError,
    Sitemap,
    Trap,
    load_scenario,
)
from simweb.model import scenario_from_json as _from_json
from simweb.text import rng_for

__all__ = ["build_features", "build_rendering", "build_seed", "build_sitemaps", "features",
           "generated", "load", "rendering", "seed", "sitemaps"]

SEED_STORIES = 30
SEED_ITEMS = 20
_UTM = "?utm_source=x"


def build_seed() -> Scenario:
    """The seed scenario (see ``seed``) built in code."""
    stories = range(1, SEED_STORIES + 1)
    tracked = {1, 5, 10}  # stories linked a second time with ?utm_source=x
    home_links = [f"/story/{n}" for n in stories]
    home_links += [f"/story/{n}{_UTM}" for n in sorted(tracked)]
    home_links += ["/private/secret", "http://shop.test/"]
    news_pages = [Page(path="/", title="The Daily Test: front page", words=120,
                       links=tuple(home_links))]
    for n in stories:
        back = f"/{_UTM}" if n % 3 == 0 else "/"
        news_pages.append(Page(path=f"/story/{n}", words=300, links=(f"/print/{n}", back)))
    news_pages += [Page(path=f"/print/{n}", same_as=f"/story/{n}") for n in stories]
    news_pages.append(Page(path="/private/secret", title="Private: do not crawl", words=150,
                           links=("/",)))
    news = Host(name="news.test", robots=Robots(disallow=("/private/",)),
                pages=tuple(news_pages))

    items = range(1, SEED_ITEMS + 1)
    shop_links = [f"/item/{n}" for n in items] + [f"/item/3{_UTM}", "http://trap.test/"]
    shop_pages = [Page(path="/", title="Test Shop: all items", words=120,
                       links=tuple(shop_links))]
    shop_pages += [Page(path=f"/item/{n}", words=220, links=("/",)) for n in items]
    shop = Host(name="shop.test", robots=Robots(kind="missing"), pages=tuple(shop_pages))

    trap = Host(name="trap.test", robots=Robots(),
                pages=(Page(path="/", title="Events calendar", words=120,
                            links=("/day/2026-01-01",)),),
                traps=(Trap(kind="calendar", prefix="/day/", start="2026-01-01", words=200),))

    return Scenario(
        name="seed", seed=20260101, hosts=(news, shop, trap),
        seeds=("http://news.test/", "http://shop.test/", "http://trap.test/"),
        description=(
            "news.test: home, 30 stories, 30 byte-identical print copies, a page "
            "robots.txt disallows, tracking-parameter copies of links. shop.test: home "
            "and 20 items, robots.txt 404. trap.test: an endless calendar. A crawler that "
            "drops utm_* parameters, obeys robots.txt, skips the links of duplicates and "
            "caps hosts at 80 pages fetches 61 + 21 + 80 pages and finds 30 exact "
            "duplicates."))


def build_features() -> Scenario:
    """A catalogue of every behaviour, one host or path per behaviour."""
    accents = "Café crème, déjà vu, naïve façade, Zürich, señor, garçon."
    lab_pages = [
        Page(path="/dup/a", words=200, links=("/",)),
        Page(path="/dup/b", same_as="/dup/a"),
        Page(path="/near/a", words=300, links=("/",)),
        Page(path="/near/b", near_duplicate_of="/near/a"),
        Page(path="/tracking", words=100,
             links=("/dup/a?utm_source=x&utm_medium=y", "/dup/a?gclid=abc", "/dup/a")),
        Page(path="/busy", status=429, retry_after="2", recover_after=1),
        Page(path="/down", status=503, retry_after="3", recover_after=2),
        Page(path="/down-forever", status=503, retry_after="120"),
        Page(path="/maintenance", status=503, retry_after="Wed, 21 Oct 2026 07:28:00 GMT"),
        Page(path="/missing", status=404),
        Page(path="/error", status=500),
        Page(path="/redirect/301", status=301, redirect="/dup/a"),
        Page(path="/redirect/302", status=302, redirect="/dup/a"),
        Page(path="/redirect/307", status=307, redirect="/dup/a"),
        Page(path="/redirect/308", status=308, redirect="/dup/a"),
        Page(path="/redirect/cross", status=301, redirect="http://other.test/"),
        Page(path="/redirect/internal", status=302, redirect="http://internal.test/secret"),
        Page(path="/loop/a", status=302, redirect="/loop/b"),
        Page(path="/loop/b", status=302, redirect="/loop/a"),
        *[Page(path=f"/chain/{i}", status=301, redirect=f"/chain/{i + 1}") for i in range(1, 7)],
        Page(path="/chain/7", words=100),
        Page(path="/slow", delay=2.0, words=100),
        Page(path="/hang", delay=60.0, words=100),
        Page(path="/drip", drip_seconds=3.0, drip_chunks=30, words=400),
        Page(path="/big", body_bytes=6_000_000, words=100),
        Page(path="/bomb", gzip_bomb=50_000_000),
        Page(path="/no-type", content_type=None, words=100),
        Page(path="/wrong-type", content_type="image/png", words=100),
        Page(path="/binary", content_type="application/octet-stream", words=100),
        Page(path="/plain", content_type="text/plain; charset=utf-8",
             body="Just text, no markup.\n"),
        Page(path="/charset/latin1-declared-utf8", encoding="latin-1", extra_text=accents),
        Page(path="/charset/meta-only", content_type="text/html", meta_charset="iso-8859-1",
             encoding="latin-1", extra_text=accents),
        Page(path="/charset/utf8-no-charset", content_type="text/html", extra_text=accents),
        Page(path="/cached", words=150),
        Page(path="/no-validators", etag=False, last_modified=False, words=150),
        Page(path="/changing", changes="major", words=200),
        Page(path="/counter", changes="minor", words=200),
    ]
    lab_home = Page(path="/", title="Feature lab", words=80,
                    links=tuple(p.path for p in lab_pages))
    lab = Host(name="lab.test", pages=(lab_home, *lab_pages))

    def simple(name: str, robots: Robots | None = None, latency: float = 0.0) -> Host:
        return Host(name=name, robots=robots or Robots(), latency=latency,
                    pages=(Page(path="/", words=120, links=("/a",)),
                           Page(path="/a", words=120, links=("/",))))

    hosts = [
        lab,
        simple("other.test"),
        Host(name="internal.test", address="127.0.0.2",
             pages=(Page(path="/", words=80), Page(path="/secret", words=80))),
        Host(name="delay.test",
             robots=Robots(disallow=("/private/",), allow=("/private/ok",), crawl_delay=2.0,
                           sitemaps=("http://delay.test/sitemap.xml",)),
             pages=(Page(path="/", words=100, links=("/private/x", "/private/ok")),
                    Page(path="/private/x", words=100), Page(path="/private/ok", words=100))),
        simple("robots404.test", robots=Robots(kind="missing")),
        simple("robots500.test", robots=Robots(kind="error", status=500)),
        simple("robots503.test", robots=Robots(kind="error", status=503)),
        simple("robots-slow.test", robots=Robots(kind="timeout", delay=60.0)),
        simple("robots-big.test", robots=Robots(kind="oversize", size=600_000,
                                                disallow=("/private/",))),
        simple("latency.test", latency=0.3),
        Host(name="traps.test",
             pages=(Page(path="/", words=100,
                         links=("/calendar/2026-01-01", "/s/page1?sid=start", "/r/",
                                "/search?q=shoes")),),
             traps=(Trap(kind="calendar", prefix="/calendar/"),
                    Trap(kind="session", prefix="/s/"),
                    Trap(kind="repeat", prefix="/r/"),
                    Trap(kind="params", prefix="/search"))),
    ]
    return Scenario(name="features", seed=7, hosts=tuple(hosts),
                    seeds=tuple(f"http://{h.name}/" for h in hosts if h.name != "internal.test"),
                    dns_ttl=60,
                    description="One host or path per behaviour of the simulated web.")


XML = "application/xml"
SITEMAP_ORPHANS = 4  # pages of maps.test that only its sitemaps name
HUGE_SITEMAP_BYTES = 51 * 1024 * 1024  # past the protocol's 50 MB once inflated


def build_sitemaps() -> Scenario:
    """Sitemaps, friendly and hostile (built in code, not shipped as JSON).

    - maps.test: robots.txt (Crawl-delay 0.25) names a sitemap index and a sitemap on
      cdn.test. The index lists a urlset with lastmod values (pages no HTML page
      links to, and a URL of victim.test that it may not speak for), a gzip urlset
      and a text sitemap.
    - cdn.test: serves the sitemap maps.test's robots.txt names (it lists
      maps.test/cross/1: vouched for by that robots.txt), and names in its own
      robots.txt a sitemap listing maps.test/rogue/1, which nobody vouches for.
    - victim.test: must never be asked for anything.
    - hostile.test: robots.txt names a malformed sitemap (cut in its second entry),
      an entity bomb, an index that lists itself and a chain of indexes deeper than
      the cap, a gzip file over 50 MB inflated, and a sitemap that answers 404.
    """
    orphans = [f"/orphan/{n}" for n in range(1, SITEMAP_ORPHANS + 1)]
    fresh = ["/fresh/1", "/fresh/2", "/fresh/3"]
    maps_pages = [
        Page(path="/", title="Maps home", words=80, links=("/about",)),
        Page(path="/about", words=80, links=("/",)),
        *(Page(path=p, words=80) for p in orphans),
        *(Page(path=p, words=80) for p in fresh),
        Page(path="/text/1", words=80), Page(path="/text/2", words=80),
        Page(path="/cross/1", words=80), Page(path="/rogue/1", words=80),
        Page(path="/sitemap_index.xml", content_type=XML, sitemap=Sitemap(
            kind="index", entries=("/sitemaps/pages.xml", "/sitemaps/fresh.xml.gz",
                                   "/sitemaps/list.txt"),
            lastmod=("2024-03-01", "2024-03-02T10:00:00+00:00"))),
        Page(path="/sitemaps/pages.xml", content_type=XML, sitemap=Sitemap(
            entries=(*orphans, "/", "http://victim.test/stolen"),
            lastmod=("2024-01-01", "2024-01-02", "2024-01-03T08:00:00Z", "2024-01",
                     "2024-01-05"))),
        Page(path="/sitemaps/fresh.xml.gz", content_type="application/gzip",
             sitemap=Sitemap(entries=tuple(fresh), lastmod=("2024-02-01",) * 3, gzip=True)),
        Page(path="/sitemaps/list.txt", content_type="text/plain; charset=utf-8",
             sitemap=Sitemap(kind="text", entries=("/text/1", "/text/2"))),
    ]
    maps = Host(name="maps.test", pages=tuple(maps_pages), robots=Robots(
        crawl_delay=0.25,
        sitemaps=("http://maps.test/sitemap_index.xml", "http://cdn.test/maps/sitemap.xml")))
    cdn = Host(name="cdn.test", robots=Robots(sitemaps=("http://cdn.test/rogue.xml",)), pages=(
        Page(path="/", words=80),
        Page(path="/own/1", words=80),
        Page(path="/maps/sitemap.xml", content_type=XML, sitemap=Sitemap(
            entries=("http://maps.test/cross/1", "/own/1"))),
        Page(path="/rogue.xml", content_type=XML, sitemap=Sitemap(
            entries=("http://maps.test/rogue/1",))),
    ))
    victim = Host(name="victim.test", pages=(Page(path="/stolen", words=80),))
    hostile = Host(name="hostile.test", robots=Robots(sitemaps=tuple(
        f"http://hostile.test/bad/{name}" for name in (
            "malformed.xml", "bomb.xml", "loop.xml", "huge.xml.gz", "missing.xml"))),
        pages=(
            Page(path="/", words=80),
            *(Page(path=p, words=80) for p in ("/m/1", "/m/2", "/b/1", "/d/1", "/d/2",
                                               "/h/1")),
            Page(path="/bad/malformed.xml", content_type=XML,
                 sitemap=Sitemap(kind="malformed", entries=("/m/1",))),
            Page(path="/bad/bomb.xml", content_type=XML,
                 sitemap=Sitemap(kind="entity_bomb", entries=("/b/1",))),
            Page(path="/bad/loop.xml", content_type=XML, sitemap=Sitemap(
                kind="index", entries=("/bad/loop.xml", "/bad/deeper1.xml"))),
            Page(path="/bad/deeper1.xml", content_type=XML, sitemap=Sitemap(
                kind="index", entries=("/bad/deeper2.xml", "/bad/loop.xml"))),
            Page(path="/bad/deeper2.xml", content_type=XML,
                 sitemap=Sitemap(entries=("/d/2",))),
            Page(path="/bad/huge.xml.gz", content_type="application/gzip", sitemap=Sitemap(
                entries=("/h/1",), gzip=True, pad_bytes=HUGE_SITEMAP_BYTES)),
        ))
    return Scenario(
        name="sitemaps", seed=5, hosts=(maps, cdn, victim, hostile), dns_ttl=60,
        seeds=("http://maps.test/", "http://cdn.test/", "http://hostile.test/"),
        description="Sitemaps from robots.txt: an index, gzip, text, lastmod, the "
                    "cross-submit rule, and hostile sitemaps.")


@functools.cache
def sitemaps() -> Scenario:
    """The sitemap scenario (see :func:`build_sitemaps`)."""
    return build_sitemaps()

RENDER_ITEMS = 3

# spa.test's scripts (verbatim; links are relative, so the server's port needs no help)
_APP_JS = """
fetch('/api/items.json').then(function (r) { return r.json(); }).then(function (data) {
  var app = document.getElementById('app');
  var h = document.createElement('h1');
  h.textContent = data.title;
  app.appendChild(h);
  var p = document.createElement('p');
  p.textContent = data.intro;
  app.appendChild(p);
  var ul = document.createElement('ul');
  data.items.forEach(function (item) {
    var li = document.createElement('li');
    var a = document.createElement('a');
    a.href = item.href;
    a.textContent = item.name;
    li.appendChild(a);
    ul.appendChild(li);
  });
  app.appendChild(ul);
  var about = document.createElement('a');
  about.href = '/about';
  about.textContent = 'About this shop';
  app.appendChild(about);
});
"""

_TRACKER_JS = """
document.addEventListener('DOMContentLoaded', function () {
  var leak = document.createElement('a');
  leak.href = '/private/leak';
  document.body.appendChild(leak);
});
"""

_HOG_JS = """
var keep = [];
for (;;) { keep.push(new Array(1000000).fill(keep.length)); }
"""


def _shell(*scripts: str, inline: str = "") -> str:
    tags = "".join(f'<script src="{src}"></script>\n' for src in scripts)
    if inline:
        tags += f"<script>{inline}</script>\n"
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<title>Loading</title>\n"
            '<link rel="stylesheet" href="/style.css">\n' + tags + "</head>\n<body>\n"
            '<img src="/logo.png" alt="">\n<div id="app"></div>\n'
            "<noscript>This shop needs JavaScript.</noscript>\n</body>\n</html>\n")


def _escapes(origin: str) -> str:
    """Ways a page's script may try to reach ``origin`` besides a script tag."""
    ws = "ws" + origin[len("http"):]
    return (f"try {{ new WebSocket('{ws}/ws'); }} catch (e) {{}}\n"
            f"new Image().src = '{origin}/beacon.gif';\n"
            f"try {{ navigator.sendBeacon('{origin}/beacon'); }} catch (e) {{}}\n")


def build_rendering(forbidden: str = "http://127.0.0.2") -> Scenario:
    """Pages that build their content and links with JavaScript (docs/rendering.md).

    spa.test's home page is an empty shell: its script fetches /api/items.json and
    builds the links to /item/1..3 and /about from it. The shell also loads a script
    robots.txt disallows (/private/tracker.js, which would add /private/leak), a script
    at ``forbidden`` (an origin the SSRF guard refuses), a style sheet and an image, and
    an inline script tries a WebSocket, an image beacon and sendBeacon to ``forbidden``;
    a crawler that renders safely requests none of those. /about links to /plain, a
    page with text, links and a script (no shell: not rendered automatically), and
    /hog is a shell whose script allocates without end (a page over its memory cap).
    """
    items = [{"name": f"Item {n}", "href": f"/item/{n}"} for n in range(1, RENDER_ITEMS + 1)]
    data = json.dumps({"title": "Script Shop", "items": items,
                       "intro": "Everything on this page was built by a script."})
    js = "application/javascript; charset=utf-8"
    pages = [
        Page(path="/", body=_shell("/app.js", "/private/tracker.js", f"{forbidden}/steal.js",
                                   inline=_escapes(forbidden))),
        Page(path="/app.js", content_type=js, body=_APP_JS),
        Page(path="/private/tracker.js", content_type=js, body=_TRACKER_JS),
        Page(path="/private/leak", words=50),
        Page(path="/api/items.json", content_type="application/json", body=data),
        Page(path="/style.css", content_type="text/css", body="body { color: #222; }\n"),
        Page(path="/logo.png", content_type="image/png", body="not really a png"),
        *[Page(path=f"/item/{n}", words=200, links=("/",)) for n in range(1, RENDER_ITEMS + 1)],
        Page(path="/about", words=150, links=("/", "/plain")),
        Page(path="/plain", body=("<!DOCTYPE html>\n<html><head><title>Plain</title>"
                                  "<script>var x = 1;</script></head><body><h1>Plain"
                                  "</h1><p>" + "A page that needs no script at all. " * 12
                                  + '</p><a href="/">Home</a> <a href="/about">About'
                                  "</a> <a href=\"/item/1\">One</a></body></html>\n")),
        Page(path="/hog", body=_shell("/hog.js")),
        Page(path="/hog.js", content_type=js, body=_HOG_JS),
    ]
    spa = Host(name="spa.test", robots=Robots(disallow=("/private/",)), pages=tuple(pages))
    return Scenario(name="rendering", seed=7, hosts=(spa,), seeds=("http://spa.test/",),
                    description="Pages built by JavaScript: links from a script and an XHR, "
                                "a script robots.txt disallows, one at a forbidden address, "
                                "a style sheet and an image, a page over its memory cap.")


@functools.cache
def rendering() -> Scenario:
    """The rendering scenario (see :func:`build_rendering`)."""
    return build_rendering()


def _shipped(name: str) -> bytes:
    return resources.files(__package__).joinpath(f"{name}.json").read_bytes()


@functools.cache
def seed() -> Scenario:
    """The seed scenario (news.test, shop.test, trap.test) from seed.json."""
    return _from_json(_shipped("seed"))


@functools.cache
def features() -> Scenario:
    """The feature catalogue from features.json."""
    return _from_json(_shipped("features"))


def generated(hosts: int, pages_per_host: int, seed: int, links_per_page: int = 6,
              duplicate_ratio: float = 0.05, *, near_duplicate_ratio: float = 0.0,
              cross_host_ratio: float = 0.15, tracking_ratio: float = 0.05,
              words: int = 120, latency: float = 0.0) -> Scenario:
    """A deterministic web of ``hosts`` hosts with ``pages_per_host`` pages each.

    Every page is reachable from its host's home page (the seeds) through pages that are
    not duplicates, within about log(pages) links; duplicates copy an original byte for
    byte (near-duplicates with one word changed), so skipping their links loses nothing.
    Every host has a robots.txt that disallows /private/ and a home page linking
    /private/1, and some links are repeated with ?utm_source=x. Pages are rendered on
    first request and cached.
    """
    if hosts < 1 or pages_per_host < 1:
        raise ScenarioError("generated: hosts and pages_per_host must be >= 1")
    if links_per_page < 2:
        raise ScenarioError("generated: links_per_page must be >= 2")
    if not 0 <= duplicate_ratio + near_duplicate_ratio <= 0.5:
        raise ScenarioError("generated: duplicate ratios must add up to at most 0.5")
    names = [f"site{i}.test" for i in range(hosts)]
    fanout = max(2, links_per_page // 2)
    host_specs = []
    for name in names:
        rng = rng_for(seed, name, "graph")
        kinds = ["page"]  # index 0 is the home page
        for _ in range(1, pages_per_host):
            r = rng.random()
            kinds.append("dup" if r < duplicate_ratio
                         else "near" if r < duplicate_ratio + near_duplicate_ratio else "page")
        originals = [0]
        children: dict[int, list[int]] = {0: []}
        for assigned, k in enumerate(range(1, pages_per_host)):
            parent = originals[min(assigned // fanout, len(originals) - 1)]
            children.setdefault(parent, []).append(k)
            if kinds[k] == "page":
                originals.append(k)
                children.setdefault(k, [])

        def path(k: int) -> str:
            return "/" if k == 0 else f"/p/{k}"

        pages = []
        for k in range(pages_per_host):
            if kinds[k] != "page":
                pool = [o for o in originals if o != 0] or [0]
                source = pool[rng.randrange(len(pool))]
                if kinds[k] == "dup":
                    pages.append(Page(path=path(k), same_as=path(source)))
                else:
                    pages.append(Page(path=path(k), near_duplicate_of=path(source)))
                continue
            links = [path(c) for c in children.get(k, [])]
            while len(links) < links_per_page:
                if hosts > 1 and rng.random() < cross_host_ratio:
                    other = names[rng.randrange(hosts)]
                    if other != name:
                        target = rng.randrange(pages_per_host)
                        links.append(f"http://{other}{path(target)}")
                        continue
                links.append(path(rng.randrange(pages_per_host)))
            if rng.random() < tracking_ratio:
                links.append(links[0] + "?utm_source=x")
            if k == 0:
                links.append("/private/1")
            pages.append(Page(path=path(k), words=words, links=tuple(links)))
        pages.append(Page(path="/private/1", words=words))
        host_specs.append(Host(name=name, latency=latency, pages=tuple(pages),
                               robots=Robots(disallow=("/private/",))))
    return Scenario(name=f"generated-{hosts}x{pages_per_host}-{seed}", seed=seed,
                    hosts=tuple(host_specs), seeds=tuple(f"http://{n}/" for n in names))


_BUILTIN = {"seed": seed, "features": features, "sitemaps": sitemaps, "rendering": rendering}


def load(name: str) -> Scenario:
    """A scenario by name ('seed', 'features', 'generated:HOSTS:PAGES[:SEED]') or by the
    path of a JSON file."""
    if name in _BUILTIN:
        return _BUILTIN[name]()
    if name.startswith("generated"):
        parts = name.split(":")[1:]
        try:
            numbers = [int(p) for p in parts]
        except ValueError as exc:
            raise ScenarioError(f"bad generated scenario spec {name!r}") from exc
        if len(numbers) not in (2, 3):
            raise ScenarioError("use generated:HOSTS:PAGES[:SEED]")
        return generated(numbers[0], numbers[1], numbers[2] if len(numbers) == 3 else 1)
    path = Path(name)
    if not path.is_file():
        raise ScenarioError(f"no scenario named {name!r} and no such file")
    return load_scenario(path)
