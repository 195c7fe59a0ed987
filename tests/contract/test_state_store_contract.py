"""The StateStore contract: every adapter (SQLite, Cassandra) must pass these tests.

The last section covers what only the SQLite adapter promises (crash consistency,
schema versioning).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from common.adapters.sqlite_store import SqliteStateStore
from common.messages import NearIndex, Reason, RecordPointer, TaskKind, UrlStatus
from common.ports import HostState, RobotsRecord, SchemaError, SeedRoot, StateStore, UrlState
from tests.contract.conftest import StoreFactory, server_available

ROOT = Path(__file__).resolve().parents[2]
MAX_U64 = (1 << 64) - 1


def row(host: str, path: str, **fields: object) -> UrlState:
    return UrlState(host=host, url=f"http://{host}{path}", **fields)  # type: ignore[arg-type]


def full_row() -> UrlState:
    """A row with every field set to a value other than its default."""
    return UrlState(
        host="full.example", url="http://full.example/a?b=1", status=UrlStatus.DONE,
        reason=Reason.NEAR_DUPLICATE, detail="near http://full.example/b", depth=3,
        priority=2, hops=1, source="http://full.example/", discovered_at=1700000000.25,
        seq=42, last_fetch_at=1700000100.5, next_fetch_at=1700086500.75, attempts=2,
        http_status=200, etag='"abc"', last_modified="Tue, 15 Nov 1994 12:45:26 GMT",
        content_hash="sha256:" + "ab" * 32, simhash=MAX_U64, duplicate_of="http://x.example/",
        revisit_interval=86400.0, record=RecordPointer("crawl-00001.warc.gz", 1 << 40, 1234),
        kind=TaskKind.SITEMAP, lastmod=1690000000.5,
    )


# ------------------------------------------------------------------ url_state


async def test_add_urls_inserts_only_new_rows_and_returns_them(store: StateStore) -> None:
    a, b = row("h.example", "/a", depth=1), row("h.example", "/b", depth=1)
    first = await store.add_urls([a, b])
    assert [(r.host, r.url) for r in first] == [(a.host, a.url), (b.host, b.url)]

    c = row("h.example", "/c")
    b_again = row("h.example", "/b", depth=5)
    second = await store.add_urls([b_again, c, row("h.example", "/c", depth=9)])
    assert [(r.url, r.depth) for r in second] == [(c.url, 0)]
    stored_b = await store.get_url(b.host, b.url)
    assert stored_b is not None and stored_b.depth == 1  # the first insert wins
    stored_c = await store.get_url(c.host, c.url)
    assert stored_c is not None and stored_c.depth == 0
    # the same url under another host is another row
    other = await store.add_urls([UrlState(host="other.example", url=a.url)])
    assert len(other) == 1
    assert await store.add_urls([]) == []


async def test_add_urls_numbers_rows_in_insert_order(store: StateStore) -> None:
    batch1 = await store.add_urls([row("s.example", f"/{i}", seq=-7) for i in range(5)])
    batch2 = await store.add_urls([row("t.example", f"/{i}", seq=-7) for i in range(5)])
    seqs = [r.seq for r in batch1 + batch2]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for inserted in batch1 + batch2:
        stored = await store.get_url(inserted.host, inserted.url)
        assert stored == inserted  # the returned rows are what was stored


async def test_put_and_get_roundtrip_every_field(store: StateStore) -> None:
    full = full_row()
    await store.put_url(full)
    assert await store.get_url(full.host, full.url) == full

    sparse = UrlState(host="sparse.example", url="http://sparse.example/", reason=None,
                      simhash=0, record=None, next_fetch_at=0.0)
    await store.put_url(sparse)
    got = await store.get_url(sparse.host, sparse.url)
    assert got == sparse
    assert got is not None and got.status is UrlStatus.QUEUED and got.record is None
    assert await store.get_url("sparse.example", "http://sparse.example/missing") is None


async def test_put_url_replaces_the_row(store: StateStore) -> None:
    [added] = await store.add_urls([row("r.example", "/")])
    done = msgspec.structs.replace(added, status=UrlStatus.REJECTED, reason=Reason.ROBOTS,
                                   detail="disallowed")
    await store.put_url(done)
    assert await store.get_url(added.host, added.url) == done

    many = [full_row(), row("r.example", "/x", status=UrlStatus.FETCHED, attempts=1)]
    await store.put_urls(many)
    for r in many:
        assert await store.get_url(r.host, r.url) == r


async def test_due_urls_orders_by_priority_depth_seq_and_filters(store: StateStore) -> None:
    host = "due.example"
    rows = [
        row(host, "/p1d2", priority=1, depth=2),
        row(host, "/p0d3", priority=0, depth=3),
        row(host, "/p1d0", priority=1, depth=0),
        row(host, "/p0d3b", priority=0, depth=3),
        row(host, "/later", priority=0, depth=0, next_fetch_at=500.0),
        row(host, "/now", priority=2, depth=0, next_fetch_at=100.0),
        row(host, "/flying", priority=0, depth=0, status=UrlStatus.IN_FLIGHT),
        row(host, "/done", priority=0, depth=0, status=UrlStatus.DONE),
        row("elsewhere.example", "/", priority=0, depth=0),
    ]
    inserted = await store.add_urls(rows)
    assert len(inserted) == len(rows)
    seq = {r.url: r.seq for r in inserted}
    eligible = [r for r in inserted if r.host == host and r.status is UrlStatus.QUEUED
                and r.next_fetch_at <= 100.0]
    expected = [r.url for r in sorted(eligible, key=lambda r: (r.priority, r.depth,
                                                                 seq[r.url]))]
    assert expected[:3] == [f"http://{host}/p0d3", f"http://{host}/p0d3b",
                            f"http://{host}/p1d0"]  # the fixture means what it says

    due = await store.due_urls(host, now=100.0, limit=100)
    assert [r.url for r in due] == expected
    assert [r.url for r in await store.due_urls(host, now=100.0, limit=2)] == expected[:2]
    assert [r.url for r in await store.due_urls(host, now=99.0, limit=100)] == [
        u for u in expected if not u.endswith("/now")]
    later = await store.due_urls(host, now=1000.0, limit=100)
    assert f"http://{host}/later" in [r.url for r in later]
    assert await store.due_urls("nobody.example", now=1000.0, limit=10) == []


async def test_due_urls_follows_updates(store: StateStore) -> None:
    [a, b] = await store.add_urls([row("u.example", "/a"), row("u.example", "/b")])
    flying = msgspec.structs.replace(a, status=UrlStatus.IN_FLIGHT)
    await store.put_url(flying)
    assert [r.url for r in await store.due_urls("u.example", 10.0, 10)] == [b.url]


async def test_a_rejected_row_queued_again_is_due_and_counted(store: StateStore) -> None:
    # the frontier queues a URL rejected for its depth when a shorter path reaches it
    [deep, other] = await store.add_urls([
        row("q.example", "/deep", status=UrlStatus.REJECTED, reason=Reason.DEPTH, depth=5),
        row("q.example", "/other", depth=1)])
    assert [r.url for r in await store.due_urls("q.example", 10.0, 10)] == [other.url]
    again = msgspec.structs.replace(deep, status=UrlStatus.QUEUED, reason=None, depth=1)
    await store.put_url(again)
    assert [r.url for r in await store.due_urls("q.example", 10.0, 10)] == [
        again.url, other.url]  # same priority and depth: in the order they were found
    assert await store.count_urls() == {("queued", ""): 2}


async def test_next_due_time(store: StateStore) -> None:
    assert await store.next_due_time("n.example") is None
    await store.add_urls([
        row("n.example", "/a", next_fetch_at=300.0),
        row("n.example", "/b", next_fetch_at=200.0),
        row("n.example", "/c", next_fetch_at=50.0, status=UrlStatus.DONE),
        row("m.example", "/", next_fetch_at=10.0),
    ])
    assert await store.next_due_time("n.example") == 200.0
    assert await store.next_due_time("m.example") == 10.0
    await store.put_url(row("n.example", "/b", next_fetch_at=200.0, status=UrlStatus.DONE))
    assert await store.next_due_time("n.example") == 300.0


async def test_urls_with_status(store: StateStore) -> None:
    await store.add_urls([
        row("a.example", "/1", status=UrlStatus.IN_FLIGHT),
        row("a.example", "/2", status=UrlStatus.IN_FLIGHT),
        row("a.example", "/3"),
        row("b.example", "/1", status=UrlStatus.IN_FLIGHT),
        row("c.example", "/1", status=UrlStatus.DONE),
    ])
    everywhere = await store.urls_with_status(UrlStatus.IN_FLIGHT, limit=100)
    assert sorted(r.url for r in everywhere) == [
        "http://a.example/1", "http://a.example/2", "http://b.example/1"]
    assert all(r.status is UrlStatus.IN_FLIGHT for r in everywhere)
    one_host = await store.urls_with_status(UrlStatus.IN_FLIGHT, limit=100, host="a.example")
    assert sorted(r.url for r in one_host) == ["http://a.example/1", "http://a.example/2"]
    limited = await store.urls_with_status(UrlStatus.IN_FLIGHT, limit=2)
    assert len(limited) == 2 and all(r.status is UrlStatus.IN_FLIGHT for r in limited)
    assert await store.urls_with_status(UrlStatus.DEAD, limit=10) == []
    assert await store.urls_with_status(UrlStatus.DONE, limit=10, host="a.example") == []


async def test_hosts_with_status(store: StateStore) -> None:
    assert await store.hosts_with_status(UrlStatus.QUEUED) == []
    await store.add_urls([
        row("a.example", "/1"), row("a.example", "/2"), row("b.example", "/1"),
        row("c.example", "/1", status=UrlStatus.DONE),
    ])
    assert sorted(await store.hosts_with_status(UrlStatus.QUEUED)) == ["a.example",
                                                                       "b.example"]
    assert await store.hosts_with_status(UrlStatus.DONE) == ["c.example"]
    await store.put_url(row("b.example", "/1", status=UrlStatus.DONE))
    assert await store.hosts_with_status(UrlStatus.QUEUED) == ["a.example"]
    assert sorted(await store.hosts_with_status(UrlStatus.DONE)) == ["b.example",
                                                                     "c.example"]


async def test_count_urls(store: StateStore) -> None:
    assert await store.count_urls() == {}
    await store.add_urls([
        row("a.example", "/1"), row("a.example", "/2"),
        row("a.example", "/3", status=UrlStatus.REJECTED, reason=Reason.ROBOTS),
        row("b.example", "/1", status=UrlStatus.REJECTED, reason=Reason.ROBOTS),
        row("b.example", "/2", status=UrlStatus.REJECTED, reason=Reason.DEPTH),
        row("b.example", "/3", status=UrlStatus.DONE),
    ])
    assert await store.count_urls() == {
        ("queued", ""): 2, ("rejected", "robots"): 2, ("rejected", "depth"): 1,
        ("done", ""): 1}
    await store.put_url(row("a.example", "/1", status=UrlStatus.DONE,
                            reason=Reason.DUPLICATE))
    await store.put_url(row("b.example", "/2", status=UrlStatus.REJECTED,
                            reason=Reason.DEPTH))  # unchanged: counts unchanged
    assert await store.count_urls() == {
        ("queued", ""): 1, ("rejected", "robots"): 2, ("rejected", "depth"): 1,
        ("done", ""): 1, ("done", "duplicate"): 1}


async def test_put_url_and_host_writes_both_rows(store: StateStore) -> None:
    queued, _ = await store.add_urls([row("u.example", "/a"), row("u.example", "/b")])
    fetched = msgspec.structs.replace(queued, status=UrlStatus.FETCHED, attempts=1,
                                      http_status=200, last_fetch_at=10.0)
    host = HostState(host="u.example", page_count=1, next_allowed_at=11.0)
    await store.put_url_and_host(fetched, host)
    assert await store.get_url(fetched.host, fetched.url) == fetched
    assert await store.get_host("u.example") == host
    # the queue and the counts follow the row, as with put_url
    assert [r.url for r in await store.due_urls("u.example", 1e12, 10)] == ["http://u.example/b"]
    assert await store.count_urls() == {("queued", ""): 1, ("fetched", ""): 1}

    again = msgspec.structs.replace(host, page_count=2)
    done = msgspec.structs.replace(fetched, status=UrlStatus.DONE)
    await store.put_url_and_host(done, again)
    assert await store.get_url(done.host, done.url) == done
    assert await store.get_host("u.example") == again
    assert await store.count_urls() == {("queued", ""): 1, ("done", ""): 1}


async def test_put_url_and_host_writes_near_duplicate_entries(store: StateStore) -> None:
    queued, = await store.add_urls([row("n.example", "/a")])
    done = msgspec.structs.replace(queued, status=UrlStatus.DONE, attempts=1,
                                   simhash=MAX_U64)
    sketch = bytes(range(256)) * 2
    await store.put_url_and_host(done, HostState(host="n.example", page_count=1),
                                 index=NearIndex(keys=[3, 1, MAX_U64], sketch=sketch))
    assert await store.get_url(done.host, done.url) == done
    for key in (1, 3, MAX_U64):
        assert await store.simhash_candidates([key]) == [(done.url, MAX_U64)]
    assert await store.simhash_sketches([done.url]) == {done.url: sketch}
    with pytest.raises(ValueError, match="without a SimHash"):
        await store.put_url_and_host(msgspec.structs.replace(done, simhash=None),
                                     HostState(host="n.example"), index=NearIndex(keys=[1]))


async def test_put_url_and_host_refuses_rows_of_two_hosts(store: StateStore) -> None:
    with pytest.raises(ValueError, match="host row"):
        await store.put_url_and_host(row("v.example", "/"), HostState(host="w.example"))
    assert await store.get_url("v.example", "http://v.example/") is None
    assert await store.get_host("w.example") is None


# ---------------------------------------------------------------------- hosts


async def test_hosts_put_get_list(store: StateStore) -> None:
    assert await store.get_host("h.example") is None
    assert await store.list_hosts() == []
    full = HostState(host="h.example", crawl_delay=2.5, delay_override=10.0, blocked=True,
                     max_pages=50, page_count=7, next_allowed_at=1700000000.5,
                     last_response_time=0.25, capped=True)
    plain = HostState(host="g.example")
    await store.put_host(full)
    await store.put_host(plain)
    assert await store.get_host("h.example") == full
    got_plain = await store.get_host("g.example")
    assert got_plain == plain
    assert got_plain is not None and got_plain.blocked is False and got_plain.max_pages is None
    assert sorted(await store.list_hosts(), key=lambda h: h.host) == [plain, full]

    changed = HostState(host="h.example", page_count=8, next_allowed_at=5.0)
    await store.put_host(changed)
    assert await store.get_host("h.example") == changed
    assert len(await store.list_hosts()) == 2


# --------------------------------------------------------------------- robots


async def test_robots_put_get(store: StateStore) -> None:
    origin = "http://r.example:8080"
    assert await store.get_robots(origin) is None
    record = RobotsRecord(origin=origin, status=200,
                          body=b"User-agent: *\nDisallow: /private\n\xff\x00",
                          fetched_at=100.0, expires_at=86500.0)
    await store.put_robots(record)
    assert await store.get_robots(origin) == record
    failed = RobotsRecord(origin=origin, status=0, body=b"", fetched_at=200.0,
                          expires_at=800.0)
    await store.put_robots(failed)
    assert await store.get_robots(origin) == failed
    assert await store.get_robots("https://r.example") is None


# ------------------------------------------------------- content fingerprints


async def test_the_first_recorded_copy_holds_the_content(store: StateStore) -> None:
    h = "sha256:" + "11" * 32
    assert await store.content_holder(h) is None
    first = RecordPointer("crawl-00000.warc.gz", 0, 100)
    await store.record_content(h, "http://a.example/", first)
    assert await store.content_holder(h) == ("http://a.example/", first)
    later = RecordPointer("crawl-00000.warc.gz", 100, 50)
    await store.record_content(h, "http://b.example/", later)
    assert await store.content_holder(h) == ("http://a.example/", first)
    # the holder recording again (a redelivered fetch) changes nothing
    await store.record_content(h, "http://a.example/", later)
    assert await store.content_holder(h) == ("http://a.example/", first)
    assert await store.content_holder("sha256:" + "22" * 32) is None


async def test_concurrent_records_agree_on_one_holder(store: StateStore) -> None:
    h = "sha256:" + "33" * 32
    await asyncio.gather(*(
        store.record_content(h, f"http://x.example/{i}", RecordPointer("f", i, 1))
        for i in range(10)))
    found = await store.content_holder(h)
    assert found is not None
    holder, pointer = found
    assert pointer is not None and holder == f"http://x.example/{pointer.offset}"
    for _ in range(3):
        assert await store.content_holder(h) == found


async def test_simhash_index(store: StateStore) -> None:
    a_hash, b_hash = MAX_U64, 0x0123456789ABCDEF
    await store.add_simhash([1, 2, MAX_U64], "http://a.example/", a_hash)
    await store.add_simhash([2, 3], "http://b.example/", b_hash)
    await store.add_simhash([2, 3], "http://b.example/", b_hash)  # idempotent
    assert await store.simhash_candidates([1]) == [("http://a.example/", a_hash)]
    assert await store.simhash_candidates([MAX_U64]) == [("http://a.example/", a_hash)]
    assert sorted(await store.simhash_candidates([2])) == [
        ("http://a.example/", a_hash), ("http://b.example/", b_hash)]
    assert sorted(await store.simhash_candidates([1, 2, 3])) == [
        ("http://a.example/", a_hash), ("http://b.example/", b_hash)]
    assert await store.simhash_candidates([4]) == []
    assert await store.simhash_candidates([]) == []


async def test_simhash_sketches(store: StateStore) -> None:
    a, b = bytes(range(256)) * 2, b"\x00\x01\x02\x03"
    await store.add_simhash([1, 2], "http://a.example/", 5, a)
    await store.add_simhash([2], "http://b.example/", 6, b)
    await store.add_simhash([2], "http://b.example/", 6, b)  # idempotent
    await store.add_simhash([2, 3], "http://c.example/", 7)  # indexed without a sketch
    assert sorted(await store.simhash_candidates([2])) == [
        ("http://a.example/", 5), ("http://b.example/", 6), ("http://c.example/", 7)]
    assert await store.simhash_sketches(
        ["http://a.example/", "http://b.example/", "http://c.example/",
         "http://d.example/", "http://a.example/"]) == {
        "http://a.example/": a, "http://b.example/": b}
    assert await store.simhash_sketches([]) == {}
    await store.add_simhash([4], "http://b.example/", 8, a)  # refetched: the newest sketch
    assert await store.simhash_sketches(["http://b.example/"]) == {"http://b.example/": a}


async def test_seed_roots_by_domain(store: StateStore) -> None:
    a = SeedRoot(domain="example.co.uk", host="docs.example.co.uk", path="/guide/")
    b = SeedRoot(domain="example.co.uk", host="www.example.co.uk", path="/")
    c = SeedRoot(domain="other.org", host="other.org", path="/")
    await store.add_seed_roots([a, c])
    await store.add_seed_roots([b, a])  # a again: still one row
    await store.add_seed_roots([])
    assert sorted(await store.seed_roots("example.co.uk"), key=lambda r: r.host) == [a, b]
    assert await store.seed_roots("other.org") == [c]
    assert await store.seed_roots("none.test") == []


# ----------------------------------------------------------------- durability


async def test_data_survives_close_and_reopen(store_factory: StoreFactory) -> None:
    first = store_factory.make()
    await first.open()
    added = await first.add_urls([row("p.example", f"/{i}") for i in range(3)])
    await first.put_url(full_row())
    host = HostState(host="p.example", page_count=3, crawl_delay=1.5)
    await first.put_host(host)
    robots = RobotsRecord(origin="http://p.example", status=404, body=b"", fetched_at=1.0,
                          expires_at=2.0)
    await first.put_robots(robots)
    await first.record_content("sha256:" + "44" * 32, "http://p.example/0",
                               RecordPointer("crawl-00000.warc.gz", 0, 9))
    await first.add_simhash([7], "http://p.example/0", 99)
    await first.close()

    second = store_factory.make()
    await second.open()
    try:
        for r in added:
            assert await second.get_url(r.host, r.url) == r
        assert await second.get_url(full_row().host, full_row().url) == full_row()
        assert await second.get_host("p.example") == host
        assert await second.get_robots("http://p.example") == robots
        assert await second.content_holder("sha256:" + "44" * 32) == (
            "http://p.example/0", RecordPointer("crawl-00000.warc.gz", 0, 9))
        assert await second.simhash_candidates([7]) == [("http://p.example/0", 99)]
        assert (await second.count_urls())[("queued", "")] == 3
        # known rows stay known; new rows are numbered after the old ones
        assert await second.add_urls([row("p.example", "/0")]) == []
        [new] = await second.add_urls([row("p.example", "/new")])
        assert new.seq > max(r.seq for r in added)
    finally:
        await second.close()


# --------------------------------------------------- SQLite adapter specifics


async def test_sqlite_open_is_idempotent_and_close_twice_is_harmless(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "deep" / "er" / "state.sqlite")
    await store.open()
    await store.open()
    await store.add_urls([row("i.example", "/")])
    await store.close()
    await store.close()
    with pytest.raises(RuntimeError, match="not open"):
        await store.get_url("i.example", "http://i.example/")
    async with SqliteStateStore(tmp_path / "deep" / "er" / "state.sqlite") as again:
        assert await again.get_url("i.example", "http://i.example/") is not None


async def test_sqlite_two_stores_on_one_file_number_rows_apart(tmp_path: Path) -> None:
    """A second process (a tool adding seeds) may write while the crawl runs."""
    path = tmp_path / "state.sqlite"
    async with SqliteStateStore(path) as one, SqliteStateStore(path) as two:
        added = []
        for i in range(5):
            added += await one.add_urls([row("a.example", f"/{i}")])
            added += await two.add_urls([row("b.example", f"/{i}"), row("a.example", f"/{i}")])
        assert len(added) == 10  # the second store saw the first one's rows
        seqs = [r.seq for r in added]
        assert seqs == list(range(seqs[0], seqs[0] + 10))
        assert (await two.count_urls())[("queued", "")] == 10


async def test_sqlite_uses_wal(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "state.sqlite") as store:
        await store.add_urls([row("w.example", "/")])
        assert (tmp_path / "state.sqlite-wal").exists()
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    async with SqliteStateStore(path):
        pass
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_version SET version = version + 1")
    db.close()
    store = SqliteStateStore(path)
    with pytest.raises(SchemaError, match="newer"):
        await store.open()
    await store.close()


async def test_sqlite_file_from_before_sitemaps_gains_their_columns(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    async with SqliteStateStore(path) as store:
        await store.put_url(row("a.example", "/", status=UrlStatus.DONE))
    db = sqlite3.connect(path)
    with db:  # the url_state table as it was before kind and lastmod
        db.execute("ALTER TABLE url_state DROP COLUMN kind")
        db.execute("ALTER TABLE url_state DROP COLUMN lastmod")
    db.close()
    async with SqliteStateStore(path) as store:
        old = await store.get_url("a.example", "http://a.example/")
        assert old is not None and old.kind is None and old.lastmod is None
        await store.put_url(row("a.example", "/s.xml", kind=TaskKind.SITEMAP, lastmod=5.0))
        new = await store.get_url("a.example", "http://a.example/s.xml")
        assert new is not None and (new.kind, new.lastmod) == (TaskKind.SITEMAP, 5.0)


async def test_sqlite_file_from_before_sketches_gains_their_table(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    async with SqliteStateStore(path) as store:
        await store.add_simhash([1], "http://a.example/", 5)
    db = sqlite3.connect(path)
    with db:  # the schema as it was before sketches were kept
        db.execute("DROP TABLE simhash_sketches")
    db.close()
    async with SqliteStateStore(path) as store:
        assert await store.simhash_sketches(["http://a.example/"]) == {}
        await store.add_simhash([1], "http://b.example/", 6, b"sketch")
        assert await store.simhash_candidates([1]) == [
            ("http://a.example/", 5), ("http://b.example/", 6)]
        assert await store.simhash_sketches(["http://a.example/", "http://b.example/"]) == {
            "http://b.example/": b"sketch"}


async def test_sqlite_rejects_simhash_outside_64_bits(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "state.sqlite") as store:
        with pytest.raises(ValueError, match="64-bit"):
            await store.add_simhash([1], "http://a.example/", 1 << 64)
        with pytest.raises(ValueError, match="64-bit"):
            await store.put_url(row("a.example", "/", simhash=-1))
        assert await store.simhash_candidates([1]) == []


_WRITER = textwrap.dedent("""
    import asyncio, sys
    from common.adapters.sqlite_store import SqliteStateStore
    from common.ports import UrlState

    async def main() -> None:
        store = SqliteStateStore(sys.argv[1])
        await store.open()
        batch = 0
        while True:
            await store.add_urls([UrlState(host=f"h{i % 7}.example",
                                           url=f"http://h{i % 7}.example/{batch}/{i}")
                                  for i in range(1000)])
            batch += 1
            print(batch, flush=True)

    asyncio.run(main())
