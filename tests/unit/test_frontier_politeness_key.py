"""The frontier with politeness keyed on the address (CRAWLER_POLITENESS_KEY=ip): hosts
on one address take turns, and a host whose DNS answer changed moves to its new
address's queue at its next dispatch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import Discovered, FetchOutcome, FetchResult, FetchTask, Link, Topic
from common.ports import Delivery
from common.settings import Settings
from frontier.service import Frontier


async def test_hosts_on_one_address_take_turns_and_a_changed_answer_moves_a_host(
        store: SqliteStateStore) -> None:
    answers = {"a.test": ("10.0.0.1",), "b.test": ("10.0.0.1",)}

    async def resolve(name: str, port: int | None) -> Sequence[str]:
        return answers[name]

    bus = MemoryBus()
    bus.declare_group("fetcher", (Topic.FETCH,))
    settings = Settings().replace(politeness={"default_delay": 0.0, "key": "ip"})
    frontier = Frontier(settings, bus, store, resolve=resolve)
    for host in answers:
        links = [Link(url=f"http://{host}/1")]
        await frontier.handle(Delivery(topic=Topic.DISCOVERED, key=host,
                                       message=Discovered(host=host, links=links)))
    got: list[FetchTask] = []
    routes: list[tuple[str, int]] = []  # each task's bus key and partition
    arrived = asyncio.Event()

    async def collect(delivery: Delivery) -> None:
        assert isinstance(delivery.message, FetchTask)
        got.append(delivery.message)
        routes.append((delivery.key, delivery.partition))
        arrived.set()

    async def tasks(want: int) -> None:
        async with asyncio.timeout(5):
            while len(got) < want:
                arrived.clear()
                await arrived.wait()

    consumer = asyncio.create_task(bus.consume("fetcher", (Topic.FETCH,), collect))
    runner = asyncio.create_task(frontier.run())
    try:
        await tasks(1)
        await asyncio.sleep(0.3)  # room for a second task that must not come
        assert len(got) == 1, got
        first = got[0]
        assert first.politeness_key == "10.0.0.1"
        # published under the address, on its partition: one fetcher holds its gate
        assert routes[0] == ("10.0.0.1", bus.partition_of(Topic.FETCH, "10.0.0.1"))
        other = "b.test" if first.host == "a.test" else "a.test"
        answers[other] = ("10.0.0.2",)  # its answer changes while it waits its turn
        result = FetchResult(task=first, outcome=FetchOutcome.OK, status=200,
                             fetched_at=frontier.clock())
        await frontier.handle(Delivery(topic=Topic.FETCHED, key=first.host,
                                       message=result))
        await tasks(2)
        assert (got[1].host, got[1].politeness_key) == (other, "10.0.0.2")
        assert routes[1][0] == "10.0.0.2"  # the new address's partition
        assert frontier.key_moves == 1
    finally:
        await frontier.stop()
        await bus.stop()
        await asyncio.wait_for(asyncio.gather(consumer, runner), 10)


async def test_a_result_of_an_earlier_owner_rests_the_whole_domain(
        store: SqliteStateStore) -> None:
    delay = 0.5
    bus = MemoryBus()
    bus.declare_group("fetcher", (Topic.FETCH,))
    settings = Settings().replace(politeness={"default_delay": delay, "key": "domain"})
    frontier = Frontier(settings, bus, store)
    # a request to a.shared.test that this frontier did not send has just ended
    old = FetchTask(task_id="earlier", url="http://a.shared.test/x", host="a.shared.test")
    ended = frontier.clock()
    await frontier.handle(Delivery(topic=Topic.FETCHED, key=old.host, message=FetchResult(
        task=old, outcome=FetchOutcome.OK, status=200, fetched_at=ended)))
    links = [Link(url="http://b.shared.test/1")]
    await frontier.handle(Delivery(topic=Topic.DISCOVERED, key="b.shared.test",
                                   message=Discovered(host="b.shared.test", links=links)))
    got: list[FetchTask] = []
    arrived = asyncio.Event()

    async def collect(delivery: Delivery) -> None:
        assert isinstance(delivery.message, FetchTask)
        got.append(delivery.message)
        arrived.set()

    consumer = asyncio.create_task(bus.consume("fetcher", (Topic.FETCH,), collect))
    runner = asyncio.create_task(frontier.run())
    try:
        await asyncio.wait_for(arrived.wait(), 5)
    finally:
        await frontier.stop()
        await bus.stop()
        await asyncio.wait_for(asyncio.gather(consumer, runner), 10)
    # b.shared.test shares the domain: its request waited out a.shared.test's gap
    assert (got[0].host, got[0].politeness_key) == ("b.shared.test", "shared.test")
    assert got[0].issued_at >= ended + delay


async def test_fixed_answers_key_hosts_on_default_and_other_ports(
        store: SqliteStateStore) -> None:
    from fetcher.dns import Answer, DnsError, Resolver

    class NoDns:
        """Every name is unknown: only the fixed answers resolve (no query leaves)."""

        async def query(self, host: str, qtype: str) -> Answer:
            raise DnsError(host, "unknown", not_found=True)

        async def close(self) -> None:
            pass

    resolver = Resolver(backend=NoDns(), overrides=["a.test:443:10.0.0.5",
                                                    "b.test:*:10.0.0.5",
                                                    "c.test:8080:10.0.0.7"])
    settings = Settings().replace(politeness={"key": "ip"})
    frontier = Frontier(settings, MemoryBus(), store, resolve=resolver.resolve)
    keys = {}
    for host in ("a.test", "b.test", "c.test:8080", "[::1]:8080", "10.0.0.5:81", "d.test"):
        keys[host] = await frontier.keys.key_of(host, await frontier.hosts.slot(host))
    assert keys == {"a.test": "10.0.0.5", "b.test": "10.0.0.5", "c.test:8080": "10.0.0.7",
                    "[::1]:8080": "::1", "10.0.0.5:81": "10.0.0.5",
                    "d.test": "d.test"}  # no answer: a queue of its own
    await resolver.close()
