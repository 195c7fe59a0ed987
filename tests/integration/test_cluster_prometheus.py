"""The real Prometheus server scrapes a local cluster (frontier, two fetchers, parser and
dedup as processes on Kafka and Cassandra) while it crawls the seed scenario, and the
crawl-rate, consumer-lag and store-latency series read back from it match the crawl.

Skipped unless the ``prometheus`` binary is installed (Debian package ``prometheus``).
Prometheus listens on 127.0.0.1 and scrapes 127.0.0.1 only; it is stopped by PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from simweb import SimWeb
from simweb.scenarios import seed
from tests.conftest import unavailable
from tests.integration.cluster import cluster, require_cluster_servers
from tests.prometheus_support import PROMETHEUS, run_prometheus

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _prometheus_installed() -> None:
    if PROMETHEUS is None:
        unavailable("prometheus not installed (apt-get install prometheus)")

ROLES = {"frontier": "frontier", "fetcher-1": "fetcher", "fetcher-2": "fetcher",
         "parser": "parser", "dedup": "dedup"}


async def _query(http: aiohttp.ClientSession, base: str, expr: str) -> list[Any]:
    async with http.get(f"{base}/api/v1/query", params={"query": expr}) as resp:
        body: dict[str, Any] = await resp.json()
    assert body.get("status") == "success", (expr, body)
    result: list[Any] = body["data"]["result"]
    return result


async def _value(http: aiohttp.ClientSession, base: str, expr: str) -> float:
    result = await _query(http, base, expr)
    return float(result[0]["value"][1]) if result else 0.0


@pytest.mark.timeout(420)
async def test_prometheus_reads_the_crawl_rate_of_a_local_cluster(tmp_path: Path) -> None:
    require_cluster_servers()
    assert PROMETHEUS is not None
    async with SimWeb(seed(), dns=True) as web:
        env = {
            "CRAWLER_FETCHER_DNS_SERVERS": ",".join(web.dns_servers),
            "CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.1/32",
            "CRAWLER_POLITENESS_DEFAULT_DELAY": "0.2",
            "CRAWLER_TRAPS_MAX_PAGES_PER_HOST": "80",
            # the separate topology: parser and dedup services (the other cluster
            # tests run the default, fetchers that parse)
            "CRAWLER_FETCHER_PARSE_INLINE": "false",
            "CRAWLER_TRAPS_MAX_DEPTH": "1000",
        }
        with cluster(tmp_path, env) as c:
            ports = {name: c.free_port() for name in ROLES}
            config = {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {"job_name": role,
                     "static_configs": [{"targets": [f"127.0.0.1:{ports[n]}"
                                                     for n, r in ROLES.items() if r == role]}]}
                    for role in sorted(set(ROLES.values()))],
            }
            with run_prometheus(tmp_path, config, c.free_port()) as base:
                for name, role in ROLES.items():
                    c.start(name, role, {"CRAWLER_METRICS_PORT": str(ports[name])})
                c.seed(web.seed_urls())
                async with aiohttp.ClientSession(
                        timeout=aiohttp.ClientTimeout(total=10)) as http:
                    # the rate while the crawl runs, read back from Prometheus
                    rate_expr = ("sum(rate(crawler_fetcher_pages_fetched_total"
                                 "{job=\"fetcher\"}[5s]))")
                    deadline = time.monotonic() + 180
                    peak_rate = 0.0
                    while time.monotonic() < deadline and peak_rate <= 0:
                        with contextlib.suppress(aiohttp.ClientConnectionError):
                            peak_rate = await _value(http, base, rate_expr)
                        await asyncio.sleep(1.0)
                    stats = await c.wait_done(300)
                    lag_expr = "max by (job, topic) (crawler_bus_consumer_lag_messages)"
                    deadline = time.monotonic() + 60
                    lag = await _query(http, base, lag_expr)
                    while (time.monotonic() < deadline
                           and any(float(r["value"][1]) > 0 for r in lag)):
                        await asyncio.sleep(1.0)  # commits and statistics catch up
                        lag = await _query(http, base, lag_expr)
                    fetched = await _value(
                        http, base, "sum(crawler_fetcher_pages_fetched_total"
                                    "{job=\"fetcher\",outcome=\"ok\"})")
                    per_fetcher = await _query(
                        http, base, "sum by (instance) "
                                    "(crawler_fetcher_pages_fetched_total)")
                    store_calls = await _value(
                        http, base, "sum(crawler_store_request_duration_seconds_count"
                                    "{job=\"frontier\"})")
                    up = await _query(http, base, "up")

    assert peak_rate > 0, "no crawl rate while the crawl ran"
    assert stats.fetched == 162
    # every page counted by the fetcher that got it (a rebalance may fetch one twice)
    assert stats.fetched <= fetched <= stats.fetched + 2
    assert len(per_fetcher) == 2  # both fetchers were scraped
    assert {r["metric"]["job"] for r in up} == set(ROLES.values())
    assert all(r["value"][1] == "1" for r in up), up
    assert {(r["metric"]["job"], r["metric"]["topic"]) for r in lag} >= {
        ("fetcher", "fetch"), ("parser", "fetched"), ("dedup", "parsed")}
    assert all(float(r["value"][1]) == 0 for r in lag), lag  # drained at the end
    assert store_calls > 0
