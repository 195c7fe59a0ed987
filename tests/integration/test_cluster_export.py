"""crawler export of a cluster's crawl: the simulated web crawled by service processes on
real Kafka and Cassandra, with the WARC files in a shared folder or in an S3 bucket;
``crawler export --cluster`` then reads the page records from the pages topic and the
records from the blob store, and its rows are held to the url_state rows and to the
text records read independently from the folder or the bucket."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from common.messages import UrlStatus
from common.runtime import make_blobs, make_store
from simweb import Page, SimWeb
from tests.e2e.crawl_support import host, scenario
from tests.export_checks import check_wacz, parquet_rows, run_wacz_validate
from tests.integration.cluster import Cluster, cluster, crawl_env, require_cluster_servers
from tests.integration.s3_support import object_bytes, object_keys, s3_server

pytestmark = pytest.mark.integration


def texts_by_uri(files: dict[str, bytes]) -> dict[str, str]:
    """Text by WARC-Target-URI, from the conversion records of the text files."""
    out: dict[str, str] = {}
    for name, data in files.items():
        if "-text-" not in name:
            continue
        for rec in ArchiveIterator(io.BytesIO(data)):
            if rec.rec_type == "conversion":
                uri = rec.rec_headers.get_header("WARC-Target-URI")
                out[uri] = bytes(rec.content_stream().read()).decode("utf-8")
    return out


def export(c: Cluster, fmt: str, to: Path, *more: str, status: int = 0) -> str:
    temp = to.parent / "export-temp"  # the exporter's temporary files go here
    temp.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "crawler", "export", "--cluster",
                           "--format", fmt, "--to", str(to), *more],
                          env={**c.env, "TMPDIR": str(temp)},
                          capture_output=True, text=True, timeout=300)
    assert not list(temp.iterdir())  # none left behind, failed or not
    assert done.returncode == status, done.stderr[-4000:]
    return done.stderr


def drop_first_page_record(c: Cluster) -> None:
    """Delete the first record of the first non-empty partition of the pages topic, as
    Kafka's retention would."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = f"{c.settings.bus.topic_prefix}.pages"
    bootstrap = c.settings.bus.kafka_bootstrap
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "drop-check"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        target = next(p for p in sorted(partitions)
                      if consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                        timeout=30)[1] > 0)
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, target, 1)]).values():
        future.result(timeout=30)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("backend", ["local", "s3"])
async def test_cluster_crawl_exports(tmp_path: Path, backend: str) -> None:
    require_cluster_servers()
    extra: dict[str, str] = {}
    config = None
    if backend == "s3":
        s3 = s3_server()  # skips (fails under CI=true) when no S3 server answers
        config = s3.config()
        extra = {"CRAWLER_BLOB_BACKEND": "s3", "CRAWLER_BLOB_S3_BUCKET": s3.bucket,
                 "CRAWLER_BLOB_S3_ENDPOINT": s3.endpoint, "CRAWLER_BLOB_S3_PATH_STYLE": "true",
                 "CRAWLER_BLOB_S3_PREFIX": config.key_prefix,
                 "CRAWLER_BLOB_WARC_MAX_BYTES": "8192", **s3.env()}
    paths = [f"/p{i}" for i in range(10)]
    site = host("export.test",
                Page(path="/", words=80, links=(*paths, "/copy", "/near")),
                *(Page(path=p, words=150 + 11 * i) for i, p in enumerate(paths)),
                Page(path="/copy", same_as="/p1"), Page(path="/near", near_duplicate_of="/p2"))
    partial_rows: list[str] = []
    async with SimWeb(scenario(site), dns=True) as web:
        with cluster(tmp_path, {**crawl_env(web.dns_servers, 0.05), **extra}) as c:
            c.start("frontier", "frontier")
            c.start("fetcher", "fetcher")
            c.seed([web.url("export.test", "/")])
            stats = await c.wait_done(240)
            c.stop_all()  # every file finished (and with s3, uploaded)
            settings = c.settings
            store = make_store(settings)
            await store.open()
            try:
                done = await store.urls_with_status(UrlStatus.DONE, 100_000)
            finally:
                await store.close()
            said = export(c, "parquet", tmp_path / "pages.parquet")
            export(c, "jsonl", tmp_path / "pages.jsonl")
            export(c, "wacz", tmp_path / "crawl.wacz", "--content", "text")
            if backend == "local":  # records Kafka has deleted: refused unless --partial
                drop_first_page_record(c)
                lost = export(c, "jsonl", tmp_path / "lost.jsonl", status=1)
                assert "deleted the first 1 records" in lost and "--partial" in lost
                assert not (tmp_path / "lost.jsonl").exists()
                export(c, "jsonl", tmp_path / "lost.jsonl", "--partial")
                partial_rows = (tmp_path / "lost.jsonl").read_text().splitlines()

    kept = {r.url: r for r in done if r.reason is None}
    assert stats.kept == len(kept) == 11
    assert stats.exact_duplicates == 1 and stats.near_duplicates == 1
    assert f"{len(kept)} rows from" in said and "duplicates left out" in said

    if config is None:
        files = {p.name: p.read_bytes() for p in (tmp_path / "warc").glob("*.warc.gz")}
    else:
        keys = object_keys(config)
        files = {k: object_bytes(config, k) for k in keys if k.endswith(".warc.gz")}
        assert not list((tmp_path / "warc").glob("*.warc.gz"))  # all in the bucket
    texts = texts_by_uri(files)

    if backend == "local":  # one record fewer: at most one page fewer
        assert len(kept) - 1 <= len(partial_rows) <= len(kept)
    rows = parquet_rows(tmp_path / "pages.parquet")
    jsonl = [json.loads(line) for line in (tmp_path / "pages.jsonl").read_text().splitlines()]
    assert rows == jsonl
    assert sorted(r["url"] for r in rows) == sorted(kept)
    from common.archive import content_hash, read_response, target_uri
    from common.messages import RecordPointer

    # with s3: a store on an empty spool, so every record comes from the bucket
    blobs = make_blobs(settings, "check",
                       root=None if config is None else str(tmp_path / "check-spool"))
    try:
        for row in rows:
            state = kept[row["url"]]
            pointer = RecordPointer(row["warcFilename"], row["warcOffset"], row["warcLength"])
            assert pointer == state.record
            assert row["contentHash"] == state.content_hash
            response = read_response(blobs, pointer)
            assert response.record_type == "response"
            assert response.url == target_uri(row["url"])
            assert content_hash(response.body) == row["contentHash"]
            assert row["text"] == texts[target_uri(row["url"])]
    finally:
        blobs.close()

    entries = check_wacz(tmp_path / "crawl.wacz", set(kept))
    assert all(e["text"] == texts[target_uri(e["url"])] for e in entries)
    run_wacz_validate(tmp_path / "crawl.wacz")
