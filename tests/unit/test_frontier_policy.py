"""Frontier policy: trap rules, politeness delay, back-off and result handling."""

from __future__ import annotations

import re

import msgspec
import pytest

from common.messages import FetchOutcome, FetchResult, FetchTask, Reason, UrlStatus
from common.ports import HostState, UrlState
from common.settings import PolitenessSettings, Settings, SettingsError, TrapSettings
from frontier.policy import (
    TrapRules,
    apply_result,
    host_blocked,
    politeness_delay,
    retry_delay,
    trap_reason,
)

RULES = TrapRules.from_settings(TrapSettings())


@pytest.mark.parametrize(("url", "depth", "reason"), [
    ("http://a.test/ok/page", 1, None),
    ("http://a.test/" + "x" * 2100, 1, Reason.TRAP_LENGTH),
    ("http://a.test/p", 17, Reason.DEPTH),
    ("http://a.test/p", 16, None),
    ("http://a.test/" + "/".join(f"s{i}" for i in range(40)), 1, Reason.TRAP_SEGMENTS),
    ("http://a.test/a/b/a/b/a/b/a/b", 1, Reason.TRAP_REPEAT),
    ("http://a.test/a/b/a/b/a/b", 1, None),
    ("http://a.test/s?" + "&".join(f"p{i}=1" for i in range(20)), 1, Reason.TRAP_QUERY),
])
def test_trap_rules(url: str, depth: int, reason: Reason | None) -> None:
    assert trap_reason(url, "a.test", depth, RULES) == reason


def test_operator_blocks_by_host_and_pattern() -> None:
    rules = TrapRules.from_settings(TrapSettings(blocked_hosts=(".ads.test", "bad.test"),
                                                 blocked_patterns=(r"^/cart",)))
    assert trap_reason("http://x.ads.test/", "x.ads.test", 0, rules) is Reason.BLOCKED
    assert trap_reason("http://ads.test/", "ads.test", 0, rules) is Reason.BLOCKED
    assert trap_reason("http://bad.test/", "bad.test", 0, rules) is Reason.BLOCKED
    assert trap_reason("http://good.test/cart?x=1", "good.test", 0, rules) is Reason.BLOCKED
    assert trap_reason("http://good.test/item/cart", "good.test", 0, rules) is None
    assert trap_reason("http://notbad.test/", "notbad.test", 0, rules) is None
    extra = [re.compile(r"/private")]
    assert trap_reason("http://good.test/private/x", "good.test", 0, rules,
                       extra_patterns=extra) is Reason.BLOCKED


def test_bad_pattern_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="CRAWLER_TRAPS_BLOCKED_PATTERNS"):
        TrapRules.from_settings(TrapSettings(blocked_patterns=("(unclosed",)))


def test_host_blocked_matches_port_free_name() -> None:
    assert host_blocked("a.test:8080", ("a.test",))
    assert not host_blocked("ba.test", (".a.test",))


def test_page_cap_override_order() -> None:
    rules = TrapRules.from_settings(TrapSettings(max_pages_per_host=80,
                                                 host_page_overrides=("big.test=500",)))
    assert rules.page_cap("x.test") == 80
    assert rules.page_cap("big.test") == 500
    assert rules.page_cap("big.test", HostState(host="big.test", max_pages=7)) == 7


def test_politeness_delay_is_the_largest_rule() -> None:
    pol = PolitenessSettings(default_delay=1.0, max_crawl_delay=10.0, response_time_factor=2.0)
    h = HostState(host="a.test")
    assert politeness_delay(h, pol) == 1.0
    h.crawl_delay = 4.0
    assert politeness_delay(h, pol) == 4.0
    h.crawl_delay = 100.0
    assert politeness_delay(h, pol) == 10.0  # capped
    h.last_response_time = 6.0
    assert politeness_delay(h, pol) == 12.0
    h.delay_override = 20.0
    assert politeness_delay(h, pol) == 20.0
    h2 = HostState(host="b.test")
    assert politeness_delay(h2, pol, {"b.test": 3.0}) == 3.0


