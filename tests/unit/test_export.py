"""crawler export's pure parts and sinks: which records become rows, what a row holds,
the Parquet and JSON Lines files, the CDXJ of a WARC file, the sorted index and the
WACZ manifest."""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from common.adapters.local_blobs import LocalBlobStore
from common.archive import ArchiveWriter, TextFields, read_response
from common.messages import RecordPointer
from crawler import cli
from crawler.export import (
    JsonlSink,
    ParquetSink,
    Report,
    Request,
    SourcePage,
    build_row,
    check_request,
    columns,
    conversion_payload,
    latest_mask,
    parse_time,
    selected_pages,
    url_hash,
)
from crawler.wacz import LineSorter, datapackage, digest_file, index_lines, page_line


def record(url: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "v": 1, "url": url, "fetchedAt": "2024-05-01T12:00:00.123456Z", "status": 200,
        "contentHash": "sha256:" + "0" * 64, "simhash": "00000000000000ff",
        "storageKey": {"file": "crawl-a-warc-00000.warc.gz", "offset": 10, "length": 20},
        "textKey": {"file": "crawl-a-text-00000.warc.gz", "offset": 5, "length": 7},
        "duplicateOf": None, "nearDuplicateOf": None, "language": "en",
        "languageConfidence": 0.9, "textChars": 100, "textWords": 20,
        "boilerplateRatio": 0.5}
    base.update(fields)
    return base


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n"
                            for x in lines))
    return path


def selected(path: Path, **kw: Any) -> tuple[list[SourcePage], Report]:
    report = Report()
    pages = list(selected_pages(path, include_duplicates=kw.get("dups", False),
                                report=report))
    return pages, report


def test_latest_mask_keeps_the_last_readable_record_of_each_url() -> None:
    hashes = np.array([1, 2, 1, 3, 2, 9], dtype=np.uint64)
    valid = np.array([True, True, True, True, True, False])
    assert latest_mask(hashes, valid).tolist() == [False, False, True, True, True, False]
    assert latest_mask(hashes[:0], valid[:0]).tolist() == []


def test_url_hash_is_stable_and_64_bit() -> None:
    assert url_hash("http://a.test/") == url_hash("http://a.test/")
    assert url_hash("http://a.test/") != url_hash("http://a.test/x")
    assert 0 <= url_hash("http://a.test/") < 2**64


def test_selected_pages_last_record_wins_and_duplicates_stay_out(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "pages.jsonl", [
        record("http://a.test/", textChars=1),
        record("http://b.test/", duplicateOf="http://a.test/"),
        record("http://c.test/", nearDuplicateOf="http://a.test/"),
        '{"v":1,"url":"http://torn.test/","fetch',  # a torn line of a crash
        "",
        record("http://a.test/", textChars=2),  # refreshed: this one counts
        record("http://d.test/", duplicateOf="http://a.test/"),
        record("http://d.test/"),  # changed since: kept now
    ])
    pages, report = selected(path)
    assert [(p.url, p.text_chars) for p in pages] == [("http://a.test/", 2),
                                                      ("http://d.test/", 100)]
    assert (report.records, report.superseded, report.duplicates, report.unreadable) == (
        6, 2, 2, 1)
    with_dups, _ = selected(path, dups=True)
    assert [p.url for p in with_dups] == ["http://b.test/", "http://c.test/",
                                         "http://a.test/", "http://d.test/"]


def test_records_of_other_versions_are_read(tmp_path: Path) -> None:
    """Older records lack text signals; newer ones carry markdownKey, extra and
    documentPages, and fields this version does not know."""
    old = {"v": 1, "url": "http://old.test/", "fetchedAt": "2024-01-01T00:00:00Z",
           "status": 200, "contentHash": None, "simhash": None, "storageKey": None,
           "textKey": None}
    new = record("http://new.test/", markdownKey={"file": "m.warc.gz", "offset": 0,
                                                  "length": 9},
                 extra={"price": 3, "tags": ["a"]}, documentPages=12, somethingElse=1)
    pages, report = selected(write_lines(tmp_path / "p.jsonl", [old, new]))
    assert report.unreadable == 0
    assert pages[0].language is None and pages[0].extra is None
    assert pages[1].markdown_key == RecordPointer("m.warc.gz", 0, 9)
    assert pages[1].extra == {"price": 3, "tags": ["a"]}
    assert pages[1].document_pages == 12


