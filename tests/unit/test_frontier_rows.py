"""Frontier policy: the pure row updates of the frontier's handlers (the row a
discovered link makes and whether it is admitted, a verdict closing a stored page, a
stored page handed to the parser again)."""

from __future__ import annotations

import pytest

from common.messages import (
    FetchOutcome,
    Link,
    LinkKind,
    Reason,
    RecordPointer,
    StatusUpdate,
    TaskKind,
    UrlStatus,
)
from common.patterns import compile_operator_pattern
from common.ports import HostState, ScopeRules, UrlState
from common.settings import Settings, TrapSettings
from frontier.policy import (
    TrapRules,
    admission_reason,
    discovered_row,
    host_refusal,
    replay_result,
    scope_applies,
    with_verdict,
)

SETTINGS = Settings()
RULES = TrapRules.from_settings(TrapSettings())


def test_a_discovered_link_makes_a_queued_row_of_its_own() -> None:
    link = Link(url="http://A.test/x#frag", depth=2, priority=1, source="http://a.test/",
                hops=1, lastmod=1_000.0)
    row = discovered_row(link, "http://a.test/x", "a.test", 50.0, SETTINGS)
    assert row == UrlState(host="a.test", url="http://a.test/x", depth=2, priority=1,
                           hops=1, source="http://a.test/", discovered_at=50.0,
                           lastmod=1_000.0)
    assert row.status is UrlStatus.QUEUED and row.kind is None


def test_a_sitemap_link_is_read_as_a_sitemap_and_its_changefreq_starts_the_interval(
        ) -> None:
    settings = SETTINGS.replace(crawl={"recrawl_interval": 86_400.0})
    sitemap = Link(url="http://a.test/s.xml", depth=1, kind=LinkKind.SITEMAP)
    assert discovered_row(sitemap, sitemap.url, "a.test", 0.0,
                          settings).kind is TaskKind.SITEMAP
    listed = Link(url="http://a.test/p", kind=LinkKind.LISTED, changefreq=3_600.0)
    row = discovered_row(listed, listed.url, "a.test", 0.0, settings)
    assert row.kind is None and row.revisit_interval == 3_600.0


@pytest.mark.parametrize(("link", "reason"), [
    (Link(url="http://a.test/ok", depth=1), None),
    (Link(url="http://a.test/ok", depth=17), Reason.DEPTH),
    (Link(url="http://a.test/cart/1", depth=1), Reason.BLOCKED),  # the operator's pattern
    (Link(url="http://a.test/s.xml", depth=9, kind=LinkKind.SITEMAP), Reason.SITEMAP_DEPTH),
])
def test_admission_by_the_url_alone(link: Link, reason: Reason | None) -> None:
    blocked = (compile_operator_pattern(r"^/cart"),)
    assert admission_reason(link, link.url, "a.test", SETTINGS, RULES, blocked) == reason


def test_the_scope_judges_links_but_not_seeds_and_only_when_it_limits() -> None:
    limited = ScopeRules(mode="seed-hosts")
    assert scope_applies(Link(url="http://a.test/"), limited)
    assert not scope_applies(Link(url="http://a.test/", kind=LinkKind.SEED), limited)
    assert not scope_applies(Link(url="http://a.test/"), ScopeRules())


@pytest.mark.parametrize(("state", "reason"), [
    (None, None),
    (HostState(host="a.test"), None),
    (HostState(host="a.test", capped=True), Reason.HOST_CAP),
    (HostState(host="a.test", blocked=True), Reason.BLOCKED),
    (HostState(host="a.test", capped=True, blocked=True), Reason.HOST_CAP),
])
def test_a_host_capped_or_blocked_refuses_new_urls(state: HostState | None,
                                                   reason: Reason | None) -> None:
    assert host_refusal(state) == reason


def test_a_verdict_closes_a_copy_of_the_row_and_keeps_what_it_does_not_say() -> None:
    row = UrlState(host="a.test", url="http://a.test/", status=UrlStatus.FETCHED,
                   duplicate_of="http://a.test/old", simhash=7, detail="kept")
    plain = with_verdict(row, StatusUpdate(url=row.url, host="a.test",
                                           status=UrlStatus.DONE))
    assert (plain.status, plain.reason) == (UrlStatus.DONE, None)
    assert (plain.duplicate_of, plain.simhash, plain.detail) == (
        "http://a.test/old", 7, "kept")
    assert row.status is UrlStatus.FETCHED  # the row given is left as it was
    dup = with_verdict(row, StatusUpdate(url=row.url, host="a.test",
                                         status=UrlStatus.DONE, reason=Reason.DUPLICATE,
                                         duplicate_of="http://b.test/", simhash=9,
                                         detail="same text"))
    assert (dup.reason, dup.duplicate_of, dup.simhash, dup.detail) == (
        Reason.DUPLICATE, "http://b.test/", 9, "same text")


def test_a_stored_page_is_replayed_as_the_result_of_its_fetch() -> None:
    record = RecordPointer("w.warc.gz", 0, 10)
    row = UrlState(host="a.test", url="http://a.test/s.xml", status=UrlStatus.FETCHED,
                   depth=1, priority=0, hops=0, attempts=2, kind=TaskKind.SITEMAP,
                   source="http://a.test/robots.txt", http_status=203,
                   last_fetch_at=5.0, record=record, content_hash="sha256:aa",
                   etag='"e"', last_modified="yesterday")
    result = replay_result(row)
    assert result.outcome is FetchOutcome.OK and result.status == 203
    assert (result.fetched_at, result.record, result.content_hash, result.etag,
            result.last_modified) == (5.0, record, "sha256:aa", '"e"', "yesterday")
    task = result.task
    assert (task.url, task.host, task.depth, task.priority, task.attempt, task.kind,
            task.source) == (row.url, "a.test", 1, 0, 2, TaskKind.SITEMAP,
                             "http://a.test/robots.txt")
    page = replay_result(UrlState(host="a.test", url="http://a.test/",
                                  source="http://a.test/from"))
    assert page.status == 200 and page.fetched_at == 0.0
    assert page.task.kind is TaskKind.PAGE and page.task.source is None
