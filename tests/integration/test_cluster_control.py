"""Steering a running cluster through the control API service, on real Kafka and
Cassandra: a pause holds every dispatch, a host block reaches the frontier that owns
the host, a blocked path pattern reaches every frontier, and resume lets the crawl
finish politely."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from common.urls import host_key
from simweb import SimWeb
from simweb.scenarios import generated
from tests.integration.cluster import cluster, require_cluster_servers

pytestmark = pytest.mark.integration

DELAY = 0.2
TOKEN = "cluster-control-token"
PATTERN = r"^/p/1[0-9]$"


async def _until(check: Any, limit: float, what: str) -> Any:
    """Poll ``check()`` (async) until it returns something truthy; bounded."""
    deadline = time.monotonic() + limit
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {limit}s")
        await asyncio.sleep(0.3)


@pytest.mark.timeout(420)
async def test_pause_host_block_and_path_block_through_the_api_service(
        tmp_path: Path) -> None:
    require_cluster_servers()
    scenario = generated(3, 30, seed=4)
    async with SimWeb(scenario, dns=True) as web:
        env = {
            "CRAWLER_FETCHER_DNS_SERVERS": ",".join(web.dns_servers),
            "CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.1/32",
            "CRAWLER_POLITENESS_DEFAULT_DELAY": str(DELAY),
            "CRAWLER_CRAWL_CONTROL_INTERVAL": "0.3",
            "CRAWLER_API_TOKEN": TOKEN,
        }
        with cluster(tmp_path, env) as c:
            api_port = c.free_port()
            c.start("api", "api", {"CRAWLER_API_PORT": str(api_port),
                                           "CRAWLER_API_HOST": "127.0.0.1"})
            c.start("frontier", "frontier")
            c.start("fetcher", "fetcher")
            # the fetchers parse and judge the pages (parse_inline, the default)
            base = f"http://127.0.0.1:{api_port}"
            auth = {"Authorization": f"Bearer {TOKEN}"}
            async with aiohttp.ClientSession() as http:

                async def call(method: str, path: str,
                               body: Any = None) -> tuple[int, Any]:
                    async with http.request(method, base + path, json=body,
                                            headers=auth) as r:
                        return r.status, await r.json()

                async def api_up() -> bool:
                    try:
                        return (await call("GET", "/v1/health"))[0] == 200
                    except aiohttp.ClientError:
                        return False

                await _until(api_up, 90, "the API service answers")
                assert await call("POST", "/v1/pause") == (200, {"paused": True})
                seeds = web.seed_urls()
                blocked_host = host_key(next(u for u in seeds if "//site1.test" in u))
                c.seed(seeds)

                async def seeds_queued() -> bool:
                    return (await c.stats()).queued >= len(seeds)

                await _until(seeds_queued, 120, "the frontier queued the seeds")
                await asyncio.sleep(2.0)  # several control reads and dispatch rounds
                during_pause = len(web.log)

                status, row = await call("PUT", f"/v1/hosts/{blocked_host}",
                                         {"blocked": True})
                assert status == 202 and row["blocked"] is True

                async def block_applied() -> bool:
                    status, row = await call("GET", f"/v1/hosts/{blocked_host}")
                    return status == 200 and row["blocked"] is True

                await _until(block_applied, 60, "the owning frontier applied the block")
                assert (await call("POST", "/v1/blocked-paths", {"pattern": PATTERN}))[0] \
                    == 200
                assert await call("POST", "/v1/resume") == (200, {"paused": False})
                stats = await c.wait_done(300)
        records = web.log.records()

    assert during_pause == 0, [r.target for r in records][:5]
    by_host: dict[str, list[str]] = {}
    for r in records:
        by_host.setdefault(r.host, []).append(r.path)
    assert "site1.test" not in by_host, by_host.get("site1.test")
    assert set(by_host) == {"site0.test", "site2.test"}
    assert all(len(paths) > 3 for paths in by_host.values()), by_host
    matched = [p for paths in by_host.values() for p in paths if re.search(PATTERN, p)]
    assert matched == []
    assert stats.blocked >= 1
    for host in by_host:
        gap = web.log.min_gap(host, exclude_paths=())
        assert gap is not None and gap >= DELAY, (host, gap)
        assert web.log.max_in_flight(host) == 1