""")


async def test_sqlite_survives_sigkill_mid_write(tmp_path: Path) -> None:
    """A writer killed at a random moment leaves whole batches, never part of one."""
    path = tmp_path / "state.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WRITER, str(path), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    batches = 0
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            while batches < 15:
                line = await proc.stdout.readline()
                if not line:
                    break
                batches = int(line)
        if batches >= 15:
            await asyncio.sleep(0.005)  # past building the next batch: inside its write
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.returncode is None:
            proc.kill()
        _, errors = await proc.communicate()
    assert batches >= 15, errors.decode(errors="replace")
    assert proc.returncode == -signal.SIGKILL

    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute("SELECT COUNT(*), MAX(seq) FROM url_state").fetchone()
    db.close()
    async with SqliteStateStore(path) as store:
        counts = await store.count_urls()
        total = counts[("queued", "")]
        assert total % 1000 == 0 and total >= 15 * 1000
        assert rows == (total, total)
        [new] = await store.add_urls([UrlState(host="h0.example", url="http://h0.example/n")])
        assert new.seq == total + 1  # numbering continues after the last whole batch


# -------------------------------------------------------------------- harness


async def test_server_probe_sees_a_loopback_listener() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # the kernel completes the handshake; nothing needs to accept
        port = listener.getsockname()[1]
        assert await asyncio.to_thread(server_available, port)
    assert not await asyncio.to_thread(server_available, port)
    with pytest.raises(ValueError, match="loopback"):
        server_available(port, host="192.0.2.1")
