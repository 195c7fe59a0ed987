"""PDFs and the extraction hook, end to end on the simulated web (embedded mode).

One crawl of three hosts side by side:

- ``docs.test``: HTML pages and two text PDFs. A PDF's text is stored like a page's
  main text (a conversion record, the text signals, a SimHash) and its page record
  has ``documentPages``; the hook's fields reach ``pages.jsonl`` as ``extra``, and the
  pages whose hook raises, sleeps, spins or answers badly are stored without it.
- ``hostile.test``: hostile PDFs (a decompression bomb, a looping file, deep nesting,
  2,000 pages, garbage, one that keeps the reader busy past the page job's limit).
  Each ends as a recorded outcome, and the page linked after them is crawled.
- ``ordinary.test``: an ordinary host whose pages keep their politeness pace all along.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from common.messages import Reason, UrlStatus
from crawler.embedded import EmbeddedCrawler
from simweb import Page, SimWeb
from tests.e2e.crawl_support import (
    Outcome,
    absolute,
    host,
    key,
    read_state,
    scenario,
    settings_for,
)
from tests.pdf_support import (
    bomb_pdf,
    garbage_pdf,
    looping_pdf,
    many_pages_pdf,
    nested_pdf,
    page_text,
    slow_pdf,
    text_pdf,
)

ORDINARY_PAGES = 20
DELAY = 0.2
MAX_GAP = 3.0
JOB_TIMEOUT = 8.0  # the slow PDF's limit: longer than any other page here takes


def _pdf(path: str, data: bytes) -> Page:
    return Page(path=path, body=data.decode("latin-1"), encoding="latin-1",
                content_type="application/pdf")


def _html(path: str, title: str, description: str) -> Page:
    text = " ".join(page_text(7, 120))
    return Page(path=path, body=(f"<html><head><title>{title}</title>"
                                 f'<meta name="description" content="{description}">'
                                 f"</head><body><article><p>{text}</p></article>"
                                 f'<a href="/end">end</a></body></html>'))


HOOK_PAGES = ("/raise", "/slow", "/spin", "/notdict", "/big")
HOSTILE = {
    "/bomb.pdf": (bomb_pdf(4 * 1024**3), Reason.PARSE_ERROR),
    "/looping.pdf": (looping_pdf(), Reason.PARSE_ERROR),
    "/garbage.pdf": (garbage_pdf(), Reason.PARSE_ERROR),
    "/slow.pdf": (slow_pdf(), Reason.PARSE_TIMEOUT),
    "/nested.pdf": (nested_pdf(100_000), None),
    "/many.pdf": (many_pages_pdf(2_000), None),
}


def _scenario() -> Any:
    docs = host(
        "docs.test",
        Page(path="/", links=("/about", "/report.pdf", "/guide.pdf", *HOOK_PAGES), words=40),
        _html("/about", "About us", "Who we are."),
        *(Page(path=path, words=150) for path in HOOK_PAGES),
        _pdf("/report.pdf", text_pdf(pages=3, words=200, title="Annual report")),
        _pdf("/guide.pdf", text_pdf(lines=[[f"guide line {i} of the manual"]
                                           for i in range(4)])),
        Page(path="/end", words=30))
    hostile = host(
        "hostile.test",
        Page(path="/", links=(*HOSTILE, "/after"), words=20),
        *(_pdf(path, data) for path, (data, _) in HOSTILE.items()),
        Page(path="/after", words=20))
    ordinary = host(
        "ordinary.test",
        Page(path="/", links=tuple(f"/p{i}" for i in range(ORDINARY_PAGES)), words=50),
        *(Page(path=f"/p{i}", words=80) for i in range(ORDINARY_PAGES)))
    return scenario(docs, hostile, ordinary, name="pdf-and-hook")


@pytest.mark.timeout(300)
async def test_pdfs_hostile_pdfs_and_the_hook(tmp_path: Path) -> None:
    async with SimWeb(_scenario(), dns=True) as web:
        settings = settings_for(
            web, tmp_path, politeness={"default_delay": DELAY},
            fetcher={"allowed_content_types": ("text/html", "application/pdf")},
            crawl={"page_processes": 1, "parse_processes": 1,
                   "page_job_timeout": JOB_TIMEOUT},
            parser={"pdf_max_pages": 100, "hook": "tests.hook_support:by_path",
                    "hook_timeout": 1.0})
        crawler = EmbeddedCrawler(settings)
        started = time.monotonic()
        await crawler.start()
        try:
            await crawler.frontier.seed([absolute(web, f"{name}/") for name in
                                         ("docs.test", "hostile.test", "ordinary.test")])
            await crawler.wait()
            took = time.monotonic() - started
            stats = await crawler.stats()
        finally:
            await crawler.close()
        ordinary_gaps = web.log.gaps("ordinary.test", exclude_paths=())
        rows, hosts = await read_state(settings)
    outcome = Outcome(stats=stats, rows=rows, hosts=hosts, settings=settings)
    records = {r["url"]: r for r in outcome.pages()}
    texts = outcome.texts()

    # a text PDF: its text stored with the signals, its page count, the hook's fields
    report = records[key(web, "docs.test/report.pdf")]
    assert report["documentPages"] == 3
    assert report["textKey"] is not None and report["simhash"] is not None
    assert report["textWords"] == 600 and report["textChars"] > 3_000
    assert report["boilerplateRatio"] == 0
    assert report["extra"] == {"title": "Annual report", "pages": 3, "words": 600,
                               "language": report["language"]}
    text = texts[key(web, "docs.test/report.pdf")]
    assert page_text(0)[0] in text and page_text(2)[-1] in text
    guide = records[key(web, "docs.test/guide.pdf")]
    assert guide["documentPages"] == 4 and guide["extra"]["pages"] == 4
    assert "guide line 3 of the manual" in texts[key(web, "docs.test/guide.pdf")]
    # HTML pages: no documentPages, the hook's title and description
    about = records[key(web, "docs.test/about")]
    assert about["documentPages"] is None
    assert about["extra"]["title"] == "About us"
    assert about["extra"]["description"] == "Who we are."
    # a hook that raises, is slow, spins or answers badly costs only its page's extra
    for path in HOOK_PAGES:
        row = outcome.row(key(web, f"docs.test{path}"))
        assert (row.status, row.reason) == (UrlStatus.DONE, None), (path, row)
        record = records[key(web, f"docs.test{path}")]
        assert record["extra"] is None and record["textKey"] is not None, path
        assert record["textWords"] > 100, path
    assert outcome.row(key(web, "docs.test/end")).status is UrlStatus.DONE

    # hostile PDFs end as recorded outcomes; what they link beside is crawled
    for path, (_, reason) in HOSTILE.items():
        row = outcome.row(key(web, f"hostile.test{path}"))
        assert (row.status, row.reason) == (UrlStatus.DONE, reason), (path, row)
    many = records[key(web, "hostile.test/many.pdf")]
    assert many["documentPages"] == 2_000
    assert "page 99 of the long file" in texts[key(web, "hostile.test/many.pdf")]
    assert "page 100 of the long file" not in texts[key(web, "hostile.test/many.pdf")]
    assert outcome.row(key(web, "hostile.test/after")).status is UrlStatus.DONE

    # the ordinary host was crawled fully at its pace all along
    assert len(ordinary_gaps) == ORDINARY_PAGES + 1
    assert max(ordinary_gaps) < MAX_GAP, ordinary_gaps
    assert stats.queued == 0 and stats.in_flight == 0 and stats.awaiting_parse == 0
    assert took < 200, took


@pytest.mark.timeout(120)
async def test_cluster_services_read_pdfs_in_their_worker_process(tmp_path: Path) -> None:
    """A cluster parser (or fetcher with inline parsing) parses on threads: its PDFs
    are read in its sitemap worker process, under the time limit and the memory cap,
    and the page record carries documentPages and the hook's extra."""
    from common.adapters.local_blobs import LocalBlobStore
    from common.adapters.memory_bus import MemoryBus
    from common.archive import ArchiveWriter
    from common.messages import FetchOutcome, FetchResult, FetchTask
    from common.pagework import ThreadPageWork, WorkContext
    from common.sitemap_work import sitemap_work
    from dedup.service import page_record
    from parser.service import ParserStage

    settings = settings_for_stage(tmp_path)
    blobs = LocalBlobStore(str(tmp_path / "warc"), writer_id="t", fsync=False)
    archive = ArchiveWriter(blobs, software="test")
    isolated = sitemap_work(settings, "t")
    stage = ParserStage(settings, MemoryBus(settings.bus, partitions=1), blobs, archive,
                        work=ThreadPageWork(WorkContext(settings, blobs, archive)),
                        sitemap_work=isolated)
    pages = {"/report.pdf": text_pdf(pages=2, words=100, title="Report"),
             "/bomb.pdf": bomb_pdf(), "/slow.pdf": slow_pdf()}
    try:
        parsed = {}
        for path, body in pages.items():
            url = f"http://a.test{path}"
            written = archive.write_exchange(
                url=url, method="GET", request_headers=[], status=200, reason="OK",
                response_headers=[("Content-Type", "application/pdf")], body=body,
                fetched_at=time.time(), ip=None)
            result = FetchResult(task=FetchTask(task_id="t", url=url, host="a.test"),
                                 outcome=FetchOutcome.OK, fetched_at=time.time(),
                                 record=written.pointer, content_type="application/pdf")
            started = time.process_time()
            parsed[path] = await stage.parse(result, written.pointer)
            # the reading was not done in this process
            assert time.process_time() - started < 2, path
    finally:
        await isolated.close()
        blobs.close()
    report = parsed["/report.pdf"]
    assert report is not None and report.error is None
    record = page_record(report, None)
    assert record.document_pages == 2 and record.text_words == 200
    assert record.extra == {"title": "Report", "pages": 2, "words": 200,
                            "language": record.language}
    bomb, slow = parsed["/bomb.pdf"], parsed["/slow.pdf"]
    assert bomb is not None and bomb.error and not bomb.timed_out
    assert slow is not None and slow.error and slow.timed_out


def settings_for_stage(out: Path) -> Any:
    from common.settings import Settings

    return Settings().replace(crawl={"out_dir": str(out), "page_job_timeout": 4.0},
                              parser={"hook": "tests.hook_support:by_path"})