def test_build_row_holds_every_column() -> None:
    page = SourcePage(url="http://News.test:8080/a", fetched_at="2024-05-01T12:00:00Z",
                      status=200, content_hash="sha256:x", simhash="00ff",
                      storage_key=RecordPointer("w.warc.gz", 3, 44),
                      language="de", language_confidence=0.5, text_chars=5, text_words=1,
                      boilerplate_ratio=0.25, extra={"k": "v"}, document_pages=2)
    row = build_row(page, "text", "Hallo")
    assert list(row) == columns("text")
    assert row["host"] == "news.test:8080"
    assert (row["warcFilename"], row["warcOffset"], row["warcLength"]) == ("w.warc.gz", 3,
                                                                          44)
    assert row["text"] == "Hallo" and row["extra"] == {"k": "v"}
    assert row["documentPages"] == 2
    md = build_row(SourcePage(url="http://a.test/"), "markdown", None)
    assert "markdown" in md and "text" not in md
    assert md["warcFilename"] is None and md["extra"] is None and md["fetchedAt"] is None


def test_parse_time() -> None:
    when = parse_time("2024-05-01T12:00:00.123456Z")
    assert when is not None and when.microsecond == 123456 and when.utcoffset() is not None
    assert parse_time("yesterday") is None and parse_time(None) is None


def rows(n: int) -> list[dict[str, Any]]:
    return [build_row(SourcePage(url=f"http://a.test/{i}", status=200,
                                 fetched_at="2024-05-01T12:00:00Z",
                                 extra={"i": i} if i % 2 else None),
                      "text", f"text {i}") for i in range(n)]


def test_parquet_sink_writes_row_groups_pyarrow_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "x.parquet"
    with out.open("wb") as fh:
        sink = ParquetSink(fh, "text", group_rows=4)
        for row in rows(10):
            sink.write(row)
        sink.close()
    meta = pq.ParquetFile(out).metadata
    assert (meta.num_rows, meta.num_row_groups) == (10, 3)
    table = pq.read_table(out)
    assert table.column_names == columns("text")
    got = table.to_pylist()
    assert got[3]["text"] == "text 3" and json.loads(got[3]["extra"]) == {"i": 3}
    assert got[2]["extra"] is None
    assert got[0]["fetchedAt"].isoformat() == "2024-05-01T12:00:00+00:00"


def test_parquet_sink_bounds_a_row_group_by_bytes(tmp_path: Path) -> None:
    out = tmp_path / "x.parquet"
    with out.open("wb") as fh:
        sink = ParquetSink(fh, "text", group_rows=1000, group_bytes=500)
        for row in rows(10):
            sink.write(row)
        sink.close()
    assert pq.ParquetFile(out).metadata.num_row_groups >= 3


def test_jsonl_sink(tmp_path: Path) -> None:
    buf = io.BytesIO()
    sink = JsonlSink(buf)
    for row in rows(3):
        sink.write(row)
    sink.close()
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [r["url"] for r in lines] == [f"http://a.test/{i}" for i in range(3)]
    assert lines[1]["extra"] == {"i": 1} and list(lines[0]) == columns("text")


def test_parquet_without_pyarrow_says_how_to_install(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    req = Request(format="parquet", to=tmp_path / "x.parquet")
    assert "pip install 'crawler[export]'" in (check_request(req) or "")
    code = cli.main(["export", "--out", str(tmp_path), "--format", "parquet",
                     "--to", str(tmp_path / "x.parquet")])
    assert code == 2
    assert "pip install 'crawler[export]'" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_check_request_refuses_what_cannot_be_written(tmp_path: Path) -> None:
    assert "must end in .wacz" in (check_request(Request("wacz", tmp_path / "x.zip")) or "")
    assert "is a folder" in (check_request(Request("jsonl", tmp_path)) or "")
    assert "does not exist" in (check_request(Request("jsonl", tmp_path / "no" / "x"))
                                or "")
    assert check_request(Request("jsonl", tmp_path / "x.jsonl")) is None


def test_export_of_a_folder_without_page_records_fails_clearly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["export", "--out", str(tmp_path / "none"), "--format", "jsonl",
                     "--to", str(tmp_path / "x.jsonl")])
    assert code == 1
    assert "WARC folder" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()  # nothing created on the way
    (tmp_path / "empty" / "warc").mkdir(parents=True)
    code = cli.main(["export", "--out", str(tmp_path / "empty"), "--format", "jsonl",
                     "--to", str(tmp_path / "x.jsonl")])
    assert code == 1
    assert "no page records" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]  # no temporary file left


