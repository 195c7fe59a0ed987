"""A running frontier queues the refreshes that fall due (not only at start), for the
hosts it owns in cluster mode, at the refresh level and with the stored validators."""

from __future__ import annotations

import asyncio
import contextlib

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import FetchTask, RecordPointer, Topic, UrlStatus
from common.ports import Delivery, UrlState
from common.settings import Settings
from frontier.service import Frontier

HOSTS = [f"h{i}.test" for i in range(8)]
T0 = 1_900_000_000.0


async def test_refreshes_fall_due_while_running_for_the_owned_hosts_only(
        store: SqliteStateStore) -> None:
    now = [T0]
    settings = Settings().replace(crawl={"recrawl_interval": 3600.0},
                                  refresh={"check_interval": 0.05},
                                  politeness={"default_delay": 0.0})
    bus = MemoryBus(partitions=4)
    rows = [UrlState(host=h, url=f"http://{h}/", status=UrlStatus.DONE, priority=0,
                     last_fetch_at=T0 - 1800, etag=f'"{h}"', revisit_interval=3600.0,
                     record=RecordPointer("w.warc.gz", 0, 10)) for h in HOSTS]
    await store.put_urls(rows)
    frontier = Frontier(settings, bus, store, embedded=False, clock=lambda: now[0])
    owned = frozenset({0, 1})
    await frontier.assign(owned)  # looks at start: nothing is due yet
    assert frontier.counters.refreshed == 0
    mine = {h for h in HOSTS if bus.partition_of(Topic.DISCOVERED, h) in owned}
    assert 0 < len(mine) < len(HOSTS)

    got: list[FetchTask] = []
    all_sent = asyncio.Event()

    async def collect(delivery: Delivery) -> None:
        assert isinstance(delivery.message, FetchTask)
        got.append(delivery.message)
        if len(got) >= len(mine):
            all_sent.set()

    bus.declare_group("fetcher", (Topic.FETCH,))
    consumer = asyncio.create_task(bus.consume("fetcher", (Topic.FETCH,), collect))
    runner = asyncio.create_task(frontier.run())
    try:
        await asyncio.sleep(0.3)
        assert got == []  # running, nothing due
        now[0] = T0 + 1801  # an hour after the last fetch: due
        await asyncio.wait_for(all_sent.wait(), 10)
        await asyncio.sleep(0.2)
    finally:
        await frontier.stop()
        await bus.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(consumer, runner), 10)

    assert sorted(t.host for t in got) == sorted(mine)  # once each, owned hosts only
    assert all(t.priority == 3 and t.etag == f'"{t.host}"' for t in got)
    assert all(t.previous_record is not None for t in got)
    assert frontier.counters.dispatched_refresh == len(mine)
    assert frontier.counters.dispatched_new == 0
    assert frontier.counters.refresh_checks >= 1
    for h in set(HOSTS) - mine:  # another frontier's: left as they were
        row = await store.get_url(h, f"http://{h}/")
        assert row is not None and row.status is UrlStatus.DONE


async def test_ready_hosts_go_out_by_level_with_refreshes_on_their_share(
        store: SqliteStateStore) -> None:
    """The order across hosts: seeds and sitemap files (0), links (1), sitemap-listed
    URLs (2) first by level; refreshes (3) take every fourth slot while new pages wait
    (share 0.25), and every slot once none waits."""
    frontier = Frontier(Settings(), MemoryBus(), store)
    record = RecordPointer("w.warc.gz", 0, 10)
    wanted = {"seed.test": (0, None), "link.test": (1, None), "listed.test": (2, None),
              "link2.test": (1, None), "seed2.test": (0, None)}
    wanted |= {f"r{i}.test": (3, record) for i in range(4)}
    for host, (prio, rec) in wanted.items():
        slot = await frontier.hosts.slot(host)
        slot.head.append(UrlState(host=host, url=f"http://{host}/", priority=prio,
                                  record=rec))
        slot.ready = True
        frontier.dispatcher.push_ready(host, slot)
    order = []
    while (host := frontier.dispatcher.pop_ready()) is not None:
        frontier.hosts.slots[host].ready = False
        order.append(host)
    assert order == ["seed.test", "seed2.test", "link.test", "r0.test", "link2.test",
                     "listed.test", "r1.test", "r2.test", "r3.test"]
