"""What a crawl of the simulated web's sitemap scenario (``simweb.scenarios.sitemaps``)
must show at the server and in url_state, in any mode: shared by the embedded and the
cluster tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from common.messages import Reason, UrlStatus
from simweb import SimWeb
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
