"""The frontier works on many hosts at once and on each host one step at a time.

The store is the real SQLite store, with calls about chosen hosts held at a gate until
the test opens it (a slow store for those hosts only)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import (
    Discovered,
    FetchOutcome,
    FetchResult,
    FetchTask,
    Link,
    Message,
    NearIndex,
    StatusUpdate,
    Topic,
    UrlStatus,
)
from common.ports import Delivery, HostState, UrlState
from common.settings import Settings
from frontier.service import Frontier, HostLocks, OwnershipGate
from tests.frontier_support import fly

LIMIT = 5.0  # seconds any single wait in these tests may take


class GatedStore(SqliteStateStore):
    """SQLite store whose calls about a held host wait until the host is released, and
    which records (host, call, task name) for every call about a host."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.held: dict[str, asyncio.Event] = {}
        self.waiting: dict[str, asyncio.Event] = {}  # set when a call waits at the gate
        self.calls: list[tuple[str, str, str]] = []
        self.fail_put_host: set[str] = set()  # hosts whose next write of its row raises
        self.fail_result: set[str] = set()  # hosts whose next result write raises
        self.landed_result: set[str] = set()  # ... raises after it was applied

    def hold(self, host: str) -> None:
        self.held[host] = asyncio.Event()
        self.waiting[host] = asyncio.Event()

    def release(self, host: str) -> None:
        self.held.pop(host).set()

    async def _gate(self, host: str, call: str) -> None:
        task = asyncio.current_task()
        self.calls.append((host, call, task.get_name() if task else "?"))
        gate = self.held.get(host)
        if gate is not None:
            self.waiting[host].set()
            await gate.wait()

    async def get_url(self, host: str, url: str) -> UrlState | None:
        await self._gate(host, "get_url")
        return await super().get_url(host, url)

    async def put_url(self, row: UrlState) -> None:
        await self._gate(row.host, "put_url")
        await super().put_url(row)

    async def put_url_and_host(self, row: UrlState, host: HostState, *,
                               index: NearIndex | None = None) -> None:
        await self._gate(row.host, "put_url_and_host")
        if row.host in self.fail_result:
            self.fail_result.discard(row.host)
            raise OSError("store unavailable")
        await super().put_url_and_host(row, host, index=index)
        if row.host in self.landed_result:
            self.landed_result.discard(row.host)
            raise OSError("timed out (but applied)")

    async def get_host(self, host: str) -> HostState | None:
        await self._gate(host, "get_host")
        return await super().get_host(host)

    async def put_host(self, row: HostState) -> None:
        await self._gate(row.host, "put_host")
        if row.host in self.fail_put_host:
            self.fail_put_host.discard(row.host)
            raise OSError("store unavailable")
        await super().put_host(row)

    async def due_urls(self, host: str, now: float, limit: int) -> list[UrlState]:
        await self._gate(host, "due_urls")
        return await super().due_urls(host, now, limit)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[GatedStore]:
    s = GatedStore(tmp_path / "state.sqlite")
    await s.open()
    try:
        yield s
    finally:
        for gate in s.held.values():
            gate.set()
        await s.close()


def _settings(**politeness: object) -> Settings:
    return Settings().replace(politeness={"default_delay": 0.0, **politeness})


async def _in_flight(frontier: Frontier | None, store: GatedStore, host: str,
                     task_id: str = "t") -> FetchResult:
    """A URL of ``host`` in flight (attempt 1) and the result that answers it: a task
    ``frontier`` dispatched, or (None) one an earlier owner handed out."""
    url = f"http://{host}/p"
    await store.add_urls([UrlState(host=host, url=url)])
    row = await store.get_url(host, url)
    assert row is not None
    if frontier is not None:
        await fly(frontier, row, task_id)
    task = FetchTask(task_id=task_id, url=url, host=host, attempt=1)
    return FetchResult(task=task, outcome=FetchOutcome.OK, status=200, fetched_at=1.0,
                       content_hash="sha256:aa")


def _delivery(topic: Topic, key: str, message: Message) -> Delivery:
    return Delivery(topic=topic, key=key, message=message)


async def _discover(frontier: Frontier, host: str, paths: list[str]) -> None:
    links = [Link(url=f"http://{host}{p}") for p in paths]
    await frontier.handle(_delivery(Topic.DISCOVERED, host,
                                    Discovered(host=host, links=links)))


