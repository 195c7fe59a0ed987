"""A crawl and the simulated web on one settable clock, moved through simulated days.

:class:`SimulatedCrawl` runs the embedded crawler (kept running, as ``crawler crawl
--continuous`` does) against a :class:`simweb.SimWeb` whose pages change on their own
schedule (``Page.change_every``). Both read the same clock: the wall clock plus the
seconds in an offset file (``crawl.clock_offset_file``, ``simweb.clock``).
:meth:`SimulatedCrawl.advance` moves that clock forward, waits for the frontier's next
look for due refreshes and then for the crawl to settle (nothing queued that is due,
nothing in flight), so each step of a window is a deterministic step of the schedule.

The clock starts just after a day boundary of simulated time, so pages that change
hourly or daily change exactly between the steps of an hourly walk.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from common.clock import set_offset
from common.ports import UrlState
from common.settings import Settings
from crawler.embedded import EmbeddedCrawler
from simweb import SimWeb
from simweb.clock import FileOffsetClock
from simweb.model import Scenario
from tests.e2e.crawl_support import absolute, read_state, settings_for

HOUR = 3600.0
DAY = 86_400.0
SETTLE_TIMEOUT = 60.0  # seconds a step may take at most


def start_offset(now: float | None = None) -> float:
    """An offset that puts the simulated clock 60 s after the start of a day, at least
    a day ahead of the wall clock."""
    now = time.time() if now is None else now
    return (math.ceil(now / DAY) + 1) * DAY + 60.0 - now


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class SimulatedCrawl:
    """An embedded crawl of a simulated web, both on the clock of ``clock_file``."""

    def __init__(self, scenario: Scenario, out: Path, **sections: Mapping[str, Any]) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.clock_file = out / "clock-offset"
        self.offset = start_offset()
        set_offset(self.clock_file, self.offset)
        self.web = SimWeb(scenario, dns=True, clock=FileOffsetClock(self.clock_file))
        self.out = out
        self.sections = dict(sections)
        self.settings: Settings | None = None
        self.crawler: EmbeddedCrawler | None = None

    async def __aenter__(self) -> SimulatedCrawl:
        await self.web.start()
        # page work on threads: a restart needs no new worker processes
        crawl = {"clock_offset_file": str(self.clock_file), "page_processes": 0,
                 **self.sections.pop("crawl", {})}
        refresh = {"check_interval": 0.05, **self.sections.pop("refresh", {})}
        self.settings = settings_for(self.web, self.out / "crawl", crawl=crawl,
                                     refresh=refresh, **self.sections)
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
        await self.web.stop()

    @property
    def now(self) -> float:
        """The simulated time."""
        return time.time() + self.offset

    async def open(self) -> None:
        """Start the crawler (resuming what its folder holds)."""
        assert self.settings is not None
        self.crawler = EmbeddedCrawler(self.settings, serve_api=False)
        await self.crawler.start()

    async def close(self) -> None:
        if self.crawler is not None:
            await self.crawler.close()
            self.crawler = None

    async def restart(self) -> None:
        """Stop the crawler and start it again on the same folder (a restart)."""
        await self.close()
        await self.open()
        await self.settle()

    async def seed(self, seeds: Iterable[str]) -> None:
        assert self.crawler is not None
        await self.crawler.frontier.seed([absolute(self.web, s) for s in seeds])

    async def settle(self) -> None:
        """Until nothing is due or in flight (seen twice in a row)."""
        crawler = self.crawler
        assert crawler is not None
        await asyncio.wait_for(crawler.wait(poll=0.02), SETTLE_TIMEOUT)

    async def advance(self, seconds: float) -> None:
        """Move the clock forward, let the frontier look for due refreshes once after
        the move (two finished looks: the first may have begun before it), and settle."""
        crawler = self.crawler
        assert crawler is not None
        counters = crawler.frontier.counters
        looked = counters.refresh_checks
        self.offset += seconds
        set_offset(self.clock_file, self.offset)
        await until(lambda: counters.refresh_checks >= looked + 2,
                    "the frontier's look for due refreshes")
        await self.settle()

    async def walk(self, steps: int, step: float = HOUR) -> None:
        for _ in range(steps):
            await self.advance(step)

    async def rows(self) -> dict[str, UrlState]:
        assert self.settings is not None
        rows, _ = await read_state(self.settings)
        return rows

    def page_hits(self, host: str, since: int = 0) -> list[str]:
        """Paths of the page requests (robots.txt left out) that reached ``host``, from
        the ``since``-th record of the request log."""
        return [r.path for r in self.web.log.records()[since:]
                if r.host == host and r.path != "/robots.txt"]
