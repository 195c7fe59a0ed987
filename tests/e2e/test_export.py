"""crawler export end to end: the simulated web crawled in embedded mode, then exported
to JSON Lines, Parquet and WACZ through the command line and read back with pyarrow,
DuckDB (when installed), warcio and the WACZ rules (and ``wacz validate`` when
installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.adapters.local_blobs import LocalBlobStore
from common.runtime import blob_root
from crawler import cli
from simweb import Page, SimWeb
from tests.e2e.crawl_support import host, run, scenario
from tests.export_checks import (
    check_rows,
    check_wacz,
    duckdb_count,
    kept_records,
    parquet_rows,
    record_text,
    run_wacz_validate,
)


@pytest.mark.timeout(120)
async def test_export_jsonl_parquet_and_wacz(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    paths = [f"/p{i}" for i in range(8)]
    site = host("export.test",
                Page(path="/", words=80, links=(*paths, "/copy", "/near", "/gone")),
                *(Page(path=p, words=150 + 11 * i) for i, p in enumerate(paths)),
                Page(path="/copy", same_as="/p1"),
                Page(path="/near", near_duplicate_of="/p2"),
                Page(path="/gone", status=404))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path / "crawl", ["export.test/"])
    records = out.pages()
    kept = kept_records(records)
    assert len(records) > len(kept) >= 9  # the copies were recorded, and are left out
    assert out.stats.kept == len(kept)

    def export(fmt: str, to: Path, *more: str) -> str:
        code = cli.main(["export", "--out", str(tmp_path / "crawl"), "--format", fmt,
                         "--to", str(to), *more])
        err = capsys.readouterr().err
        assert code == 0, err
        return err

    said = export("jsonl", tmp_path / "pages.jsonl")
    assert f"{len(kept)} rows from {len(records)} page records" in said
    said = export("parquet", tmp_path / "pages.parquet")
    export("wacz", tmp_path / "crawl.wacz", "--content", "text")

    blobs = LocalBlobStore(str(blob_root(out.settings)), writer_id="check")
    jsonl = [json.loads(line) for line in (tmp_path / "pages.jsonl").read_text().splitlines()]
    check_rows(jsonl, records, blobs)
    parquet = parquet_rows(tmp_path / "pages.parquet")
    check_rows(parquet, records, blobs)
    assert parquet == jsonl
    count = duckdb_count(tmp_path / "pages.parquet")
    assert count == len(kept)

    entries = check_wacz(tmp_path / "crawl.wacz", set(kept))
    texts = {r["url"]: r["text"] for r in jsonl}
    assert all(e["text"] == texts[e["url"]] for e in entries)
    run_wacz_validate(tmp_path / "crawl.wacz")

    # no text asked for: the WACZ's pages carry none
    export("wacz", tmp_path / "plain.wacz")
    assert all("text" not in e for e in check_wacz(tmp_path / "plain.wacz", set(kept)))

    # Markdown (written by default): each row's is its page's Markdown record
    said = export("jsonl", tmp_path / "md.jsonl", "--content", "markdown")
    assert "no page record has a markdownKey" not in said
    md = [json.loads(line) for line in (tmp_path / "md.jsonl").read_text().splitlines()]
    assert len(md) == len(kept)
    for row in md:
        key = kept[row["url"]]["markdownKey"]
        assert row["markdown"] == record_text(blobs, key) != "", row["url"]
        assert "text" not in row

    # Markdown asked for from a crawl that wrote none: said, and the column is empty
    async with SimWeb(scenario(site), dns=True) as web:
        await run(web, tmp_path / "plain-crawl", ["export.test/"], parser={"markdown": False})
    code = cli.main(["export", "--out", str(tmp_path / "plain-crawl"), "--format", "jsonl",
                     "--to", str(tmp_path / "none.jsonl"), "--content", "markdown"])
    assert code == 0
    assert "no page record has a markdownKey" in capsys.readouterr().err
    md = [json.loads(line) for line in (tmp_path / "none.jsonl").read_text().splitlines()]
    assert len(md) == len(kept) and all(r["markdown"] is None for r in md)

    # duplicates on request
    export("jsonl", tmp_path / "all.jsonl", "--include-duplicates")
    everything = (tmp_path / "all.jsonl").read_text().splitlines()
    assert len(everything) == len({r["url"] for r in records}) > len(kept)