# ------------------------------------------------------------------ the two locks


async def test_host_locks_serialize_one_host_only_and_are_dropped_when_idle() -> None:
    locks = HostLocks()
    order: list[str] = []
    a_inside = asyncio.Event()
    let_a_go = asyncio.Event()

    async def first_a() -> None:
        async with locks.hold("a"):
            order.append("a1 in")
            a_inside.set()
            await let_a_go.wait()
            order.append("a1 out")

    async def second(host: str) -> None:
        async with locks.hold(host):
            order.append(f"{host} in")

    t1 = asyncio.create_task(first_a())
    await asyncio.wait_for(a_inside.wait(), LIMIT)
    t2 = asyncio.create_task(second("a"))
    t3 = asyncio.create_task(second("b"))
    await asyncio.wait_for(t3, LIMIT)  # another host is not held up
    assert order == ["a1 in", "b in"]
    assert locks.locked("a") and not t2.done()
    let_a_go.set()
    await asyncio.wait_for(asyncio.gather(t1, t2), LIMIT)
    assert order == ["a1 in", "b in", "a1 out", "a in"]
    assert len(locks) == 0


async def test_the_exclusive_side_waits_for_shared_holders_and_keeps_new_ones_out() -> None:
    gate = OwnershipGate()
    events: list[str] = []
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def reader(name: str, hold: bool) -> None:
        async with gate.shared():
            events.append(f"{name} in")
            if hold:
                inside.set()
                await leave.wait()
            events.append(f"{name} out")

    async def writer() -> None:
        async with gate.exclusive():
            events.append("writer in")
            await asyncio.sleep(0)
            events.append("writer out")

    r1 = asyncio.create_task(reader("r1", hold=True))
    await asyncio.wait_for(inside.wait(), LIMIT)
    w = asyncio.create_task(writer())
    await asyncio.sleep(0.01)
    r2 = asyncio.create_task(reader("r2", hold=False))
    await asyncio.sleep(0.01)
    assert events == ["r1 in"]  # the writer waits for r1, r2 waits behind the writer
    assert gate.shared_holders == 1 and not gate.exclusive_held
    leave.set()
    await asyncio.wait_for(asyncio.gather(r1, w, r2), LIMIT)
    assert events == ["r1 in", "r1 out", "writer in", "writer out", "r2 in", "r2 out"]


async def test_a_cancelled_exclusive_waiter_lets_shared_holders_in_again() -> None:
    gate = OwnershipGate()
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def hold_shared() -> None:
        async with gate.shared():
            inside.set()
            await leave.wait()

    async def take_exclusive() -> None:
        async with gate.exclusive():
            pass

    holder = asyncio.create_task(hold_shared())
    await asyncio.wait_for(inside.wait(), LIMIT)
    writer = asyncio.create_task(take_exclusive())
    await asyncio.sleep(0.01)
    writer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writer

    async def quick_reader() -> str:
        async with gate.shared():
            return "in"

    assert await asyncio.wait_for(quick_reader(), LIMIT) == "in"
    leave.set()
    await asyncio.wait_for(holder, LIMIT)


# ------------------------------------------------------------------ handlers


async def test_results_of_other_hosts_go_on_while_one_hosts_store_call_is_slow(
        store: GatedStore) -> None:
    frontier = Frontier(_settings(), MemoryBus(), store, embedded=False)
    slow = await _in_flight(frontier, store, "slow.test", "t1")
    fast = await _in_flight(frontier, store, "fast.test", "t2")
    store.hold("slow.test")
    stuck = asyncio.create_task(frontier.handle(_delivery(Topic.FETCHED, "slow.test", slow)))
    await asyncio.wait_for(store.waiting["slow.test"].wait(), LIMIT)
    await asyncio.wait_for(frontier.handle(_delivery(Topic.FETCHED, "fast.test", fast)),
                           LIMIT)
    fast_row = await store.get_url("fast.test", "http://fast.test/p")
    assert fast_row is not None and fast_row.status is UrlStatus.FETCHED
    assert not stuck.done()
    store.release("slow.test")
    await asyncio.wait_for(stuck, LIMIT)
    slow_row = await store.get_url("slow.test", "http://slow.test/p")
    assert slow_row is not None and slow_row.status is UrlStatus.FETCHED


