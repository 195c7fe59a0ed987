"""Checks of what ``crawler export`` wrote, shared by the end-to-end and cluster tests.

They read the outputs with other readers than the exporter's own (pyarrow, DuckDB,
warcio on the bytes inside the ZIP) and hold them to the crawl's records:
one row per kept page, its text equal to its text record, its pointer reading its
response, and a WACZ that follows the WACZ 1.1.1 rules (the reference validator,
``wacz validate``, runs too: scripts/test installs it in ``.cache/wacz``; a missing
one skips only that step, and fails it under ``CI=true``: :func:`wacz_validator`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from common.archive import cdx_timestamp, content_hash, read_response, target_uri
from common.messages import RecordPointer
from common.ports import BlobStore
from tests.conftest import in_ci, unavailable

ROOT = Path(__file__).resolve().parents[1]
PAGES_HEADER = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}


def kept_records(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last record of each URL that names no duplicate, by URL."""
    last: dict[str, dict[str, Any]] = {}
    for rec in lines:
        last[rec["url"]] = rec
    return {u: r for u, r in last.items()
            if not r.get("duplicateOf") and not r.get("nearDuplicateOf")}


def record_text(blobs: BlobStore, pointer: dict[str, Any]) -> str:
    """The payload of the text record at ``pointer``, read with warcio."""
    data = blobs.read(RecordPointer(pointer["file"], pointer["offset"], pointer["length"]))
    rec = next(iter(ArchiveIterator(io.BytesIO(data))))
    assert rec.rec_type == "conversion"
    return bytes(rec.content_stream().read()).decode("utf-8")


def check_rows(rows: list[dict[str, Any]], records: list[dict[str, Any]],
               blobs: BlobStore) -> None:
    """Rows are the kept pages, each with its record's fields, its text record's text,
    and a pointer that reads its response record."""
    kept = kept_records(records)
    assert len(rows) == len(kept) > 0
    assert sorted(r["url"] for r in rows) == sorted(kept)
    for row in rows:
        rec = kept[row["url"]]
        for name in ("status", "contentHash", "simhash", "language", "textChars",
                     "textWords"):
            assert row[name] == rec.get(name), (name, row["url"])
        if rec.get("textKey"):
            assert row["text"] == record_text(blobs, rec["textKey"]), row["url"]
        else:
            assert row["text"] is None
        key = rec["storageKey"]
        assert (row["warcFilename"], row["warcOffset"], row["warcLength"]) == (
            key["file"], key["offset"], key["length"])
        response = read_response(blobs, RecordPointer(row["warcFilename"], row["warcOffset"],
                                                      row["warcLength"]))
        assert response.record_type == "response"
        assert response.url == target_uri(row["url"])
        assert content_hash(response.body) == row["contentHash"]


def parquet_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of an exported Parquet file as the JSON Lines export has them."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    for row in rows:
        when = row["fetchedAt"]
        row["fetchedAt"] = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if when else None
        row["extra"] = json.loads(row["extra"]) if row["extra"] is not None else None
    return rows


def duckdb_count(path: Path) -> int:
    """Rows DuckDB reads from the Parquet file."""
    import duckdb

    relation = duckdb.sql(f"SELECT count(*) FROM read_parquet('{path}')")
    assert relation is not None
    return int(relation.fetchall()[0][0])


def wacz_validator() -> str | None:
    """The reference validator's command (``pip install wacz``; it brings heavy
    dependencies, so it may live in a venv of its own): ``CRAWLER_TEST_WACZ``, else
    ``wacz`` on the PATH, else ``.cache/wacz/bin/wacz`` in the checkout."""
    named = os.environ.get("CRAWLER_TEST_WACZ", "").strip()
    if named:
        return named
    found = shutil.which("wacz")
    if found:
        return found
    local = ROOT / ".cache" / "wacz" / "bin" / "wacz"
    return str(local) if local.exists() else None


def run_wacz_validate(path: Path) -> bool:
    """Run ``wacz validate`` on ``path`` when installed (True: it ran, and passed)."""
    command = wacz_validator()
    if command is None:
        if in_ci():
            unavailable("the WACZ reference validator (wacz) is not installed; "
                        "scripts/test installs it in .cache/wacz")
        return False
    done = subprocess.run([command, "validate", "-f", str(path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Validation succeeded" in done.stdout, done.stdout[-3000:]
    return True


def check_wacz(path: Path, kept_urls: set[str]) -> list[dict[str, Any]]:
    """The WACZ 1.1.1 rules, checked here; returns the page entries."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        assert len(names) == len(set(names))
        fixed = {"datapackage.json", "datapackage-digest.json", "indexes/index.cdxj",
                 "pages/pages.jsonl"}
        assert fixed <= set(names), names
        archives = [n for n in names if n.startswith("archive/")]
        assert archives and all(n.endswith(".warc.gz") for n in archives)
        assert set(names) == fixed | set(archives)
        for name in archives:  # already compressed: stored as they are
            assert z.getinfo(name).compress_type == zipfile.ZIP_STORED, name
        package = json.loads(z.read("datapackage.json"))
        assert package["profile"] == "data-package" and package["wacz_version"] == "1.1.1"
        datetime.fromisoformat(package["created"].replace("Z", "+00:00"))
        listed = {r["path"]: r for r in package["resources"]}
        assert set(listed) == set(names) - {"datapackage.json", "datapackage-digest.json"}
        data = {name: z.read(name) for name in listed}
        for name, resource in listed.items():
            assert resource["bytes"] == len(data[name]), name
            assert resource["hash"] == "sha256:" + hashlib.sha256(data[name]).hexdigest()
            assert resource["name"] == Path(name).name.lower()
        digest = json.loads(z.read("datapackage-digest.json"))
        assert digest == {"path": "datapackage.json", "hash": "sha256:" + hashlib.sha256(
            z.read("datapackage.json")).hexdigest()}

    # the index: sorted as LC_ALL=C sort sorts, each line naming a real record
    lines = data["indexes/index.cdxj"].decode("utf-8").splitlines()
    assert lines and lines == sorted(lines, key=lambda s: s.encode("utf-8"))
    responses = 0
    for line in lines:
        _surt, stamp, block = line.split(" ", 2)
        fields = json.loads(block)
        member = data["archive/" + fields["filename"]]
        start, length = int(fields["offset"]), int(fields["length"])
        rec = next(iter(ArchiveIterator(io.BytesIO(member[start:start + length]))))
        assert rec.rec_type in ("response", "revisit")
        assert rec.rec_headers.get_header("WARC-Target-URI") == fields["url"]
        assert cdx_timestamp(rec.rec_headers.get_header("WARC-Date")) == stamp
        responses += rec.rec_type == "response"
    in_archive = 0
    for name in archives:
        for rec in ArchiveIterator(io.BytesIO(data[name])):
            in_archive += rec.rec_type in ("response", "revisit")
    assert len(lines) == in_archive  # every response and revisit record is indexed

    pages = data["pages/pages.jsonl"].decode("utf-8").splitlines()
    assert json.loads(pages[0]) == PAGES_HEADER
    entries = [json.loads(line) for line in pages[1:]]
    assert {e["url"] for e in entries} == kept_urls and len(entries) == len(kept_urls)
    for entry in entries:
        datetime.fromisoformat(entry["ts"].replace("Z", "+00:00"))  # RFC 3339
    indexed = {json.loads(line.split(" ", 2)[2])["url"] for line in lines}
    assert {target_uri(u) for u in kept_urls} <= indexed  # every page can be replayed
    assert responses >= len(kept_urls)
    return entries
