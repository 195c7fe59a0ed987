"""The robots.txt cache with a fake store and a fake fetcher (no network)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from common.messages import FetchOutcome
from common.ports import RobotsRecord, StateStore
from common.robots import RobotsBasis
from common.settings import Settings
from fetcher.http import RobotsResponse
from fetcher.robots_cache import RobotsCache

ORIGIN = "http://site.test"
ROBOTS = b"User-agent: *\nDisallow: /private\nCrawl-delay: 90\nSitemap: http://site.test/s.xml\n"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeStore:
    def __init__(self) -> None:
        self.rows: dict[str, RobotsRecord] = {}
        self.puts: list[RobotsRecord] = []

    async def get_robots(self, origin: str) -> RobotsRecord | None:
        return self.rows.get(origin)

    async def put_robots(self, row: RobotsRecord) -> None:
        self.rows[row.origin] = row
        self.puts.append(row)


class FakeFetcher:
    def __init__(self, *answers: RobotsResponse, delay: float = 0.0) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []
        self.delay = delay

    async def fetch_robots(self, origin: str) -> RobotsResponse:
        self.calls.append(origin)
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


def ok(body: bytes = ROBOTS) -> RobotsResponse:
    return RobotsResponse(200, body, None, FetchOutcome.OK)


def status(code: int) -> RobotsResponse:
    outcome = FetchOutcome.SERVER_ERROR if code >= 500 else FetchOutcome.HTTP_ERROR
    return RobotsResponse(code, b"", None, outcome)


def failed(outcome: FetchOutcome) -> RobotsResponse:
    return RobotsResponse(None, b"", "it failed", outcome)


SETTINGS = Settings().replace(fetcher={"robots_cache_ttl": 1000.0, "robots_error_retry": 60.0},
                              politeness={"max_crawl_delay": 30.0})


def make(fetcher: FakeFetcher, store: FakeStore | None = None,
         **kw: Any) -> tuple[RobotsCache, FakeStore, FakeClock]:
    store = store or FakeStore()
    clock = FakeClock()
    cache = RobotsCache(cast(StateStore, store), fetcher, SETTINGS, clock=clock, **kw)
    return cache, store, clock


async def test_2xx_rules_are_cached_for_the_ttl() -> None:
    fetcher = FakeFetcher(ok())
    cache, store, clock = make(fetcher)
    first = await cache.get(ORIGIN)
    assert first.fetched
    assert first.response is not None
    assert first.available
    assert first.basis is RobotsBasis.FILE
    assert first.allowed("http://site.test/public")
    assert not first.allowed("http://site.test/private/x")
    assert first.crawl_delay == 30.0  # 90 capped at max_crawl_delay
    assert first.sitemaps() == ["http://site.test/s.xml"]
    assert store.puts[0].expires_at == clock.now + 1000.0
    assert store.puts[0].body == ROBOTS
    clock.now += 999
    again = await cache.get(ORIGIN)
    assert not again.fetched
    assert again.response is None
    assert not again.allowed("http://site.test/private")
    assert fetcher.calls == [ORIGIN]
    clock.now += 2
    third = await cache.get(ORIGIN)
    assert third.fetched
    assert fetcher.calls == [ORIGIN, ORIGIN]
    assert cache.stats.memory_hits == 1


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410, 451])
async def test_4xx_allows_everything(code: int) -> None:
    cache, store, clock = make(FakeFetcher(status(code)))
    decision = await cache.get(ORIGIN)
    assert decision.available
    assert decision.basis is RobotsBasis.NO_FILE
    assert decision.allowed("http://site.test/private")
    assert decision.status == code
    assert store.puts[0].expires_at == clock.now + 1000.0


@pytest.mark.parametrize("response", [
    status(500), status(503), status(429), failed(FetchOutcome.TIMEOUT),
    failed(FetchOutcome.NETWORK_ERROR), failed(FetchOutcome.DNS_ERROR),
    failed(FetchOutcome.SSRF_BLOCKED),
])
async def test_failures_disallow_for_a_short_while(response: RobotsResponse) -> None:
    fetcher = FakeFetcher(response, ok())
    cache, store, clock = make(fetcher)
    # a third try: its back-off (30 s doubled twice) is over robots_error_retry (60 s)
    decision = await cache.get(ORIGIN, attempt=3)
    assert not decision.available
    assert not decision.allowed("http://site.test/anything")
    assert decision.allowed("http://site.test/robots.txt")
    assert decision.outcome is response.outcome
    assert store.puts[0].expires_at == clock.now + 60.0
    assert store.puts[0].status == (response.status or 0)
    clock.now += 59
    assert not (await cache.get(ORIGIN)).available
    clock.now += 2
    retried = await cache.get(ORIGIN)
    assert retried.fetched
    assert retried.available
    assert retried.allowed("http://site.test/public")
    assert len(fetcher.calls) == 2


async def test_a_failure_is_remembered_for_the_back_off_of_the_try_that_met_it() -> None:
    # backoff_base 30 s: a first try's failure is remembered 30 s, a second's 60 s (the
    # robots_error_retry cap here), so each retry of the URL asks robots.txt again
    fetcher = FakeFetcher(status(503), status(503), ok())
    cache, store, clock = make(fetcher)
    assert SETTINGS.politeness.backoff_base == 30.0
    first = await cache.for_url(ORIGIN + "/p", attempt=1)
    assert not first.available and first.expires_at == clock.now + 30.0
    clock.now += 29
    assert not (await cache.get(ORIGIN, attempt=2)).fetched  # still remembered
    clock.now += 1
    second = await cache.get(ORIGIN, attempt=2)
    assert second.fetched and second.expires_at == clock.now + 60.0
    assert [p.expires_at - p.fetched_at for p in store.puts] == [30.0, 60.0]
    clock.now += 60
    assert (await cache.get(ORIGIN, attempt=3)).available
    assert len(fetcher.calls) == 3


async def test_store_answer_is_used_before_fetching() -> None:
    store = FakeStore()
    fetcher = FakeFetcher(ok(b"User-agent: *\nDisallow: /\n"))
    cache, _, clock = make(fetcher, store)
    store.rows[ORIGIN] = RobotsRecord(origin=ORIGIN, status=200, body=ROBOTS,
                                      fetched_at=clock.now - 10, expires_at=clock.now + 10)
    decision = await cache.get(ORIGIN)
    assert not decision.fetched
    assert decision.allowed("http://site.test/public")
    assert fetcher.calls == []
    assert cache.stats.store_hits == 1
    clock.now += 11  # the stored answer expires: fetch again
    refreshed = await cache.get(ORIGIN)
    assert refreshed.fetched
    assert not refreshed.allowed("http://site.test/public")


async def test_stored_network_failure_still_disallows() -> None:
    store = FakeStore()
    cache, _, clock = make(FakeFetcher(ok()), store)
    store.rows[ORIGIN] = RobotsRecord(origin=ORIGIN, status=0, body=b"",
                                      fetched_at=clock.now, expires_at=clock.now + 30)
    decision = await cache.get(ORIGIN)
    assert not decision.available
    assert not decision.fetched


async def test_concurrent_calls_share_one_fetch() -> None:
    fetcher = FakeFetcher(ok(), delay=0.05)
    cache, store, _ = make(fetcher)
    decisions = await asyncio.gather(*(cache.get(ORIGIN) for _ in range(8)))
    assert fetcher.calls == [ORIGIN]
    assert len(store.puts) == 1
    assert all(d.fetched for d in decisions)  # every caller waits the politeness gap
    assert sum(d.response is not None for d in decisions) == 1  # archived once
    assert cache.stats.shared == 7


async def test_for_url_uses_the_origin() -> None:
    fetcher = FakeFetcher(ok())
    cache, _, _ = make(fetcher)
    await cache.for_url("http://SITE.test:80/a?b")
    await cache.for_url("http://site.test/c")
    assert fetcher.calls == ["http://site.test"]
    with pytest.raises(ValueError, match=r"."):
        await cache.for_url("ftp://site.test/")


async def test_memory_is_bounded() -> None:
    cache, _, _ = make(FakeFetcher(ok()), max_entries=2)
    for i in range(4):
        await cache.get(f"http://h{i}.test")
    assert cache.stats.size == 2
