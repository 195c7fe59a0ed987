"""A unique page's near-duplicate index entries, judged by a fetcher (``defer_index``),
travel with its verdict and are written by its frontier owner in the result's store
write: on an SQLite state store, with the dedup stage and the frontier as they run."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from common import minhash
from common.adapters.int64 import index_entries, to_signed
from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import (
    FetchOutcome,
    FetchResult,
    FetchTask,
    MessageError,
    NearIndex,
    Reason,
    StatusUpdate,
    Topic,
    UrlStatus,
    decode,
    encode,
)
from common.ports import Delivery, UrlState
from common.settings import Settings
from common.simhash import simhash64
from dedup.service import DedupStage
from frontier.service import Frontier
from tests.unit.test_dedup_links import RecordingBus
from tests.unit.test_dedup_near import parsed
from tests.unit.test_frontier_verdict_order import URL, _in_flight

TEXT = " ".join(f"word{i % 97} other{i % 13} thing{i % 7}" for i in range(400))


class IndexCountingStore(SqliteStateStore):
    """Counts the near-duplicate index writes made on their own."""

    own_writes = 0

    async def add_simhash(self, keys: list[int], url: str, simhash: int,  # type: ignore[override]
                          sketch: bytes | None = None) -> None:
        self.own_writes += 1
        await super().add_simhash(keys, url, simhash, sketch)


async def test_deferred_unique_page_carries_its_entries_and_writes_none(
        tmp_path: Path) -> None:
    async with IndexCountingStore(tmp_path / "state.sqlite") as store:
        stage = DedupStage(Settings(), RecordingBus(1), store, defer_index=True)
        verdict = await stage.judge(parsed(URL, TEXT))
        assert verdict.reason is None and verdict.index is not None
        assert store.own_writes == 0
        assert await store.simhash_candidates(verdict.index.keys) == []
        assert verdict.index.sketch == minhash.sketch(TEXT)


async def test_not_deferred_unique_page_is_indexed_by_the_stage(tmp_path: Path) -> None:
    async with IndexCountingStore(tmp_path / "state.sqlite") as store:
        stage = DedupStage(Settings(), RecordingBus(1), store)
        verdict = await stage.judge(parsed(URL, TEXT))
        assert verdict.reason is None and verdict.index is None
        assert store.own_writes == 1


async def test_near_duplicate_carries_no_entries(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "state.sqlite") as store:
        stage = DedupStage(Settings(), RecordingBus(1), store)
        await stage.judge(parsed("http://b.test/", TEXT))  # indexed by the stage
        deferring = DedupStage(Settings(), RecordingBus(1), store, defer_index=True)
        verdict = await deferring.judge(parsed(URL, TEXT))
        assert verdict.reason is Reason.NEAR_DUPLICATE and verdict.index is None


async def _result_with_verdict(store: SqliteStateStore, verdict: StatusUpdate, *,
                               attempt: int = 1) -> Frontier:
    frontier = await _in_flight(store)
    task = FetchTask(task_id="t", url=URL, host="a.test", attempt=attempt)
    result = FetchResult(task=task, outcome=FetchOutcome.OK, status=200, fetched_at=1.0,
                         content_hash="sha256:aa", verdict=verdict)
    await frontier.handle(Delivery(topic=Topic.FETCHED, key="a.test", message=result))
    return frontier


def _unique_verdict() -> StatusUpdate:
    h = simhash64(TEXT)
    return StatusUpdate(url=URL, host="a.test", status=UrlStatus.DONE, simhash=h,
                        content_hash="sha256:aa",
                        index=NearIndex(keys=[7, 2**64 - 1], sketch=b"\x01" * 8))


async def test_frontier_writes_the_entries_with_the_result(tmp_path: Path) -> None:
    async with IndexCountingStore(tmp_path / "state.sqlite") as store:
        await _result_with_verdict(store, _unique_verdict())
        row = await store.get_url("a.test", URL)
        assert row is not None and row.status is UrlStatus.DONE
        h = simhash64(TEXT)
        assert await store.simhash_candidates([7]) == [(URL, h)]
        assert await store.simhash_candidates([2**64 - 1]) == [(URL, h)]
        assert await store.simhash_sketches([URL]) == {URL: b"\x01" * 8}
        assert store.own_writes == 0  # in the result's write, not one of its own


async def test_stale_result_writes_no_entries(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "state.sqlite") as store:
        await _result_with_verdict(store, _unique_verdict(), attempt=2)  # not the row's
        assert await store.simhash_candidates([7]) == []
        row = await store.get_url("a.test", URL)
        assert row is not None and row.status is UrlStatus.QUEUED  # still in flight


async def test_verdict_about_another_body_writes_no_entries(tmp_path: Path) -> None:
    verdict = msgspec.structs.replace(_unique_verdict(), content_hash="sha256:bb")
    async with SqliteStateStore(tmp_path / "state.sqlite") as store:
        await _result_with_verdict(store, verdict)
        assert await store.simhash_candidates([7]) == []


async def test_entries_sent_apart_from_a_result_are_written_with_the_verdict(
        tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "state.sqlite") as store:
        frontier = Frontier(Settings(), MemoryBus(), store)
        await store.add_urls([UrlState(host="a.test", url=URL, status=UrlStatus.FETCHED,
                                       content_hash="sha256:aa")])
        await frontier.handle(Delivery(topic=Topic.STATUS, key="a.test",
                                       message=_unique_verdict()))
        assert await store.simhash_candidates([7]) == [(URL, simhash64(TEXT))]


def test_index_entries_are_signed_sorted_and_once() -> None:
    assert index_entries([2**64 - 1, 5, 5, 3], "u", 2**63) == [
        (to_signed(2**64 - 1), "u", to_signed(2**63)), (3, "u", to_signed(2**63)),
        (5, "u", to_signed(2**63))]
    with pytest.raises(ValueError, match="without a SimHash"):
        index_entries([1], "u", None)


def test_verdict_with_entries_round_trips_and_is_checked() -> None:
    verdict = _unique_verdict()
    assert decode(StatusUpdate, encode(verdict)) == verdict
    no_simhash = encode(verdict).replace(b'"simhash":' + str(verdict.simhash).encode(),
                                         b'"simhash":null')
    with pytest.raises(MessageError):
        decode(StatusUpdate, no_simhash)
    too_big = encode(verdict).replace(b"18446744073709551615", b"18446744073709551616")
    with pytest.raises(MessageError):
        decode(StatusUpdate, too_big)
    no_keys = encode(msgspec.structs.replace(verdict, index=None)).replace(
        b'"index":null', b'"index":{"keys":[]}')
    with pytest.raises(MessageError):
        decode(StatusUpdate, no_keys)
