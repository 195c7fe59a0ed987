"""The sitemap reader (common/sitemaps.py) and the frontier's sitemap rules: pure."""

from __future__ import annotations

import datetime as dt
import gzip
import time
import tracemalloc
from pathlib import Path

import pytest

from common.messages import Link, LinkKind, Reason, UrlStatus
from common.ports import UrlState
from common.settings import RefreshSettings, Settings, SitemapSettings
from common.sitemaps import (
    CHUNK,
    MAX_ATTRIBUTE_CHARS,
    MAX_ATTRIBUTES,
    MAX_ELEMENTS,
    MAX_MARKUP_BYTES,
    PROTOCOL_MAX_URLS,
    Entry,
    parse_changefreq,
    parse_lastmod,
    read_sitemap,
    robots_sitemaps,
    vouched_hosts,
)
from frontier.policy import first_revisit_interval, listed_change, refresh_at, sitemap_reason

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC).timestamp()
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
HERE = "http://a.test/sitemap.xml"


def urlset(*entries: tuple[str, str | None]) -> bytes:
    body = "".join(f"<url><loc>{loc}</loc>" + (f"<lastmod>{mod}</lastmod>" if mod else "")
                   + "<changefreq>daily</changefreq></url>" for loc, mod in entries)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {NS}>{body}</urlset>'.encode()


def test_urlset_pages_with_lastmod() -> None:
    read = read_sitemap(urlset(("http://a.test/x", "2024-01-02"),
                               ("http://a.test/y", None),
                               ("http://a.test/z", "2024-01-02T10:00:00+02:00")),
                        HERE, now=NOW)
    assert read.reason is Reason.SITEMAP and read.form == "urlset"
    jan2 = dt.datetime(2024, 1, 2, tzinfo=dt.UTC).timestamp()
    day = 86_400.0  # every entry says <changefreq>daily</changefreq>
    assert read.pages == [Entry("http://a.test/x", jan2, day),
                          Entry("http://a.test/y", None, day),
                          Entry("http://a.test/z", jan2 + 8 * 3600, day)]
    assert read.sitemaps == [] and read.off_host == 0 and read.invalid == 0


def test_index_lists_sitemaps() -> None:
    body = (f"<sitemapindex {NS}><sitemap><loc>http://a.test/s1.xml.gz</loc>"
            "<lastmod>2025-01-01</lastmod></sitemap>"
            "<sitemap><loc>http://a.test/s2.xml</loc></sitemap></sitemapindex>").encode()
    read = read_sitemap(body, HERE, now=NOW)
    assert read.form == "index" and read.reason is Reason.SITEMAP
    assert [e.url for e in read.sitemaps] == ["http://a.test/s1.xml.gz", "http://a.test/s2.xml"]
    assert read.pages == []


def test_gzip_sitemap_reads_like_the_plain_one() -> None:
    plain = urlset(*((f"http://a.test/p{n}", "2025-03-01") for n in range(100)))
    assert read_sitemap(gzip.compress(plain), HERE, now=NOW).pages == \
        read_sitemap(plain, HERE, now=NOW).pages
    # two gzip members, as `cat a.gz b.gz` makes
    parts = gzip.compress(plain[:500]) + gzip.compress(plain[500:])
    assert len(read_sitemap(parts, HERE, now=NOW).pages) == 100


def test_text_sitemap() -> None:
    read = read_sitemap(b"http://a.test/1\r\nhttp://a.test/2\n\nftp://a.test/x\n"
                        b"http://b.test/3", HERE, now=NOW)
    assert read.form == "text" and [e.url for e in read.pages] == ["http://a.test/1",
                                                                    "http://a.test/2"]
    assert read.invalid == 1 and read.off_host == 1


