"""What is kept and what is followed, end to end: near-duplicates, robots directives in
pages and headers, refreshing stored pages (conditional GET answered by 304, and a
page whose content changed between visits), and the text signals of the records."""

from __future__ import annotations

import asyncio
import html
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from common.messages import Reason, UrlStatus
from crawler.embedded import blob_root
from simweb import Page, SimWeb, text
from simweb.scenarios import features
from tests.e2e.crawl_support import Outcome, hits, host, key, paths, resume, run, scenario

REFRESH = 0.3  # crawl.recrawl_interval of the refresh tests (seconds)


def document(title: str, paragraphs: list[str], links: list[tuple[str, str]],
             head: str = "") -> str:
    body = "".join(f"<p>{html.escape(p)}</p>\n" for p in paragraphs)
    anchors = "".join(f'<li><a href="{href}"{extra}>next</a></li>\n' for href, extra in links)
    return (f"<!DOCTYPE html>\n<html><head><title>{html.escape(title)}</title>{head}</head>"
            f"<body><h1>{html.escape(title)}</h1>\n{body}<ul>\n{anchors}</ul></body></html>\n")


@pytest.mark.timeout(60)
async def test_near_duplicate_is_recorded_and_its_links_not_followed(tmp_path: Path) -> None:
    words = text.paragraphs(text.rng_for("near-duplicate test"), 400)
    original = document("Story", words, [("/near/b", ""), ("/from-a", "")])
    copy = document("Story", [*words, "Syndicated copy."], [("/from-b", "")])
    site = host("near.test", Page(path="/near/a", body=original),
                Page(path="/near/b", body=copy), Page(path="/from-a", words=60),
                Page(path="/from-b", words=60))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["near.test/near/a"])
        log = hits(web, "near.test")

    assert paths(log) == ["/near/a", "/near/b", "/from-a"]  # never /from-b
    near = out.row(key(web, "near.test/near/b"))
    assert (near.status, near.reason) == (UrlStatus.DONE, Reason.NEAR_DUPLICATE)
    assert near.duplicate_of == key(web, "near.test/near/a")
    assert key(web, "near.test/from-b") not in out.rows
    records = {p["url"]: p for p in out.pages()}
    assert records[near.url]["nearDuplicateOf"] == key(web, "near.test/near/a")
    assert out.stats.near_duplicates == 1 and out.stats.kept == 2


@pytest.mark.timeout(60)
async def test_nofollow_directives_stop_link_following(tmp_path: Path) -> None:
    def words(name: str) -> list[str]:  # different text each, so no near-duplicates
        return text.paragraphs(text.rng_for("nofollow test", name), 80)

    meta = document("Meta", words("meta"), [("/via-meta", "")],
                    head='<meta name="robots" content="nofollow">')
    bot = document("Bot", words("bot"), [("/via-bot-meta", "")],
                   head='<meta name="politecrawler" content="nofollow">')
    rel = document("Rel", words("rel"), [("/via-rel", ' rel="nofollow"'), ("/followed", "")])
    site = host("follow.test",
                Page(path="/", words=40, links=("/meta", "/header", "/bot", "/rel")),
                Page(path="/meta", body=meta),
                Page(path="/header", words=80, links=("/via-header",),
                     headers={"X-Robots-Tag": "nofollow"}),
                Page(path="/bot", body=bot), Page(path="/rel", body=rel),
                *(Page(path=p, words=40) for p in ("/via-meta", "/via-header",
                                                   "/via-bot-meta", "/via-rel", "/followed")))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["follow.test/"])
        log = hits(web, "follow.test")

    assert sorted(paths(log)) == ["/", "/bot", "/followed", "/header", "/meta", "/rel"]
    for path in ("/meta", "/header", "/bot", "/rel"):  # stored, only not followed
        assert out.row(key(web, "follow.test" + path)).status is UrlStatus.DONE
    assert {p["url"] for p in out.pages()} >= {key(web, "follow.test/meta"),
                                               key(web, "follow.test/header")}


@pytest.mark.timeout(60)
async def test_noindex_pages_leave_no_page_record(tmp_path: Path) -> None:
    words = text.paragraphs(text.rng_for("noindex test"), 80)
    meta = document("Hidden", words, [("/after-meta", "")],
                    head='<meta name="robots" content="noindex">')
    site = host("index.test",
                Page(path="/", words=40, links=("/meta", "/header")),
                Page(path="/meta", body=meta),
                Page(path="/header", words=80, links=("/after-header",),
                     headers={"X-Robots-Tag": "noindex"}),
                Page(path="/after-meta", words=40), Page(path="/after-header", words=40))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["index.test/"])
        log = hits(web, "index.test")

    # noindex alone still lets the links be followed
    assert sorted(paths(log)) == ["/", "/after-header", "/after-meta", "/header", "/meta"]
    recorded = {p["url"] for p in out.pages()}
    assert recorded == {key(web, f"index.test{p}") for p in ("/", "/after-meta",
                                                             "/after-header")}
    for path in ("/meta", "/header"):
        assert out.row(key(web, "index.test" + path)).status is UrlStatus.DONE


def lab_page(path: str) -> Page:
    return next(p for p in features().host("lab.test").pages if p.path == path)


async def refresh(first: Outcome, intervals: float = 1.0) -> Outcome:
    """Run the crawl again once its pages are due for a refresh (``intervals``: how
    many of the first interval: an unchanged page's interval doubles after a refresh)."""
    await asyncio.sleep(REFRESH * intervals * 1.2)
    return await resume(first)


