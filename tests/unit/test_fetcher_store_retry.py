"""A store outage between writing a page's records and recording its copy: the retry
records or names the records already written and never archives the body twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from cassandra.cluster import NoHostAvailable
from warcio.archiveiterator import ArchiveIterator

from common.adapters.handling import while_down
from common.adapters.local_blobs import LocalBlobStore
from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.archive import ArchiveWriter, Written
from common.messages import FetchOutcome, FetchTask
from common.settings import Settings
from fetcher.http import Response
from fetcher.service import FetcherStage


class StoreWithOutage:
    """The real SQLite store, whose first ``record_content`` fails as a Cassandra
    outage does: before the write, or after it was applied (a timed-out request)."""

    def __init__(self, inner: SqliteStateStore, *, applied: bool) -> None:
        self.inner = inner
        self.applied = applied
        self.failures = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def record_content(self, digest: str, url: str, pointer: Any) -> None:
        if self.failures == 0:
            self.failures += 1
            if self.applied:
                await self.inner.record_content(digest, url, pointer)
            raise NoHostAvailable("Unable to connect to any servers", {})
        await self.inner.record_content(digest, url, pointer)


def _responses(root: Path) -> list[str]:
    ids = []
    for path in sorted(root.rglob("*.warc.gz")):
        with path.open("rb") as fh:
            ids += [rec.rec_headers.get_header("WARC-Record-ID")
                    for rec in ArchiveIterator(fh) if rec.rec_type in ("response", "revisit")]
    return ids


@pytest.mark.parametrize("applied", [False, True], ids=["not-applied", "applied"])
async def test_a_page_is_archived_once_through_a_store_outage(
        tmp_path: Path, store: SqliteStateStore, applied: bool) -> None:
    settings = Settings()
    blobs = LocalBlobStore(str(tmp_path / "warc"), writer_id="test")
    archive = ArchiveWriter(blobs, software="test")
    flaky = StoreWithOutage(store, applied=applied)
    stage = FetcherStage(settings, MemoryBus(settings.bus, partitions=1),
                         cast(Any, flaky), blobs, archive, cast(Any, None), cast(Any, None))
    url = "http://a.test/page"
    task = FetchTask(task_id="t1", url=url, host="a.test")
    resp = Response(url=url, outcome=FetchOutcome.OK, status=200, reason="OK",
                    http_version="1.1", headers=(("Content-Type", "text/html"),),
                    body=b"<html><body>one page</body></html>", content_type="text/html",
                    fetched_at=1.0e9)
    written: list[Written] = []
    result = await while_down(lambda: stage._result(task, resp, False, None, written),
                              "storing the page")
    blobs.close()
    assert flaky.failures == 1
    ids = _responses(tmp_path / "warc")
    assert len(ids) == 1, ids
    assert result.record is not None and result.duplicate_of is None
    assert result.record == written[0].pointer
    holder = await store.content_holder(result.content_hash or "")
    assert holder == (url, result.record)
