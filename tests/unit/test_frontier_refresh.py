"""Frontier policy for refreshing stored pages: when a page is due again, the row that
queues it, the adaptive revisit interval, the refresh budget and the refresh level."""

from __future__ import annotations

import msgspec
import pytest

from common.messages import FetchOutcome, FetchResult, FetchTask, Reason, RecordPointer, UrlStatus
from common.ports import HostState, UrlState
from common.settings import RefreshSettings, Settings
from frontier.policy import (
    apply_result,
    due_buckets,
    next_revisit_interval,
    refresh_at,
    refresh_priority,
    refreshed,
    take_refresh,
)

RECORD = RecordPointer("crawl-00000.warc.gz", 0, 100)


def stored(**changes: object) -> UrlState:
    row = UrlState(host="a.test", url="http://a.test/p", status=UrlStatus.DONE,
                   last_fetch_at=1000.0, record=RECORD, etag='"v1"', attempts=2,
                   last_modified="Wed, 01 Jan 2025 00:00:00 GMT")
    for name, value in changes.items():
        setattr(row, name, value)
    return row


def test_a_kept_page_is_due_one_interval_after_its_fetch() -> None:
    assert refresh_at(stored(), 60.0) == 1060.0
    assert refresh_at(stored(reason=Reason.NOT_MODIFIED), 60.0) == 1060.0


def test_the_row_revisit_interval_wins() -> None:
    assert refresh_at(stored(revisit_interval=5.0), 60.0) == 1005.0


@pytest.mark.parametrize("changes", [
    {"status": UrlStatus.QUEUED},
    {"status": UrlStatus.REJECTED, "reason": Reason.ROBOTS},
    {"status": UrlStatus.DEAD, "reason": Reason.DEAD},
    {"reason": Reason.DUPLICATE},
    {"reason": Reason.NEAR_DUPLICATE},
    {"reason": Reason.REDIRECTED},
    {"record": None},
    {"last_fetch_at": None},
])
def test_pages_not_stored_as_kept_are_not_refreshed(changes: dict[str, object]) -> None:
    assert refresh_at(stored(**changes), 60.0) is None


def test_interval_zero_turns_refresh_off() -> None:
    assert refresh_at(stored(), 0.0) is None


def test_refreshed_row_is_queued_with_its_validators() -> None:
    row = stored(reason=Reason.NOT_MODIFIED, detail="x")
    again = refreshed(row, 2000.0)
    assert (again.status, again.reason, again.detail) == (UrlStatus.QUEUED, None, None)
    assert (again.attempts, again.next_fetch_at) == (0, 2000.0)
    assert (again.etag, again.last_modified, again.record) == (row.etag, row.last_modified,
                                                               RECORD)
    assert row.status is UrlStatus.DONE  # the input is not changed


# ---------------------------------------------------------------- adaptive interval

BOUNDS = RefreshSettings(min_interval=3600.0, max_interval=90 * 86_400.0)


def test_a_changed_page_is_visited_twice_as_often() -> None:
    assert next_revisit_interval(8 * 3600.0, True, 86_400.0, BOUNDS) == 4 * 3600.0


def test_an_unchanged_page_is_visited_half_as_often() -> None:
    assert next_revisit_interval(8 * 3600.0, False, 86_400.0, BOUNDS) == 16 * 3600.0


def test_the_first_interval_is_the_starting_one() -> None:
    assert next_revisit_interval(None, False, 86_400.0, BOUNDS) == 2 * 86_400.0
    assert next_revisit_interval(None, True, 86_400.0, BOUNDS) == 43_200.0


def test_intervals_stay_within_their_bounds() -> None:
    assert next_revisit_interval(3600.0, True, 86_400.0, BOUNDS) == 3600.0
    assert next_revisit_interval(80 * 86_400.0, False, 86_400.0, BOUNDS) == 90 * 86_400.0
    every = 86_400.0
    for changed in [True] * 30 + [False] * 30:
        every = next_revisit_interval(every, changed, 86_400.0, BOUNDS)
        assert 3600.0 <= every <= 90 * 86_400.0


def test_a_starting_interval_below_the_least_is_the_least() -> None:
    assert next_revisit_interval(0.3, True, 0.3, BOUNDS) == 0.3
    assert next_revisit_interval(0.3, False, 0.3, BOUNDS) == 0.6


def test_not_adaptive_keeps_the_starting_interval() -> None:
    fixed = RefreshSettings(adaptive=False)
    assert next_revisit_interval(7200.0, True, 86_400.0, fixed) == 86_400.0


def result(outcome: FetchOutcome, content_hash: str | None, row: UrlState) -> FetchResult:
    task = FetchTask(task_id="t", url=row.url, host=row.host, depth=0, priority=1,
                     attempt=1, previous_record=row.record)
    return FetchResult(task=task, outcome=outcome, status=200, fetched_at=5000.0,
                       content_hash=content_hash, record=RECORD)