@pytest.mark.timeout(60)
async def test_refresh_sends_validators_and_304_writes_a_revisit(tmp_path: Path) -> None:
    async with SimWeb(scenario(host("lab.test", lab_page("/cached"))), dns=True) as web:
        first = await run(web, tmp_path, ["lab.test/cached"],
                          crawl={"recrawl_interval": REFRESH})
        stored = first.row(key(web, "lab.test/cached"))
        second = await refresh(first)
        third = await refresh(second, 2.0)
        log = hits(web, "lab.test")

    assert stored.etag and stored.last_modified and stored.record is not None
    assert [r.status for r in log] == [200, 304, 304]
    assert log[0].header("If-None-Match") is None
    for conditional in log[1:]:
        assert conditional.header("If-None-Match") == stored.etag
        assert conditional.header("If-Modified-Since") == stored.last_modified
    for outcome in (second, third):
        row = outcome.row(stored.url)
        assert (row.status, row.reason) == (UrlStatus.DONE, Reason.NOT_MODIFIED)
        assert row.etag == stored.etag and row.attempts == 1
    # unchanged (304) twice: the revisit interval doubled each time
    assert second.row(stored.url).revisit_interval == 2 * REFRESH
    assert third.row(stored.url).revisit_interval == 4 * REFRESH
    response = [r for r in third.warc() if r.type == "response" and r.uri == stored.url]
    revisits = [r for r in third.warc() if r.type == "revisit" and r.uri == stored.url]
    assert len(response) == 1 and len(revisits) == 2
    original = response[0].headers["WARC-Record-ID"]
    for rev in revisits:
        assert rev.headers["WARC-Profile"].endswith("/revisit/server-not-modified")
        assert rev.headers["WARC-Refers-To"] == original  # the stored copy, not a revisit
        assert rev.http_status == 304
    assert third.stats.not_modified == 1 and third.stats.fetched == 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["/changing", "/counter"])
async def test_refresh_of_a_changed_page_stores_the_new_content(tmp_path: Path,
                                                                path: str) -> None:
    # /changing is new text on every visit; /counter changes one line (a near-duplicate
    # of its own earlier copy, which is not a reason to drop the new one)
    async with SimWeb(scenario(host("lab.test", lab_page(path))), dns=True) as web:
        first = await run(web, tmp_path, ["lab.test" + path],
                          crawl={"recrawl_interval": REFRESH})
        second = await refresh(first)
        log = hits(web, "lab.test")

    url = key(web, "lab.test" + path)
    before, after = first.row(url), second.row(url)
    assert [r.status for r in log] == [200, 200]
    assert log[1].header("If-None-Match") == before.etag  # asked, but it had changed
    assert (after.status, after.reason) == (UrlStatus.DONE, None)
    assert after.content_hash != before.content_hash and after.etag != before.etag
    assert after.record != before.record
    responses = [r for r in second.warc() if r.type == "response" and r.uri == url]
    assert len({r.headers["WARC-Payload-Digest"] for r in responses}) == 2
    records = [p for p in second.pages() if p["url"] == url]
    assert [p["contentHash"] for p in records] == [before.content_hash, after.content_hash]
    assert not any(p.get("nearDuplicateOf") for p in records)
    assert second.stats.kept == 1 and second.stats.fetched == 2


@pytest.mark.timeout(60)
async def test_refresh_leaves_a_host_at_its_page_cap_alone(tmp_path: Path) -> None:
    # the cap counts fetches: a refresh past it would reject the stored page instead
    async with SimWeb(scenario(host("lab.test", lab_page("/cached"))), dns=True) as web:
        first = await run(web, tmp_path, ["lab.test/cached"],
                          crawl={"recrawl_interval": REFRESH}, traps={"max_pages_per_host": 1})
        second = await refresh(first)
        log = hits(web, "lab.test")

    url = key(web, "lab.test/cached")
    assert [r.status for r in log] == [200]
    assert (second.row(url).status, second.row(url).reason) == (UrlStatus.DONE, None)
    assert second.row(url).last_fetch_at == first.row(url).last_fetch_at


@pytest.mark.timeout(60)
async def test_page_and_text_records_carry_the_text_signals(tmp_path: Path) -> None:
    english = ["The council met on Tuesday evening and agreed to rebuild the old bridge "
               "over the river before winter, after engineers found the piers unsafe."] * 3
    nav = [(f"/nav/{i}", "") for i in range(20)]
    site = host("signals.test", Page(path="/story", body=document("Bridge", english, nav)))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["signals.test/story"])

    record = {p["url"]: p for p in out.pages()}[key(web, "signals.test/story")]
    assert record["language"] == "en" and record["languageConfidence"] >= 0.5
    assert record["textWords"] == 3 * len(english[0].split())
    assert record["textChars"] >= 3 * len(english[0])
    assert 0.0 < record["boilerplateRatio"] < 1.0  # the title and the links list
    headers: dict[str, str] = {}
    for path in sorted(blob_root(out.settings).glob("*-text-*.warc.gz")):
        with path.open("rb") as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_headers.get_header("WARC-Target-URI") == record["url"]:
                    headers = dict(rec.rec_headers.headers)
    assert headers["WARC-Identified-Content-Language"] == "en"
    assert headers["Crawler-Text-Words"] == str(record["textWords"])
    assert headers["Crawler-Text-Chars"] == str(record["textChars"])
    assert float(headers["Crawler-Boilerplate-Ratio"]) == pytest.approx(
        record["boilerplateRatio"], abs=1e-4)
