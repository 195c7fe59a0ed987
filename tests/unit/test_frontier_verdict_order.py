"""A dedup verdict that overtakes its own fetch result is applied when the result lands."""

from __future__ import annotations

from pathlib import Path

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import (
    FetchOutcome,
    FetchResult,
    FetchTask,
    NearIndex,
    Reason,
    StatusUpdate,
    Topic,
    UrlStatus,
)
from common.ports import Delivery, HostState, UrlState
from common.settings import Settings
from frontier.service import Frontier
from tests.frontier_support import fly

URL = "http://a.test/p"


async def _in_flight(store: SqliteStateStore) -> Frontier:
    """A frontier on ``store`` whose one URL is in flight (attempt 1, task "t")."""
    frontier = Frontier(Settings(), MemoryBus(), store)
    await store.add_urls([UrlState(host="a.test", url=URL)])
    row = await store.get_url("a.test", URL)
    assert row is not None
    await fly(frontier, row, "t")
    return frontier


async def _run(tmp_path: Path, verdict_hash: str) -> UrlState | None:
    store = SqliteStateStore(tmp_path / "state.sqlite")
    await store.open()
    try:
        frontier = await _in_flight(store)
        verdict = StatusUpdate(url=URL, host="a.test", status=UrlStatus.DONE,
                               reason=Reason.DUPLICATE, duplicate_of="http://a.test/q",
                               content_hash=verdict_hash)
        await frontier.handle(Delivery(topic=Topic.STATUS, key="a.test", message=verdict))
        task = FetchTask(task_id="t", url=URL, host="a.test", attempt=1)
        result = FetchResult(task=task, outcome=FetchOutcome.OK, status=200,
                             fetched_at=1.0, content_hash="sha256:aa")
        await frontier.handle(Delivery(topic=Topic.FETCHED, key="a.test", message=result))
        return await store.get_url("a.test", URL)
    finally:
        await store.close()


async def test_early_verdict_closes_the_url(tmp_path: Path) -> None:
    row = await _run(tmp_path, "sha256:aa")
    assert row is not None
    assert row.status is UrlStatus.DONE and row.reason is Reason.DUPLICATE
    assert row.duplicate_of == "http://a.test/q"


async def test_early_verdict_about_another_body_is_not_applied(tmp_path: Path) -> None:
    row = await _run(tmp_path, "sha256:bb")
    assert row is not None
    assert row.status is UrlStatus.FETCHED  # waits for the verdict on this body


class CountingStore(SqliteStateStore):
    """Counts the writes of URL rows."""

    writes = 0

    async def put_url(self, row: UrlState) -> None:
        self.writes += 1
        await super().put_url(row)

    async def put_url_and_host(self, row: UrlState, host: HostState, *,
                               index: NearIndex | None = None) -> None:
        self.writes += 1
        await super().put_url_and_host(row, host, index=index)


async def _with_result(tmp_path: Path, verdict: StatusUpdate | None,
                       outcome: FetchOutcome = FetchOutcome.OK) -> tuple[UrlState, int]:
    """A result carrying ``verdict`` (the fetcher parsed and judged the page): the row
    after it, and the URL-row writes it took."""
    store = CountingStore(tmp_path / "state.sqlite")
    await store.open()
    try:
        frontier = await _in_flight(store)
        store.writes = 0
        task = FetchTask(task_id="t", url=URL, host="a.test", attempt=1)
        result = FetchResult(task=task, outcome=outcome, status=200, fetched_at=1.0,
                             content_hash="sha256:aa", verdict=verdict)
        await frontier.handle(Delivery(topic=Topic.FETCHED, key="a.test", message=result))
        after = await store.get_url("a.test", URL)
        assert after is not None
        return after, store.writes
    finally:
        await store.close()


async def test_a_verdict_with_the_result_closes_the_url_in_one_write(tmp_path: Path) -> None:
    verdict = StatusUpdate(url=URL, host="a.test", status=UrlStatus.DONE,
                           reason=Reason.NEAR_DUPLICATE, duplicate_of="http://a.test/q",
                           simhash=12345, content_hash="sha256:aa")
    row, writes = await _with_result(tmp_path, verdict)
    assert (row.status, row.reason, row.duplicate_of, row.simhash) == (
        UrlStatus.DONE, Reason.NEAR_DUPLICATE, "http://a.test/q", 12345)
    assert writes == 1


async def test_a_unique_page_with_its_verdict_is_done(tmp_path: Path) -> None:
    verdict = StatusUpdate(url=URL, host="a.test", status=UrlStatus.DONE,
                           content_hash="sha256:aa")
    row, writes = await _with_result(tmp_path, verdict)
    assert row.status is UrlStatus.DONE and row.reason is None and writes == 1


async def test_a_verdict_about_another_body_is_not_applied(tmp_path: Path) -> None:
    verdict = StatusUpdate(url=URL, host="a.test", status=UrlStatus.DONE,
                           content_hash="sha256:bb")
    row, _ = await _with_result(tmp_path, verdict)
    assert row.status is UrlStatus.FETCHED


async def test_a_result_without_a_verdict_awaits_one(tmp_path: Path) -> None:
    row, writes = await _with_result(tmp_path, None)
    assert row.status is UrlStatus.FETCHED and writes == 1
