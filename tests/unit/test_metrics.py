"""Metric bundles: naming conventions, closed label sets, role selection."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from common.messages import FetchOutcome, Reason, Topic
from common.metrics import (
    FORBIDDEN_LABELS,
    ROLES,
    STATUS_CLASSES,
    STORE_OPERATIONS,
    Heartbeat,
    Metrics,
    all_metric_names,
    check_conventions,
    exposed_names,
    metric_objects,
    status_class,
)
from common.robots import RobotsBasis


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]],
                                                 float]:
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_every_metric_follows_the_naming_convention() -> None:
    metrics = Metrics.create(ROLES, process=False)
    assert len(metric_objects(metrics)) >= 30
    assert check_conventions(metrics) == []


def test_convention_check_catches_bad_names_and_url_labels() -> None:
    metrics = Metrics.create(ROLES, process=False)
    spare = CollectorRegistry()
    metrics.fetcher.bad_label = Counter(  # type: ignore[attr-defined]
        "crawler_fetcher_bad_label_total", "x", ["url"], registry=spare)
    metrics.parser.bad_name = Counter(  # type: ignore[attr-defined]
        "parser_things_total", "x", registry=spare)
    metrics.dedup.bad_unit = Histogram(  # type: ignore[attr-defined]
        "crawler_dedup_compare_time", "x", registry=spare)
    problems = check_conventions(metrics)
    assert any("'url'" in p for p in problems)
    assert any(p.startswith("parser_things:") for p in problems)
    assert any("crawler_dedup_compare_time" in p for p in problems)


def test_no_exposed_series_carries_a_url_or_host_label() -> None:
    metrics = Metrics.create(ROLES, process=False)
    for outcome in FetchOutcome:
        metrics.fetcher.record_fetch(503, outcome, nbytes=10, seconds=0.1)
    for reason in Reason:
        metrics.frontier.count_rejected(reason)
    for topic in Topic:
        metrics.bus.count_consumed(topic)
        metrics.bus.set_lag(topic, 3)
    for op in STORE_OPERATIONS:
        with metrics.store.time(op):
            pass
    labels = {name for (_, items) in _samples(metrics.registry) for name, _ in items}
    assert labels, "expected labelled series"
    assert not labels & FORBIDDEN_LABELS
    assert labels <= {"status_class", "outcome", "reason", "topic", "operation", "result",
                      "kind", "le", "due"}


@pytest.mark.parametrize(("status", "expected"), [
    (200, "2xx"), (204, "2xx"), (301, "3xx"), (404, "4xx"), (599, "5xx"), (None, "none"),
    (0, "none"), (101, "none"), (600, "none"), (999, "none"),
])
def test_status_class(status: int | None, expected: str) -> None:
    assert status_class(status) == expected
    assert status_class(status) in STATUS_CLASSES


def test_record_fetch_counts_status_class_outcome_bytes_and_latency() -> None:
    metrics = Metrics.create(("fetcher",), process=False)
    metrics.fetcher.record_fetch(200, FetchOutcome.OK, nbytes=1000, seconds=0.2)
    metrics.fetcher.record_fetch(200, FetchOutcome.OK, nbytes=500, seconds=3.0)
    metrics.fetcher.record_fetch(None, FetchOutcome.TIMEOUT)
    metrics.fetcher.record_robots(RobotsBasis.NO_FILE, nbytes=24)
    s = _samples(metrics.registry)
    fetched = "crawler_fetcher_pages_fetched_total"
    assert s[(fetched, (("outcome", "ok"), ("status_class", "2xx")))] == 2
    assert s[(fetched, (("outcome", "timeout"), ("status_class", "none")))] == 1
    assert s[(fetched, (("outcome", "ok"), ("status_class", "5xx")))] == 0  # pre-created
    assert s[(fetched, (("outcome", "robots_blocked"), ("status_class", "none")))] == 0
    assert s[("crawler_fetcher_downloaded_bytes_total", ())] == 1524
    assert s[("crawler_fetcher_fetch_duration_seconds_count", ())] == 2
    assert s[("crawler_fetcher_fetch_duration_seconds_sum", ())] == pytest.approx(3.2)
    assert s[("crawler_fetcher_fetch_duration_seconds_bucket", (("le", "0.25"),))] == 1
    assert s[("crawler_fetcher_robots_fetches_total", (("result", "no_file"),))] == 1
    assert s[("crawler_fetcher_robots_fetches_total", (("result", "file"),))] == 0


def test_label_values_outside_the_closed_sets_are_refused() -> None:
    metrics = Metrics.create(process=False)
    with pytest.raises(ValueError, match="not a valid"):
        metrics.fetcher.record_fetch(200, "http://example.test/")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a valid"):
        metrics.frontier.count_rejected("example.test")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a valid"):
        metrics.bus.count_published("crawl.some-host.test")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown store operation"), \
            metrics.store.time("get http://example.test/"):
        pass


def test_frontier_helpers_and_gauges() -> None:
    metrics = Metrics.create(("frontier",), process=False)
    f = metrics.frontier
    f.count_rejected(Reason.ROBOTS, 3)
    f.count_rejected(Reason.DEPTH, 0)
    f.count_retry(FetchOutcome.TIMEOUT)
    f.queued_urls.set(42)
    f.active_hosts.set(7)
    f.politeness_wait.observe(1.5)
    s = _samples(metrics.registry)
    assert s[("crawler_frontier_urls_rejected_total", (("reason", "robots"),))] == 3
    # every reason is exposed from the start, at 0 until it happens
    assert s[("crawler_frontier_urls_rejected_total", (("reason", "depth"),))] == 0
    assert s[("crawler_frontier_fetch_retries_total", (("outcome", "timeout"),))] == 1
    assert s[("crawler_frontier_queued_urls", ())] == 42
    assert s[("crawler_frontier_active_hosts", ())] == 7
    assert s[("crawler_frontier_politeness_wait_seconds_count", ())] == 1


def test_parse_timer_counts_successes_and_failures() -> None:
    metrics = Metrics.create(("parser",), process=False)
    with metrics.parser.time_parse():
        pass
    with pytest.raises(RuntimeError), metrics.parser.time_parse():
        raise RuntimeError("bad page")
    s = _samples(metrics.registry)
    assert s[("crawler_parser_pages_parsed_total", ())] == 1
    assert s[("crawler_parser_parse_failures_total", ())] == 1
    assert s[("crawler_parser_parse_duration_seconds_count", ())] == 2


def test_store_timer_counts_errors_by_operation() -> None:
    metrics = Metrics.create((), process=False)
    with metrics.store.time("get_url"):
        pass
    with pytest.raises(ConnectionError), metrics.store.time("put_url"):
        raise ConnectionError("down")
    s = _samples(metrics.registry)
    dur = "crawler_store_request_duration_seconds_count"
    assert s[(dur, (("operation", "get_url"),))] == 1
    assert s[(dur, (("operation", "put_url"),))] == 1
    assert s[("crawler_store_request_errors_total", (("operation", "put_url"),))] == 1
    assert s[("crawler_store_request_errors_total", (("operation", "get_url"),))] == 0


def test_bus_lag_is_never_negative() -> None:
    metrics = Metrics.create((), process=False)
    metrics.bus.set_lag(Topic.FETCH, -5)
    metrics.bus.set_lag(Topic.PARSED, 12)
    s = _samples(metrics.registry)
    assert s[("crawler_bus_consumer_lag_messages", (("topic", "fetch"),))] == 0
    assert s[("crawler_bus_consumer_lag_messages", (("topic", "parsed"),))] == 12


def test_only_the_roles_of_a_process_are_served() -> None:
    metrics = Metrics.create(("fetcher",), process=False)
    metrics.frontier.queued_urls.set(5)  # detached: works, not served
    metrics.dedup.unique_pages.inc()
    names = exposed_names(metrics.registry)
    assert "crawler_fetcher_pages_fetched_total" in names
    assert "crawler_bus_messages_consumed_total" in names
    assert "crawler_store_request_duration_seconds_bucket" in names
    assert not any(n.startswith(("crawler_frontier_", "crawler_dedup_", "crawler_parser_"))
                   for n in names)
    assert metrics.roles == frozenset({"fetcher"})


def test_unknown_role_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown role"):
        Metrics.create(("fetcher", "indexer"))


def test_exposed_names_cover_type_suffixes() -> None:
    names = all_metric_names()
    assert "crawler_frontier_politeness_wait_seconds_bucket" in names
    assert "crawler_frontier_politeness_wait_seconds_sum" in names
    assert "crawler_frontier_urls_rejected_total" in names  # labelled, no sample yet
    assert "crawler_frontier_urls_rejected" not in names
    assert "process_resident_memory_bytes" in names
    assert "crawler_frontier_queued_urls" in names


def test_two_processes_can_build_metrics_side_by_side() -> None:
    a = Metrics.create(process=False)
    b = Metrics.create(process=False)
    a.dedup.unique_pages.inc()
    assert _samples(a.registry)[("crawler_dedup_unique_pages_total", ())] == 1
    assert _samples(b.registry)[("crawler_dedup_unique_pages_total", ())] == 0


def test_heartbeat_goes_stale_without_beats() -> None:
    now = [100.0]
    heart = Heartbeat(max_silence=10, clock=lambda: now[0])
    assert heart()
    now[0] = 109.0
    assert heart()
    now[0] = 110.5
    assert not heart()
    assert heart.silence == pytest.approx(10.5)
    heart.beat()
    assert heart()
    with pytest.raises(ValueError, match="positive"):
        Heartbeat(max_silence=0)
