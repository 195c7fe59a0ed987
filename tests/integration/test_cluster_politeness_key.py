"""Cluster mode with politeness keyed on something wider than the host.

``domain``: every host of a domain is on one partition, so one of the two frontiers
owns the domain and holds its one timer; at the server, the hosts of each domain see
one request at a time and every gap at least the delay.

``ip``: hosts are owned by name, so the hosts of one address are spread over both
frontiers; each frontier resolves its hosts and publishes their fetch tasks under the
address, so one fetcher holds the address's gate; at the server, all the hosts on
127.0.0.1 together see one request at a time and every gap at least the delay."""

from __future__ import annotations

from pathlib import Path

import pytest

from frontier.stats import CrawlStats
from simweb import Host, Page, SimWeb
from simweb.model import Robots, Scenario
from tests.integration.cluster import cluster, crawl_env, require_cluster_servers

pytestmark = pytest.mark.integration

DELAY = 0.2
DOMAINS = {d: [f"h{i}.{d}" for i in range(8)] for d in ("alpha.test", "beta.test")}


def _site(name: str, latency: float = 0.0) -> Host:
    return Host(name=name, robots=Robots(), latency=latency, pages=(
        Page(path="/", links=("/a", "/b"), words=60), Page(path="/a", words=60),
        Page(path="/b", words=60)))


async def _crawl_two_by_two(tmp_path: Path, web: SimWeb, key: str,
                            names: list[str]) -> CrawlStats:
    """Crawl ``names`` with politeness keyed on ``key`` by two frontiers and two
    fetchers until nothing is left to do."""
    env = crawl_env(web.dns_servers, DELAY) | {"CRAWLER_POLITENESS_KEY": key}
    with cluster(tmp_path, env) as c:
        c.start("frontier-1", "frontier")
        c.start("frontier-2", "frontier")
        c.start("fetcher-1", "fetcher")
        c.start("fetcher-2", "fetcher")
        c.seed([web.url(n, "/") for n in names])
        return await c.wait_done(300)


@pytest.mark.timeout(420)
async def test_each_domain_gets_one_request_at_a_time_across_two_frontiers(
        tmp_path: Path) -> None:
    require_cluster_servers()
    names = [n for hosts in DOMAINS.values() for n in hosts]
    scenario = Scenario(name="domains", seed=5, hosts=tuple(_site(n) for n in names),
                        dns_ttl=60)
    async with SimWeb(scenario, dns=True) as web:
        stats = await _crawl_two_by_two(tmp_path, web, "domain", names)
        paths = {n: {r.path for r in web.log.records(n)} for n in names}
        in_flight = {d: web.log.max_in_flight(hosts) for d, hosts in DOMAINS.items()}
        gaps = {d: web.log.min_gap(hosts, exclude_paths=()) for d, hosts in DOMAINS.items()}

    # every host crawled in full (a page may be fetched twice when the second frontier's
    # arrival moves partitions while a task is out: delivery is at least once)
    assert paths == {n: {"/robots.txt", "/", "/a", "/b"} for n in names}
    assert stats.fetched >= 3 * len(names)
    assert in_flight == {d: 1 for d in DOMAINS}, in_flight
    for domain, gap in gaps.items():
        assert gap is not None and gap >= DELAY, (domain, gap)


IP_HOSTS = [f"n{i:02d}.test" for i in range(30)]  # 30 names, all on 127.0.0.1
# each answer takes 0.05 s, so that requests sent side by side overlap at the server


@pytest.mark.timeout(420)
async def test_hosts_of_one_address_get_one_request_at_a_time_across_two_frontiers(
        tmp_path: Path) -> None:
    require_cluster_servers()
    scenario = Scenario(name="one-address", seed=7,
                        hosts=tuple(_site(n, latency=0.05) for n in IP_HOSTS), dns_ttl=60)
    async with SimWeb(scenario, dns=True) as web:
        stats = await _crawl_two_by_two(tmp_path, web, "ip", IP_HOSTS)
        paths = {n: {r.path for r in web.log.records(n)} for n in IP_HOSTS}
        in_flight = web.log.max_in_flight(IP_HOSTS)
        gap = web.log.min_gap(IP_HOSTS, exclude_paths=())

    assert paths == {n: {"/robots.txt", "/", "/a", "/b"} for n in IP_HOSTS}
    assert stats.fetched >= 3 * len(IP_HOSTS)
    # across all 30 hosts, whichever frontier owns each: one request at a time, each
    # starting at least the delay after the end of the one before
    assert in_flight == 1, in_flight
    assert gap is not None and gap >= DELAY, gap