async def test_messages_of_one_host_do_not_interleave(store: GatedStore) -> None:
    """A verdict handled while the fetch result of the same URL is half-way through
    must wait for it; else it would see the row in flight and be kept aside for good."""
    frontier = Frontier(_settings(), MemoryBus(), store, embedded=False)
    result = await _in_flight(frontier, store, "a.test")
    verdict = StatusUpdate(url="http://a.test/p", host="a.test", status=UrlStatus.DONE,
                           content_hash="sha256:aa")
    store.hold("a.test")
    first = asyncio.create_task(frontier.handle(_delivery(Topic.FETCHED, "a.test", result)),
                                name="result")
    await asyncio.wait_for(store.waiting["a.test"].wait(), LIMIT)
    second = asyncio.create_task(frontier.handle(_delivery(Topic.STATUS, "a.test", verdict)),
                                 name="verdict")
    await asyncio.sleep(0.05)
    assert [c for c in store.calls if c[0] == "a.test" and c[2] == "verdict"] == []
    store.release("a.test")
    await asyncio.wait_for(asyncio.gather(first, second), LIMIT)
    row = await store.get_url("a.test", "http://a.test/p")
    assert row is not None and row.status is UrlStatus.DONE


async def test_two_discoveries_of_a_new_host_make_one_slot(store: GatedStore) -> None:
    frontier = Frontier(_settings(), MemoryBus(), store, embedded=False)
    store.hold("n.test")
    one = asyncio.create_task(_discover(frontier, "n.test", ["/1"]))
    two = asyncio.create_task(_discover(frontier, "n.test", ["/2"]))
    await asyncio.wait_for(store.waiting["n.test"].wait(), LIMIT)
    await asyncio.sleep(0.05)
    store.release("n.test")
    await asyncio.wait_for(asyncio.gather(one, two), LIMIT)
    # both messages read the host row for the trap check; only one makes the slot
    loads = [c for c in store.calls if c[0] == "n.test" and c[1] == "get_host"]
    assert len(loads) == 3, store.calls
    assert [host for _, _, host in frontier.hosts.timer] == ["n.test"]


async def test_an_ownership_change_waits_for_handlers_in_progress(
        store: GatedStore) -> None:
    bus = MemoryBus(Settings().bus, partitions=2)
    frontier = Frontier(_settings(), bus, store, embedded=False)
    result = await _in_flight(frontier, store, "a.test")
    store.hold("a.test")
    handler = asyncio.create_task(frontier.handle(_delivery(Topic.FETCHED, "a.test", result)))
    await asyncio.wait_for(store.waiting["a.test"].wait(), LIMIT)
    assign = asyncio.create_task(frontier.assign(frozenset({0, 1})))
    await asyncio.sleep(0.05)
    assert not assign.done()  # waits for the handler that holds a.test
    store.release("a.test")
    await asyncio.wait_for(asyncio.gather(handler, assign), LIMIT)
    row = await store.get_url("a.test", "http://a.test/p")
    assert row is not None and row.status is UrlStatus.FETCHED


# ------------------------------------------------------------------ dispatch


async def _run_until(frontier: Frontier, bus: MemoryBus, done: asyncio.Event,
                     got: list[FetchTask]) -> asyncio.Future[tuple[None, None]]:
    async def collect(delivery: Delivery) -> None:
        assert isinstance(delivery.message, FetchTask)
        got.append(delivery.message)
        done.set()

    bus.declare_group("fetcher", (Topic.FETCH,))
    consumer = asyncio.create_task(bus.consume("fetcher", (Topic.FETCH,), collect))
    runner = asyncio.create_task(frontier.run())
    return asyncio.gather(consumer, runner)


async def _stop(frontier: Frontier, bus: MemoryBus,
                runner: asyncio.Future[tuple[None, None]]) -> None:
    await frontier.stop()
    await bus.stop()
    await asyncio.wait_for(runner, LIMIT)