def test_other_hosts_refused_unless_vouched() -> None:
    body = urlset(("http://a.test/1", None), ("http://b.test/2", None),
                  ("http://a.test:8080/3", None), ("https://a.test/4", None))
    read = read_sitemap(body, HERE, now=NOW)
    # the port is part of the host; the scheme is not
    assert [e.url for e in read.pages] == ["http://a.test/1", "https://a.test/4"]
    assert read.off_host == 2
    vouched = read_sitemap(body, HERE, now=NOW, vouched=frozenset({"b.test"}))
    assert [e.url for e in vouched.pages] == ["http://a.test/1", "http://b.test/2",
                                              "https://a.test/4"]


def test_vouched_hosts_only_from_a_robots_txt() -> None:
    assert vouched_hosts("http://B.test/robots.txt") == frozenset({"b.test"})
    assert vouched_hosts("http://b.test:81/robots.txt") == frozenset({"b.test:81"})
    assert vouched_hosts("http://b.test/page") == frozenset()
    assert vouched_hosts(None) == frozenset() and vouched_hosts("not a url") == frozenset()


def test_url_cap_keeps_the_first_entries() -> None:
    body = urlset(*((f"http://a.test/{n}", None) for n in range(12)))
    read = read_sitemap(body, HERE, now=NOW, max_urls=10)
    assert read.reason is Reason.SITEMAP_CAPPED and len(read.pages) == 10
    assert read.pages[-1].url == "http://a.test/9"
    exactly = read_sitemap(body, HERE, now=NOW, max_urls=12)
    assert exactly.reason is Reason.SITEMAP and len(exactly.pages) == 12


def test_protocol_cap_of_50000_urls() -> None:
    body = b"<urlset>" + b"".join(b"<url><loc>http://a.test/%d</loc></url>" % n
                                  for n in range(50_003)) + b"</urlset>"
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_CAPPED and len(read.pages) == 50_000


def test_gzip_bomb_stops_at_the_byte_cap_with_bounded_memory() -> None:
    # 200 MB of spaces inside <urlset>: about 200 KB compressed
    comp = gzip.compress(b"<urlset><url><loc>http://a.test/1</loc></url>"
                         + b" " * (200 * 1024 * 1024) + b"</urlset>", compresslevel=9)
    assert len(comp) < 1_000_000
    tracemalloc.start()
    try:
        read = read_sitemap(comp, HERE, now=NOW)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert read.reason is Reason.SITEMAP_CAPPED and "52428800" in (read.problem or "")
    assert [e.url for e in read.pages] == ["http://a.test/1"]
    assert peak < 8 * 1024 * 1024


def test_plain_body_over_the_byte_cap() -> None:
    body = urlset(*((f"http://a.test/{n}", None) for n in range(100)))
    read = read_sitemap(body, HERE, now=NOW, max_bytes=1000)
    assert read.reason is Reason.SITEMAP_CAPPED and 0 < len(read.pages) < 100


def test_entity_bomb_refused() -> None:
    lol = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
           + "".join(f'<!ENTITY lol{i} "{"&lol{};".format(i - 1 if i > 1 else "") * 10}">'
                     for i in range(1, 10))
           + f"]><urlset {NS}><url><loc>http://a.test/&lol9;</loc></url></urlset>")
    started = time.perf_counter()
    read = read_sitemap(lol.encode(), HERE, now=NOW)
    assert time.perf_counter() - started < 1.0
    assert read.reason is Reason.SITEMAP_INVALID and "DTDForbidden" in (read.problem or "")
    assert read.pages == []


def test_external_entity_refused() -> None:
    body = (b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            b"<urlset><url><loc>&x;</loc></url></urlset>")
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_INVALID and read.pages == []


@pytest.mark.parametrize("body", [
    b"<urlset><url><loc>http://a.test/1</loc></url><url><loc>http://a.test/2</lo",
    b"<urlset><url><loc>http://a.test/1</loc></url></urlset><extra/>",
    b"<urlset><url><loc>http://a.test/1</loc></url><url></urlset>",
])
def test_malformed_xml_keeps_what_came_before(body: bytes) -> None:
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_INVALID and "malformed" in (read.problem or "")
    assert [e.url for e in read.pages] == ["http://a.test/1"]


