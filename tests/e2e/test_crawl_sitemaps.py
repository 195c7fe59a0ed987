"""Sitemaps end to end: robots.txt names them, the crawler fetches them as polite
fetches and crawls what they list; hostile sitemaps end as recorded outcomes. Checked
in the simulated web's request log and in url_state."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import pytest

from common.messages import Reason, TaskKind, UrlStatus
from simweb import Page, SimWeb
from simweb.model import Robots
from simweb.scenarios import SITEMAP_ORPHANS, sitemaps
from tests.e2e.crawl_support import hits, host, host_key, key, paths, resume, run, scenario
from tests.e2e.sitemap_support import (
    LONG_INDEX,
    MAX_FILES,
    SEEDS,
    check_hostile_outcomes,
    check_long_index_requests,
    check_requests,
    long_index_site,
)


@pytest.mark.timeout(120)
async def test_sitemaps_lead_to_every_listed_page(tmp_path: Path) -> None:
    async with SimWeb(sitemaps(), dns=True) as web:
        out = await run(web, tmp_path, SEEDS)
        check_requests(web)

    index = out.row(key(web, "maps.test/sitemap_index.xml"))
    assert (index.status, index.reason, index.kind) == (UrlStatus.DONE, Reason.SITEMAP,
                                                        TaskKind.SITEMAP)
    assert index.detail is not None and "3 sitemaps" in index.detail
    pages_xml = out.row(key(web, "maps.test/sitemaps/pages.xml"))
    assert pages_xml.detail is not None and "1 of other hosts refused" in pages_xml.detail
    orphan = out.row(key(web, "maps.test/orphan/1"))
    assert orphan.status is UrlStatus.DONE and orphan.reason is None
    assert orphan.lastmod == dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp()
    assert orphan.priority == 2 and orphan.kind is None
    assert out.row(key(web, "maps.test/about")).priority == 1  # a link
    # the home page, fetched as a seed before its sitemap was read, got its lastmod too
    home = out.row(key(web, "maps.test/"))
    assert home.lastmod == dt.datetime(2024, 1, 5, tzinfo=dt.UTC).timestamp()
    assert home.priority == 0

    # hostile sitemaps: recorded outcomes
    def outcome(path: str) -> tuple[UrlStatus, Reason | None]:
        row = out.row(key(web, "hostile.test" + path))
        return row.status, row.reason

    check_hostile_outcomes(outcome)
    bomb = out.row(key(web, "hostile.test/bad/bomb.xml"))
    assert bomb.detail is not None and "DTDForbidden" in bomb.detail
    # sitemaps are no pages: no page records for them
    assert not [p for p in out.pages() if ".xml" in p["url"] or ".txt" in p["url"]]
    assert out.stats.queued == 0 and out.stats.in_flight == 0


@pytest.mark.timeout(120)
async def test_probe_and_unchanged_pages_not_refetched(tmp_path: Path) -> None:
    # robots.txt names no sitemap: with probing on, /sitemap.xml is tried
    from simweb.model import Sitemap

    site = host("probe.test",
                Page(path="/", words=80, links=("/linked",)),
                Page(path="/linked", words=80),
                Page(path="/old", words=80), Page(path="/undated", words=80),
                # no validators: the refresh gets the same bytes again with a 200
                Page(path="/sitemap.xml", content_type="application/xml", etag=False,
                     last_modified=False,
                     sitemap=Sitemap(entries=("/old", "/undated"), lastmod=("2024-01-01",))),
                robots=Robots())
    async with SimWeb(scenario(site), dns=True) as web:
        first = await run(web, tmp_path, ["probe.test/"], sitemaps={"probe": True},
                          crawl={"recrawl_interval": 0.5})
        assert Counter(paths(hits(web, "probe.test"))) == {
            "/": 1, "/linked": 1, "/sitemap.xml": 1, "/old": 1, "/undated": 1}
        web.log.clear()
        await asyncio_sleep(0.6)  # every stored page is due again
        second = await resume(first)
        again = Counter(paths(hits(web, "probe.test")))

    # the page whose lastmod is older than its stored copy is not fetched again; the
    # others (no lastmod) and the sitemap itself are refreshed
    assert "/old" not in again, again
    assert again["/undated"] == 1 and again["/"] == 1 and again["/sitemap.xml"] == 1
    # the sitemap came back byte for byte (a revisit record): read as unchanged
    refreshed = second.row(key(web, "probe.test/sitemap.xml"))
    assert (refreshed.status, refreshed.reason) == (UrlStatus.DONE, Reason.SITEMAP)
    assert refreshed.detail is not None and "same as its last capture" in refreshed.detail


@pytest.mark.timeout(60)
async def test_changefreq_starts_the_revisit_interval(tmp_path: Path) -> None:
    # /weekly is listed with <changefreq>weekly</changefreq>, /plain with none: with a
    # recrawl interval of 0.5 s, only /plain is due again after 0.6 s
    from simweb.model import Sitemap

    site = host("freq.test",
                Page(path="/", words=80),
                Page(path="/plain", words=80), Page(path="/weekly", words=80),
                Page(path="/sitemap.xml", content_type="application/xml",
                     sitemap=Sitemap(entries=("/plain", "/weekly"),
                                     changefreq=("", "weekly"))),
                robots=Robots(sitemaps=("/sitemap.xml",)))
    async with SimWeb(scenario(site), dns=True) as web:
        first = await run(web, tmp_path, ["freq.test/"], crawl={"recrawl_interval": 0.5})
        assert Counter(paths(hits(web, "freq.test"))) == {
            "/": 1, "/plain": 1, "/weekly": 1, "/sitemap.xml": 1}
        web.log.clear()
        await asyncio_sleep(0.6)
        second = await resume(first)
        again = Counter(paths(hits(web, "freq.test")))

    assert again["/plain"] == 1 and "/weekly" not in again, again
    weekly = second.row(key(web, "freq.test/weekly"))
    assert weekly.status is UrlStatus.DONE and weekly.revisit_interval == 604_800.0
    # /plain started at the crawl's 0.5 s and doubled when its refresh found it unchanged
    assert second.row(key(web, "freq.test/plain")).revisit_interval == 1.0


async def asyncio_sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


@pytest.mark.timeout(60)
async def test_sitemaps_off(tmp_path: Path) -> None:
    site = host("quiet.test", Page(path="/", words=80),
                Page(path="/sitemap.xml", content_type="application/xml"),
                robots=Robots(sitemaps=("http://quiet.test/sitemap.xml",)))
    async with SimWeb(scenario(site), dns=True) as web:
        await run(web, tmp_path, ["quiet.test/"], sitemaps={"enabled": False})
        assert paths(hits(web, "quiet.test")) == ["/"]


@pytest.mark.timeout(120)
async def test_sitemaps_through_the_cluster_fetchers_inline_judge(tmp_path: Path) -> None:
    # Cluster mode's composition on the embedded adapters: the fetcher parses and
    # judges what it stored (crawler/inline.py) and the verdict travels with the fetch
    # result, so the parser and dedup consumers see nothing to do. Kafka and Cassandra
    # are not needed to run the stage code a cluster fetcher runs.
    from crawler.embedded import EmbeddedCrawler
    from crawler.inline import page_judge
    from tests.e2e.crawl_support import absolute, read_state, settings_for

    async with SimWeb(sitemaps(), dns=True) as web:
        settings = settings_for(web, tmp_path)
        crawler = EmbeddedCrawler(settings)
        crawler.fetcher.judge = page_judge(settings, crawler.bus, crawler.store,
                                           crawler.blobs, crawler.archive,
                                           crawler.work.lane("parse"), crawler.metrics)
        await crawler.start()
        try:
            await crawler.frontier.seed([absolute(web, s) for s in SEEDS])
            await crawler.wait()
            parsed_by_stage = crawler.parser.parsed
            registry = crawler.metrics.registry

            def sample(name: str, **labels: str) -> float:
                return registry.get_sample_value(name, labels) or 0.0
        finally:
            await crawler.close()
        maps = Counter(paths(hits(web, "maps.test")))
        hostile = Counter(paths(hits(web, "hostile.test")))
        victim = web.log.records("victim.test")
        rows, _ = await read_state(settings)

    assert parsed_by_stage == 0  # every page and sitemap was judged by its fetcher
    read = "crawler_parser_sitemaps_read_total"
    assert sample(read, outcome="sitemap_invalid") == 2  # malformed, entity bomb
    assert sample(read, outcome="sitemap_capped") == 1  # over 50 MB
    # index, pages, fresh, list, cdn's two, loop, deeper1
    assert sample(read, outcome="sitemap") == 8
    assert sample("crawler_parser_sitemap_urls_total", result="other_host") == 2
    for n in range(1, SITEMAP_ORPHANS + 1):
        assert maps[f"/orphan/{n}"] == 1
    assert maps["/fresh/3"] == 1 and maps["/text/2"] == 1 and maps["/cross/1"] == 1
    assert "/rogue/1" not in maps and victim == []
    assert hostile["/m/1"] == 1 and hostile["/h/1"] == 1 and "/b/1" not in hostile

    def reason(where: str) -> Reason | None:
        return rows[key(web, where)].reason

    assert reason("maps.test/sitemap_index.xml") is Reason.SITEMAP
    assert reason("hostile.test/bad/bomb.xml") is Reason.SITEMAP_INVALID
    assert reason("hostile.test/bad/huge.xml.gz") is Reason.SITEMAP_CAPPED
    assert reason("hostile.test/bad/deeper2.xml") is Reason.SITEMAP_DEPTH
    assert all(r.status in (UrlStatus.DONE, UrlStatus.REJECTED) for r in rows.values())


@pytest.mark.timeout(120)
async def test_a_newer_lastmod_refreshes_the_page_at_once(tmp_path: Path) -> None:
    # Two crawls of one output folder. The second serves the same site, except that
    # the sitemap now says /changed changed after the first crawl fetched it.
    import asyncio

    from simweb.model import Sitemap

    def site(changed_at: str) -> Page:
        return Page(path="/sitemap.xml", content_type="application/xml", sitemap=Sitemap(
            entries=("/changed", "/same"), lastmod=(changed_at, "2024-01-01")))

    def web_of(sitemap: Page) -> list[Page]:
        return [Page(path="/", words=80), Page(path="/changed", words=80),
                Page(path="/same", words=80), sitemap]

    robots = Robots(sitemaps=("http://fresh.test/sitemap.xml",))
    first_site = host("fresh.test", *web_of(site("2024-01-01")), robots=robots)
    async with SimWeb(scenario(first_site), dns=True) as web:
        port = web.port
        await run(web, tmp_path, ["fresh.test/"], crawl={"recrawl_interval": 0.5})
        assert Counter(paths(hits(web, "fresh.test"))) == {
            "/": 1, "/sitemap.xml": 1, "/changed": 1, "/same": 1}
    await asyncio.sleep(0.6)  # the sitemap and the home page are due again
    changed_at = dt.datetime.now(dt.UTC).isoformat()
    second_site = host("fresh.test", *web_of(site(changed_at)), robots=robots)
    async with SimWeb(scenario(second_site), dns=True, port=port) as web:
        second = await run(web, tmp_path, [], crawl={"recrawl_interval": 0.5})
        again = Counter(paths(hits(web, "fresh.test")))

    # /same: its lastmod is older than its copy, so neither the interval nor the
    # sitemap brings it back; /changed: the sitemap read again says it changed
    assert again == {"/": 1, "/sitemap.xml": 1, "/changed": 1}, again
    row = second.row(key(web, "fresh.test/changed"))
    assert row.status is UrlStatus.DONE and row.lastmod is not None
    assert row.last_fetch_at is not None and row.last_fetch_at >= row.lastmod


@pytest.mark.timeout(120)
async def test_a_long_index_reads_at_most_the_cap_after_the_pages(tmp_path: Path) -> None:
    # an index listing 200 sitemap files, 8 sitemap files per host: the index and 7 of
    # its files are fetched, after the pages the home page links to
    async with SimWeb(scenario(long_index_site()), dns=True) as web:
        out = await run(web, tmp_path, ["many.test/"],
                        sitemaps={"max_files_per_host": MAX_FILES})
        check_long_index_requests(web)

    index = out.row(key(web, "many.test/index.xml"))
    assert index.detail is not None and f"{MAX_FILES} sitemaps" in index.detail
    assert f"{LONG_INDEX - MAX_FILES} sitemaps past the per-host cap" in index.detail
    assert index.priority == 0  # robots.txt named it
    files = [r for r in out.rows.values() if "/s/" in r.url]
    assert len(files) == MAX_FILES  # the entries past the cap were not even queued
    assert all(r.priority == 3 and r.kind is TaskKind.SITEMAP for r in files)
    read = [r for r in files if r.status is UrlStatus.DONE]
    refused = [r for r in files if r.status is UrlStatus.REJECTED]
    assert len(read) == MAX_FILES - 1 and all(r.reason is Reason.SITEMAP for r in read)
    assert len(refused) == 1 and refused[0].reason is Reason.SITEMAP_FILES
    assert refused[0].detail is not None and "MAX_FILES_PER_HOST" in refused[0].detail
    assert out.hosts[host_key(web, "many.test")].sitemap_files == MAX_FILES
    assert out.stats.queued == 0 and out.stats.in_flight == 0
