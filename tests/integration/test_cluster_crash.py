"""Cluster mode under failure: on a generated web of thousands of pages over dozens of
hosts, a fetcher and the frontier are killed with SIGKILL mid-crawl and a second
frontier joins mid-crawl (a rebalance). The crawl still fetches every expected page,
loses no URL, and never breaks politeness in the server's own log; pages fetched more
than once (at-least-once delivery) are counted and reported."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from pathlib import Path

import pytest

from common import urls
from simweb import SimWeb
from simweb.expected import expected_urls
from simweb.scenarios import generated
from tests.integration.cluster import Cluster, cluster, crawl_env, require_cluster_servers

pytestmark = pytest.mark.integration

DELAY = 0.1
HOSTS = 24
PAGES = 100


async def _wait_fetched(c: Cluster, n: int, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if (await c.stats()).fetched >= n:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"fewer than {n} pages fetched after {limit}s\n{c.log_text()}")


@pytest.mark.timeout(900)
async def test_sigkill_and_rebalance_lose_nothing(tmp_path: Path) -> None:
    require_cluster_servers()
    scenario = generated(HOSTS, PAGES, seed=7)
    async with SimWeb(scenario, dns=True) as web:
        expected = expected_urls(scenario, port=web.port)
        env = crawl_env(web.dns_servers, DELAY)
        with cluster(tmp_path, env) as c:
            c.start("frontier-1", "frontier")
            c.start("fetcher-1", "fetcher")
            c.start("fetcher-2", "fetcher")
            # the fetchers parse and judge the pages (parse_inline, the default)
            c.seed(web.seed_urls())
            total = len(expected)
            await _wait_fetched(c, total // 5, 300)
            c.kill("fetcher-1")
            c.start("fetcher-3", "fetcher")
            await _wait_fetched(c, 2 * total // 5, 300)
            c.start("frontier-2", "frontier")  # rebalance: the hosts are split
            await _wait_fetched(c, 3 * total // 5, 300)
            c.kill("frontier-1")  # frontier-2 takes every partition after the timeout
            stats = await c.wait_done(240)
        port = web.port
        fetched: Counter[str] = Counter()
        for host in web.log.counts_by_host():
            for r in web.log.records(host):
                if r.path != "/robots.txt":
                    fetched[urls.canonicalize(f"http://{host}:{port}{r.target}")] += 1
        gaps = {h: web.log.min_gap(h, exclude_paths=()) for h in web.log.counts_by_host()}
        closest = {}
        for h in gaps:
            recs = sorted(web.log.records(h), key=lambda r: r.started)
            pairs = [(b.started - a.ended, a, b) for a, b in itertools.pairwise(recs)]
            if pairs:
                g, a, b = min(pairs, key=lambda p: p[0])
                closest[h] = (round(g, 3), a.target, round(a.ended_wall, 3), b.target,
                              round(b.started_wall, 3))
        in_flight = {h: web.log.max_in_flight(h) for h in web.log.counts_by_host()}

    missing = expected - set(fetched)
    extra = set(fetched) - expected
    twice = sum(1 for n in fetched.values() if n > 1)
    print(f"\ncrash test: expected {len(expected)} pages, fetched {len(fetched)} distinct, "
          f"{sum(fetched.values())} requests, {twice} fetched more than once, "
          f"missing {len(missing)}, extra {len(extra)}; stats {stats}")
    assert not missing, sorted(missing)[:20]
    assert not extra, sorted(extra)[:20]
    assert stats.queued == 0 and stats.in_flight == 0 and stats.awaiting_parse == 0
    assert stats.dead == 0
    # each page counted once toward its host: a page fetched again replaced a result
    # that was never applied (a URL's row and its host's row are written together)
    assert stats.fetched == len(expected), (stats.fetched, len(expected))
    for host, gap in gaps.items():
        assert gap is not None and gap >= DELAY, (host, gap, closest[host])
    assert max(in_flight.values()) == 1, in_flight
