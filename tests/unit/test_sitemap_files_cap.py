"""The per-host cap of sitemap files and their place below the pages: pure rules
(frontier/policy.py, common/sitemaps.py), and the count in the host row, which a
SQLite crawl folder keeps across a restart (Cassandra: tests/integration)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from common.adapters.sqlite_store import SqliteStateStore
from common.messages import Reason, TaskKind
from common.ports import HostState, UrlState
from common.settings import Settings
from common.sitemaps import read_sitemap
from frontier.policy import first_sitemap_fetch, sitemap_files_refusal, sitemap_links

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
NOW = 1_780_000_000.0


def sitemap_row(**kw: object) -> UrlState:
    return UrlState(host="a.test", url="http://a.test/s/1.xml", kind=TaskKind.SITEMAP,
                    **kw)  # type: ignore[arg-type]


def test_only_the_first_fetch_of_a_sitemap_file_counts() -> None:
    assert first_sitemap_fetch(sitemap_row())
    assert not first_sitemap_fetch(sitemap_row(attempts=1))  # a retry
    assert not first_sitemap_fetch(sitemap_row(last_fetch_at=NOW))  # a refresh
    assert not first_sitemap_fetch(UrlState(host="a.test", url="http://a.test/p"))


def test_a_sitemap_file_past_the_cap_is_refused_with_a_reason() -> None:
    under = HostState(host="a.test", sitemap_files=2)
    at = HostState(host="a.test", sitemap_files=3)
    assert sitemap_files_refusal(sitemap_row(), under, 3) is None
    refused = sitemap_files_refusal(sitemap_row(), at, 3)
    assert refused is not None and refused[0] is Reason.SITEMAP_FILES
    assert "3 sitemap files" in refused[1] and "MAX_FILES_PER_HOST" in refused[1]
    # pages, retries and refreshes of files already counted are not held back
    page = UrlState(host="a.test", url="http://a.test/p")
    assert sitemap_files_refusal(page, at, 3) is None
    assert sitemap_files_refusal(sitemap_row(attempts=1), at, 3) is None
    assert sitemap_files_refusal(sitemap_row(last_fetch_at=NOW), at, 3) is None


def index(count: int) -> bytes:
    entries = "".join(f"<sitemap><loc>http://a.test/s/{i}.xml</loc></sitemap>"
                      for i in range(count))
    return f"<sitemapindex {NS}>{entries}</sitemapindex>".encode()


def test_an_index_longer_than_the_cap_gives_only_the_cap() -> None:
    read = read_sitemap(index(5_000), "http://a.test/index.xml", now=NOW,
                        max_sitemaps=40)
    assert [e.url for e in read.sitemaps] == [f"http://a.test/s/{i}.xml" for i in range(40)]
    assert read.sitemaps_over == 4_960 and read.reason is Reason.SITEMAP
    assert "4960 sitemaps past the per-host cap" in read.summary()
    # the protocol's cap still counts every entry read
    capped = read_sitemap(index(5_000), "http://a.test/index.xml", now=NOW,
                          max_urls=1_000, max_sitemaps=40)
    assert len(capped.sitemaps) == 40 and capped.sitemaps_over == 960
    assert capped.reason is Reason.SITEMAP_CAPPED
    # a urlset's pages are no sitemap files
    urlset = "".join(f"<url><loc>http://a.test/p/{i}</loc></url>" for i in range(100))
    pages = read_sitemap(f"<urlset {NS}>{urlset}</urlset>".encode(),
                         "http://a.test/s.xml", now=NOW, max_sitemaps=1)
    assert len(pages.pages) == 100 and pages.sitemaps_over == 0


def test_listed_sitemap_files_queue_below_the_pages_by_default() -> None:
    s = Settings()
    assert s.sitemaps.max_files_per_host == 1_000
    links, listed = 1, s.sitemaps.priority  # 0 is the highest level
    assert s.sitemaps.file_priority > max(links, listed)
    assert s.sitemaps.file_priority < s.crawl.priority_levels
    # those robots.txt names stay at the seed priority: the first ones
    named = sitemap_links(["http://a.test/index.xml"], "http://a.test/", s)
    assert [link.priority for link in named] == [s.crawl.seed_priority]
    # a cap of sitemap files reaches the default page cap even at 100 URLs a file
    assert s.sitemaps.max_files_per_host * 100 >= s.traps.max_pages_per_host


async def test_the_count_survives_a_restart_and_an_older_folder(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = SqliteStateStore(path)
    await store.open()
    await store.put_host(HostState(host="a.test", sitemap_files=7))
    await store.put_host(HostState(host="old.test", page_count=4))
    await store.close()
    with sqlite3.connect(path) as db:  # old.test as a version before the column made it
        db.execute("UPDATE hosts SET sitemap_files = NULL WHERE host = 'old.test'")
    store = SqliteStateStore(path)
    await store.open()
    try:
        a = await store.get_host("a.test")
        old = await store.get_host("old.test")
        assert a is not None and a.sitemap_files == 7
        assert old is not None and (old.page_count, old.sitemap_files) == (4, 0)
    finally:
        await store.close()
    with sqlite3.connect(path) as db:  # a folder made before the column existed
        db.execute("ALTER TABLE hosts DROP COLUMN sitemap_files")
    store = SqliteStateStore(path)
    await store.open()
    try:
        a = await store.get_host("a.test")
        assert a is not None and a.sitemap_files == 0
        await store.put_host(HostState(host="a.test", sitemap_files=8))
        again = await store.get_host("a.test")
        assert again is not None and again.sitemap_files == 8
    finally:
        await store.close()


def test_a_head_of_lower_priority_rows_is_read_again_when_better_ones_come() -> None:
    from frontier.policy import head_outranked

    files = [sitemap_row(priority=3), sitemap_row(priority=3)]
    assert head_outranked(files, 2)  # a page a sitemap lists goes before the files
    assert not head_outranked(files, 3) and not head_outranked(files, None)
    assert not head_outranked([], 0)  # no head: the next read is in order anyway
    mixed = [UrlState(host="a.test", url="http://a.test/p", priority=1), *files]
    assert head_outranked(mixed, 2)  # ahead of the head's last row
    assert not head_outranked(mixed[:1], 1)
