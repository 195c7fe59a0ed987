"""Cluster mode keeps a crawl fresh as embedded mode does: a frontier and a fetcher on
real Kafka and Cassandra, and the simulated web, all on one clock the test moves an
hour at a time (CRAWLER_CRAWL_CLOCK_OFFSET_FILE). Pages that change hourly are fetched
every hour, pages that never change ever more rarely (intervals doubling from the
starting hour), and the stored figures tell refreshes from new pages."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from common.clock import set_offset
from common.messages import UrlStatus
from common.runtime import make_store
from simweb import Page, SimWeb
from simweb.clock import FileOffsetClock
from tests.e2e.crawl_support import host, scenario
from tests.e2e.freshness_support import HOUR, start_offset
from tests.integration.cluster import cluster, crawl_env, require_cluster_servers

pytestmark = pytest.mark.integration

HOURLY = [f"/hourly/{i}" for i in range(3)]
NEVER = [f"/never/{i}" for i in range(3)]
STATIC = ["/", *NEVER]


def page_requests(web: SimWeb) -> list[tuple[str, int]]:
    return [(r.path, r.status) for r in web.log.records("fresh.test")
            if r.path != "/robots.txt"]


@pytest.mark.timeout(420)
async def test_cluster_refreshes_what_changes_more_often(tmp_path: Path) -> None:
    require_cluster_servers()
    clock_file = tmp_path / "clock-offset"
    offset = start_offset()
    set_offset(clock_file, offset)
    site = scenario(host("fresh.test", Page(path="/", words=40, links=(*HOURLY, *NEVER)),
                         *(Page(path=p, words=60, change_every=HOUR) for p in HOURLY),
                         *(Page(path=p, words=60) for p in NEVER)))
    # hourly pages every hour; the others at 1 h, then 2 h later (3 h), then 4 h later
    expected = [7, 14, 17, 24, 27, 30, 33]  # page requests after each step
    async with SimWeb(site, dns=True, clock=FileOffsetClock(clock_file)) as web:
        env = crawl_env(web.dns_servers, 0.05) | {
            "CRAWLER_CRAWL_CLOCK_OFFSET_FILE": str(clock_file),
            "CRAWLER_CRAWL_RECRAWL_INTERVAL": str(HOUR),
            "CRAWLER_REFRESH_CHECK_INTERVAL": "0.2",
        }
        with cluster(tmp_path, env) as c:
            c.start("frontier", "frontier")
            c.start("fetcher", "fetcher")
            c.seed([web.url("fresh.test")])
            for step, want in enumerate(expected):
                if step:
                    offset += HOUR
                    set_offset(clock_file, offset)
                async with asyncio.timeout(180 if step == 0 else 60):
                    await web.log.wait_until(lambda log, n=want: len(page_requests(web)) >= n)
                await c.wait_done(60, quiet_polls=2, poll=0.5)
            await asyncio.sleep(2.0)  # nothing more is due
            requests = page_requests(web)
            stats = await c.stats()
            store = make_store(c.settings)
            await store.open()
            try:
                rows = {r.url.rsplit(":", 1)[1].split("/", 1)[1]: r
                        for r in await store.urls_with_status(UrlStatus.DONE, 100)}
            finally:
                await store.close()

    fetched = Counter(p for p, _ in requests)
    assert len(requests) == expected[-1], requests
    assert all(fetched[p] == 7 for p in HOURLY), fetched
    assert all(fetched[p] == 3 for p in STATIC), fetched
    assert [s for p, s in requests if p == NEVER[0]] == [200, 304, 304]
    assert {rows["hourly/0"].revisit_interval, rows["never/0"].revisit_interval} == {
        HOUR, 4 * HOUR}
    assert rows["hourly/0"].revisit_interval == HOUR
    assert (stats.fetched, stats.fetched_new, stats.refreshed) == (33, 7, 26)
