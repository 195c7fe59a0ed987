"""Operator patterns run in linear time (RE2): catastrophic-backtracking patterns meet
inputs built to make a backtracking engine explode, and every entry point (settings,
API, frontier) refuses what RE2 cannot run with a clear message.

These tests carry no timing assertions: with a backtracking engine each of them would
run for minutes to years, so the pytest timeout below is what fails a regression."""

from __future__ import annotations

import asyncio

import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import Discovered, FetchTask, Link, Reason, Topic, UrlStatus
from common.patterns import PatternError, compile_operator_pattern
from common.ports import CrawlControl, Delivery
from common.settings import Settings, SettingsError, TrapSettings
from crawler.api import ApiError, check_pattern
from frontier.policy import TrapRules, path_blocked, trap_reason
from frontier.service import Frontier

pytestmark = pytest.mark.timeout(30)

N = 100_000  # far past where a backtracking engine gives up (30 is enough for minutes)

# (pattern, adversarial text that does not match, text that matches)
CATASTROPHIC = [
    (r"^(a+)+$", "a" * N + "!", "a" * N),
    (r"^/redos/(a+)+$", "/redos/" + "a" * N + "!", "/redos/" + "a" * N),
    (r"(a|aa)+$", "a" * N + "!", "b" + "a" * N),
    (r"^(a|a?)+$", "a" * N + "!", "a" * N),
    (r"(.*a){20}", "a" * 19 + "b" * N, "ba" * 20),
    (r"^(\w+\s?)*$", "word " * (N // 5) + "!", "word " * (N // 5)),
    (r"^(a|b|ab)*c$", "ab" * N, "ab" * N + "c"),
]


@pytest.mark.parametrize(("pattern", "miss", "hit"), CATASTROPHIC)
def test_catastrophic_patterns_answer_correctly_on_adversarial_input(
        pattern: str, miss: str, hit: str) -> None:
    compiled = compile_operator_pattern(pattern)
    assert compiled.search(miss) is None
    assert compiled.search(hit) is not None


def test_path_blocked_and_trap_rules_use_the_linear_engine() -> None:
    evil, caught = "http://a.test/redos/" + "a" * N + "!", "http://a.test/redos/" + "a" * N
    compiled = (compile_operator_pattern(r"^/redos/(a+)+$"),)
    assert not path_blocked(evil, compiled)
    assert path_blocked(caught, compiled)
    rules = TrapRules.from_settings(TrapSettings(blocked_patterns=(r"^/redos/(a+)+$",),
                                                 max_url_length=N * 2))
    assert trap_reason(evil, "a.test", 1, rules) is None
    assert trap_reason(caught, "a.test", 1, rules) is Reason.BLOCKED


@pytest.mark.parametrize(("pattern", "why"), [
    (r"(a)\1", "backreferences"),
    (r"(?P<x>a)(?P=x)", "backreferences"),
    (r"(?=x)", "lookahead"),
    (r"foo(?!bar)", "lookahead"),
    (r"(?<=a)b", "lookbehind"),
    (r"(?<!a)b", "lookbehind"),
    (r"/end\Z", r"\z"),
    ("[a-", "missing ]"),
    ("(", "missing )"),
])
def test_patterns_re2_cannot_run_are_refused_with_the_reason(pattern: str, why: str) -> None:
    with pytest.raises(PatternError, match="not a regular expression RE2 can run") as err:
        compile_operator_pattern(pattern)
    assert why in str(err.value)
    with pytest.raises(ApiError) as api_err:
        check_pattern(pattern)
    assert api_err.value.status == 422 and why in api_err.value.message
    with pytest.raises(SettingsError, match="CRAWLER_TRAPS_BLOCKED_PATTERNS") as set_err:
        Settings.from_env({"CRAWLER_TRAPS_BLOCKED_PATTERNS": pattern})
    assert why in str(set_err.value)
    with pytest.raises(SettingsError, match="CRAWLER_TRAPS_BLOCKED_PATTERNS"):
        TrapRules.from_settings(TrapSettings(blocked_patterns=(pattern,)))


def test_ordinary_patterns_keep_their_meaning() -> None:
    for pattern, hit, miss in [(r"^/private/", "/private/x", "/x/private/"),
                               (r"\?sort=", "/p?sort=up", "/p?order=sort"),
                               (r"(?i)^/CART\b", "/cart/1", "/carts"),
                               (r"^/a/\d{4}-\d{2}$", "/a/2026-01", "/a/2026-1"),
                               (r"\.(jpe?g|png)$", "/x.JPG".lower(), "/x.jpg/")]:
        compiled = compile_operator_pattern(pattern)
        assert compiled.search(hit) is not None, (pattern, hit)
        assert compiled.search(miss) is None, (pattern, miss)


async def test_the_issue_pattern_neither_freezes_discovery_nor_dispatch(
        store: SqliteStateStore) -> None:
    # the report: ^/redos/(a+)+$ POSTed, then one link /redos/ + 29 'a' + '!' froze the
    # loop for 45 s when discovered and 72 s when dequeued. Here the URL is as long as
    # the URL length cap lets it be.
    bus = MemoryBus()
    bus.declare_group("fetcher", (Topic.FETCH,))
    settings = Settings().replace(politeness={"default_delay": 0.0,
                                              "max_in_flight_per_host": 4})
    frontier = Frontier(settings, bus, store)
    evil = "/redos/" + "a" * 1900 + "!"
    links = [Link(url=f"http://r.test{p}", depth=1) for p in (evil, "/redos/aaa", "/ok")]
    await frontier.handle(Delivery(topic=Topic.DISCOVERED, key="r.test",
                                   message=Discovered(host="r.test", links=links[:1])))
    # the pattern arrives while the evil URL waits in the queue (checked at dispatch)
    frontier.apply_control(CrawlControl(blocked_paths=[r"^/redos/(a+)+$"]))
    await frontier.handle(Delivery(topic=Topic.DISCOVERED, key="r.test",
                                   message=Discovered(host="r.test", links=links[1:])))
    blocked = await store.get_url("r.test", "http://r.test/redos/aaa")
    assert blocked is not None and blocked.reason is Reason.BLOCKED

    got: list[FetchTask] = []
    enough = asyncio.Event()

    async def collect(delivery: Delivery) -> None:
        assert isinstance(delivery.message, FetchTask)
        got.append(delivery.message)
        if len(got) >= 2:
            enough.set()

    consumer = asyncio.create_task(bus.consume("fetcher", (Topic.FETCH,), collect))
    runner = asyncio.create_task(frontier.run())
    try:
        await asyncio.wait_for(enough.wait(), 10)
    finally:
        await frontier.stop()
        await bus.stop()
        await asyncio.wait_for(asyncio.gather(consumer, runner), 10)
    assert sorted(t.url for t in got) == sorted(["http://r.test" + evil, "http://r.test/ok"])
    row = await store.get_url("r.test", "http://r.test" + evil)
    # dispatched: queued in the store until its result, in flight in memory
    assert row is not None and row.status is UrlStatus.QUEUED
    assert "http://r.test" + evil in frontier.hosts.slots["r.test"].flying_urls()


async def test_a_stored_pattern_re2_cannot_run_is_skipped(
        store: SqliteStateStore, caplog: pytest.LogCaptureFixture) -> None:
    # a control row written by an older version (Python syntax) does not stop the crawl
    frontier = Frontier(Settings(), MemoryBus(), store)
    frontier.apply_control(CrawlControl(blocked_paths=[r"(a)\1", r"^/x"]))
    assert "RE2" in caplog.text and "ignored" in caplog.text
    links = [Link(url="http://d.test/x/1", depth=1), Link(url="http://d.test/aa", depth=1)]
    await frontier.handle(Delivery(topic=Topic.DISCOVERED, key="d.test",
                                   message=Discovered(host="d.test", links=links)))
    x = await store.get_url("d.test", "http://d.test/x/1")
    aa = await store.get_url("d.test", "http://d.test/aa")
    assert x is not None and x.reason is Reason.BLOCKED
    assert aa is not None and aa.status is UrlStatus.QUEUED
