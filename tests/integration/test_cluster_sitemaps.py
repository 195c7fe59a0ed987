"""Sitemaps in cluster mode: a frontier and a fetcher (which parses and judges inline)
as processes on real Kafka and Cassandra crawl the simulated web's sitemap scenario.
The same checks as embedded mode's (tests/e2e/sitemap_support.py): every URL a sitemap
or sitemap index lists is fetched once and politely, nothing a sitemap may not vouch
for, and each hostile sitemap ends as its recorded outcome in the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from common import urls
from common.messages import Reason, UrlStatus
from common.ports import UrlState
from common.runtime import make_store
from simweb import SimWeb
from simweb.scenarios import sitemaps
from tests.e2e.crawl_support import absolute, key
from tests.e2e.sitemap_support import (
    HOSTILE_OUTCOMES,
    SEEDS,
    check_hostile_outcomes,
    check_requests,
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
