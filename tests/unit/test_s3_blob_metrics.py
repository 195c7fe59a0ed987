"""The S3 blob store's upload metrics (crawler_blob_*): files and bytes the bucket
acknowledged, failed attempts, upload time and the backlog waiting in the spool.

The bucket is obstore's local-filesystem store (the same client calls as against an S3
server; the S3 server itself is exercised by tests/integration/test_s3_blobs.py). It
fails while its folder is replaced by a plain file, which refuses every write, root's
included."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from obstore.store import LocalStore

from common.adapters.s3_blobs import S3BlobStore, S3Config
from common.metrics import Metrics

RECORD = b"x" * 700  # two of them pass max_bytes: the first file is finished


def sample(metrics: Metrics, name: str, kind: str | None = None) -> float:
    value = metrics.registry.get_sample_value(name, {"kind": kind} if kind else {})
    assert value is not None, name
    return value


def wait_for(check: object, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} within {limit} s"
        time.sleep(0.05)


def _store(tmp_path: Path, **kw: Any) -> tuple[Path, Metrics, S3BlobStore]:
    """An S3 blob store whose bucket is the folder ``bucket``, with its metrics."""
    folder = tmp_path / "bucket"
    folder.mkdir()
    metrics = Metrics.create(roles=(), process=False)
    store = S3BlobStore(str(tmp_path / "spool"), S3Config(bucket="crawl", keep_uploaded=0,
                                                            upload_wait=30),
                        writer_id="w", fsync=False,
                        bucket=LocalStore(str(folder)),  # type: ignore[arg-type]
                        metrics=metrics.blob, **kw)
    return folder, metrics, store


def test_uploads_failures_and_backlog_are_counted(tmp_path: Path) -> None:
    folder, metrics, store = _store(tmp_path, max_bytes=1000)
    try:
        assert sample(metrics, "crawler_blob_upload_backlog_files") == 0
        folder.rmdir()
        folder.write_bytes(b"")  # the bucket refuses every upload now
        first = store.append("warc", RECORD)
        store.append("warc", RECORD)  # rolls over: the first file waits for its upload
        wait_for(lambda: store.upload_failures() >= 2, "two failed attempts")
        assert sample(metrics, "crawler_blob_upload_failures_total", "file") >= 2
        assert sample(metrics, "crawler_blob_upload_backlog_files") == 1
        size = (store.root / first.file).stat().st_size
        assert sample(metrics, "crawler_blob_upload_backlog_bytes") == size
        assert sample(metrics, "crawler_blob_uploaded_files_total", "file") == 0

        folder.unlink()
        folder.mkdir()  # the bucket is back: the retry goes through
        assert store.wait_uploaded(30) == 0
        assert (folder / first.file).stat().st_size == size
        assert sample(metrics, "crawler_blob_uploaded_files_total", "file") == 1
        assert sample(metrics, "crawler_blob_uploaded_bytes_total", "file") == size
        assert sample(metrics, "crawler_blob_upload_duration_seconds_count", "file") == 1
        assert sample(metrics, "crawler_blob_upload_backlog_files") == 0
        assert sample(metrics, "crawler_blob_upload_backlog_bytes") == 0
        assert sample(metrics, "crawler_blob_upload_failures_total", "side") == 0
    finally:
        store.close()
    # close uploaded the second file too
    assert sample(metrics, "crawler_blob_uploaded_files_total", "file") == 2
    assert sample(metrics, "crawler_blob_uploaded_bytes_total", "file") == sum(
        p.stat().st_size for p in folder.iterdir())


def test_a_side_file_snapshot_counts_as_a_side_upload(tmp_path: Path) -> None:
    folder, metrics, store = _store(tmp_path)
    store.append_line("pages.jsonl", '{"url": "http://a.test/"}')
    store.close()
    assert sample(metrics, "crawler_blob_uploaded_files_total", "side") == 1
    assert sample(metrics, "crawler_blob_uploaded_bytes_total", "side") == (
        folder / "pages.jsonl").stat().st_size
