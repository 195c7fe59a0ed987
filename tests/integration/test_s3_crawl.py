"""An embedded crawl of the simulated web that writes its WARC, text and side files to a
bucket (SeaweedFS, ``scripts/servers start s3``); everything is then read back from
the bucket alone."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from common.adapters.s3_blobs import S3BlobStore
from common.archive import read_response
from common.messages import RecordPointer
from simweb import Page, SimWeb
from tests.e2e.crawl_support import blob_root, host, run, scenario
from tests.integration.s3_support import S3Server, object_bytes, object_keys

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.mark.parametrize("page_processes", [1, 0], ids=["worker-processes", "threads"])
async def test_embedded_crawl_writes_to_the_bucket(s3: S3Server, tmp_path: Path,
                                                   page_processes: int) -> None:
    config = s3.config()
    paths = [f"/p{i}" for i in range(12)]
    site = host("bucket.test", Page(path="/", words=60, links=tuple(paths)),
                *(Page(path=p, words=120 + 7 * i) for i, p in enumerate(paths)))
    blob = {"backend": "s3", "s3_bucket": s3.bucket, "s3_endpoint": s3.endpoint,
            "s3_path_style": True, "s3_prefix": config.key_prefix, "warc_max_bytes": 4096}
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["bucket.test/"], blob=blob,
                        crawl={"page_processes": page_processes})
    assert out.stats.fetched == 13

    spool = blob_root(out.settings)
    assert sorted(spool.glob("*.warc.gz")) == []  # all uploaded, none left behind
    keys = object_keys(config)
    warcs = [k for k in keys if k.endswith(".warc.gz") and "-text-" not in k]
    texts = [k for k in keys if "-text-" in k]
    assert len(warcs) > 1 and texts  # rolled over, and every file went up
    assert "pages.jsonl" in keys and "index.cdxj" in keys

    responses: dict[str, bytes] = {}
    for key in warcs:
        records = list(ArchiveIterator(io.BytesIO(object_bytes(config, key))))
        assert records[0].rec_type == "warcinfo"
    for key in warcs:
        for rec in ArchiveIterator(io.BytesIO(object_bytes(config, key))):
            if rec.rec_type == "response":
                responses[rec.rec_headers.get_header("WARC-Target-URI")] = (
                    rec.content_stream().read())
    assert len(responses) == 14  # the 13 pages and robots.txt

    pages = [json.loads(line) for line in
             object_bytes(config, "pages.jsonl").decode().splitlines() if line]
    assert len(pages) == 13
    index = object_bytes(config, "index.cdxj").decode().splitlines()
    assert len([line for line in index if line]) >= 13
    # every page record's pointers read back from the bucket, through a store on an
    # empty spool (the parser's read-back path)
    reader = S3BlobStore(str(tmp_path / "empty-spool"), config, writer_id="reader")
    try:
        for page in pages:
            pointer = RecordPointer(**page["storageKey"])
            stored = read_response(reader, pointer)
            assert stored.body == responses[page["url"]]
            text = RecordPointer(**page["textKey"])
            assert reader.read(text)[:2] == b"\x1f\x8b"  # a gzip member: one record
            markdown = RecordPointer(**page["markdownKey"])
            record = next(iter(ArchiveIterator(io.BytesIO(reader.read(markdown)))))
            headers = record.rec_headers
            assert headers.get_header("Content-Type").startswith("text/markdown")
            assert headers.get_header("WARC-Refers-To") == stored.record_id
            assert headers.get_header("WARC-Refers-To-Payload-Digest") == stored.payload_digest
    finally:
        reader.close()
