"""Grafana dashboards and Prometheus rules: every query parses and names only metrics
that common/metrics.py defines; provisioning and layout are consistent."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from common.metrics import all_metric_names

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"

# Series Prometheus makes itself for every target.
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

GRAFANA_INTERVALS = re.compile(r"\$__(rate_interval|interval|range)\b")
GRAFANA_VARIABLES = re.compile(r"\$\{[A-Za-z0-9_:.]+\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]+\]\]")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (Grafana variables replaced first)."""
    text = GRAFANA_INTERVALS.sub("5m", expr)
    text = GRAFANA_VARIABLES.sub("x", text)
    tree = promql_parser.parse(text)  # raises ValueError on a syntax error
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    names.add(m.value)

    promql_parser.walk(tree, visit)
    return names


def unknown_metrics(expr: str, known: set[str]) -> set[str]:
    return promql_metric_names(expr) - known - PROMETHEUS_SERIES


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def dashboard_exprs(board: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for panel in _panels(board.get("panels", [])):
        for target in panel.get("targets", []):
            if "expr" in target:
                out.append((panel.get("title", "?"), target["expr"]))
    for var in board.get("templating", {}).get("list", []):
        query = var.get("query")
        if var.get("type") == "query" and isinstance(query, str):
            out.append((f"variable {var['name']}", query))
    return out


def rule_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [(rule.get("alert") or rule.get("record"), rule["expr"])
            for group in doc["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def known() -> set[str]:
    return all_metric_names()


def test_there_are_dashboards() -> None:
    assert len(DASHBOARDS) >= 2


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_names_only_defined_metrics(path: Path, known: set[str]) -> None:
    exprs = dashboard_exprs(_load(path))
    assert exprs, f"{path.name} has no queries"
    for title, expr in exprs:
        assert not unknown_metrics(expr, known), f"{path.name} / {title}: {expr}"


def test_every_rule_names_only_defined_metrics(known: set[str]) -> None:
    rules = rule_exprs()
    assert rules
    for name, expr in rules:
        assert not unknown_metrics(str(expr), known), f"rule {name}: {expr}"


def test_the_check_catches_unknown_and_misspelt_metrics(known: set[str]) -> None:
    good = "histogram_quantile(0.9, sum by (le) " \
           "(rate(crawler_fetcher_fetch_duration_seconds_bucket[$__rate_interval])))"
    assert promql_metric_names(good) == {"crawler_fetcher_fetch_duration_seconds_bucket"}
    assert not unknown_metrics(good, known)
    assert unknown_metrics("rate(crawler_fetcher_pages_fetched[5m])", known) == {
        "crawler_fetcher_pages_fetched"}  # counter without _total
    assert unknown_metrics("crawler_fetcher_fetch_duration_seconds_total", known)
    assert unknown_metrics('sum({__name__="crawler_nope_total"})', known) == {
        "crawler_nope_total"}
    assert unknown_metrics("crawler_frontier_queued_urls / on() crawler_nope", known) == {
        "crawler_nope"}
    with pytest.raises(ValueError, match="bracket"):
        promql_metric_names("rate(crawler_frontier_queued_urls[5m")


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_layout_ids_and_datasource(path: Path) -> None:
    board = _load(path)
    assert board["uid"] and board["title"]
    panels = list(_panels(board["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for p in panels:
        grid = p["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p["targets"], p["title"]


def test_dashboard_uids_and_titles_are_unique() -> None:
    boards = [_load(p) for p in DASHBOARDS]
    assert len({b["uid"] for b in boards}) == len(boards)
    assert len({b["title"] for b in boards}) == len(boards)


def test_dashboards_cover_the_crawl(known: set[str]) -> None:
    used: set[str] = set()
    for path in DASHBOARDS:
        for _, expr in dashboard_exprs(_load(path)):
            used |= promql_metric_names(expr)
    wanted = {
        "crawler_fetcher_pages_fetched_total",  # crawl rate and status mix
        "crawler_fetcher_downloaded_bytes_total",  # bandwidth
        "crawler_fetcher_fetch_duration_seconds_bucket",  # latency percentiles
        "crawler_frontier_queued_urls",  # frontier depth
        "crawler_frontier_active_hosts",  # host spread
        "crawler_dedup_exact_duplicates_total", "crawler_dedup_near_duplicates_total",
        "crawler_bus_consumer_lag_messages",  # lag per stage
        "crawler_bus_handler_errors_total", "crawler_bus_dead_lettered_messages_total",
        "crawler_store_request_errors_total",  # errors
        "crawler_store_request_duration_seconds_bucket",  # store latency by operation
        "crawler_bus_messages_consumed_total", "crawler_bus_messages_published_total",
        "crawler_frontier_fetch_tasks_total",  # new pages against refreshes
        "crawler_frontier_refresh_due_urls",  # what is due when
    }
    assert wanted <= known
    assert not wanted - used, f"not on any dashboard: {sorted(wanted - used)}"


def test_provisioning_points_at_the_dashboards_and_datasource() -> None:
    ds = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus"
    for path in DASHBOARDS:
        current = {v["name"]: v for v in _load(path)["templating"]["list"]}["datasource"]
        assert current["current"]["value"] == source["uid"], path.name
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "crawler.yaml").read_text())
    (provider,) = providers["providers"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{provider['options']['path']}:ro" in mounts
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in mounts
    assert source["url"] == "http://prometheus:9090"
    assert "prometheus" in compose["services"]
