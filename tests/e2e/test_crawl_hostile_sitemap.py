"""Hostile sitemaps beside an ordinary host: each ends as a recorded outcome at little
cost, and the ordinary host's pages are all fetched.

A sitemap of a few KB compressed used to cost seconds of CPU and up to 2 GiB while it
was read: elements nested millions deep, one attribute of 50 MB, millions of
attributes on one element, a comment without end. Now reading stops at the first
thing no sitemap has (:mod:`common.sitemaps`). In cluster mode, whose page work is
threads, sitemaps are read in a worker process of their own with the page-job time
limit and a memory cap (:mod:`common.sitemap_work`): a read over the limit is
abandoned, its worker killed, and the sitemap recorded as parse_timeout.
"""

from __future__ import annotations

import gzip
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from common.messages import Reason, UrlStatus
from common.pagework import WorkContext
from common.sitemap_work import ADDRESS_SPACE_HEADROOM, read_job, sitemap_work
from crawler.embedded import EmbeddedCrawler
from crawler.inline import page_judge
from simweb import Page, SimWeb
from simweb.model import Robots, Sitemap
from tests.e2e.crawl_support import (
    absolute,
    hits,
    host,
    key,
    paths,
    read_state,
    run,
    scenario,
    settings_for,
)

ORDINARY_PAGES = 12


