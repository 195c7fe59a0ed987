"""Crawler traps end: each trap of the simulated web's traps.test is crawled until the
crawl finishes on its own, and the number of requests that reached the server is the
one the trap settings promise."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from common import urls
from common.messages import Reason, UrlStatus
from simweb import SimWeb
from simweb.scenarios import features
from tests.e2e.crawl_support import absolute, hits, host_key, key, run, scenario

TRAPS = scenario(features().host("traps.test"))


def query_size(target: str) -> int:
    return len(parse_qsl(urlsplit(target).query, keep_blank_values=True))


@pytest.mark.timeout(60)
async def test_endless_calendar_ends_at_the_depth_cap(tmp_path: Path) -> None:
    depth = 5
    async with SimWeb(TRAPS, dns=True) as web:
        out = await run(web, tmp_path, ["traps.test/calendar/2026-01-01"],
                        traps={"max_depth": depth})
        log = hits(web, "traps.test")

    assert [r.path for r in log] == [f"/calendar/2026-01-0{d + 1}" for d in range(depth + 1)]
    cut = out.with_reason(Reason.DEPTH)
    assert [r.url for r in cut] == [key(web, "traps.test/calendar/2026-01-07")]
    assert out.stats.fetched == depth + 1 and out.stats.queued == 0


@pytest.mark.timeout(60)
async def test_endless_calendar_ends_at_the_host_cap(tmp_path: Path) -> None:
    cap = 7
    async with SimWeb(TRAPS, dns=True) as web:
        out = await run(web, tmp_path, ["traps.test/calendar/2026-01-01"],
                        traps={"max_pages_per_host": cap, "max_depth": 1000})
        log = hits(web, "traps.test")

    assert len(log) == cap
    assert out.stats.fetched == cap and out.stats.hosts_capped == 1
    assert out.hosts[host_key(web, "traps.test")].capped
    assert [r.url for r in out.with_reason(Reason.HOST_CAP)] == [
        key(web, f"traps.test/calendar/2026-01-0{cap + 1}")]


@pytest.mark.timeout(60)
async def test_session_ids_are_bounded_by_the_host_cap(tmp_path: Path) -> None:
    # every link carries a new sid, so with the default URL rules every link is a new
    # URL: only the pages-per-host cap ends this trap
    cap = 12
    async with SimWeb(TRAPS, dns=True) as web:
        out = await run(web, tmp_path, ["traps.test/s/page1?sid=start"],
                        traps={"max_pages_per_host": cap})
        log = hits(web, "traps.test")

    assert len(log) == cap == out.stats.fetched
    assert all("sid=" in r.target for r in log)
    assert len({r.target for r in log}) == cap
    assert out.stats.hosts_capped == 1 and out.stats.host_capped_urls > 0
    assert out.stats.queued == 0


def session_pages(web: SimWeb, seed: str, tracking: urls.TrackingRules,
                  max_depth: int) -> set[str]:
    """Breadth-first over the trap as the server links it: canonical URLs within depth."""
    found = {urls.canonicalize(seed, tracking=tracking)}
    frontier = list(found)
    for _ in range(max_depth):
        nxt = []
        for url in frontier:
            for href in web.site.links("traps.test", urls.path_and_query(url)):
                link = urls.canonicalize(urls.resolve(href, url) or "", tracking=tracking)
                if link not in found:
                    found.add(link)
                    nxt.append(link)
        frontier = nxt
    return found


@pytest.mark.timeout(60)
async def test_session_ids_dropped_by_the_canonical_form(tmp_path: Path) -> None:
    # with sid declared a tracking parameter the canonical form drops it: each page is
    # fetched once, whatever sid its links carry, and the depth cap bounds the rest
    depth = 3
    async with SimWeb(TRAPS, dns=True) as web:
        seed = absolute(web, "traps.test/s/page1?sid=start")
        out = await run(web, tmp_path, [seed], urls={"extra_tracking_params": ("sid",)},
                        traps={"max_depth": depth})
        log = hits(web, "traps.test")
        tracking = urls.TrackingRules.from_settings(out.settings.urls)
        expected = session_pages(web, seed, tracking, depth)

    assert not any("sid=" in r.target for r in log)
    fetched = {urls.canonicalize(absolute(web, "traps.test" + r.target)) for r in log}
    assert len(fetched) == len(log)  # no page twice
    assert fetched == expected
    assert len(log) <= sum(3 ** d for d in range(depth + 1))
    assert out.stats.fetched == len(log)
    assert out.with_reason(Reason.DEPTH)


@pytest.mark.timeout(60)
async def test_repeating_segments_end_at_the_repeat_rule(tmp_path: Path) -> None:
    repeats = 2
    async with SimWeb(TRAPS, dns=True) as web:
        out = await run(web, tmp_path, ["traps.test/r/"],
                        traps={"max_repeated_segment": repeats})
        log = hits(web, "traps.test")

    assert [r.path for r in log] == ["/r/" + "more/" * n for n in range(repeats + 1)]
    cut = out.with_reason(Reason.TRAP_REPEAT)
    assert [r.url for r in cut] == [key(web, "traps.test/r/" + "more/" * (repeats + 1))]
    assert out.stats.trap_cut == 1 and out.stats.fetched == repeats + 1


@pytest.mark.timeout(60)
async def test_query_explosion_ends_at_the_query_cap_and_depth(tmp_path: Path) -> None:
    # facets add parameters and 'page' counts up for ever: the parameter cap cuts the
    # facet combinations, the depth cap the page numbers
    max_params, depth = 2, 4
    async with SimWeb(TRAPS, dns=True) as web:
        out = await run(web, tmp_path, ["traps.test/search?q=shoes"],
                        traps={"max_query_params": max_params, "max_depth": depth})
        log = hits(web, "traps.test")

    assert log and max(query_size(r.target) for r in log) <= max_params
    assert len(log) <= sum(3 ** d for d in range(depth + 1))
    assert len({r.target for r in log}) == len(log)
    cut = out.with_reason(Reason.TRAP_QUERY)
    assert cut and all(query_size(r.url) > max_params for r in cut)
    assert all(r.depth <= depth for r in out.with_status(UrlStatus.DONE))
    assert out.stats.fetched == len(log) and out.stats.queued == 0


@pytest.mark.timeout(60)
async def test_query_explosion_ends_at_the_host_cap(tmp_path: Path) -> None:
    cap = 10
    async with SimWeb(TRAPS, dns=True) as web:
        out = await run(web, tmp_path, ["traps.test/search?q=shoes"],
                        traps={"max_pages_per_host": cap, "max_depth": 1000})
        log = hits(web, "traps.test")

    assert len(log) == cap == out.stats.fetched
    assert out.stats.hosts_capped == 1 and out.stats.host_capped_urls > 0
    assert out.stats.queued == 0
