"""HostGate.hold: one request at a time per host, however holders come and go."""

from __future__ import annotations

import asyncio

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
    assert gate._locks == {}  # nothing left behind once every holder is gone


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
