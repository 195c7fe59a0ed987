"""Sitemaps in cluster mode: a frontier and a fetcher (which parses and judges inline)
as processes on real Kafka and Cassandra crawl the simulated web's sitemap scenario.
The same checks as embedded mode's (tests/e2e/sitemap_support.py): every URL a sitemap
or sitemap index lists is fetched once and politely, nothing a sitemap may not vouch
for, and each hostile sitemap ends as its recorded outcome in the store."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from common import urls
from common.messages import Reason, UrlStatus
from common.ports import UrlState
from common.runtime import make_store
from simweb import SimWeb
from simweb.scenarios import sitemaps
from tests.e2e.crawl_support import absolute, host_key, key, scenario
from tests.e2e.sitemap_support import (
    HOSTILE_OUTCOMES,
    MAX_FILES,
    SEEDS,
    check_hostile_outcomes,
    check_long_index_requests,
    check_requests,
    long_index_site,
)
from tests.integration.cluster import cluster, crawl_env, require_cluster_servers

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
async def test_cluster_crawls_what_sitemaps_list(tmp_path: Path) -> None:
    require_cluster_servers()
    async with SimWeb(sitemaps(), dns=True) as web:
        env = crawl_env(web.dns_servers, 0.05)
        with cluster(tmp_path, env) as c:
            c.start("frontier", "frontier")
            c.start("fetcher", "fetcher")
            c.seed([absolute(web, s) for s in SEEDS])
            stats = await c.wait_done(240)
            store = make_store(c.settings)
            await store.open()
            try:
                rows: dict[str, UrlState | None] = {}
                for path in HOSTILE_OUTCOMES:
                    url = key(web, "hostile.test" + path)
                    rows[path] = await store.get_url(urls.host_key(url), url)
            finally:
                await store.close()
        check_requests(web)

    def outcome(path: str) -> tuple[UrlStatus, Reason | None]:
        row = rows[path]
        assert row is not None, path
        return row.status, row.reason

    check_hostile_outcomes(outcome)
    assert stats.queued == 0 and stats.in_flight == 0 and stats.dead == 0, stats


@pytest.mark.timeout(300)
async def test_cluster_reads_at_most_the_cap_of_a_long_index_after_the_pages(
        tmp_path: Path) -> None:
    # the count of a host's sitemap files lives in its Cassandra row, written with the
    # dispatch of each new file
    require_cluster_servers()
    async with SimWeb(scenario(long_index_site()), dns=True) as web:
        env = crawl_env(web.dns_servers, 0.05) | {
            "CRAWLER_SITEMAPS_MAX_FILES_PER_HOST": str(MAX_FILES)}
        with cluster(tmp_path, env) as c:
            c.start("frontier", "frontier")
            c.start("fetcher", "fetcher")
            c.seed([absolute(web, "many.test/")])
            stats = await c.wait_done(240)
            store = make_store(c.settings)
            await store.open()
            try:
                state = await store.get_host(host_key(web, "many.test"))
                refused = [await store.get_url(host_key(web, "many.test"),
                                               key(web, f"many.test/s/{i}.xml"))
                           for i in range(MAX_FILES)]
            finally:
                await store.close()
        check_long_index_requests(web)

    assert state is not None and state.sitemap_files == MAX_FILES
    reasons = Counter(r.reason for r in refused if r is not None)
    assert reasons == {Reason.SITEMAP: MAX_FILES - 1, Reason.SITEMAP_FILES: 1}, reasons
    assert stats.queued == 0 and stats.in_flight == 0 and stats.dead == 0, stats
