"""robots.txt end to end: every variant the simulated web serves, checked in the
crawler's url_state and hosts rows and in the server's request log."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from common.messages import Reason, UrlStatus
from common.politeness import retry_backoff
from simweb import Host, Page, SimWeb
from simweb.model import Robots
from simweb.scenarios import features
from tests.e2e.crawl_support import DELAY, hits, host, host_key, key, paths, run, scenario


def two_pages(name: str, robots: Robots, *extra: Page) -> Host:
    links = ("/a", *(p.path for p in extra))
    return host(name, Page(path="/", words=80, links=links),
                Page(path="/a", words=80), *extra, robots=robots)


@pytest.mark.timeout(60)
async def test_disallowed_url_is_never_requested(tmp_path: Path) -> None:
    rules = Robots(disallow=("/private/",), allow=("/private/ok",))
    site = host("rules.test", Page(path="/", words=80, links=("/private/x", "/private/ok")),
                Page(path="/private/x", words=80), Page(path="/private/ok", words=80),
                robots=rules)
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["rules.test/"])
        log = web.log.records("rules.test")

    assert paths(log)[0] == "/robots.txt"
    assert paths(log).count("/robots.txt") == 1
    assert "/private/x" not in paths(log)
    assert sorted(paths(log)[1:]) == ["/", "/private/ok"]
    blocked = out.row(key(web, "rules.test/private/x"))
    assert (blocked.status, blocked.reason) == (UrlStatus.REJECTED, Reason.ROBOTS)
    assert out.row(key(web, "rules.test/private/ok")).status is UrlStatus.DONE
    assert out.stats.robots_blocked == 1 and out.stats.fetched == 2


@pytest.mark.timeout(60)
async def test_crawl_delay_sets_the_gap_between_hits(tmp_path: Path) -> None:
    crawl_delay = 0.4
    site = two_pages("slowly.test", Robots(crawl_delay=crawl_delay), Page(path="/b", words=80))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["slowly.test/"])
        gaps = web.log.gaps("slowly.test", exclude_paths=())

    assert len(gaps) == 3  # robots.txt, /, /a, /b
    assert min(gaps) >= crawl_delay, gaps
    assert crawl_delay > DELAY * 4  # the gap came from robots.txt, not the default
    assert out.hosts[host_key(web, "slowly.test")].crawl_delay == crawl_delay
    assert out.stats.fetched == 3


@pytest.mark.timeout(60)
async def test_crawl_delay_is_capped_by_max_crawl_delay(tmp_path: Path) -> None:
    # delay.test asks for Crawl-delay: 2; the crawler caps it at 0.3 s
    cap = 0.3
    web_scenario = scenario(features().host("delay.test"))
    async with SimWeb(web_scenario, dns=True) as web:
        out = await run(web, tmp_path, ["delay.test/"],
                        politeness={"max_crawl_delay": cap})
        gaps = web.log.gaps("delay.test", exclude_paths=())
        log = web.log.records("delay.test")

    assert "/private/x" not in paths(log)
    # the sitemap its robots.txt names is fetched too (it answers 404), as politely
    assert sorted(paths(hits(web, "delay.test"))) == ["/", "/private/ok", "/sitemap.xml"]
    assert len(gaps) == 3
    assert min(gaps) >= cap, gaps
    # the uncapped Crawl-delay was not used: with it every gap would be 2 s or more (one
    # gap may stretch on a loaded machine, so not every one is held to it)
    assert sum(1 for g in gaps if g < 2.0) >= 2, gaps
    state = out.hosts[host_key(web, "delay.test")]
    assert state.crawl_delay == cap


@pytest.mark.timeout(60)
async def test_sitemap_lines_do_not_end_the_group(tmp_path: Path) -> None:
    # RFC 9309: Sitemap is not a group member; the rules after it still belong to '*'
    body = ("User-agent: *\nSitemap: http://maps.test/sitemap.xml\nDisallow: /private/\n"
            "Sitemap: http://maps.test/other.xml\nCrawl-delay: 0.3\n")
    site = host("maps.test", Page(path="/", words=80, links=("/private/x", "/a")),
                Page(path="/private/x", words=80), Page(path="/a", words=80),
                robots=Robots(body=body))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["maps.test/"])
        gaps = web.log.gaps("maps.test", exclude_paths=())

    assert paths(hits(web, "maps.test")) == ["/", "/a"]
    assert out.row(key(web, "maps.test/private/x")).reason is Reason.ROBOTS
    assert min(gaps) >= 0.3, gaps
    assert out.hosts[host_key(web, "maps.test")].crawl_delay == 0.3


@pytest.mark.timeout(60)
async def test_robots_404_allows_everything(tmp_path: Path) -> None:
    async with SimWeb(scenario(features().host("robots404.test")), dns=True) as web:
        out = await run(web, tmp_path, ["robots404.test/"])
        log = web.log.records("robots404.test")

    assert [(r.path, r.status) for r in log] == [
        ("/robots.txt", 404), ("/", 200), ("/a", 200)]
    assert {r.status for r in out.rows.values()} == {UrlStatus.DONE}
    assert out.stats.fetched == 2 and out.stats.kept == 2


@pytest.mark.timeout(60)
async def test_robots_500_fails_closed_until_dead(tmp_path: Path) -> None:
    # robots.txt is asked again after each error period; pages are never fetched
    async with SimWeb(scenario(features().host("robots500.test")), dns=True) as web:
        out = await run(web, tmp_path, ["robots500.test/"],
                        fetcher={"robots_error_retry": 0.05})
        log = web.log.records("robots500.test")

    attempts = out.settings.politeness.max_attempts
    assert paths(log) == ["/robots.txt"] * attempts
    assert {r.status for r in log} == {500}
    row = out.row(key(web, "robots500.test/"))
    assert (row.status, row.reason) == (UrlStatus.DEAD, Reason.DEAD)
    assert row.attempts == attempts
    assert row.detail is not None and "robots_unavailable" in row.detail
    assert out.stats.fetched == 0 and out.stats.dead == 1


@pytest.mark.timeout(60)
async def test_robots_error_is_remembered_for_the_retry_back_off(tmp_path: Path) -> None:
    # a failure is remembered for the back-off of the try that met it (robots_error_retry,
    # 600 s, is only the cap): the URL comes again when that runs out and asks robots.txt
    # again, so each of its tries has a robots request of its own and none is used up
    # by a remembered answer
    async with SimWeb(scenario(features().host("robots503.test")), dns=True) as web:
        out = await run(web, tmp_path, ["robots503.test/"],
                        fetcher={"robots_error_retry": 600.0})
        log = web.log.records("robots503.test")

    pol = out.settings.politeness
    assert [(r.path, r.status) for r in log] == [("/robots.txt", 503)] * pol.max_attempts
    gaps = [b.started - a.ended for a, b in itertools.pairwise(log)]
    backoffs = [retry_backoff(n, pol.backoff_base, pol.backoff_max)
                for n in range(1, len(gaps) + 1)]
    assert all(g >= b * 0.95 for g, b in zip(gaps, backoffs, strict=True)), (gaps, backoffs)
    assert max(gaps) < 30  # not the 600 s cap
    row = out.row(key(web, "robots503.test/"))
    assert row.status is UrlStatus.DEAD and row.attempts == pol.max_attempts


@pytest.mark.timeout(60)
async def test_pages_wait_until_robots_comes_back(tmp_path: Path) -> None:
    robots = Robots(kind="error", status=503, disallow=("/private/",), recover_after=2)
    site = two_pages("flaky.test", robots, Page(path="/private/x", words=80))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["flaky.test/"],
                        politeness={"max_attempts": 5},
                        fetcher={"robots_error_retry": 0.05})
        log = web.log.records("flaky.test")

    assert [(r.path, r.status) for r in log[:3]] == [("/robots.txt", 503)] * 2 + [
        ("/robots.txt", 200)]
    first_page = min(r.started for r in log if r.path != "/robots.txt")
    good_robots = next(r for r in log if r.path == "/robots.txt" and r.status == 200)
    assert first_page >= good_robots.ended  # nothing while robots.txt was failing
    assert sorted(paths(hits(web, "flaky.test"))) == ["/", "/a"]
    home = out.row(key(web, "flaky.test/"))
    assert home.status is UrlStatus.DONE and home.attempts == 3
    assert out.row(key(web, "flaky.test/private/x")).reason is Reason.ROBOTS


@pytest.mark.timeout(60)
async def test_robots_timeout_fails_closed(tmp_path: Path) -> None:
    async with SimWeb(scenario(features().host("robots-slow.test")), dns=True,
                      max_stall=5.0) as web:
        out = await run(web, tmp_path, ["robots-slow.test/"],
                        fetcher={"total_timeout": 0.3, "connect_timeout": 0.3,
                                 "robots_error_retry": 0.05},
                        politeness={"max_attempts": 2})
        log = web.log.records("robots-slow.test")

    assert paths(log) == ["/robots.txt"] * 2
    assert not any(r.completed for r in log)  # the crawler gave up before the answer
    row = out.row(key(web, "robots-slow.test/"))
    assert (row.status, row.reason) == (UrlStatus.DEAD, Reason.DEAD)
    assert row.detail is not None and "robots_unavailable" in row.detail
    assert out.stats.fetched == 0


@pytest.mark.timeout(60)
async def test_oversize_robots_rules_within_the_cap_apply(tmp_path: Path) -> None:
    robots = Robots(kind="oversize", size=600_000, disallow=("/private/",))
    site = host("big-robots.test",
                Page(path="/", words=80, links=("/private/p", "/beyond-limit/b")),
                Page(path="/private/p", words=80), Page(path="/beyond-limit/b", words=80),
                robots=robots)
    async with SimWeb(scenario(site), dns=True) as web:
        robots_size = len(web.site.robots_bytes("big-robots.test"))
        out = await run(web, tmp_path, ["big-robots.test/"])
        log = web.log.records("big-robots.test")

    assert robots_size > out.settings.fetcher.robots_max_bytes
    assert paths(log).count("/robots.txt") == 1
    assert "/private/p" not in paths(log)
    # the Disallow past the parse cap is never read, so the page is fetched
    assert sorted(paths(hits(web, "big-robots.test"))) == ["/", "/beyond-limit/b"]
    assert out.row(key(web, "big-robots.test/private/p")).reason is Reason.ROBOTS
    assert out.row(key(web, "big-robots.test/beyond-limit/b")).status is UrlStatus.DONE