@pytest.mark.parametrize("body", [b"", b"   \n", b"<html><body>hi</body></html>",
                                  b"\x1f\x8b\x08\x00garbage", b"<rss><channel/></rss>"])
def test_not_a_sitemap(body: bytes) -> None:
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_INVALID and read.entries == 0


def test_odd_entries_counted_not_fatal() -> None:
    body = (f"<urlset {NS}><url><loc>  http://a.test/ok  </loc></url><url><lastmod>2024-01-01"
            f"</lastmod></url><url><loc>javascript:alert(1)</loc></url>"
            f"<url><loc>http://a.test/{'x' * 3000}</loc></url>"
            f"<sitemap><loc>http://a.test/s.xml</loc></sitemap></urlset>").encode()
    read = read_sitemap(body, HERE, now=NOW)
    assert [e.url for e in read.pages] == ["http://a.test/ok"]
    assert read.invalid == 3 and read.sitemaps == [] and read.reason is Reason.SITEMAP


def test_deep_junk_inside_an_entry_is_dropped_as_read() -> None:
    junk = "<a><b>x</b></a>" * 200_000  # 3 MB of nested elements in one entry
    body = f"<urlset><url><loc>http://a.test/1</loc>{junk}</url></urlset>".encode()
    tracemalloc.start()
    try:
        read = read_sitemap(body, HERE, now=NOW)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [e.url for e in read.pages] == ["http://a.test/1"]
    assert peak < 16 * 1024 * 1024


@pytest.mark.parametrize(("value", "expected"), [
    ("2024", dt.datetime(2024, 1, 1, tzinfo=dt.UTC)),
    ("2024-05", dt.datetime(2024, 5, 1, tzinfo=dt.UTC)),
    ("2024-05-06", dt.datetime(2024, 5, 6, tzinfo=dt.UTC)),
    ("2024-05-06T07:08Z", dt.datetime(2024, 5, 6, 7, 8, tzinfo=dt.UTC)),
    ("2024-05-06T07:08:09.5-01:00", dt.datetime(2024, 5, 6, 8, 8, 9, 500000, tzinfo=dt.UTC)),
    ("2024-05-06T07:08:09", dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)),
    ("yesterday", None), ("", None), (None, None), ("2024-13-01", None),
    ("1969-12-31", None), ("2099-01-01", None),
])
def test_lastmod(value: str | None, expected: dt.datetime | None) -> None:
    assert parse_lastmod(value, NOW) == (None if expected is None else expected.timestamp())


def test_robots_sitemaps() -> None:
    robots = "http://a.test/robots.txt"
    assert robots_sitemaps(["http://a.test/s.xml", "/rel.xml", "http://a.test/s.xml",
                            "ftp://a.test/x"], robots, probe=True) == [
        "http://a.test/s.xml", "http://a.test/rel.xml"]
    assert robots_sitemaps([], robots, probe=True) == ["http://a.test/sitemap.xml"]
    assert robots_sitemaps([], robots, probe=False) == []
    many = [f"http://a.test/{n}.xml" for n in range(200)]
    assert len(robots_sitemaps(many, robots, probe=False, limit=5)) == 5
    assert len(robots_sitemaps(many, robots, probe=False)) == 100
    long = "http://a.test/" + "x" * 3000
    assert robots_sitemaps([long, "/s.xml"], robots, probe=True) == ["http://a.test/s.xml"]


def _settings(depth: int = 1) -> Settings:
    return Settings(sitemaps=SitemapSettings(max_index_depth=depth))


