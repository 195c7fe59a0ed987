"""Frontier policy for refreshing stored pages: when a page is due again, and the row
that queues it."""

from __future__ import annotations

import pytest

from common.messages import Reason, RecordPointer, UrlStatus
from common.ports import UrlState
from frontier.policy import refresh_at, refreshed

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
