"""Hostile servers end to end: throttling with Retry-After, slow drips and hangs,
oversize bodies, compression bombs, wrong content types and bad charsets. Each ends in
a recorded outcome for its URL, checked in url_state, in the request log and in the WARC."""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from common.messages import Reason, UrlStatus
from common.runtime import blob_root
from simweb import Page, SimWeb
from simweb.scenarios import features
from tests.e2e.crawl_support import Outcome, hits, host, key, paths, run, scenario

ACCENTS = "Café crème, déjà vu, naïve façade, Zürich, señor, garçon."


def lab(*names: str) -> Page:
    return next(p for p in features().host("lab.test").pages if p.path in names)


@dataclass(frozen=True, slots=True)
class Archived:
    type: str
    warc: dict[str, str]
    http: dict[str, str]
    payload: bytes


def archived(out: Outcome, url: str) -> list[Archived]:
    """The page archive's records for ``url`` (digests checked), with their payloads."""
    found: list[Archived] = []
    for path in sorted(blob_root(out.settings).glob("*.warc.gz")):
        if "-text-" in path.name:
            continue
        with path.open("rb") as fh:
            for rec in ArchiveIterator(fh, check_digests="raise"):
                if rec.rec_headers.get_header("WARC-Target-URI") == url:
                    http = rec.http_headers
                    found.append(Archived(rec.rec_type, dict(rec.rec_headers.headers),
                                          dict(http.headers) if http is not None else {},
                                          rec.raw_stream.read()))
    return found


def indexed(out: Outcome, url: str) -> bool:
    index = blob_root(out.settings) / "index.cdxj"
    return f'"url": "{url}"' in (index.read_text() if index.exists() else "")


def assert_cut(record: Archived, why: str) -> None:
    """A response record of a body that did not arrive in full: marked, and every
    length in it describes the stored bytes (what pywb and warcio rely on)."""
    assert record.type == "response"
    assert record.warc["WARC-Truncated"] == why
    assert record.http["Content-Length"] == str(len(record.payload))


@pytest.mark.timeout(60)
async def test_429_retry_after_rests_the_host_then_fetches(tmp_path: Path) -> None:
    retry_after = 1.0
    site = host("busy.test", Page(path="/busy", status=429, retry_after="1", recover_after=1),
                Page(path="/other", words=80))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["busy.test/busy", "busy.test/other"])
        log = hits(web, "busy.test")

    throttled = log[0]
    assert (throttled.path, throttled.status) == ("/busy", 429)
    assert sorted((r.path, r.status) for r in log[1:]) == [("/busy", 200), ("/other", 200)]
    for later in log[1:]:  # no request to the host, for any URL, before Retry-After
        assert later.started - throttled.ended >= retry_after, later
    row = out.row(key(web, "busy.test/busy"))
    assert (row.status, row.reason, row.attempts) == (UrlStatus.DONE, None, 2)
    assert out.stats.fetched == 3 and out.stats.kept == 2


@pytest.mark.timeout(60)
async def test_503_retry_after_is_waited_out_each_time(tmp_path: Path) -> None:
    site = host("down.test", Page(path="/down", status=503, retry_after="1", recover_after=2))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["down.test/down"])
        log = hits(web, "down.test")
        gaps = web.log.gaps("down.test")

    assert [r.status for r in log] == [503, 503, 200]
    assert len(gaps) == 2 and min(gaps) >= 1.0, gaps
    row = out.row(key(web, "down.test/down"))
    assert (row.status, row.attempts, row.http_status) == (UrlStatus.DONE, 3, 200)


@pytest.mark.timeout(60)
async def test_slow_drip_times_out_and_ends_dead(tmp_path: Path) -> None:
    timeout = 0.4
    async with SimWeb(scenario(host("lab.test", lab("/drip"))), dns=True,
                      max_stall=5.0) as web:
        out = await run(web, tmp_path, ["lab.test/drip"],
                        fetcher={"total_timeout": timeout, "connect_timeout": timeout},
                        politeness={"max_attempts": 2})
        log = hits(web, "lab.test")

    assert paths(log) == ["/drip", "/drip"]
    assert not any(r.completed for r in log)  # each body was still dripping
    assert all(r.duration < 2.0 for r in log)  # the drip takes 3 s; we gave up early
    row = out.row(key(web, "lab.test/drip"))
    assert (row.status, row.reason, row.attempts) == (UrlStatus.DEAD, Reason.DEAD, 2)
    assert row.detail is not None and row.detail.startswith("timeout")
    assert out.stats.dead == 1 and out.stats.fetched == 2
    # each attempt is archived as far as it arrived, marked cut by the time-out
    responses = [r for r in archived(out, row.url) if r.type == "response"]
    assert len(responses) == 2
    for record in responses:
        assert_cut(record, "time")
        assert 0 < len(record.payload) < int(record.http["X-Crawler-Original-Content-Length"])


@pytest.mark.timeout(60)
async def test_hanging_server_times_out_and_ends_dead(tmp_path: Path) -> None:
    async with SimWeb(scenario(host("lab.test", lab("/hang"))), dns=True,
                      max_stall=5.0) as web:
        out = await run(web, tmp_path, ["lab.test/hang"],
                        fetcher={"total_timeout": 0.3, "connect_timeout": 0.3},
                        politeness={"max_attempts": 2})
        log = hits(web, "lab.test")

    assert paths(log) == ["/hang", "/hang"] and not any(r.completed for r in log)
    row = out.row(key(web, "lab.test/hang"))
    assert row.status is UrlStatus.DEAD and row.detail is not None
    assert row.detail.startswith("timeout")