def test_sitemap_depth_cap() -> None:
    def link(depth: int) -> Link:
        return Link(url="http://a.test/s.xml", depth=depth, kind=LinkKind.SITEMAP)

    assert sitemap_reason(link(1), _settings()) is None  # named by robots.txt
    assert sitemap_reason(link(2), _settings()) is None  # listed by that index
    assert sitemap_reason(link(3), _settings()) is Reason.SITEMAP_DEPTH
    assert sitemap_reason(link(2), _settings(0)) is Reason.SITEMAP_DEPTH
    assert sitemap_reason(Link(url="http://a.test/p", depth=9,
                                    kind=LinkKind.LISTED), _settings()) is None


def _stored(**kw: object) -> UrlState:
    row = UrlState(host="a.test", url="http://a.test/p", status=UrlStatus.DONE,
                   last_fetch_at=1000.0, record=None)
    from common.messages import RecordPointer
    row.record = RecordPointer("f.warc.gz", 0, 10)
    for k, v in kw.items():
        setattr(row, k, v)
    return row


def test_lastmod_unchanged_page_is_not_refreshed() -> None:
    assert refresh_at(_stored(), 60.0) == 1060.0
    assert refresh_at(_stored(lastmod=900.0), 60.0) is None
    assert refresh_at(_stored(lastmod=1000.0), 60.0) is None
    assert refresh_at(_stored(lastmod=1001.0), 60.0) == 1060.0
    # sitemap files are refreshed like pages
    assert refresh_at(_stored(reason=Reason.SITEMAP), 60.0) == 1060.0
    assert refresh_at(_stored(reason=Reason.SITEMAP_INVALID), 60.0) is None


@pytest.mark.parametrize(("value", "expected"), [
    ("hourly", 3_600.0), (" Weekly ", 604_800.0), ("always", 3_600.0),
    ("never", 315_360_000.0), ("daily", 86_400.0), ("monthly", 2_592_000.0),
    ("yearly", 31_536_000.0), ("fortnightly", None), ("", None), (None, None)])
def test_changefreq(value: str | None, expected: float | None) -> None:
    assert parse_changefreq(value) == expected


def test_changefreq_read_from_pages_only() -> None:
    body = (f"<urlset {NS}><url><loc>http://a.test/a</loc><changefreq>hourly</changefreq>"
            "</url><url><loc>http://a.test/b</loc><changefreq>sometimes</changefreq></url>"
            "<url><loc>http://a.test/c</loc></url></urlset>").encode()
    assert [(e.url, e.changefreq) for e in read_sitemap(body, HERE, now=NOW).pages] == [
        ("http://a.test/a", 3_600.0), ("http://a.test/b", None), ("http://a.test/c", None)]


def test_changefreq_starts_the_revisit_interval_within_its_bounds() -> None:
    bounds = RefreshSettings(min_interval=7_200.0, max_interval=30 * 86_400.0)
    day = 86_400.0
    assert first_revisit_interval(day, day, bounds) == day
    assert first_revisit_interval(604_800.0, day, bounds) == 604_800.0
    assert first_revisit_interval(3_600.0, day, bounds) == 7_200.0  # the least interval
    assert first_revisit_interval(315_360_000.0, day, bounds) == 30 * day  # the most
    assert first_revisit_interval(None, day, bounds) is None  # the crawl's interval
    assert first_revisit_interval(day, day, RefreshSettings(adaptive=False)) is None


def test_listed_again() -> None:
    assert listed_change(_stored(), None, 5000.0) is None
    kept = listed_change(_stored(), 900.0, 5000.0)
    assert kept is not None and kept.status is UrlStatus.DONE and kept.lastmod == 900.0
    assert listed_change(_stored(lastmod=900.0), 900.0, 5000.0) is None
    changed = listed_change(_stored(lastmod=900.0), 2000.0, 5000.0)
    assert changed is not None and changed.status is UrlStatus.QUEUED
    assert changed.next_fetch_at == 5000.0 and changed.lastmod == 2000.0
    assert changed.record is not None  # kept for the conditional GET and revisit
    # a duplicate stays closed; a queued row only records the lastmod
    dup = listed_change(_stored(reason=Reason.DUPLICATE), 2000.0, 5000.0)
    assert dup is not None and dup.status is UrlStatus.DONE and dup.lastmod == 2000.0
    queued = listed_change(_stored(status=UrlStatus.QUEUED), 2000.0, 5000.0)
    assert queued is not None and queued.status is UrlStatus.QUEUED
    assert queued.lastmod == 2000.0 and queued.next_fetch_at == 0.0


