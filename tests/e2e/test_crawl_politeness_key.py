"""Politeness keyed on something wider than the host (CRAWLER_POLITENESS_KEY): many
hosts on one address (``ip``) or under one registered domain (``domain``) share one
gap and one request in flight, measured at the simulated web's server across all of
them, robots.txt requests included."""

from __future__ import annotations

from pathlib import Path

import pytest

from simweb import Host, Page, SimWeb

from .crawl_support import DELAY, host, run, scenario

PAGES = ("/", "/a", "/b")  # per host, robots.txt aside


def _site(name: str) -> Host:
    return host(name, Page(path="/", links=("/a", "/b"), words=60),
                Page(path="/a", words=60), Page(path="/b", words=60))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("mode", "names"), [
    ("ip", [f"h{i:02d}.test" for i in range(50)]),  # 50 names, each its own domain
    ("domain", [f"h{i:02d}.shared.test" for i in range(20)]),  # one domain, shared.test
])
async def test_hosts_sharing_a_key_get_one_request_at_a_time(
        tmp_path: Path, mode: str, names: list[str]) -> None:
    async with SimWeb(scenario(*(_site(n) for n in names)), dns=True) as web:
        out = await run(web, tmp_path, [f"{n}/" for n in names], politeness={"key": mode})
        every = web.log.records()
        in_flight = web.log.max_in_flight(None)
        gap = web.log.min_gap(None, exclude_paths=())

    # every host was crawled in full: 3 pages and its robots.txt
    assert web.log.counts_by_host() == {n: len(PAGES) + 1 for n in names}
    assert out.stats.fetched == len(names) * len(PAGES)
    # across all hosts: one request at a time, and each starts at least the delay after
    # the end of the one before it
    assert len(every) == len(names) * (len(PAGES) + 1)
    assert in_flight == 1
    assert gap is not None and gap >= DELAY, gap


@pytest.mark.timeout(60)
async def test_host_keying_overlaps_requests_to_one_address(tmp_path: Path) -> None:
    """The measure above can fail: keyed by host (the default), hosts on one address
    are fetched side by side (each answer takes 0.2 s, so they overlap)."""
    sites = [host(f"s{i}.test", Page(path="/", words=60), latency=0.2) for i in range(8)]
    async with SimWeb(scenario(*sites), dns=True) as web:
        await run(web, tmp_path, [f"s{i}.test/" for i in range(8)])
        in_flight = web.log.max_in_flight(None)

    assert in_flight > 1


@pytest.mark.timeout(60)
async def test_a_page_budget_ends_a_crawl_with_hosts_waiting_for_their_address(
        tmp_path: Path) -> None:
    names = [f"w{i}.test" for i in range(6)]
    async with SimWeb(scenario(*(_site(n) for n in names)), dns=True) as web:
        out = await run(web, tmp_path, [f"{n}/" for n in names],
                        politeness={"key": "ip"}, crawl={"max_pages": 4})
        pages = web.log.counts_by_host(exclude_paths=("/robots.txt",))

    # the crawl ended (hosts were still waiting for the address when the budget ran out)
    assert out.stats.fetched == 4
    assert sum(pages.values()) == 4