async def test_a_slow_host_does_not_hold_up_the_dispatch_of_others(
        store: GatedStore) -> None:
    bus = MemoryBus()
    frontier = Frontier(_settings(), bus, store, embedded=False)
    await _discover(frontier, "slow.test", ["/1"])
    await _discover(frontier, "fast.test", ["/1"])
    store.hold("slow.test")
    got: list[FetchTask] = []
    some = asyncio.Event()
    runner = await _run_until(frontier, bus, some, got)
    try:
        await asyncio.wait_for(some.wait(), LIMIT)
        assert [t.host for t in got] == ["fast.test"]
        assert frontier.outstanding == 2  # one request out, one dispatch in progress
        store.release("slow.test")
        while len(got) < 2:
            some.clear()
            await asyncio.wait_for(some.wait(), LIMIT)
        assert sorted(t.host for t in got) == ["fast.test", "slow.test"]
        assert frontier.outstanding == 2
    finally:
        await _stop(frontier, bus, runner)


async def test_dispatches_never_exceed_the_outstanding_cap(store: GatedStore) -> None:
    bus = MemoryBus()
    frontier = Frontier(_settings(), bus, store, embedded=False)
    frontier.max_outstanding = 1
    for host in ("a.test", "b.test", "c.test"):
        await _discover(frontier, host, ["/1"])
        store.hold(host)
    got: list[FetchTask] = []
    some = asyncio.Event()
    runner = await _run_until(frontier, bus, some, got)
    try:
        waiting = [store.waiting[h] for h in ("a.test", "b.test", "c.test")]
        await asyncio.sleep(0.1)
        started = [h for h, w in zip(("a.test", "b.test", "c.test"), waiting, strict=True)
                   if w.is_set()]
        assert len(started) == 1, started  # one dispatch at a time under a cap of one
        assert frontier.outstanding == 1
        store.release(started[0])
        await asyncio.wait_for(some.wait(), LIMIT)
        await asyncio.sleep(0.1)
        assert frontier.outstanding == 1 and len(got) == 1  # the cap is taken by it
    finally:
        await _stop(frontier, bus, runner)


async def test_a_failed_dispatch_is_tried_again_and_dispatching_goes_on(
        store: GatedStore) -> None:
    bus = MemoryBus()
    frontier = Frontier(_settings(), bus, store, embedded=False)
    await _discover(frontier, "a.test", ["/1"])
    store.fail_put_host.add("a.test")  # the dispatch's write of the host's lease
    got: list[FetchTask] = []
    some = asyncio.Event()
    runner = await _run_until(frontier, bus, some, got)
    try:
        await asyncio.wait_for(some.wait(), LIMIT)  # after the retry delay
        assert [t.url for t in got] == ["http://a.test/1"]
        # no request went out: the failed attempt does not count
        assert got[0].attempt == 1
        assert frontier.outstanding == 1
        # in flight in memory; the store keeps the row queued until its result
        row = await store.get_url("a.test", "http://a.test/1")
        assert row is not None and row.status is UrlStatus.QUEUED
        assert frontier.in_flight() == 1
        stored = await store.get_host("a.test")
        assert stored is not None and stored.lease_until > 0  # the retry wrote it
    finally:
        await _stop(frontier, bus, runner)


async def test_a_result_waits_for_the_dispatch_of_its_host(store: GatedStore) -> None:
    bus = MemoryBus()
    frontier = Frontier(_settings(), bus, store, embedded=False)
    earlier = await _in_flight(None, store, "a.test")  # a task an earlier owner handed out
    done = await store.get_url("a.test", "http://a.test/p")
    assert done is not None
    done.status = UrlStatus.DONE  # fetched since (the result is a late repeat)
    await store.put_url(done)
    await _discover(frontier, "a.test", ["/1"])
    store.hold("a.test")
    got: list[FetchTask] = []
    some = asyncio.Event()
    runner = await _run_until(frontier, bus, some, got)
    try:
        await asyncio.wait_for(store.waiting["a.test"].wait(), LIMIT)  # dispatching
        handler = asyncio.create_task(
            frontier.handle(_delivery(Topic.FETCHED, "a.test", earlier)), name="result")
        await asyncio.sleep(0.05)
        assert not [c for c in store.calls if c[2] == "result"]
        store.release("a.test")
        await asyncio.wait_for(asyncio.gather(handler, some.wait()), LIMIT)
        calls = [(call, name) for host, call, name in store.calls if host == "a.test"]
        mine = [i for i, (_, name) in enumerate(calls) if name == "result"]
        assert mine and mine == list(range(mine[0], mine[-1] + 1)), calls
        # the host's lease (the only write of a dispatch)
        lease = calls.index(("put_host", "frontier-dispatch:a.test"))
        assert lease < mine[0], calls  # the whole dispatch came first
        assert [t.url for t in got] == ["http://a.test/1"]
        row = await store.get_url("a.test", "http://a.test/p")
        assert row is not None and row.status is UrlStatus.DONE  # a stale result
        assert frontier.counters.stale_results == 1
    finally:
        await _stop(frontier, bus, runner)