# -- messages: the new fields have defaults, so older messages decode ------------------

def test_messages_without_the_sitemap_fields_decode() -> None:
    import msgspec

    from common.messages import (
        Discovered,
        FetchResult,
        FetchTask,
        MessageError,
        ParsedPage,
        StatusUpdate,
        TaskKind,
        decode,
    )

    task = {"v": 1, "task_id": "t", "url": "http://a.test/", "host": "a.test"}
    got = decode(FetchTask, msgspec.json.encode(task))
    assert got.kind is TaskKind.PAGE and got.source is None
    result = decode(FetchResult, msgspec.json.encode(
        {"v": 1, "task": task, "outcome": "ok"}))
    assert result.sitemaps == []
    link = decode(Discovered, msgspec.json.encode(
        {"v": 1, "host": "a.test", "links": [{"url": "http://a.test/"}]})).links[0]
    assert link.lastmod is None
    page = decode(ParsedPage, msgspec.json.encode(
        {"v": 1, "url": "http://a.test/", "host": "a.test", "depth": 0, "priority": 1,
         "status": 200, "fetched_at": 1.0, "content_hash": None, "simhash": None}))
    assert page.kind is TaskKind.PAGE and page.reason is None and page.detail is None
    status = decode(StatusUpdate, msgspec.json.encode(
        {"v": 1, "url": "http://a.test/", "host": "a.test", "status": "done"}))
    assert status.detail is None
    with pytest.raises(MessageError):
        decode(Discovered, msgspec.json.encode(
            {"v": 1, "host": "a.test", "links": [{"url": "http://a.test/", "lastmod": -1}]}))
    with pytest.raises(MessageError):
        decode(FetchTask, msgspec.json.encode({**task, "kind": "executable"}))


def test_robots_sitemaps_become_sitemap_links_of_the_result() -> None:
    from common.messages import FetchOutcome, FetchResult, FetchTask
    from common.ports import HostState
    from frontier.policy import apply_result

    task = FetchTask(task_id="t", url="http://a.test:81/page", host="a.test:81")
    result = FetchResult(task=task, outcome=FetchOutcome.ROBOTS_BLOCKED, robots_fetched=True,
                         fetched_at=10.0, sitemaps=["http://a.test:81/s.xml",
                                                    "http://cdn.test/a.xml"])
    row = UrlState(host="a.test:81", url=task.url, status=UrlStatus.IN_FLIGHT, attempts=1)
    effect = apply_result(result, row, HostState(host="a.test:81"), Settings(), 10.0)
    assert effect.row.reason is Reason.ROBOTS  # the page's own outcome is unchanged
    assert [(lk.url, lk.kind, lk.depth, lk.priority, lk.source) for lk in effect.follow] == [
        ("http://a.test:81/s.xml", LinkKind.SITEMAP, 1, 0, "http://a.test:81/robots.txt"),
        ("http://cdn.test/a.xml", LinkKind.SITEMAP, 1, 0, "http://a.test:81/robots.txt")]


