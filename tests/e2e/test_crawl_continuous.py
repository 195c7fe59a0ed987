"""``crawler crawl --continuous``: the crawl keeps running when nothing is due, refreshes
stored pages when their time comes (on a clock the test moves: the crawler and the
simulated web read the same offset file), and ``crawler stats`` then tells new pages
from refreshes and what is due when."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from common.clock import set_offset
from simweb import Page, SimWeb
from simweb.clock import FileOffsetClock
from tests.e2e.crawl_support import host, scenario
from tests.e2e.freshness_support import HOUR, start_offset

HOURLY = [f"/hourly/{i}" for i in range(3)]
NEVER = [f"/never/{i}" for i in range(3)]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def page_requests(web: SimWeb) -> list[tuple[str, int]]:
    return [(r.path, r.status) for r in web.log.records("fresh.test")
            if r.path != "/robots.txt"]


@pytest.mark.timeout(120)
async def test_continuous_crawl_refreshes_and_reports_what_is_due(tmp_path: Path) -> None:
    clock_file = tmp_path / "clock-offset"
    offset = start_offset()
    set_offset(clock_file, offset)
    site = scenario(host("fresh.test", Page(path="/", words=40, links=(*HOURLY, *NEVER)),
                         *(Page(path=p, words=60, change_every=HOUR) for p in HOURLY),
                         *(Page(path=p, words=60) for p in NEVER)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env.update({"CRAWLER_CRAWL_CLOCK_OFFSET_FILE": str(clock_file),
                "CRAWLER_REFRESH_CHECK_INTERVAL": "0.1"})
    out = tmp_path / "crawl"
    async with SimWeb(site, dns=True, clock=FileOffsetClock(clock_file)) as web:
        common = ["--out", str(out), "--recrawl-interval", str(HOUR)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler.cli", "crawl", web.url("fresh.test"), *common,
            "--continuous", "--delay", "0.05", "--allow-network", "127.0.0.1/32",
            "--dns", web.dns_servers[0], "--no-progress", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=_default_sigint)
        async with asyncio.timeout(60):
            await web.log.wait_until(lambda log: len(page_requests(web)) >= 7)
        await asyncio.sleep(1.0)  # nothing is due: it waits, and fetches nothing
        assert proc.returncode is None
        first = page_requests(web)
        set_offset(clock_file, offset + HOUR + 60)
        async with asyncio.timeout(60):
            await web.log.wait_until(lambda log: len(page_requests(web)) >= 14)
        await asyncio.sleep(0.5)
        second = page_requests(web)[7:]
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        stats = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler.cli", "stats", *common, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        text, stats_err = await asyncio.wait_for(stats.communicate(), 60)

    assert proc.returncode == 130, err.decode()
    assert len(first) == 7 and {s for _, s in first} == {200}
    assert sorted(second) == sorted([(p, 200) for p in HOURLY]
                                    + [(p, 304) for p in ("/", *NEVER)])
    lines = [" ".join(line.split()) for line in text.decode().splitlines()]
    assert stats.returncode == 0, stats_err.decode()
    assert "fetched 14" in lines and "new pages 7" in lines and "refreshes 7" in lines
    # hourly pages changed: due again an hour after their refresh; the others did not
    # change: their interval doubled to two hours
    assert "refresh due:" in lines
    assert "next hour 3" in lines and "next day 4" in lines, lines