async def test_a_graceful_stop_ends_the_leases_of_hosts_with_nothing_in_flight(
        store: GatedStore) -> None:
    """A lease says how long a request of its owner may still run. At a graceful stop a
    frontier ends the leases of the hosts whose results all came back, so the next owner
    (here: a frontier started again on the same store) need not wait them out; a host
    with a request still out keeps its lease."""
    bus = MemoryBus()
    frontier = Frontier(_settings(), bus, store, embedded=False)
    await _discover(frontier, "done.test", ["/1"])
    await _discover(frontier, "out.test", ["/1"])
    got: list[FetchTask] = []
    some = asyncio.Event()
    runner = await _run_until(frontier, bus, some, got)
    try:
        async with asyncio.timeout(LIMIT):
            while len(got) < 2:
                some.clear()
                await some.wait()
        leases = {h: (await store.get_host(h)) for h in ("done.test", "out.test")}
        assert all(s is not None and s.lease_until > time.time() for s in leases.values())
        task = next(t for t in got if t.host == "done.test")
        await frontier.handle(_delivery(Topic.FETCHED, task.host, FetchResult(
            task=task, outcome=FetchOutcome.OK, status=200, fetched_at=time.time(),
            content_hash="sha256:aa")))
        rest = await store.get_host("done.test")
        assert rest is not None
    finally:
        stopped_at = time.time()
        await _stop(frontier, bus, runner)
    done = await store.get_host("done.test")
    out = await store.get_host("out.test")
    assert done is not None and out is not None
    assert stopped_at <= done.lease_until <= time.time()  # ended at the stop
    assert done.next_allowed_at >= rest.next_allowed_at  # its rest kept
    assert out.lease_until == leases["out.test"].lease_until > time.time()  # kept
    # started again: nothing to wait for at done.test, the lease at out.test
    again = Frontier(_settings(), MemoryBus(), store, embedded=False)
    assert (await again.hosts.slot("done.test")).foreign_lease <= time.time()
    assert (await again.hosts.slot("out.test")).foreign_lease > time.time()


@pytest.mark.parametrize("landed", [False, True])
async def test_a_result_whose_write_failed_is_applied_when_delivered_again(
        store: GatedStore, landed: bool) -> None:
    """A store outage while a result is written: the message is delivered again, and
    the result must still find its request in flight. Were the request forgotten before
    the write, the second delivery would be taken for stale and the row, still queued in
    the store, fetched a second time (the Cassandra outage test's refetches). A write that
    reported a failure but was applied (``landed``) is not applied twice: the host's page
    count stays exact."""
    bus = MemoryBus()
    frontier = Frontier(_settings(), bus, store, embedded=False)
    await _discover(frontier, "a.test", ["/1"])
    got: list[FetchTask] = []
    some = asyncio.Event()
    runner = await _run_until(frontier, bus, some, got)
    try:
        await asyncio.wait_for(some.wait(), LIMIT)
        task = got[0]
        result = FetchResult(task=task, outcome=FetchOutcome.OK, status=200,
                             fetched_at=time.time(), content_hash="sha256:aa")
        (store.landed_result if landed else store.fail_result).add("a.test")
        with pytest.raises(OSError, match=r"store unavailable|timed out"):
            await frontier.handle(_delivery(Topic.FETCHED, "a.test", result))
        assert frontier.in_flight() == 1 and frontier.outstanding == 1  # still out
        again = Delivery(topic=Topic.FETCHED, key="a.test", message=result, calls=2)
        await frontier.handle(again)
        row = await store.get_url("a.test", task.url)
        assert row is not None and row.status is UrlStatus.FETCHED
        host = await store.get_host("a.test")
        assert host is not None and host.page_count == 1
        assert frontier.in_flight() == 0
        assert frontier.counters.stale_results == 0
        await asyncio.sleep(0.2)  # nothing of a.test goes out again
        assert [t.url for t in got] == ["http://a.test/1"]
        assert frontier.outstanding == 0  # (a dispatch that found nothing due gave it back)
    finally:
        await _stop(frontier, bus, runner)