def _free_port() -> int:
    """A port free on loopback now: verbatim bodies name it in their URLs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORT = _free_port()
OPEN = (b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        b"<url><loc>http://hostile.test:%d/first</loc></url>" % PORT)

#: path -> (the body after the first entry, what the sitemap's detail must say)
HOSTILE: dict[str, tuple[bytes, str]] = {
    "/deep.xml.gz": (b"<url>" + b"<a>" * 1_000_000, "nested deeper than 5"),
    "/attribute.xml.gz": (b'<url><loc x="' + b"x" * (5 << 20) + b'">/2</loc></url></urlset>',
                          "markup (a tag, comment or processing instruction) longer"),
    "/attributes.xml.gz": (b"<url><loc " + b" ".join(b'a%d="1"' % n for n in range(200_000))
                           + b">/2</loc></url></urlset>", "markup"),
    "/comment.xml.gz": (b"<!--" + b"<" * (5 << 20) + b"--></urlset>", "markup"),
    "/junk.xml.gz": (b"<url/>" * 200_000 + b"</urlset>", "more than 50000 entries"),
}


def _gzip_page(path: str, raw: bytes) -> Page:
    # latin-1 carries the bytes through the simulated web's text body unchanged
    return Page(path=path, body=gzip.compress(raw, compresslevel=9).decode("latin-1"),
                encoding="latin-1", content_type="application/gzip")


def _ordinary() -> Any:
    """A host whose pages only its sitemap lists (its home page links to none)."""
    listed = tuple(f"/p{n}" for n in range(ORDINARY_PAGES))
    return host("ordinary.test", Page(path="/", words=50),
                *(Page(path=p, words=80) for p in listed),
                Page(path="/sitemap.xml", content_type="application/xml",
                     sitemap=Sitemap(entries=listed)),
                robots=Robots(sitemaps=("http://ordinary.test/sitemap.xml",)))


def _hostile(files: dict[str, bytes]) -> Any:
    return host("hostile.test", Page(path="/", words=20), Page(path="/first", words=20),
                *(_gzip_page(path, OPEN + raw) for path, raw in files.items()),
                robots=Robots(sitemaps=tuple(f"http://hostile.test{p}" for p in files)))


def _check_ordinary(web: SimWeb, rows: dict[str, Any]) -> None:
    got = sorted(paths(hits(web, "ordinary.test")))
    assert got == sorted(["/", "/sitemap.xml", *(f"/p{n}" for n in range(ORDINARY_PAGES))])
    for n in range(ORDINARY_PAGES):
        row = rows[key(web, f"ordinary.test/p{n}")]
        assert (row.status, row.reason) == (UrlStatus.DONE, None), row


@pytest.mark.timeout(120)
async def test_hostile_sitemaps_end_as_outcomes_beside_an_ordinary_host(
        tmp_path: Path) -> None:
    site = scenario(_hostile({p: raw for p, (raw, _) in HOSTILE.items()}), _ordinary())
    async with SimWeb(site, port=PORT, dns=True) as web:
        out = await run(web, tmp_path, ["hostile.test/", "ordinary.test/"])
        _check_ordinary(web, out.rows)
        hostile = paths(hits(web, "hostile.test"))

    for path, (_, problem) in HOSTILE.items():
        row = out.row(key(web, "hostile.test" + path))
        reason = Reason.SITEMAP_CAPPED if path == "/junk.xml.gz" else Reason.SITEMAP_INVALID
        assert (row.status, row.reason) == (UrlStatus.DONE, reason), (path, row)
        assert problem in (row.detail or ""), (path, row.detail)
    # each listed its first entry before it went wrong: that one URL was crawled once
    assert hostile.count("/first") == 1
    assert out.stats.queued == 0 and out.stats.in_flight == 0


@pytest.mark.timeout(120)
async def test_cluster_sitemap_worker_abandons_a_slow_read(tmp_path: Path) -> None:
    # Cluster mode's composition on the embedded adapters: page work on threads of the
    # fetcher (page_processes 0), sitemaps in a worker process of their own. A sitemap
    # of 1.9 million empty elements is within every bound and takes over a second to
    # read: with a time limit of 0.5 s it is abandoned and its worker killed; the
    # ordinary host's sitemap is read by the next worker.
    slow = b"<url>" + b"<x/>" * 1_900_000 + b"</url></urlset>"
    site = scenario(_hostile({"/slow.xml.gz": slow,
                              "/deep.xml.gz": HOSTILE["/deep.xml.gz"][0]}), _ordinary())
    async with SimWeb(site, port=PORT, dns=True) as web:
        settings = settings_for(web, tmp_path, crawl={"page_processes": 0,
                                                      "page_job_timeout": 0.5})
        crawler = EmbeddedCrawler(settings)
        sitemaps = sitemap_work(settings, "test")
        crawler.fetcher.judge = page_judge(settings, crawler.bus, crawler.store,
                                           crawler.blobs, crawler.archive, crawler.work,
                                           crawler.metrics, sitemap_work=sitemaps)
        await crawler.start()
        try:
            await crawler.frontier.seed([absolute(web, "hostile.test/"),
                                         absolute(web, "ordinary.test/")])
            await crawler.wait()
            stats = await crawler.stats()
        finally:
            await crawler.close()
            await sitemaps.close()
        rows, _ = await read_state(settings)
        _check_ordinary(web, rows)

    assert crawler.parser.parsed == 0  # every page and sitemap judged by its fetcher
    row = rows[key(web, "hostile.test/slow.xml.gz")]
    assert (row.status, row.reason) == (UrlStatus.DONE, Reason.PARSE_TIMEOUT), row
    assert sitemaps.timeouts == 1
    deep = rows[key(web, "hostile.test/deep.xml.gz")]
    assert deep.reason is Reason.SITEMAP_INVALID and "deeper" in (deep.detail or "")
    assert stats.queued == 0 and stats.in_flight == 0


def _allocate(ctx: WorkContext, size: int) -> int:
    """A job that asks for ``size`` bytes (in the sitemap worker)."""
    return len(bytearray(size))


def _pid(ctx: WorkContext) -> int:
    return os.getpid()


def _oom_score_adj(ctx: WorkContext) -> str:
    with open("/proc/self/oom_score_adj") as f:
        return f.read().strip()


@pytest.mark.timeout(60)
async def test_the_sitemap_worker_caps_its_memory(tmp_path: Path) -> None:
    from common.settings import Settings

    settings = Settings().replace(crawl={"out_dir": str(tmp_path)})
    work = sitemap_work(settings, "test")
    try:
        pid = await work.run(_pid)
        # more than its headroom: refused as MemoryError, not grown into
        with pytest.raises(MemoryError):
            await work.run(_allocate, ADDRESS_SPACE_HEADROOM + (64 << 20))
        # the same worker goes on reading sitemaps
        read = await work.run(read_job, gzip.compress(OPEN + b"</urlset>"),
                              f"http://hostile.test:{PORT}/s.xml", now=0.0,
                              vouched=frozenset())
        assert [e.url for e in read.pages] == [f"http://hostile.test:{PORT}/first"]
        assert await work.run(_pid) == pid
        assert await work.run(_oom_score_adj) == "1000"  # the first the kernel kills
    finally:
        await work.close()