async def test_listed_urls_go_out_in_messages_under_the_kafka_limit(tmp_path: Path) -> None:
    import msgspec

    from common.adapters.local_blobs import LocalBlobStore
    from common.adapters.memory_bus import MemoryBus
    from common.archive import ArchiveWriter
    from common.messages import (
        FetchOutcome,
        FetchResult,
        FetchTask,
        Message,
        TaskKind,
        Topic,
    )
    from common.pagework import ThreadPageWork, WorkContext
    from common.settings import BusSettings
    from parser.service import ParserStage

    # 3,000 URLs of 1.9 KB: 5.7 MB of links from one sitemap
    body = urlset(*((f"http://a.test/{n}/{'x' * 1900}", None) for n in range(3000)))
    settings = Settings()
    blobs = LocalBlobStore(str(tmp_path), writer_id="t", fsync=False)
    archive = ArchiveWriter(blobs, software="test")
    written = archive.write_exchange(
        url="http://a.test/s.xml", method="GET", request_headers=[], status=200,
        reason="OK", response_headers=[("Content-Type", "application/xml")], body=body,
        fetched_at=NOW, ip=None)
    bus = MemoryBus(BusSettings(), partitions=4)
    sent: list[bytes] = []
    original = bus.publish

    async def publish(topic: Topic, key: str, message: Message) -> None:
        sent.append(msgspec.json.encode(message))  # what Kafka would be handed
        await original(topic, key, message)

    bus.publish = publish  # type: ignore[method-assign]  # a spy; the real publish runs
    stage = ParserStage(settings, bus, blobs, archive,
                        work=ThreadPageWork(WorkContext(settings, blobs, archive)))
    task = FetchTask(task_id="t", url="http://a.test/s.xml", host="a.test",
                     kind=TaskKind.SITEMAP, depth=1)
    page = await stage.parse(FetchResult(task=task, outcome=FetchOutcome.OK, fetched_at=NOW,
                                         record=written.pointer), written.pointer)
    assert page.kind is TaskKind.SITEMAP and page.reason is Reason.SITEMAP
    assert page.links == [] and page.detail is not None and "3000 URLs" in page.detail
    assert sum(len(msgspec.json.decode(m)["links"]) for m in sent) == 3000
    assert max(len(m) for m in sent) < 1_000_000 and len(sent) > 5


def test_cassandra_url_state_has_the_sitemap_columns() -> None:
    # the Cassandra store adds missing columns to an existing table when it opens
    from common.adapters.cassandra import schema

    assert set(schema.URLS.columns) == set(schema.URL_COLUMNS)
    assert schema.URL_COLUMNS["kind"] == "text"
    assert schema.URL_COLUMNS["lastmod"] == "double"


def test_simulated_web_sitemaps_read_back() -> None:
    from simweb.scenarios import sitemaps
    from simweb.site import SimRequest, Site

    site = Site(sitemaps(), port=8123)

    def read(host: str, path: str, **kw: object) -> tuple[str, list[str], Reason]:
        reply = site.respond(SimRequest(host, path))
        assert reply.status == 200
        got = read_sitemap(reply.body, f"http://{host}:8123{path}", now=NOW, **kw)  # type: ignore[arg-type]
        return got.form, [e.url for e in got.pages + got.sitemaps], got.reason

    assert read("maps.test", "/sitemap_index.xml") == ("index", [
        "http://maps.test:8123/sitemaps/pages.xml", "http://maps.test:8123/sitemaps/fresh.xml.gz",
        "http://maps.test:8123/sitemaps/list.txt"], Reason.SITEMAP)
    form, listed, reason = read("maps.test", "/sitemaps/fresh.xml.gz")
    assert form == "urlset" and len(listed) == 3 and reason is Reason.SITEMAP
    assert read("maps.test", "/sitemaps/list.txt")[0] == "text"
    assert read("cdn.test", "/maps/sitemap.xml",
                vouched=frozenset({"maps.test:8123"}))[1] == [
        "http://maps.test:8123/cross/1", "http://cdn.test:8123/own/1"]
    assert read("hostile.test", "/bad/bomb.xml")[2] is Reason.SITEMAP_INVALID
    assert read("hostile.test", "/bad/malformed.xml")[1:] == (
        ["http://hostile.test:8123/m/1"], Reason.SITEMAP_INVALID)
    huge = site.respond(SimRequest("hostile.test", "/bad/huge.xml.gz")).body
    assert len(huge) < 200_000
    assert read("hostile.test", "/bad/huge.xml.gz")[1:] == (
        ["http://hostile.test:8123/h/1"], Reason.SITEMAP_CAPPED)


