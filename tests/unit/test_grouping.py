"""Requests gathered into groups (common.adapters.grouping): pure asyncio, no server."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from common.adapters.grouping import Grouped


class Recorder:
    """A send that records each request's items and answers each item doubled."""

    def __init__(self, fail: BaseException | None = None, delay: float = 0.0) -> None:
        self.requests: list[list[int]] = []
        self.fail = fail
        self.delay = delay

    async def __call__(self, items: Sequence[int]) -> list[int]:
        self.requests.append(list(items))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return [2 * i for i in items]


async def test_calls_within_the_wait_go_out_as_one_request() -> None:
    send = Recorder()
    group: Grouped[int, int] = Grouped(send, wait=0.05, limit=10)
    answers = await asyncio.gather(*(group(i) for i in range(4)))
    assert answers == [0, 2, 4, 6]
    assert send.requests == [[0, 1, 2, 3]]
    assert (group.requests, group.items) == (1, 4)


async def test_a_full_group_goes_out_at_once_and_the_rest_waits() -> None:
    send = Recorder()
    group: Grouped[int, int] = Grouped(send, wait=10.0, limit=3)
    first = [asyncio.ensure_future(group(i)) for i in range(3)]
    # the third call filled the group: it goes out without waiting 10 s
    assert await asyncio.wait_for(asyncio.gather(*first), 1.0) == [0, 2, 4]
    late = asyncio.ensure_future(group(7))
    await asyncio.sleep(0.05)
    assert not late.done()  # a group of one, waiting for others
    await group.drain()
    assert await late == 14
    assert send.requests == [[0, 1, 2], [7]]


async def test_calls_after_a_group_left_start_the_next() -> None:
    send = Recorder()
    group: Grouped[int, int] = Grouped(send, wait=0.01, limit=10)
    assert await group(1) == 2
    assert await asyncio.gather(group(2), group(3)) == [4, 6]
    assert send.requests == [[1], [2, 3]]


async def test_no_wait_sends_each_call_alone() -> None:
    send = Recorder()
    group: Grouped[int, int] = Grouped(send, wait=0.0, limit=10)
    assert await asyncio.gather(*(group(i) for i in range(3))) == [0, 2, 4]
    assert send.requests == [[0], [1], [2]]


async def test_a_failed_request_fails_every_caller_of_its_group() -> None:
    send = Recorder(fail=ConnectionError("store down"))
    group: Grouped[int, int] = Grouped(send, wait=0.01, limit=10)
    results = await asyncio.gather(group(1), group(2), return_exceptions=True)
    assert [type(r) for r in results] == [ConnectionError, ConnectionError]
    # the next group is sent again: a failure is not remembered
    send.fail = None
    assert await group(3) == 6


async def test_a_cancelled_caller_leaves_the_others_their_answers() -> None:
    send = Recorder(delay=0.05)
    group: Grouped[int, int] = Grouped(send, wait=0.01, limit=10)
    gone = asyncio.ensure_future(group(1))
    stays = asyncio.ensure_future(group(2))
    await asyncio.sleep(0)
    gone.cancel()
    assert await stays == 4
    assert gone.cancelled()
    assert send.requests == [[2]]  # the cancelled call's item was not sent


async def test_an_answer_of_the_wrong_length_is_an_error_for_each_caller() -> None:
    async def short(items: Sequence[int]) -> list[int]:
        return [0]

    group: Grouped[int, int] = Grouped(short, wait=0.01, limit=10)
    results = await asyncio.gather(group(1), group(2), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and "answered 1 of 2" in str(r) for r in results)


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="wait"):
        Grouped(Recorder(), wait=-1.0, limit=1)
    with pytest.raises(ValueError, match="at least one"):
        Grouped(Recorder(), wait=0.0, limit=0)
