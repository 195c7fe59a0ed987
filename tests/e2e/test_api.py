"""The control API of an embedded crawl, over real HTTP on loopback: auth, seeds that
get crawled, host blocks, pause and resume, figures, bad input, and the cluster-mode
variant over the same store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import Discovered, HostControl, Topic
from common.ports import Delivery, HostState
from common.settings import Settings, SettingsError
from common.urls import host_key
from crawler import cli
from crawler.api import ControlApi
from crawler.embedded import EmbeddedCrawler
from frontier.stats import collect
from simweb import SimWeb
from simweb.scenarios import seed
from tests.e2e.test_crawl_seed import page_hits, seed_settings

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def api_settings(out: Path, web: SimWeb | None = None) -> Settings:
    base = seed_settings(out, web) if web is not None else Settings().replace(
        crawl={"out_dir": str(out)})
    return base.replace(api={"token": TOKEN, "host": "127.0.0.1"})


class Client:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def __call__(self, method: str, path: str, *, body: Any = None, raw: bytes | None = None,
                       headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        async with self.session.request(method, self.base + path, data=data,
                                        headers=AUTH if headers is None else headers) as r:
            text = await r.text()
            assert r.content_type == "application/json", (r.status, text)
            return r.status, json.loads(text)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def client_for(crawler: EmbeddedCrawler, session: aiohttp.ClientSession) -> Client:
    assert crawler.api is not None
    return Client(session, f"http://127.0.0.1:{crawler.api.port}")


@pytest.mark.timeout(120)
async def test_seed_block_and_stats_through_the_api(tmp_path: Path,
                                                    session: aiohttp.ClientSession) -> None:
    async with SimWeb(seed(), dns=True) as web:
        crawler = EmbeddedCrawler(api_settings(tmp_path, web), serve_api=True)
        await crawler.start()
        try:
            api = client_for(crawler, session)
            assert await api("GET", "/v1/health", headers={}) == (200, {"status": "ok"})
            status, doc = await api("GET", "/v1/openapi.json", headers={})
            assert status == 200 and doc["openapi"].startswith("3.0")
            for headers in ({}, {"Authorization": "Bearer wrong"},
                            {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}):
                status, body = await api("GET", "/v1/stats", headers=headers)
                assert status == 401 and body["error"], headers
            assert (await api("POST", "/v1/seeds", body={"urls": web.seed_urls()},
                              headers={}))[0] == 401
            assert (await api("GET", "/v1/stats"))[0] == 200

            keys = {u.split("/")[2].split(":")[0]: host_key(u) for u in web.seed_urls()}
            status, host = await api("PUT", f"/v1/hosts/{keys['trap.test']}",
                                     body={"blocked": True})
            assert status == 200 and host["blocked"] is True
            assert host["host"] == keys["trap.test"]
            status, answer = await api("POST", "/v1/seeds", body={"urls": web.seed_urls()})
            assert status == 202
            assert answer["accepted"] == len(web.seed_urls()) and answer["hosts"] == 3
            await crawler.wait()

            hits = page_hits(web)
            status, stats = await api("GET", "/v1/stats")
            expected = await collect(crawler.store,
                                     seen_skipped=crawler.frontier.counters.seen_skipped,
                                     invalid=crawler.frontier.counters.invalid)
            status_host, trap = await api("GET", f"/v1/hosts/{keys['trap.test']}")
            status_news, news = await api("GET", f"/v1/hosts/{keys['news.test'].upper()}")
        finally:
            await crawler.close()

    assert hits["trap.test"] == 0 and hits["news.test"] > 0 and hits["shop.test"] > 0
    assert status == 200 and stats == msgspec.to_builtins(expected)
    assert stats["fetched"] == sum(hits.values())
    assert stats["blocked"] >= 1  # the trap.test seed was rejected as blocked
    assert status_host == 200 and trap["blocked"] is True and trap["pageCount"] == 0
    assert status_news == 200 and news["host"] == keys["news.test"]
    assert news["pageCount"] == hits["news.test"]


@pytest.mark.timeout(120)
async def test_pause_holds_dispatch_until_resume(tmp_path: Path,
                                                 session: aiohttp.ClientSession) -> None:
    async with SimWeb(seed(), dns=True) as web:
        settings = api_settings(tmp_path, web).replace(crawl={"max_pages": 6})
        crawler = EmbeddedCrawler(settings, serve_api=True)
        await crawler.start()
        try:
            api = client_for(crawler, session)
            assert await api("POST", "/v1/pause") == (200, {"paused": True})
            assert (await api("POST", "/v1/seeds", body={"urls": web.seed_urls()}))[0] == 202
            await asyncio.sleep(1.0)
            during_pause = len(web.log)  # robots.txt included
            assert not crawler.done()
            assert await api("POST", "/v1/resume") == (200, {"paused": False})
            await asyncio.wait_for(crawler.wait(), 60)
            after = sum(page_hits(web).values())
        finally:
            await crawler.close()
    assert during_pause == 0
    assert after == 6


@pytest.mark.timeout(60)
async def test_bad_input_gets_a_4xx_with_a_message(tmp_path: Path,
                                                   session: aiohttp.ClientSession) -> None:
    crawler = EmbeddedCrawler(api_settings(tmp_path), serve_api=True)
    await crawler.start()
    try:
        api = client_for(crawler, session)
        cases: list[tuple[str, str, bytes, int]] = [
            ("POST", "/v1/seeds", b"{not json", 400),
            ("POST", "/v1/seeds", b"", 400),
            ("POST", "/v1/seeds", b'{"urls": "http://a.test/"}', 422),
            ("POST", "/v1/seeds", b'{"urls": []}', 422),
            ("POST", "/v1/seeds", b'{"urls": ["http://a.test/"], "extra": 1}', 422),
            ("POST", "/v1/seeds", b'{"urls": ["http://a.test/"], "priority": -1}', 422),
            ("POST", "/v1/seeds", b'{"urls": ["http://a.test/"], "priority": 99}', 422),
            ("POST", "/v1/seeds", b'{"urls": ["ftp://a.test/x"]}', 422),
            ("POST", "/v1/seeds", b'{"urls": ["http://a.test/", "javascript:alert(1)"]}', 422),
            ("POST", "/v1/seeds", json.dumps(
                {"urls": [f"http://a.test/{i}" for i in range(10_001)]}).encode(), 422),
            ("PUT", "/v1/hosts/a.test", b"{}", 422),
            ("PUT", "/v1/hosts/a.test", b'{"blocked": "yes"}', 422),
            ("PUT", "/v1/hosts/a.test", b'{"crawlDelaySeconds": -1}', 422),
            ("PUT", "/v1/hosts/a.test", b'{"crawlDelaySeconds": 1e400}', 422),
            ("PUT", "/v1/hosts/a.test", b'{"maxPages": 1.5}', 422),
            ("PUT", "/v1/hosts/a.test", b'{"delay": 1}', 422),
            ("PUT", "/v1/hosts/a.test", b'{"blocked": ', 400),
            ("PUT", "/v1/hosts/a%20b", b'{"blocked": true}', 400),
            # names the URL Standard takes but no host can have, refused like such seeds
            ("PUT", "/v1/hosts/-x-", b'{"blocked": true}', 400),
            ("PUT", "/v1/hosts/x..test", b'{"crawlDelaySeconds": 1}', 400),
            ("GET", "/v1/hosts/-x-", b"", 400),
            ("POST", "/v1/seeds", b'{"urls": ["http://-x-/"]}', 422),
            ("POST", "/v1/seeds", b'{"urls": ["http://x..test/"]}', 422),
            ("GET", "/v1/hosts/unknown.test", b"", 404),
            ("GET", "/v1/nothing", b"", 404),
            ("DELETE", "/v1/stats", b"", 405),
        ]
        for method, path, raw, expected in cases:
            status, body = await api(method, path, raw=raw)
            assert status == expected, (method, path, raw[:60], status, body)
            assert isinstance(body["error"], str) and body["error"], (path, raw[:60])
        status, body = await api("POST", "/v1/seeds", raw=b'{"urls": ["ftp://a.test/x"]}')
        assert "ftp://a.test/x" in body["error"]
        status, stats = await api("GET", "/v1/stats")
        assert status == 200 and stats["known_urls"] == 0  # nothing was taken
        assert await crawler.store.get_host("a.test") is None
        for host in ("-x-", "x..test"):
            assert await crawler.store.get_host(host) is None, host
        status, body = await api("PUT", "/v1/hosts/x..test", raw=b'{"blocked": true}')
        assert "not a host name" in body["error"] and "empty label" in body["error"]
    finally:
        await crawler.close()


async def test_the_api_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    settings = Settings().replace(crawl={"out_dir": str(tmp_path)}, api={"port": 18080})
    with pytest.raises(SettingsError, match="CRAWLER_API_TOKEN"):
        EmbeddedCrawler(settings)


@pytest.mark.timeout(60)
async def test_cluster_mode_sends_host_changes_stores_switches_and_publishes_seeds(
        tmp_path: Path, session: aiohttp.ClientSession) -> None:
    settings = api_settings(tmp_path)
    store = SqliteStateStore(tmp_path / "state.sqlite")
    await store.open()
    bus = MemoryBus(settings.bus, partitions=1)
    topics = (Topic.DISCOVERED, Topic.CONTROL)
    bus.declare_group("frontier", topics)
    got: list[Discovered] = []
    controls: list[HostControl] = []
    done = asyncio.Event()

    async def handle(delivery: Delivery) -> None:
        if isinstance(delivery.message, HostControl):
            controls.append(delivery.message)
            return
        assert isinstance(delivery.message, Discovered)
        got.append(delivery.message)
        if len(got) == 2:
            done.set()

    consumer = asyncio.create_task(bus.consume("frontier", topics, handle))
    api = ControlApi(settings, bus, store)
    await api.start("127.0.0.1", 0)
    try:
        call = Client(session, f"http://127.0.0.1:{api.port}")
        await store.put_host(HostState(host="b.test", crawl_delay=3.0, page_count=7))
        status, host = await call("PUT", "/v1/hosts/b.test",
                                  body={"crawlDelaySeconds": 2, "maxPages": 50})
        assert status == 202
        assert host == {"host": "b.test", "crawlDelaySeconds": 2.0,
                        "robotsCrawlDelaySeconds": 3.0, "blocked": False, "maxPages": 50,
                        "pageCount": 7, "capped": False}
        # the owning frontier writes the row; the API only sends the change
        row = await store.get_host("b.test")
        assert row is not None and row.delay_override is None and row.max_pages is None
        status, host = await call("PUT", "/v1/hosts/b.test", body={"crawlDelaySeconds": None})
        assert status == 202 and host["crawlDelaySeconds"] is None
        assert await call("POST", "/v1/pause") == (200, {"paused": True})
        assert (await store.get_control()).paused
        assert await call("POST", "/v1/resume") == (200, {"paused": False})
        assert not (await store.get_control()).paused
        assert await call("POST", "/v1/blocked-paths", body={"pattern": "^/private/"}) == (
            200, {"patterns": ["^/private/"]})
        assert await call("POST", "/v1/blocked-paths", body={"pattern": "[a-"}) == (
            422, {"error": "invalid pattern: '[a-' is not a regular expression RE2 can "
                           "run: missing ]: [a-"})
        for pattern, why in ((r"(a)\1", "RE2 has no backreferences"),
                             ("(?=x)", "RE2 has no lookahead or lookbehind")):
            status, answer = await call("POST", "/v1/blocked-paths", body={"pattern": pattern})
            assert status == 422 and why in answer["error"], answer
        assert await call("GET", "/v1/blocked-paths") == (200, {"patterns": ["^/private/"]})
        assert (await store.get_control()).blocked_paths == ["^/private/"]
        assert (await call("DELETE", "/v1/blocked-paths?pattern=%5E%2Fnone"))[0] == 404
        assert (await call("DELETE", "/v1/blocked-paths"))[0] == 400
        assert await call("DELETE", "/v1/blocked-paths?pattern=%5E%2Fprivate%2F") == (
            200, {"patterns": []})
        status, _ = await call("POST", "/v1/seeds", body={
            "urls": ["http://B.test/a?utm_source=x", "http://c.test/"], "priority": 1})
        assert status == 202
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await api.stop()
        await bus.stop()
        await asyncio.wait_for(consumer, 10)
        await store.close()
    assert [(c.host, c.delay, c.clear_delay, c.max_pages) for c in controls] == [
        ("b.test", 2.0, False, 50), ("b.test", None, True, None)]
    urls_by_host = {m.host: [link.url for link in m.links] for m in got}
    assert urls_by_host == {"b.test": ["http://b.test/a"], "c.test": ["http://c.test/"]}
    assert all(link.priority == 1 for m in got for link in m.links)


@pytest.mark.timeout(120)
async def test_cli_talks_to_the_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with SimWeb(seed(), dns=True) as web:
        crawler = EmbeddedCrawler(api_settings(tmp_path, web).replace(crawl={"max_pages": 3}),
                                  serve_api=True)
        await crawler.start()
        try:
            assert crawler.api is not None
            base = f"http://127.0.0.1:{crawler.api.port}"
            shop = next(host_key(u) for u in web.seed_urls() if "//shop.test" in u)
            common = ["--api", base, "--token", TOKEN]
            code_block = await asyncio.to_thread(
                cli.main, ["host", shop, "--block", "--delay", "4", *common])
            out_block = capsys.readouterr().out
            code_seed = await asyncio.to_thread(cli.main, ["seed", *web.seed_urls(), *common])
            out_seed = capsys.readouterr().out
            await asyncio.wait_for(crawler.wait(), 60)
            code_stats = await asyncio.to_thread(cli.main, ["stats", *common])
            out_stats = capsys.readouterr().out
            code_get = await asyncio.to_thread(cli.main, ["host", shop, *common])
            out_get = capsys.readouterr().out
            code_bad = await asyncio.to_thread(
                cli.main, ["host", shop, "--api", base, "--token", "wrong"])
            err_bad = capsys.readouterr().err
            switches = []
            for argv in (["pause"], ["block-path", "^/private/"], ["block-path"],
                         ["block-path", "^/private/", "--remove"], ["resume"],
                         ["block-path", "(", "--remove"]):
                code = await asyncio.to_thread(cli.main, [*argv, *common])
                captured = capsys.readouterr()
                switches.append((code, captured.out.strip() or captured.err.strip()))
            hits = page_hits(web)
        finally:
            await crawler.close()
    assert code_block == 0 and json.loads(out_block)["blocked"] is True
    assert json.loads(out_block)["crawlDelaySeconds"] == 4.0
    assert code_seed == 0 and f"{len(web.seed_urls())} seed URLs sent" in out_seed
    fetched_line = next(line for line in out_stats.splitlines() if line.startswith("fetched"))
    assert code_stats == 0 and fetched_line.split() == ["fetched", str(sum(hits.values()))]
    assert code_get == 0 and json.loads(out_get)["blocked"] is True
    assert code_bad == 1 and "401" in err_bad
    assert hits["shop.test"] == 0
    assert switches[:5] == [(0, "paused"), (0, "^/private/"), (0, "^/private/"),
                            (0, "(no blocked path patterns)"), (0, "running")]
    assert switches[5][0] == 1 and "404" in switches[5][1]


class TimingOutStore(SqliteStateStore):
    """A store whose database stops answering, as Cassandra does under overload."""

    async def count_urls(self) -> dict[tuple[str, str], int]:
        from cassandra import OperationTimedOut

        raise OperationTimedOut("errors={'127.0.0.1:9042': 'Client request timeout'}")


async def test_a_store_that_cannot_answer_is_a_503_not_a_500(
        tmp_path: Path, session: aiohttp.ClientSession) -> None:
    settings = api_settings(tmp_path)
    store = TimingOutStore(tmp_path / "state.sqlite")
    await store.open()
    api = ControlApi(settings, MemoryBus(), store)
    await api.start("127.0.0.1", 0)
    try:
        async with session.get(f"http://127.0.0.1:{api.port}/v1/stats",
                               headers=AUTH) as resp:
            body = await resp.json()
            assert resp.status == 503, body
            assert resp.headers["Retry-After"] == "5"
        assert body == {"error": "the state store (Cassandra) cannot answer now; try again"}
    finally:
        await api.stop()
        await store.close()