# -- the shape of a sitemap bounds what reading it costs ---------------------------------

ENTRY = b"<url><loc>http://a.test/1</loc></url>"
OPEN = b'<?xml version="1.0"?><urlset ' + NS.encode() + b">" + ENTRY


def hostile(middle: bytes, tail: bytes = b"</urlset>") -> bytes:
    """A gzip sitemap whose first entry is fine and whose rest is ``middle``."""
    return gzip.compress(OPEN + middle + tail, compresslevel=9)


def test_nesting_past_the_deepest_sitemap_ends_reading_at_once() -> None:
    # a million elements nested in an entry: 3 MB, 3 KB compressed
    body = hostile(b"<url>" + b"<a>" * 1_000_000, b"")
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_INVALID
    assert "nested deeper than 5" in (read.problem or "")
    assert [e.url for e in read.pages] == ["http://a.test/1"]
    assert read.bytes_read <= CHUNK  # the first piece, not the 3 MB


def test_a_news_sitemap_five_deep_is_read() -> None:
    body = (f'<urlset {NS} xmlns:news="http://www.google.com/schemas/sitemap-news/0.9">'
            "<url><loc>http://a.test/n</loc><news:news><news:publication>"
            "<news:name>The Test Times</news:name><news:language>en</news:language>"
            "</news:publication><news:title>T</news:title></news:news></url>"
            "</urlset>").encode()
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP and [e.url for e in read.pages] == ["http://a.test/n"]


def test_extensions_of_real_sitemaps_are_read() -> None:
    xhtml = 'xmlns:xhtml="http://www.w3.org/1999/xhtml"'
    image = 'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"'
    video = 'xmlns:video="http://www.google.com/schemas/sitemap-video/1.1"'
    xsi = 'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
    schemas = " ".join(["http://www.sitemaps.org/schemas/sitemap/0.9",
                        "http://www.sitemaps.org/schemas/sitemap/0.9/sitemap.xsd"] * 20)
    alternates = "".join(f'<xhtml:link rel="alternate" hreflang="l{n}" '
                         f'href="http://a.test/{n}/{"p" * 1900}"/>' for n in range(40))
    images = "".join(f"<image:image><image:loc>http://a.test/i{n}.jpg</image:loc>"
                     f"<image:caption><![CDATA[A <b>caption</b> {n}]]></image:caption>"
                     "</image:image>" for n in range(1000))
    body = (f'<?xml version="1.0" encoding="UTF-8"?>'
            f'<?xml-stylesheet type="text/xsl" href="/sitemap.xsl"?>\n'
            f"<!-- generated -->\n"
            f'<urlset {NS} {xhtml} {image} {video} {xsi} xsi:schemaLocation="{schemas}">\n'
            f"  <url>\n    <loc>http://a.test/x</loc>\n    <priority>0.5</priority>\n"
            f"    {alternates}{images}\n"
            f'    <video:video><video:title>V</video:title><video:restriction '
            f'relationship="allow">IE GB</video:restriction>'
            f'<video:player_loc allow_embed="yes">http://a.test/p</video:player_loc>'
            f"</video:video>\n  </url>\n"
            f"  <url><loc>http://a.test/y</loc></url>\n</urlset>\n").encode()
    read = read_sitemap(gzip.compress(body), HERE, now=NOW)
    assert read.reason is Reason.SITEMAP, read.problem
    assert [e.url for e in read.pages] == ["http://a.test/x", "http://a.test/y"]