SETTINGS = Settings().replace(crawl={"recrawl_interval": 86_400.0})


def test_apply_result_writes_the_interval_and_counts_the_refresh() -> None:
    row = stored(content_hash="old", revisit_interval=4 * 3600.0, status=UrlStatus.IN_FLIGHT)
    host = HostState(host="a.test")
    changed = apply_result(result(FetchOutcome.OK, "new", row), row, host, SETTINGS, 5000.0)
    assert changed.row.revisit_interval == 2 * 3600.0
    assert (changed.host.page_count, changed.host.refreshes) == (1, 1)
    same = apply_result(result(FetchOutcome.OK, "old", row), row, host, SETTINGS, 5000.0)
    assert same.row.revisit_interval == 8 * 3600.0
    not_modified = apply_result(result(FetchOutcome.NOT_MODIFIED, None, row), row, host,
                                SETTINGS, 5000.0)
    assert not_modified.row.revisit_interval == 8 * 3600.0


def test_apply_result_gives_a_new_page_the_starting_interval() -> None:
    row = UrlState(host="a.test", url="http://a.test/new", status=UrlStatus.IN_FLIGHT)
    effect = apply_result(result(FetchOutcome.OK, "h", row), row, HostState(host="a.test"),
                          SETTINGS, 5000.0)
    assert effect.row.revisit_interval == 86_400.0
    assert (effect.host.page_count, effect.host.refreshes) == (1, 0)


def test_a_new_page_keeps_the_interval_its_sitemap_gave() -> None:
    # listed with <changefreq>weekly</changefreq>: first_revisit_interval gave a week
    row = UrlState(host="a.test", url="http://a.test/listed", status=UrlStatus.IN_FLIGHT,
                   revisit_interval=604_800.0)
    effect = apply_result(result(FetchOutcome.OK, "h", row), row, HostState(host="a.test"),
                          SETTINGS, 5000.0)
    assert effect.row.revisit_interval == 604_800.0
    assert refresh_at(msgspec.structs.replace(effect.row, status=UrlStatus.DONE),
                      86_400.0) == 5000.0 + 604_800.0


def test_refresh_off_leaves_the_interval_unwritten() -> None:
    row = stored(content_hash="old", status=UrlStatus.IN_FLIGHT)
    effect = apply_result(result(FetchOutcome.OK, "new", row), row,
                          HostState(host="a.test"), Settings(), 5000.0)
    assert effect.row.revisit_interval is None
    assert refresh_at(stored(revisit_interval=60.0), 0.0) is None


# ---------------------------------------------------------------- budget and priority

def test_the_refresh_share_holds_while_both_kinds_wait() -> None:
    for share in (0.0, 0.1, 0.25, 0.5, 0.9):
        refreshes = 0
        picks = []
        for total in range(200):
            take = take_refresh(refreshes, total, share)
            refreshes += take
            picks.append(take)
            assert refreshes <= share * (total + 1) + 1e-9
            assert refreshes >= share * (total + 1) - 1  # never behind by a whole slot
        if share:
            assert not picks[0]  # discovery first


def test_a_share_of_a_quarter_gives_every_fourth_slot() -> None:
    refreshes, picks = 0, []
    for total in range(8):
        take = take_refresh(refreshes, total, 0.25)
        refreshes += take
        picks.append(take)
    assert picks == [False, False, False, True] * 2


def test_refreshes_have_the_lowest_level_of_the_documented_order() -> None:
    s = Settings()
    listed = min(s.crawl.priority_levels - 1, s.sitemaps.priority)
    assert (s.crawl.seed_priority, 1, listed, refresh_priority(s)) == (0, 1, 2, 3)
    assert refresh_priority(s.replace(crawl={"priority_levels": 2})) == 1
    assert refreshed(stored(priority=0), 10.0, refresh_priority(s)).priority == 3


def test_due_buckets_count_what_is_due_when() -> None:
    now = 1_000_000.0
    times = [None, now - 5, now, now + 60, now + 7200, now + 2 * 86_400.0,
             now + 30 * 86_400.0]
    assert due_buckets(times, now) == {"now": 2, "next_hour": 1, "next_day": 1,
                                      "next_week": 1, "later": 1, "never": 1}


def test_the_due_buckets_are_exported_at_0_before_the_first_look() -> None:
    from prometheus_client import generate_latest

    from common.metrics import REFRESH_DUE_BUCKETS, Metrics
    from frontier.policy import due_buckets

    assert tuple(due_buckets([], 0.0)) == REFRESH_DUE_BUCKETS
    metrics = Metrics.create(roles=("frontier",), process=False)
    text = generate_latest(metrics.registry).decode()
    for due in REFRESH_DUE_BUCKETS:
        assert f'crawler_frontier_refresh_due_urls{{due="{due}"}} 0.0' in text
