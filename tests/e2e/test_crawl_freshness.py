"""Keeping a crawl fresh, end to end on a simulated clock: pages that change often are
fetched more often than pages that never change, revisit intervals stay within their
bounds, a restart keeps the schedule, and refreshes take their share of the fetch slots
(no more) while pages never fetched are also waiting.

Each test walks a window of simulated hours (see tests/e2e/freshness_support.py): the
crawler and the simulated web read one clock that the test moves forward, and the
crawler keeps running between the steps as ``crawler crawl --continuous`` does. The
evidence is the simulated web's request log.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from common.messages import UrlStatus
from simweb import Page
from tests.e2e.crawl_support import host, key, scenario
from tests.e2e.freshness_support import HOUR, SimulatedCrawl

HOURLY = [f"/hourly/{i}" for i in range(3)]
NEVER = [f"/never/{i}" for i in range(3)]
START, LEAST, MOST = 4 * HOUR, HOUR, 16 * HOUR
BOUNDS = {"min_interval": LEAST, "max_interval": MOST}


def fresh_site() -> object:
    return scenario(host("fresh.test",
                         Page(path="/", words=40, links=(*HOURLY, *NEVER)),
                         *(Page(path=p, words=60, change_every=HOUR) for p in HOURLY),
                         *(Page(path=p, words=60) for p in NEVER)))


@pytest.mark.timeout(120)
async def test_pages_that_change_are_fetched_more_often_within_bounds(tmp_path: Path) -> None:
    async with SimulatedCrawl(fresh_site(), tmp_path,  # type: ignore[arg-type]
                              crawl={"recrawl_interval": START}, refresh=BOUNDS) as sim:
        await sim.seed(["fresh.test/"])
        await sim.settle()
        await sim.walk(30)
        fetched = Counter(sim.page_hits("fresh.test"))
        statuses = [(r.path, r.status) for r in sim.web.log.records("fresh.test")]
        rows = await sim.rows()
        web = sim.web

    # hourly pages: 0 h, 4 h (changed: 2 h), 6 h (changed: 1 h), then every hour to 30 h
    # pages that never change: 0 h, 4 h (same: 8 h), 12 h (16 h), 28 h (16 h, the most)
    for path in HOURLY:
        assert fetched[path] == 27, fetched
    for path in (*NEVER, "/"):
        assert fetched[path] == 4, fetched
    # the unchanged pages were asked conditionally and answered 304 after the first time
    assert [s for p, s in statuses if p == NEVER[0]] == [200, 304, 304, 304]
    for path in HOURLY:
        row = rows[key(web, "fresh.test" + path)]
        assert row.revisit_interval == LEAST and row.status is UrlStatus.DONE
    for path in (*NEVER, "/"):
        assert rows[key(web, "fresh.test" + path)].revisit_interval == MOST
    assert all(LEAST <= (r.revisit_interval or 0) <= MOST for r in rows.values())


@pytest.mark.timeout(120)
async def test_a_restart_keeps_the_schedule(tmp_path: Path) -> None:
    async with SimulatedCrawl(fresh_site(), tmp_path,  # type: ignore[arg-type]
                              crawl={"recrawl_interval": START}, refresh=BOUNDS) as sim:
        await sim.seed(["fresh.test/"])
        await sim.settle()
        await sim.walk(8)  # hourly pages at 1 h now, the others due at 12 h
        before = await sim.rows()
        mark = len(sim.web.log)
        await sim.restart()
        at_restart = sim.page_hits("fresh.test", mark)
        after = await sim.rows()
        await sim.walk(6)  # to 14 h
        later = sim.page_hits("fresh.test", mark)

    assert at_restart == []  # nothing was due at the restart: nothing fetched
    assert {u: (r.revisit_interval, r.last_fetch_at, r.next_fetch_at)
            for u, r in after.items()} == {u: (r.revisit_interval, r.last_fetch_at,
                                               r.next_fetch_at) for u, r in before.items()}
    counted = Counter(later)
    for path in HOURLY:
        assert counted[path] == 6  # every hour, as before the restart
    for path in (*NEVER, "/"):
        assert counted[path] == 1  # at 12 h, as scheduled before the restart


def budget_site(refreshing: int, new: int, links: int) -> object:
    hosts = [host(f"r{i}.test", Page(path="/", words=40, links=("/a", "/b")),
                  Page(path="/a", words=40), Page(path="/b", words=40))
             for i in range(refreshing)]
    hosts += [host(f"n{i}.test",
                   Page(path="/", words=40, links=tuple(f"/p{j}" for j in range(links))),
                   *(Page(path=f"/p{j}", words=40) for j in range(links)))
              for i in range(new)]
    return scenario(*hosts)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("share", [0.25, 0.5])
async def test_refreshes_take_their_share_while_new_pages_wait(tmp_path: Path,
                                                               share: float) -> None:
    # many new hosts, so that one is ready while others wait for their results: the
    # refreshes meet waiting new pages until they run out (with few new hosts, all of
    # them could be awaiting their results at once and the refreshes take every slot)
    async with SimulatedCrawl(budget_site(8, 16, 4), tmp_path,  # type: ignore[arg-type]
                              crawl={"recrawl_interval": START},
                              refresh={"share": share},
                              # fetch slots, not the hosts' gaps, are what is short
                              politeness={"default_delay": 0.0},
                              fetcher={"concurrency": 1}) as sim:
        await sim.seed([f"r{i}.test/" for i in range(8)])
        await sim.settle()
        mark = len(sim.web.log)
        # the stored pages fall due and new hosts are seeded at the same moment
        await sim.seed([f"n{i}.test/" for i in range(16)])
        await sim.advance(START)
        kinds = ["refresh" if r.host.startswith("r") else "new"
                 for r in sim.web.log.records()[mark:] if r.path != "/robots.txt"]

    assert kinds.count("refresh") == 24 and kinds.count("new") == 80
    # while both kinds waited: up to the last request of the kind that ran out first
    end = min(len(kinds) - 1 - kinds[::-1].index(kind) for kind in ("new", "refresh"))
    window = kinds[:end + 1]
    taken = window.count("refresh") / len(window)
    assert share - 0.1 <= taken <= share + 0.05, (taken, "".join(k[0] for k in kinds))
    assert window[:4].count("new") >= 2  # discovery is never starved, not even at first
