"""A URL first found beyond the depth limit is queued when a link reaches it on a
shorter path (pages are parsed side by side, so the first path found to a page is not
always its shortest); found again as deep, it is skipped without a store call."""

from __future__ import annotations

from pathlib import Path

import msgspec

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import Discovered, Link, Reason, Topic, UrlStatus
from common.ports import Delivery, UrlState
from common.settings import Settings, TrapSettings
from frontier.policy import readmitted
from frontier.service import Frontier


def _found(url: str, depth: int) -> Delivery:
    return Delivery(topic=Topic.DISCOVERED, key="a.test",
                    message=Discovered(host="a.test", links=(Link(url=url, depth=depth),)))


async def test_a_url_rejected_for_depth_is_queued_from_a_shorter_path(
        tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "state.sqlite")
    await store.open()
    try:
        frontier = Frontier(Settings(traps=TrapSettings(max_depth=2)), MemoryBus(), store)
        url = "http://a.test/deep"
        await frontier.handle(_found(url, 3))
        row = await store.get_url("a.test", url)
        assert row is not None and row.status is UrlStatus.REJECTED
        assert row.reason is Reason.DEPTH
        await frontier.handle(_found(url, 4))  # as deep or deeper: skipped
        assert frontier.counters.seen_skipped == 1
        await frontier.handle(_found(url, 2))  # within the limit now
        again = await store.get_url("a.test", url)
        assert again is not None and again.status is UrlStatus.QUEUED
        assert again.depth == 2 and again.reason is None and again.seq == row.seq
        assert frontier.counters.readmitted == 1
        await frontier.handle(_found(url, 1))  # queued now: the seen filter skips it
        assert frontier.counters.seen_skipped == 2 and frontier.counters.readmitted == 1
    finally:
        await store.close()


def _row(status: UrlStatus, reason: Reason | None, depth: int) -> UrlState:
    return UrlState(host="a.test", url="http://a.test/x", status=status, reason=reason,
                    depth=depth, seq=7)


def test_only_a_depth_rejection_is_undone_and_only_by_a_shorter_path() -> None:
    queued = _row(UrlStatus.QUEUED, None, 2)
    assert readmitted(_row(UrlStatus.REJECTED, Reason.DEPTH, 3), queued) == (
        msgspec.structs.replace(queued, seq=7))
    assert readmitted(_row(UrlStatus.REJECTED, Reason.DEPTH, 2), queued) is None
    assert readmitted(_row(UrlStatus.REJECTED, Reason.BLOCKED, 3), queued) is None
    assert readmitted(_row(UrlStatus.DONE, None, 3), queued) is None
    rejected = _row(UrlStatus.REJECTED, Reason.BLOCKED, 2)
    assert readmitted(_row(UrlStatus.REJECTED, Reason.DEPTH, 3), rejected) is None
