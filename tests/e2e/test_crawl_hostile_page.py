"""One crafted page must not freeze the crawl (issue 11, item 1).

A page whose parse grows with the square of its attributes used to hold the one page
worker for minutes; WARC writes of every other page queued behind it, and an ordinary
host beside it saw no request for tens of seconds. Now the parser bounds what a page
can cost (``parser.html``), writes and parses run in separate worker lanes, and a page
job over the time limit is abandoned and its worker replaced (``common.pagework``).

Both tests crawl a hostile host and an ordinary one side by side and look at the
ordinary host's request gaps at the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.messages import Reason, UrlStatus
from common.pagework import PageWork, ProcessPageWork, WorkContext
from crawler.embedded import EmbeddedCrawler
from frontier.stats import CrawlStats
from parser.service import parse_job as stage_parse_job
from simweb import Page, SimWeb
from tests.e2e.crawl_support import (
    absolute,
    hits,
    host,
    key,
    read_state,
    scenario,
    settings_for,
)

ORDINARY_PAGES = 30
DELAY = 0.2  # the politeness gap: the ordinary host's gaps should stay near it
MAX_GAP = 3.0  # "no gap over a few seconds"
JOB_TIMEOUT = 8.0  # the hanging parse's limit: longer than any real page here takes


def _attributes(n: int) -> str:
    return " ".join(f"a{i}=x" for i in range(n))


def _hostile(markup: str) -> str:
    return ('<html><head><title>hostile</title></head><body>' + markup
            + '<p>after the markup</p><a href="/after">after</a></body></html>')


HOSTILE = {
    # the shapes: one element with 80,000 and with 500,000 attributes (4.9 MB)
    "/attrs80k": _hostile(f"<div {_attributes(80_000)}>one element</div>"),
    "/attrs500k": _hostile(f"<div {_attributes(500_000)}>one element</div>"),
    # distinct attribute names over many elements, options of one select, and
    # attributes merged into the body from many <body> tags: all quadratic in lexbor
    "/names": _hostile("".join(f"<span n{i}=x>s</span>" for i in range(120_000))),
    "/options": _hostile("<select>" + "<option>o" * 40_000 + "</select>"),
    "/bodies": _hostile("".join(f"<body b{i}=x>" for i in range(40_000))),
}


def _scenario() -> Any:
    ordinary = host(
        "ordinary.test",
        Page(path="/", links=tuple(f"/p{i}" for i in range(ORDINARY_PAGES)), words=50),
        *(Page(path=f"/p{i}", words=80) for i in range(ORDINARY_PAGES)))
    hostile = host(
        "hostile.test",
        Page(path="/", links=tuple(HOSTILE), words=20),
        *(Page(path=path, body=body) for path, body in HOSTILE.items()),
        Page(path="/after", words=20))
    return scenario(hostile, ordinary, name="hostile-page")


def _gaps(web: SimWeb, name: str) -> list[float]:
    return web.log.gaps(name, exclude_paths=())


async def _crawl(web: SimWeb, out: Path, *, job_timeout: float = 30.0,
                 wrap: Callable[[EmbeddedCrawler], None] | None = None
                 ) -> tuple[EmbeddedCrawler, CrawlStats, float]:
    settings = settings_for(web, out, politeness={"default_delay": DELAY},
                            # one parse worker, never a second (counted below)
                            crawl={"page_processes": 1, "parse_processes": 1,
                                   "page_job_timeout": job_timeout})
    crawler = EmbeddedCrawler(settings)
    if wrap is not None:
        wrap(crawler)
    started = time.monotonic()
    await crawler.start()
    try:
        await crawler.frontier.seed([absolute(web, "hostile.test/"),
                                     absolute(web, "ordinary.test/")])
        await crawler.wait()
        took = time.monotonic() - started
        stats = await crawler.stats()
    finally:
        await crawler.close()
    return crawler, stats, took


@pytest.mark.timeout(240)
async def test_hostile_pages_beside_an_ordinary_host(tmp_path: Path) -> None:
    async with SimWeb(_scenario(), dns=True) as web:
        crawler, stats, took = await _crawl(web, tmp_path)
        ordinary_gaps = _gaps(web, "ordinary.test")
        hostile_hits = {r.path for r in hits(web, "hostile.test")}
        rows, _hosts = await read_state(crawler.settings)

    # the ordinary host was crawled at the politeness pace all along
    assert len(ordinary_gaps) == ORDINARY_PAGES + 1  # after robots.txt: home, pages
    assert max(ordinary_gaps) < MAX_GAP, ordinary_gaps
    # every hostile page was fetched, parsed within the bounds and kept: its link
    # (after the hostile markup) was followed
    assert set(HOSTILE) | {"/", "/after"} <= hostile_hits
    for path in HOSTILE:
        row = rows[key(web, f"hostile.test{path}")]
        assert (row.status, row.reason) == (UrlStatus.DONE, None), (path, row)
    assert stats.queued == 0 and stats.in_flight == 0 and stats.awaiting_parse == 0
    assert not stats.errors
    assert took < 120, took


def _hang(ctx: WorkContext, *args: Any, **kwargs: Any) -> None:
    """A parse that never ends (in the worker process)."""
    time.sleep(3600)


class _HangOn:
    """The parse lane, except that the page at ``path`` gets a job that never ends:
    what a parse the bounds did not foresee would look like. Notes the parse workers'
    process ids it sees."""

    def __init__(self, inner: PageWork, work: ProcessPageWork, path: str) -> None:
        self.inner = inner
        self.work = work
        self.path = path
        self.pids: set[int] = set()

    async def start(self) -> None:
        await self.inner.start()

    async def run(self, job: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.pids.update(self.work.pids("parse"))
        # the stage names its jobs (common.pagework.JobRef)
        if job is stage_parse_job and args[0].task.url.endswith(self.path):
            job = _hang
        try:
            return await self.inner.run(job, *args, **kwargs)
        finally:
            self.pids.update(self.work.pids("parse"))

    async def close(self) -> None:
        await self.inner.close()

    def lane(self, name: str) -> PageWork:
        return self.inner.lane(name)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.timeout(240)
async def test_a_parse_over_the_time_limit_is_abandoned_and_recorded(tmp_path: Path) -> None:
    hang: list[_HangOn] = []

    def wrap(crawler: EmbeddedCrawler) -> None:
        assert isinstance(crawler.work, ProcessPageWork)
        hang.append(_HangOn(crawler.parser.work, crawler.work, "/attrs80k"))
        crawler.parser.work = hang[0]

    async with SimWeb(_scenario(), dns=True) as web:
        crawler, stats, took = await _crawl(web, tmp_path, job_timeout=JOB_TIMEOUT, wrap=wrap)
        ordinary_gaps = _gaps(web, "ordinary.test")
        ordinary_hits = hits(web, "ordinary.test")
        hostile_hits = {r.path for r in hits(web, "hostile.test")}
        rows, _hosts = await read_state(crawler.settings)

    # the hanging page was abandoned and recorded with its reason
    row = rows[key(web, "hostile.test/attrs80k")]
    assert (row.status, row.reason) == (UrlStatus.DONE, Reason.PARSE_TIMEOUT)
    assert [r.url for r in rows.values() if r.reason is not None] == [row.url]
    assert stats.errors == {"parse_timeout": 1}
    assert isinstance(crawler.work, ProcessPageWork) and crawler.work.timeouts == 1
    # its worker was killed and replaced: the crawl went on with another parse worker
    assert len(hang[0].pids) == 2, hang[0].pids
    assert all(_gone(pid) for pid in hang[0].pids)
    # the other hostile pages were parsed after it (their link was followed)
    assert set(HOSTILE) | {"/", "/after"} <= hostile_hits
    # the ordinary host never waited on it, and its pages were all parsed and kept
    assert max(ordinary_gaps) < MAX_GAP, ordinary_gaps
    assert len(ordinary_hits) == ORDINARY_PAGES + 1  # home, pages (robots.txt left out)
    kept = [r for r in rows.values() if r.url.startswith(absolute(web, "ordinary.test/"))
            and r.status is UrlStatus.DONE and r.reason is None]
    assert len(kept) == ORDINARY_PAGES + 1
    assert stats.queued == 0 and stats.in_flight == 0 and stats.awaiting_parse == 0
    assert took < 120, took