def test_line_sorter_sorts_across_spilled_runs() -> None:
    lines = [f"com,test,{i % 97})/{i} 2024 {{}}" for i in range(1000)] + ["é x", "Z y"]
    sorter = LineSorter(run_lines=64)
    for line in lines:
        sorter.add(line)
    try:
        merged = list(sorter.merged())
    finally:
        sorter.close()
    assert len(sorter.runs) == 0 and len(merged) == len(lines)
    assert merged == sorted(lines, key=lambda s: s.encode("utf-8"))  # LC_ALL=C order


def written_archive(tmp_path: Path) -> tuple[LocalBlobStore, list[RecordPointer], Any]:
    blobs = LocalBlobStore(str(tmp_path), writer_id="t")
    writer = ArchiveWriter(blobs, software="test")
    pointers = []
    for i in range(3):
        w = writer.write_exchange(
            url=f"http://a.test/{i}", method="GET", request_headers=[], status=200,
            reason="OK", response_headers=[("Content-Type", "text/html; charset=utf-8")],
            body=f"<p>page {i}</p>".encode(), fetched_at=1_700_000_000 + i, ip="127.0.0.1",
            metadata={"note": "x"})
        pointers.append(w.pointer)
    first = pointers[0]
    original = read_response(blobs, first)
    pointers.append(writer.write_revisit(
        url="http://a.test/copy", fetched_at=1_700_000_100, status=200, reason="OK",
        response_headers=[], refers_to_url="http://a.test/0",
        refers_to_date=original.warc_date, refers_to_record_id=original.record_id,
        profile="identical-payload-digest", payload_digest=original.payload_digest).pointer)
    text = writer.write_text(url="http://a.test/0", text="page 0 ünïcode",
                             fetched_at=1_700_000_000, refers_to_record_id=original.record_id,
                             signals=TextFields(language="en", language_confidence=1.0,
                                                chars=6, words=2, boilerplate_ratio=0.1))
    blobs.flush()
    return blobs, pointers, text


def test_index_lines_point_at_the_response_and_revisit_records(tmp_path: Path) -> None:
    blobs, pointers, text = written_archive(tmp_path)
    name = pointers[0].file
    lines: list[str] = []
    with (tmp_path / name).open("rb") as fh:
        assert index_lines(fh, name, lines.append) is None
    found = [json.loads(line.split(" ", 2)[2]) for line in lines]
    assert [RecordPointer(f["filename"], int(f["offset"]), int(f["length"]))
            for f in found] == pointers
    assert [f["mime"] for f in found] == ["text/html"] * 3 + ["warc/revisit"]
    # the crawl's own index says the same
    crawl_index = (tmp_path / "index.cdxj").read_text().splitlines()
    assert sorted(crawl_index) == sorted(lines)
    assert conversion_payload(blobs.read(text.pointer)) == "page 0 ünïcode"


def test_index_lines_leave_out_a_torn_record(tmp_path: Path) -> None:
    _, pointers, _ = written_archive(tmp_path)
    data = (tmp_path / pointers[0].file).read_bytes()
    cut = pointers[2].offset + pointers[2].length // 2
    lines: list[str] = []
    index_lines(io.BytesIO(data[:cut]), pointers[0].file, lines.append)
    assert len(lines) == 2  # the torn third response gets no line


def test_conversion_payload_refuses_bytes_that_are_no_record() -> None:
    with pytest.raises(ValueError, match="archive format"):
        conversion_payload(b"not a warc record")


def test_wacz_page_line_and_manifest() -> None:
    page = SourcePage(url="http://a.test/", fetched_at="2024-05-01T12:00:00Z")
    line = page_line(page, None)
    assert line["url"] == "http://a.test/" and line["ts"] == "2024-05-01T12:00:00Z"
    assert "text" not in line and line["id"] == page_line(page, "t")["id"]
    assert page_line(page, "t")["text"] == "t"
    from crawler.wacz import Resource

    package = datapackage([Resource("archive/A.warc.gz", "ab" * 32, 5)],
                          created="2024-05-01T12:00:00Z", software="crawler",
                          main_page=("http://a.test/", "2024-05-01T12:00:00Z"))
    parsed = json.loads(package)
    assert parsed["profile"] == "data-package" and parsed["wacz_version"] == "1.1.1"
    assert parsed["resources"] == [{"name": "a.warc.gz", "path": "archive/A.warc.gz",
                                    "hash": "sha256:" + "ab" * 32, "bytes": 5}]
    assert parsed["mainPageUrl"] == "http://a.test/"
    assert json.loads(digest_file(package)) == {
        "path": "datapackage.json",
        "hash": "sha256:" + hashlib.sha256(package).hexdigest()}
