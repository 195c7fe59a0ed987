"""Politeness keyed on something wider than the host (CRAWLER_POLITENESS_KEY): many
hosts on one address (``ip``) or under one registered domain (``domain``) share one
gap and one request in flight, measured at the simulated web's server across all of
them, robots.txt requests included."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from common.messages import UrlStatus
from crawler.embedded import crawl
from simweb import Host, Page, SimWeb
from simweb.dns import DnsResponder

from .crawl_support import DELAY, absolute, host, read_state, run, scenario, settings_for

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


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("server", "answers"), [
    # each name's lowest address (its key) is closed, the server is second: were a
    # fetch to fall back to the second address, 12 keys would reach one server at once
    ("127.0.0.200", lambda n: (f"127.0.0.{n}", "127.0.0.200")),
    # the server is every name's lowest address (their shared key), a closed one first
    ("127.0.0.2", lambda n: (f"127.0.0.{100 + n}", "127.0.0.2")),
], ids=["key-address-closed", "key-address-serving"])
async def test_ip_keying_connects_only_to_the_address_of_the_key(
        tmp_path: Path, server: str, answers: Callable[[int], tuple[str, str]]) -> None:
    """Names answering two addresses: each fetch goes to the address its politeness
    key was made from, never to another one of the answer, so the server sees one
    request at a time with the gap between, whichever names reach it."""
    numbers = range(2, 14)
    names = [f"v{n}.ip2.test" for n in numbers]
    sites = [host(name, Page(path="/", links=("/a",), words=60), Page(path="/a", words=60),
                  latency=0.2) for name in names]
    async with SimWeb(scenario(*sites), host=server, dns=True) as web:
        dns = DnsResponder({name: answers(n) for n, name in zip(numbers, names, strict=True)},
                           ttl=60, host=server)
        await dns.start()
        try:
            settings = settings_for(web, tmp_path, politeness={"key": "ip"}).replace(
                fetcher={"dns_servers": (dns.server,), "allow_networks": ("127.0.0.0/8",)})
            await crawl(settings, [absolute(web, f"{name}/") for name in names])
        finally:
            await dns.stop()
        rows, _ = await read_state(settings)
        in_flight = web.log.max_in_flight(None)
        gap = web.log.min_gap(None, exclude_paths=())
        reached = web.log.counts_by_host(exclude_paths=("/robots.txt",))

    assert in_flight <= 1
    assert gap is None or gap >= DELAY, gap
    seeds = [r for r in rows.values() if r.url.endswith("/") and r.depth == 0]
    assert len(seeds) == len(names)
    assert all(r.status not in (UrlStatus.QUEUED, UrlStatus.IN_FLIGHT) for r in seeds)
    if server == "127.0.0.2":  # the key's address serves: every page was fetched there
        assert reached == {name: 2 for name in names}
    else:  # nothing listens at the key's address: recorded failures, no request sent
        assert reached == {}
        assert all(r.status is UrlStatus.DEAD for r in seeds), [r.status for r in seeds]