def test_retry_delay_doubles_and_honours_retry_after() -> None:
    pol = PolitenessSettings(backoff_base=10.0, backoff_max=100.0, max_retry_after=50.0)
    assert [retry_delay(a, None, pol) for a in (1, 2, 3, 4, 5)] == [10, 20, 40, 80, 100]
    assert retry_delay(1, 45.0, pol) == 45.0
    assert retry_delay(1, 5000.0, pol) == 50.0  # capped


def _task(attempt: int = 1, hops: int = 0) -> FetchTask:
    return FetchTask(task_id="t", url="http://a.test/p", host="a.test", attempt=attempt,
                     hops=hops)


def _row(attempts: int = 1, hops: int = 0) -> UrlState:
    return UrlState(host="a.test", url="http://a.test/p", status=UrlStatus.IN_FLIGHT,
                    attempts=attempts, hops=hops)


SETTINGS = Settings().replace(politeness={"default_delay": 2.0, "backoff_base": 10.0,
                                          "max_attempts": 3})


def test_ok_result_sets_next_allowed_from_response_end() -> None:
    r = FetchResult(task=_task(), outcome=FetchOutcome.OK, status=200, fetched_at=1000.0,
                    elapsed=0.5, content_hash="sha256:ab")
    e = apply_result(r, _row(), HostState(host="a.test"), SETTINGS, now=1000.1)
    assert e.row.status is UrlStatus.FETCHED
    assert e.host.page_count == 1
    assert e.host.next_allowed_at == pytest.approx(1002.0)
    assert e.request_made


def test_robots_block_makes_no_request_and_no_wait() -> None:
    r = FetchResult(task=_task(), outcome=FetchOutcome.ROBOTS_BLOCKED, fetched_at=1000.0)
    e = apply_result(r, _row(), HostState(host="a.test", next_allowed_at=5.0), SETTINGS,
                     now=1000.0)
    assert e.row.status is UrlStatus.REJECTED and e.row.reason is Reason.ROBOTS
    assert e.host.page_count == 0
    assert e.host.next_allowed_at == 5.0
    assert not e.request_made


def test_robots_fetch_counts_as_a_request_to_the_host() -> None:
    r = FetchResult(task=_task(), outcome=FetchOutcome.ROBOTS_BLOCKED, fetched_at=1000.0,
                    robots_fetched=True, robots_crawl_delay=5.0)
    e = apply_result(r, _row(), HostState(host="a.test"), SETTINGS, now=1000.0)
    assert e.host.crawl_delay == 5.0
    assert e.host.next_allowed_at == pytest.approx(1005.0)


def test_throttled_retries_later_and_rests_the_host() -> None:
    r = FetchResult(task=_task(), outcome=FetchOutcome.THROTTLED, status=429,
                    fetched_at=1000.0, retry_after=120.0)
    e = apply_result(r, _row(), HostState(host="a.test"), SETTINGS, now=1000.0)
    assert e.retry and e.row.status is UrlStatus.QUEUED
    assert e.row.next_fetch_at == pytest.approx(1120.0)
    assert e.host.next_allowed_at >= 1120.0


def test_dead_after_max_attempts() -> None:
    r = FetchResult(task=_task(3), outcome=FetchOutcome.SERVER_ERROR, status=500,
                    fetched_at=1000.0)
    e = apply_result(r, _row(attempts=3), HostState(host="a.test"), SETTINGS, now=1000.0)
    assert e.dead and e.row.status is UrlStatus.DEAD and e.row.reason is Reason.DEAD
    assert "server_error" in (e.row.detail or "")