@pytest.mark.timeout(60)
async def test_oversize_body_is_too_large(tmp_path: Path) -> None:
    site = host("big.test", Page(path="/", words=50, links=("/big",)),
                Page(path="/big", words=100, body_bytes=400_000, links=("/behind-big",)),
                Page(path="/behind-big", words=50))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["big.test/"], fetcher={"max_body_bytes": 100_000})
        log = hits(web, "big.test")

    assert paths(log) == ["/", "/big"]  # not retried; its links never seen
    row = out.row(key(web, "big.test/big"))
    assert (row.status, row.reason) == (UrlStatus.REJECTED, Reason.TOO_LARGE)
    assert out.stats.errors == {"too_large": 1}
    # refused on its Content-Length, unread: no record, rather than an empty 200
    assert archived(out, row.url) == [] and not indexed(out, row.url)
    assert row.record is None


@pytest.mark.timeout(90)
async def test_compression_bomb_is_too_large_in_little_memory(tmp_path: Path) -> None:
    bomb = lab("/bomb")
    cap = 1_000_000
    async with SimWeb(scenario(host("lab.test", bomb)), dns=True) as web:
        tracemalloc.start()
        try:
            out = await run(web, tmp_path, ["lab.test/bomb"], fetcher={"max_body_bytes": cap})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        log = hits(web, "lab.test")

    assert bomb.gzip_bomb >= 50 * cap
    assert [r.path for r in log] == ["/bomb"]
    assert log[0].bytes_sent < cap  # small on the wire, 50 MB inflated
    row = out.row(key(web, "lab.test/bomb"))
    assert (row.status, row.reason) == (UrlStatus.REJECTED, Reason.TOO_LARGE)
    assert peak < 16 * cap, f"peak traced memory {peak} bytes"
    # cut while inflating: the first cap bytes are archived, marked as cut at the cap
    records = archived(out, row.url)
    assert [r.type for r in records] == ["response", "request", "metadata"]
    record = records[0]
    assert_cut(record, "length")
    assert len(record.payload) == cap and record.payload.startswith(b"<!DOCTYPE html")
    assert record.http["X-Crawler-Original-Content-Encoding"] == "gzip"
    assert int(record.http["X-Crawler-Original-Content-Length"]) == log[0].bytes_sent
    # a cut body is neither parsed nor kept as a page
    assert row.url not in out.texts() and not out.pages()


@pytest.mark.timeout(60)
async def test_content_types_refused_or_sniffed(tmp_path: Path) -> None:
    site = host("types.test",
                Page(path="/", words=50, links=("/wrong-type", "/binary", "/no-type",
                                                "/plain")),
                Page(path="/wrong-type", words=100, content_type="image/png"),
                Page(path="/binary", words=100, content_type="application/octet-stream"),
                Page(path="/no-type", words=100, content_type=None, links=("/sniffed-link",)),
                Page(path="/plain", content_type="text/plain; charset=utf-8",
                     body="Just text, no markup. /not-a-link\n"),
                Page(path="/sniffed-link", words=50))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["types.test/"])
        log = hits(web, "types.test")

    assert sorted(paths(log)) == ["/", "/binary", "/no-type", "/plain", "/sniffed-link",
                                  "/wrong-type"]
    for path in ("/wrong-type", "/binary"):
        row = out.row(key(web, "types.test" + path))
        assert (row.status, row.reason) == (UrlStatus.REJECTED, Reason.BAD_CONTENT_TYPE)
    # no Content-Type: sniffed as HTML, parsed, its link followed
    assert out.row(key(web, "types.test/no-type")).status is UrlStatus.DONE
    assert out.row(key(web, "types.test/sniffed-link")).status is UrlStatus.DONE
    assert out.row(key(web, "types.test/plain")).status is UrlStatus.DONE
    assert out.stats.errors == {"bad_content_type": 2}
    # a refused media type is not downloaded and not archived: no empty 200 record
    for path in ("/wrong-type", "/binary"):
        url = key(web, "types.test" + path)
        assert archived(out, url) == [] and not indexed(out, url)
    assert [r.type for r in archived(out, key(web, "types.test/plain"))] == [
        "response", "request", "metadata"]


@pytest.mark.timeout(60)
async def test_pages_with_bad_charsets_are_parsed(tmp_path: Path) -> None:
    cases = {
        "/latin1-declared-utf8": Page(path="/latin1-declared-utf8", encoding="latin-1",
                                      extra_text=ACCENTS, links=("/after/1",)),
        "/meta-only": Page(path="/meta-only", content_type="text/html", encoding="latin-1",
                           meta_charset="iso-8859-1", extra_text=ACCENTS,
                           links=("/after/2",)),
        "/utf8-no-charset": Page(path="/utf8-no-charset", content_type="text/html",
                                 extra_text=ACCENTS, links=("/after/3",)),
        "/unknown-label": Page(path="/unknown-label",
                               content_type="text/html; charset=x-no-such-charset",
                               extra_text=ACCENTS, links=("/after/4",)),
    }
    after = [Page(path=f"/after/{i}", words=40) for i in range(1, 5)]
    site = host("charsets.test", Page(path="/", words=40, links=tuple(cases)),
                *cases.values(), *after)
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["charsets.test/"])
        log = hits(web, "charsets.test")
        texts = out.texts()

    assert sorted(paths(log)) == sorted(["/", *cases, *(p.path for p in after)])
    for path in cases:
        url = key(web, "charsets.test" + path)
        assert out.row(url).status is UrlStatus.DONE and out.row(url).reason is None
        assert ACCENTS in texts[url], (path, texts[url][-200:])
    assert out.stats.kept == 1 + len(cases) + len(after)
