"""The outputs LLM-data and search users take away, end to end on real documentation
(embedded mode): five HTML pages and one PDF as Debian's documentation packages ship
them (tests/data/realdocs, with their sources and licences), served by the simulated
web on three hosts.

For every page: a Markdown record beside its text record, pointing at the response
record (id and payload digest), with the page's section headings as Markdown headings
(and no permalink symbols), its code blocks fenced with their code inside, its tables
as Markdown tables; for the PDF its text and page count as pypdf reads them; the
example extraction hook's fields in ``pages.jsonl``; and the export (JSON Lines with
Markdown, Parquet, WACZ) holding exactly the kept pages.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from selectolax.lexbor import LexborHTMLParser

from common.adapters.local_blobs import LocalBlobStore
from common.runtime import blob_root
from crawler import cli
from simweb import Page, SimWeb
from tests.e2e.crawl_support import absolute, host, run, scenario
from tests.export_checks import (
    check_rows,
    check_wacz,
    kept_records,
    parquet_rows,
    record_text,
    run_wacz_validate,
)

DOCS = Path(__file__).resolve().parents[1] / "data" / "realdocs"
SITES = {
    "pydoc.test": ("pydoc", ("/library/json.html", "/tutorial/controlflow.html")),
    "pgdoc.test": ("pgdoc", ("/tutorial-join.html", "/datatype-numeric.html")),
    "djangodoc.test": ("djangodoc", ("/topics/http/urls.html",)),
}
PDF_HOST, PDF_PATH = "specs.test", "/shared-mime-info-spec.pdf"
PDF_FILE = DOCS / "mime" / "shared-mime-info-spec.pdf"
PERMALINK = re.compile(r"\[[¶§#]\]\(")


def _site(name: str, folder: str, paths: tuple[str, ...]) -> Any:
    index = "".join(f'<li><a href="{p}">{p}</a></li>' for p in paths)
    pages = [Page(path="/", body=f"<html><body><h1>{name}</h1><ul>{index}</ul></body></html>")]
    pages += [Page(path=p, body=(DOCS / folder / p.lstrip("/")).read_text("utf-8"))
              for p in paths]
    return host(name, *pages)


def _scenario() -> Any:
    specs = host(PDF_HOST,
                 Page(path="/", body=f'<html><body><a href="{PDF_PATH}">spec</a></body></html>'),
                 Page(path=PDF_PATH, body=PDF_FILE.read_bytes().decode("latin-1"),
                      encoding="latin-1", content_type="application/pdf"))
    return scenario(*(_site(n, f, p) for n, (f, p) in SITES.items()), specs,
                    name="real-docs")


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _fences(markdown: str) -> list[str]:
    """The contents of the fenced code blocks."""
    return [m.group(1) for m in re.finditer(r"^```[^\n]*\n(.*?)^```$", markdown, re.S | re.M)]


def _outside_fences(markdown: str) -> str:
    return re.sub(r"^```[^\n]*\n.*?^```$", "", markdown, flags=re.S | re.M)


def _check_markdown(url: str, html: str, markdown: str) -> None:
    """The page's structure, as far as its main content keeps it, in its Markdown."""
    assert PERMALINK.search(markdown) is None, url
    prose = _outside_fences(markdown)
    headings = {_words(line.lstrip("#")) for line in prose.splitlines()
                if re.match(r"#{1,6} ", line)}
    doc = LexborHTMLParser(html)
    inner = [_words(h.text(deep=True)) for h in doc.css("h2, h3")]
    # the section headings of the body (the extractor may leave a title bar out)
    kept = [h for h in inner if h in headings]
    assert len(kept) >= max(1, len(inner) // 2), (url, inner, headings)
    blocks = [_words(p.text(deep=True)) for p in doc.css("pre")]
    fences = [_words(f) for f in _fences(markdown)]
    if blocks:
        assert fences, url
        # every fence holds a block of the page, word for word
        assert all(any(f and f in b for b in blocks) for f in fences if f), url
        assert sum(1 for b in blocks if any(b and b in f for f in fences)) >= len(blocks) // 2
    if doc.css_first("table td") is not None:
        assert re.search(r"^\| --- \|", prose, re.M), url
    assert re.search(r"\]\(http://", prose), url  # links kept, made absolute


@pytest.mark.timeout(180)
async def test_outputs_on_real_documentation(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    pypdf = pytest.importorskip("pypdf")
    async with SimWeb(_scenario(), dns=True) as web:
        seeds = [f"{n}/" for n in (*SITES, PDF_HOST)]
        out = await run(
            web, tmp_path / "crawl", seeds,
            traps={"max_depth": 1},  # the pages, not the rest of each manual
            politeness={"default_delay": 0.05},
            fetcher={"allowed_content_types": ("text/html", "application/pdf")},
            parser={"hook": "examples.hooks:title_and_description"})
        urls = {n: [absolute(web, n + p) for p in paths] for n, (_, paths) in SITES.items()}
        pdf_url = absolute(web, PDF_HOST + PDF_PATH)

    records = {r["url"]: r for r in out.pages()}
    blobs = LocalBlobStore(str(blob_root(out.settings)), writer_id="check")
    root = blob_root(out.settings)
    responses = {r.uri: r for r in out.warc() if r.type == "response"}
    markdowns = out.texts("text/markdown")
    md_headers = _markdown_headers(root)

    for name, (folder, paths) in SITES.items():
        for url, path in zip(urls[name], paths, strict=True):
            rec = records[url]
            assert rec["status"] == 200 and rec["textKey"] and rec["markdownKey"], url
            markdown = record_text(blobs, rec["markdownKey"])
            assert markdown == markdowns[url]
            html = (DOCS / folder / path.lstrip("/")).read_text("utf-8")
            _check_markdown(url, html, markdown)
            # provenance: the response record it was made from, by id and digest
            headers = md_headers[url]
            response = responses[url].headers
            assert headers["WARC-Refers-To"] == response["WARC-Record-ID"]
            assert headers["WARC-Refers-To-Payload-Digest"] == response["WARC-Payload-Digest"]
            assert headers["WARC-Target-URI"] == url
            # the hook's fields: the page's <title>
            title = LexborHTMLParser(html).css_first("title")
            assert title is not None
            assert rec["extra"]["title"] == " ".join(title.text().split())[:1000], url
            assert rec["language"] == "en" and rec["documentPages"] is None

    # the PDF: its text and page count as pypdf reads the file, with Markdown too
    reader = pypdf.PdfReader(io.BytesIO(PDF_FILE.read_bytes()))
    rec = records[pdf_url]
    assert rec["status"] == 200 and rec["documentPages"] == len(reader.pages) > 1
    assert rec["extra"]["pages"] == len(reader.pages)
    text = record_text(blobs, rec["textKey"])
    first = _words(reader.pages[0].extract_text())
    assert first and first[:200] in _words(text)
    # the same words, escaped for Markdown
    unescaped = re.sub(r"\\(.)", r"\1", record_text(blobs, rec["markdownKey"]))
    assert _words(unescaped) == _words(text)
    assert rec["language"] == "en" and rec["textWords"] > 1000

    # the export holds exactly the kept pages, with their Markdown
    kept = kept_records(out.pages())
    assert set(kept) >= {pdf_url, *(u for us in urls.values() for u in us)}

    def export(fmt: str, to: Path, *more: str) -> None:
        code = cli.main(["export", "--out", str(tmp_path / "crawl"), "--format", fmt,
                         "--to", str(to), *more])
        assert code == 0, capsys.readouterr().err

    export("jsonl", tmp_path / "pages.jsonl")
    export("jsonl", tmp_path / "md.jsonl", "--content", "markdown")
    export("parquet", tmp_path / "pages.parquet")
    export("wacz", tmp_path / "crawl.wacz", "--content", "markdown")
    rows = [json.loads(line) for line in (tmp_path / "pages.jsonl").read_text().splitlines()]
    check_rows(rows, out.pages(), blobs)
    assert parquet_rows(tmp_path / "pages.parquet") == rows
    for row in (json.loads(line) for line in (tmp_path / "md.jsonl").read_text().splitlines()):
        assert row["markdown"] == record_text(blobs, kept[row["url"]]["markdownKey"])
        assert row["extra"] == kept[row["url"]].get("extra")
    check_wacz(tmp_path / "crawl.wacz", set(kept))
    run_wacz_validate(tmp_path / "crawl.wacz")


def _markdown_headers(root: Path) -> dict[str, dict[str, str]]:
    """WARC headers of the Markdown records, by target URI."""
    from warcio.archiveiterator import ArchiveIterator

    found: dict[str, dict[str, str]] = {}
    for path in sorted(root.glob("*-text-*.warc.gz")):
        with path.open("rb") as fh:
            for rec in ArchiveIterator(fh):
                if (rec.rec_headers.get_header("Content-Type") or "").startswith(
                        "text/markdown"):
                    headers = dict(rec.rec_headers.headers)
                    found[headers["WARC-Target-URI"]] = headers
    return found
