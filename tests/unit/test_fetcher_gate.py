"""HostGate: one request at a time per host, however holders come and go, and no request
before its host's gap is over."""

from __future__ import annotations

import asyncio
import time

import pytest

from fetcher.gate import HostGate


async def test_a_newcomer_at_release_waits_behind_the_woken_holder() -> None:
    gate = HostGate()
    inside = 0
    peak = 0
    first_may_leave = asyncio.Event()
    late: list[asyncio.Task[None]] = []

    async def visit(leave: asyncio.Event | None = None) -> None:
        nonlocal inside, peak
        async with gate.hold("h.example"):
            inside += 1
            peak = max(peak, inside)
            if leave is not None:
                await leave.wait()
            for _ in range(3):
                await asyncio.sleep(0)  # stay inside across loop turns
            inside -= 1

    async def first() -> None:
        await visit(first_may_leave)
        # the lock is released and the waiter woken, but it has not run yet: a
        # newcomer now must queue behind it, not make a lock of its own
        late.append(asyncio.create_task(visit()))

    a = asyncio.create_task(first())
    await asyncio.sleep(0)
    b = asyncio.create_task(visit())
    await asyncio.sleep(0)
    first_may_leave.set()
    await asyncio.wait_for(asyncio.gather(a, b), 5)
    await asyncio.wait_for(asyncio.gather(*late), 5)
    assert peak == 1
    assert len(gate._locks) == 0  # nothing left behind once every holder is gone


async def test_holders_of_different_hosts_do_not_wait_for_each_other() -> None:
    gate = HostGate()
    entered = asyncio.Event()
    leave = asyncio.Event()

    async def hold_a() -> None:
        async with gate.hold("a.example"):
            entered.set()
            await leave.wait()

    task = asyncio.create_task(hold_a())
    await entered.wait()
    async with gate.hold("b.example"):  # would hang if hosts shared a lock
        pass
    leave.set()
    await asyncio.wait_for(task, 5)


def test_the_pause_is_kept_on_the_monotonic_clock_while_the_wall_clock_is_slewed() -> None:
    # The wall clock runs 0.1% fast (as under an NTP slew): 1.000 s of monotonic time is
    # 1.001 s of wall time. A pause worked out on the wall clock would end 0.4 ms early
    # for a 0.4 s delay; the gate's earliest start is 0.4 s of monotonic time after the
    # response ended.
    mono = [100.0]
    base_wall = 1_700_000_000.0

    def wall() -> float:
        return base_wall + (mono[0] - 100.0) * 1.001

    gate = HostGate(clock=lambda: mono[0], wall=wall)
    ended_wall = wall()
    mono[0] += 0.000_010  # done() is called a moment after the response ended
    gate.done("h.example", ended_wall, 0.4)
    earliest = gate.earliest("h.example", None, 0.4)
    assert abs(earliest - (100.0 + 0.4)) < 1e-6, earliest


def test_took_over_partitions_wait_a_delay_from_the_takeover() -> None:
    mono = [50.0]
    gate = HostGate(clock=lambda: mono[0], wall=lambda: 1e9 + mono[0])
    gate.took_over(frozenset({3}))
    assert gate.earliest("new.example", 3, 2.0) == 52.0
    assert gate.earliest("new.example", 4, 2.0) == 0.0  # not a newly taken partition


async def test_hosts_following_one_key_share_its_lock_and_gap() -> None:
    now = [100.0]
    gate = HostGate(clock=lambda: now[0], wall=lambda: now[0])
    gate.follow("a.test", "127.0.0.1")
    gate.follow("b.test", "127.0.0.1")
    gate.done("a.test", 100.0, 2.0)
    # b.test shares a.test's address: it waits out a.test's gap
    assert gate.earliest("b.test", None, 2.0) == 102.0
    assert gate.earliest("c.test", None, 2.0) == 0.0  # a host of its own
    async with gate.hold("a.test"):
        assert gate._locks.locked("127.0.0.1")  # b.test would queue behind it
    # a host whose key is itself again stops sharing
    gate.follow("b.test", "b.test")
    assert gate.key("b.test") == "b.test"
    assert gate.earliest("b.test", None, 2.0) == 0.0


async def test_a_timer_that_fires_early_is_slept_again_until_the_gap_is_over() -> None:
    # An event loop's timer may end a sleep before the time asked (uvloop counts whole
    # milliseconds): here a sleep longer than 1 ms ends 1 ms short. The wait still ends
    # no earlier than the end of the last response plus the delay.
    now = [10.0]
    asked: list[float] = []

    async def early_sleep(seconds: float) -> None:
        asked.append(seconds)
        now[0] += seconds - 0.001 if seconds > 0.001 else seconds

    gate = HostGate(clock=lambda: now[0], wall=lambda: now[0], sleep=early_sleep)
    gate.done("h.example", 10.0, 0.2)
    await gate.wait("h.example", None, 0.2)
    assert now[0] >= 10.2
    assert len(asked) == 2 and asked[0] == pytest.approx(0.2)
    assert asked[1] == pytest.approx(0.001)
    assert gate.waits == 1 and gate.waited_seconds == pytest.approx(0.2)
    # no gap left: no sleep at all
    before = len(asked)
    await gate.wait("h.example", None, 0.2)
    assert len(asked) == before and gate.waits == 1


def test_on_uvloop_no_wait_ends_before_its_time() -> None:
    # uvloop rounds a sleep to whole milliseconds of a loop time rounded down, so a plain
    # sleep of the gap often ends a fraction of a millisecond early: a request sent early
    uvloop = pytest.importorskip("uvloop")
    short: list[float] = []

    async def main() -> None:
        gate = HostGate()
        for i in range(40):
            host = f"h{i}.example"
            gate.done(host, gate.wall(), 0.0105 + 0.000_37 * i)
            at = gate.earliest(host, None, 0.0)
            await gate.wait(host, None, 0.0)
            late = time.monotonic() - at
            if late < 0:
                short.append(late)

    runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    with runner:
        runner.run(main())
    assert not short, short
