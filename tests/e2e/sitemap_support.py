"""What a crawl of the simulated web's sitemap scenario (``simweb.scenarios.sitemaps``)
must show at the server and in url_state, in any mode: shared by the embedded and the
cluster tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from common.messages import Reason, UrlStatus
from simweb import SimWeb
from simweb.model import Host, Page, Robots, Sitemap
from simweb.scenarios import SITEMAP_ORPHANS
from tests.e2e.crawl_support import hits, paths

SEEDS = ["maps.test/", "cdn.test/", "hostile.test/"]
CRAWL_DELAY = 0.25  # maps.test's robots.txt

SITEMAP_FILES = ["/sitemap_index.xml", "/sitemaps/pages.xml", "/sitemaps/fresh.xml.gz",
                 "/sitemaps/list.txt"]
LISTED = [f"/orphan/{n}" for n in range(1, SITEMAP_ORPHANS + 1)] + [
    "/fresh/1", "/fresh/2", "/fresh/3", "/text/1", "/text/2"]

#: hostile.test's sitemaps and how each ends in url_state
HOSTILE_OUTCOMES: dict[str, tuple[UrlStatus, Reason]] = {
    "/bad/malformed.xml": (UrlStatus.DONE, Reason.SITEMAP_INVALID),
    "/bad/bomb.xml": (UrlStatus.DONE, Reason.SITEMAP_INVALID),
    "/bad/huge.xml.gz": (UrlStatus.DONE, Reason.SITEMAP_CAPPED),
    "/bad/loop.xml": (UrlStatus.DONE, Reason.SITEMAP),
    "/bad/deeper2.xml": (UrlStatus.REJECTED, Reason.SITEMAP_DEPTH),
    "/bad/missing.xml": (UrlStatus.REJECTED, Reason.HTTP_ERROR),
}


def check_requests(web: SimWeb) -> None:
    """At the server: every sitemap of the index and every URL they list fetched once
    (no HTML page links to them), nothing fetched that a sitemap could not vouch for,
    hostile sitemaps read only as far as they were valid, and every fetch polite."""
    maps = Counter(paths(hits(web, "maps.test")))
    cdn = Counter(paths(hits(web, "cdn.test")))
    hostile = Counter(paths(hits(web, "hostile.test")))
    for path in [*SITEMAP_FILES, *LISTED, "/", "/about", "/cross/1"]:
        assert maps[path] == 1, (path, maps)
    # a sitemap on cdn.test that nobody vouches for may not list maps.test URLs;
    # victim.test, listed by maps.test's sitemap, is never asked for anything
    assert "/rogue/1" not in maps and web.log.records("victim.test") == []
    assert cdn["/maps/sitemap.xml"] == 1 and cdn["/rogue.xml"] == 1 and cdn["/own/1"] == 1
    assert sum(maps.values()) == len(SITEMAP_FILES) + len(LISTED) + 3
    # politeness: sitemap fetches wait the host's Crawl-delay like any other request
    maps_gaps = web.log.gaps("maps.test", exclude_paths=())
    hostile_gaps = web.log.gaps("hostile.test", exclude_paths=())
    assert min(maps_gaps) >= CRAWL_DELAY, maps_gaps
    assert min(hostile_gaps) >= 0.05, hostile_gaps
    # hostile sitemaps: only what they validly listed is fetched
    assert hostile["/m/1"] == 1  # listed before the malformed cut
    assert hostile["/h/1"] == 1  # listed before the 50 MB cap
    for never in ("/b/1", "/d/1", "/d/2", "/bad/deeper2.xml"):
        assert never not in hostile, (never, hostile)
    assert hostile["/bad/loop.xml"] == 1 and hostile["/bad/deeper1.xml"] == 1


def check_hostile_outcomes(outcome: Callable[[str], tuple[UrlStatus, Reason | None]]
                           ) -> None:
    """Each hostile sitemap ended as its recorded outcome; ``outcome`` gives the
    (status, reason) of a hostile.test path."""
    got = {path: outcome(path) for path in HOSTILE_OUTCOMES}
    assert got == HOSTILE_OUTCOMES, got


#: many.test: robots.txt names one index, which lists LONG_INDEX sitemap files (each
#: listing one page); the home page links to LINKED pages. With MAX_FILES sitemap files
#: per host, the index and MAX_FILES - 1 of its files are fetched.
LONG_INDEX = 200
LINKED = 12
MAX_FILES = 8


def long_index_site() -> Host:
    """many.test, whose sitemap index lists far more files than a host may have read."""
    return Host(
        name="many.test",
        robots=Robots(crawl_delay=0.1, sitemaps=("/index.xml",)),
        pages=(Page(path="/", words=80, links=tuple(f"/a/{i}" for i in range(LINKED))),
               *(Page(path=f"/a/{i}", words=40) for i in range(LINKED)),
               Page(path="/index.xml", content_type="application/xml",
                    sitemap=Sitemap(kind="index", entries=tuple(
                        f"/s/{i}.xml" for i in range(LONG_INDEX)))),
               *(Page(path=f"/s/{i}.xml", content_type="application/xml",
                      sitemap=Sitemap(entries=(f"/l/{i}",))) for i in range(LONG_INDEX)),
               *(Page(path=f"/l/{i}", words=40) for i in range(LONG_INDEX))))


def check_long_index_requests(web: SimWeb) -> None:
    """At the server: the index and MAX_FILES - 1 of its sitemap files fetched, each
    once, the page each lists too, and every page the home page links to fetched
    before the first sitemap file the index lists (they queue below the pages)."""
    order = paths(hits(web, "many.test"))
    files = [p for p in order if p.startswith("/s/")]
    assert order.count("/index.xml") == 1, order
    assert len(files) == MAX_FILES - 1 and len(set(files)) == len(files), files
    first_file = order.index(files[0])
    linked = [order.index(f"/a/{i}") for i in range(LINKED)]
    assert max(linked) < first_file, order
    listed = [p for p in order if p.startswith("/l/")]
    assert sorted(listed) == sorted(f"/l/{p[3:-4]}" for p in files), order
    # a file's page (listed, level 2) goes before the next file (level 3): most of the
    # listed pages are fetched before the last file, however the parse lags
    assert sum(order.index(p) < order.index(files[-1]) for p in listed) >= MAX_FILES // 2, order
