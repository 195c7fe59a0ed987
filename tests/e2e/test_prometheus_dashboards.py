"""A real Prometheus scrapes a crawler metrics endpoint on loopback, and every query of
the Grafana dashboards and every alert rule evaluates against it without an error.

Skipped unless the ``prometheus`` binary is installed (Debian package ``prometheus``).
Prometheus listens on 127.0.0.1 and scrapes 127.0.0.1 only; it is stopped by PID.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from common.messages import FetchOutcome, Reason, Topic
from common.metrics import HealthServer, Metrics
from common.robots import RobotsBasis
from tests.conftest import unavailable
from tests.prometheus_support import PROMETHEUS, run_prometheus

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _prometheus_installed() -> None:
    if PROMETHEUS is None:
        unavailable("prometheus not installed (apt-get install prometheus)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _exprs() -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json")):
        board = json.loads(path.read_text(encoding="utf-8"))
        stack = list(board["panels"])
        while stack:
            panel = stack.pop()
            stack.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                out.append((f"{path.name} / {panel['title']}", target["expr"]))
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            out.append((f"rule {rule['alert']}", str(rule["expr"])))
    return out


def _grafana_to_promql(expr: str) -> str:
    return re.sub(r"\$__(rate_interval|interval|range)\b", "1m", expr)


def _metrics() -> Metrics:
    m = Metrics.create()
    for status, outcome in ((200, FetchOutcome.OK), (404, FetchOutcome.HTTP_ERROR),
                            (None, FetchOutcome.TIMEOUT), (301, FetchOutcome.REDIRECT)):
        m.fetcher.record_fetch(status, outcome, nbytes=2048, seconds=0.2)
    m.fetcher.record_robots(RobotsBasis.FILE, nbytes=100)
    m.frontier.queued_urls.set(12)
    m.frontier.active_hosts.set(3)
    m.frontier.count_rejected(Reason.ROBOTS)
    m.frontier.politeness_wait.observe(1.0)
    m.dedup.unique_pages.inc(5)
    m.dedup.exact_duplicates.inc(2)
    m.bus.set_lag(Topic.FETCH, 7)
    m.bus.count_consumed(Topic.FETCHED)
    with m.store.time("get_url"):
        pass
    with m.parser.time_parse():
        pass
    return m


@pytest.fixture
async def endpoint() -> AsyncIterator[int]:
    async with HealthServer(_metrics().registry, ready=lambda: True) as server:
        await server.start("127.0.0.1", 0)
        yield server.port


@pytest.fixture
def prometheus(tmp_path: Path, endpoint: int) -> Iterator[str]:
    assert PROMETHEUS is not None
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "fetcher",
                            "static_configs": [{"targets": [f"127.0.0.1:{endpoint}"]}]}],
    }
    with run_prometheus(tmp_path, config, _free_port()) as base:
        yield base


async def _query(session: aiohttp.ClientSession, base: str, expr: str) -> dict[str, Any]:
    async with session.get(f"{base}/api/v1/query", params={"query": expr}) as resp:
        body: dict[str, Any] = await resp.json()
        return body


async def _wait_for_samples(session: aiohttp.ClientSession, base: str) -> list[Any]:
    for _ in range(150):  # at most ~30 s
        try:
            body = await _query(session, base,
                                'crawler_fetcher_pages_fetched_total{job="fetcher"}')
            if body.get("status") == "success" and body["data"]["result"]:
                result: list[Any] = body["data"]["result"]
                return result
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.2)
    pytest.fail("Prometheus did not scrape the metrics endpoint within 30 s")


async def test_dashboard_and_rule_queries_evaluate(prometheus: str) -> None:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        series = await _wait_for_samples(session, prometheus)
        counts = {(s["metric"]["status_class"], s["metric"]["outcome"]): float(s["value"][1])
                  for s in series}
        assert counts[("2xx", "ok")] == 1
        assert counts[("none", "timeout")] == 1
        assert counts[("4xx", "http_error")] == 1
        assert counts[("5xx", "ok")] == 0
        assert all("url" not in s["metric"] and "host" not in s["metric"] for s in series)
        exprs = _exprs()
        assert len(exprs) > 30
        failures = []
        for where, expr in exprs:
            body = await _query(session, prometheus, _grafana_to_promql(expr))
            if body.get("status") != "success":
                failures.append(f"{where}: {body.get('error')}")
        assert failures == []
        lag = await _query(session, prometheus, "sum by (job, topic) "
                                                "(crawler_bus_consumer_lag_messages)")
        assert [(r["metric"], r["value"][1]) for r in lag["data"]["result"]] == [
            ({"job": "fetcher", "topic": "fetch"}, "7")]