def _robots_unavailable(fetched: bool, robots_at: float, expires_in: float) -> FetchResult:
    return FetchResult(task=_task(3), outcome=FetchOutcome.ROBOTS_UNAVAILABLE,
                       fetched_at=robots_at, robots_fetched=fetched, retry_after=expires_in,
                       error="robots.txt status 0")


def test_a_remembered_robots_failure_the_url_already_counted_uses_up_no_try() -> None:
    # the URL's last try (at 900) met robots.txt failing at 900; this try was answered
    # from that remembered failure: no request, no try used up, back when it runs out
    row = msgspec.structs.replace(_row(attempts=3), last_fetch_at=900.0)
    e = apply_result(_robots_unavailable(False, 900.0, 40.0), row,
                     HostState(host="a.test"), SETTINGS, now=1000.0)
    assert not e.dead and e.row.status is UrlStatus.QUEUED and e.row.attempts == 2
    assert e.row.next_fetch_at == pytest.approx(1040.0)
    assert e.host.next_allowed_at >= 1040.0  # the host rests as long
    assert not e.request_made


@pytest.mark.parametrize(("fetched", "robots_at", "last"), [
    (True, 1000.0, 900.0),  # robots.txt asked by this try
    (False, 950.0, 900.0),  # asked by another URL since this one's last try
    (False, 950.0, None),  # this URL's first try
])
def test_a_robots_failure_new_to_the_url_counts(fetched: bool, robots_at: float,
                                                last: float | None) -> None:
    row = msgspec.structs.replace(_row(attempts=3), last_fetch_at=last)
    e = apply_result(_robots_unavailable(fetched, robots_at, 40.0), row,
                     HostState(host="a.test"), SETTINGS, now=1000.0)
    assert e.dead and e.row.status is UrlStatus.DEAD and e.row.attempts == 3
    assert "robots_unavailable" in (e.row.detail or "")


def test_redirect_goes_back_to_the_frontier_with_a_hop_count() -> None:
    r = FetchResult(task=_task(), outcome=FetchOutcome.REDIRECT, status=301,
                    fetched_at=1000.0, location="http://b.test/x")
    e = apply_result(r, _row(hops=2), HostState(host="a.test"), SETTINGS, now=1000.0)
    assert e.row.reason is Reason.REDIRECTED
    assert [(link.url, link.hops) for link in e.follow] == [("http://b.test/x", 3)]


def test_redirect_past_the_hop_cap_is_rejected() -> None:
    r = FetchResult(task=_task(), outcome=FetchOutcome.REDIRECT, status=302,
                    fetched_at=1000.0, location="http://a.test/loop")
    e = apply_result(r, _row(hops=5), HostState(host="a.test"), SETTINGS, now=1000.0)
    assert e.row.status is UrlStatus.REJECTED and e.row.reason is Reason.REDIRECT_CAP
    assert e.follow == []


@pytest.mark.parametrize(("outcome", "reason"), [
    (FetchOutcome.HTTP_ERROR, Reason.HTTP_ERROR),
    (FetchOutcome.TOO_LARGE, Reason.TOO_LARGE),
    (FetchOutcome.BAD_CONTENT_TYPE, Reason.BAD_CONTENT_TYPE),
    (FetchOutcome.SSRF_BLOCKED, Reason.SSRF),
])
def test_final_outcomes_are_recorded(outcome: FetchOutcome, reason: Reason) -> None:
    r = FetchResult(task=_task(), outcome=outcome, fetched_at=1000.0)
    e = apply_result(r, _row(), HostState(host="a.test"), SETTINGS, now=1000.0)
    assert e.row.status is UrlStatus.REJECTED and e.row.reason is reason


def test_input_rows_are_not_mutated() -> None:
    row, host = _row(), HostState(host="a.test")
    r = FetchResult(task=_task(), outcome=FetchOutcome.OK, status=200, fetched_at=1.0)
    apply_result(r, row, host, SETTINGS, now=1.0)
    assert row.status is UrlStatus.IN_FLIGHT and host.page_count == 0