def test_one_huge_attribute_is_not_waited_for() -> None:
    # one attribute of 5 MB: expat holds a tag whole, scanning it again on every piece
    body = hostile(b'<url><loc x="' + b"x" * (5 * 1024 * 1024) + b'">http://a.test/2</loc></url>')
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_INVALID and "markup" in (read.problem or "")
    assert [e.url for e in read.pages] == ["http://a.test/1"]
    assert read.bytes_read <= MAX_MARKUP_BYTES + 2 * CHUNK


def test_many_attributes_in_one_tag_are_not_waited_for() -> None:
    attributes = b" ".join(b'a%d="1"' % n for n in range(200_000))  # 2 MB
    body = hostile(b"<url><loc " + attributes + b">http://a.test/2</loc></url>")
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_INVALID and "markup" in (read.problem or "")
    assert read.bytes_read <= MAX_MARKUP_BYTES + 2 * CHUNK


def test_a_huge_comment_is_not_waited_for() -> None:
    body = hostile(b"<!--" + b"<" * (5 * 1024 * 1024) + b"-->")
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_INVALID and "markup" in (read.problem or "")
    assert read.bytes_read <= MAX_MARKUP_BYTES + 2 * CHUNK


@pytest.mark.parametrize(("tag", "problem"), [
    (b"<url><loc " + b" ".join(b'a%d="1"' % n for n in range(MAX_ATTRIBUTES + 1)) + b">",
     f"more than {MAX_ATTRIBUTES} attributes"),
    (b'<url><loc a="' + b"x" * (MAX_ATTRIBUTE_CHARS + 1) + b'">',
     f"attribute of more than {MAX_ATTRIBUTE_CHARS} characters"),
])
def test_attribute_caps(tag: bytes, problem: str) -> None:
    read = read_sitemap(hostile(tag + b"http://a.test/2</loc></url>"), HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_INVALID and problem in (read.problem or "")
    assert [e.url for e in read.pages] == ["http://a.test/1"]


@pytest.mark.parametrize(("middle", "problem"), [
    (b"<url><loc>http://a.test/2</loc></url><page><loc>http://a.test/3</loc></page>",
     "<page> in <urlset>"),
    (b"<url><loc>http://a.test/2</loc></url>stray text", "text outside an entry"),
    (b"<url><loc>http://a.test/2</loc>stray text</url>", "text outside an entry"),
])
def test_structure_a_sitemap_cannot_have_ends_reading(middle: bytes, problem: str) -> None:
    read = read_sitemap(hostile(middle + b"<url><loc>http://a.test/4</loc></url>"),
                        HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_INVALID and problem in (read.problem or "")
    assert "http://a.test/4" not in [e.url for e in read.pages]


def test_elements_past_the_cap_are_not_read() -> None:
    # flat junk inside one entry: each element costs a call, none is deeper than 3
    body = hostile(b"<url>" + b"<x/>" * 50_000 + b"</url>" + ENTRY)
    read = read_sitemap(body, HERE, now=NOW, max_elements=10_000)
    assert read.reason is Reason.SITEMAP_CAPPED and "10000 elements" in (read.problem or "")
    assert read.bytes_read < 100_000  # of 200 KB
    assert MAX_ELEMENTS >= 1_000_000  # room for a 50 MB image sitemap


def test_entries_without_a_url_count_to_the_cap() -> None:
    body = hostile(b"<url/>" * (PROTOCOL_MAX_URLS + 5))
    read = read_sitemap(body, HERE, now=NOW)
    assert read.reason is Reason.SITEMAP_CAPPED and read.invalid == PROTOCOL_MAX_URLS - 1
    text = read_sitemap(b"http://a.test/1\n" + b"a\n" * (PROTOCOL_MAX_URLS + 5), HERE,
                        now=NOW)
    assert text.reason is Reason.SITEMAP_CAPPED and text.invalid == PROTOCOL_MAX_URLS - 1
