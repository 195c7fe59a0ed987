"""A cluster frontier that renders keeps a host resting while a page of it waits for
its verdict (a render service may be loading its scripts from the host), and rests the
host's delay from the verdict on; embedded mode and a crawl without rendering do not."""

from __future__ import annotations

from pathlib import Path

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import FetchOutcome, FetchResult, FetchTask, StatusUpdate, Topic, UrlStatus
from common.ports import Delivery, UrlState
from common.settings import Settings
from frontier.service import Frontier
from tests.frontier_support import fly

URL = "http://a.test/p"
DELAY = 2.0
TIMEOUT = 15.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _rests(tmp_path: Path, *, render: bool, embedded: bool = False,
                 verdict_with_result: bool = False) -> tuple[float, float]:
    """When the host may be fetched again after the page's fetch result (at 1000 s,
    fetched then) and after its verdict (at 1010 s)."""
    settings = Settings().replace(
        render={"enabled": render, "page_timeout": TIMEOUT},
        politeness={"default_delay": DELAY, "response_time_factor": 0.0})
    clock = Clock()
    store = SqliteStateStore(tmp_path / "state.sqlite")
    await store.open()
    try:
        frontier = Frontier(settings, MemoryBus(), store, clock=clock, embedded=embedded)
        await store.add_urls([UrlState(host="a.test", url=URL)])
        row = await store.get_url("a.test", URL)
        assert row is not None
        await fly(frontier, row, "t")
        verdict = StatusUpdate(url=URL, host="a.test", status=UrlStatus.DONE,
                               content_hash="sha256:aa")
        task = FetchTask(task_id="t", url=URL, host="a.test", attempt=1, delay=DELAY)
        result = FetchResult(task=task, outcome=FetchOutcome.OK, status=200,
                             fetched_at=clock.now, content_hash="sha256:aa",
                             verdict=verdict if verdict_with_result else None)
        await frontier.handle(Delivery(topic=Topic.FETCHED, key="a.test", message=result))
        after_result = frontier.hosts.slots["a.test"].rest_until()
        clock.now += 10
        await frontier.handle(Delivery(topic=Topic.STATUS, key="a.test", message=verdict))
        after_verdict = frontier.hosts.slots["a.test"].rest_until()
        row = await store.get_url("a.test", URL)
        assert row is not None and row.status is UrlStatus.DONE
        return after_result, after_verdict
    finally:
        await store.close()


async def test_a_page_awaiting_its_verdict_holds_its_host(tmp_path: Path) -> None:
    after_result, after_verdict = await _rests(tmp_path, render=True)
    assert after_result == 1000 + 2 * TIMEOUT  # at most a render and its retry
    assert after_verdict == 1010 + DELAY  # the delay from the verdict on


async def test_a_page_judged_with_its_result_holds_nothing(tmp_path: Path) -> None:
    assert await _rests(tmp_path, render=True, verdict_with_result=True) == (
        1000 + DELAY, 1000 + DELAY)


async def test_without_rendering_or_in_embedded_mode_nothing_is_held(tmp_path: Path) -> None:
    assert await _rests(tmp_path / "off", render=False) == (1000 + DELAY, 1000 + DELAY)
    assert await _rests(tmp_path / "embedded", render=True, embedded=True) == (
        1000 + DELAY, 1000 + DELAY)
