"""Requests of one kind gathered into one: a group commit for a remote store.

A Cassandra node spends several times more CPU on a request that finds it idle than on
one of many arriving together (its request threads wake, spin and park for each), and
the driver spends about as much in Python per request whatever it carries. So requests
that arrive within a few milliseconds of each other (content look-ups of several
pages, their records, their near-duplicate candidates) are better sent as one request
of several keys. :class:`Grouped` does that for one kind of request: the first call
opens a group and the group goes out ``wait`` seconds later, or at once when it holds
``limit`` items; every caller gets its own item's answer, or the request's exception.

With ``wait`` 0 every call is its own request, sent at once (no task, no timer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K")
R = TypeVar("R")

Send = Callable[[Sequence[K]], Awaitable[Sequence[R]]]
"""Sends one request for ``items`` and returns one answer per item, in their order."""


class Grouped(Generic[K, R]):
    """Calls made within ``wait`` seconds of a group's first go out as one ``send``
    of at most ``limit`` items."""

    def __init__(self, send: Send[K, R], *, wait: float, limit: int) -> None:
        if wait < 0:
            raise ValueError(f"a group's wait must be 0 or more seconds, not {wait!r}")
        if limit < 1:
            raise ValueError(f"a group holds at least one item, not {limit!r}")
        self._send = send
        self._wait = wait
        self._limit = limit
        self._items: list[tuple[K, asyncio.Future[R]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._running: set[asyncio.Task[None]] = set()
        self.requests = 0  # requests sent
        self.items = 0  # items they carried

    async def __call__(self, item: K) -> R:
        if self._wait == 0:
            self.requests += 1
            self.items += 1
            answers = await self._send([item])
            return answers[0]
        loop = asyncio.get_running_loop()
        mine: asyncio.Future[R] = loop.create_future()
        self._items.append((item, mine))
        if len(self._items) >= self._limit:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._wait, self._flush)
        return await mine

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        items, self._items = self._items, []
        if not items:
            return
        task = asyncio.get_running_loop().create_task(self._run(items))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, items: list[tuple[K, asyncio.Future[R]]]) -> None:
        waiting = [(item, future) for item, future in items if not future.done()]
        if not waiting:
            return  # every caller went away (cancelled)
        self.requests += 1
        self.items += len(waiting)
        try:
            answers = await self._send([item for item, _ in waiting])
            if len(answers) != len(waiting):
                raise RuntimeError(f"a grouped request answered {len(answers)} of "
                                   f"{len(waiting)} items")
        except BaseException as exc:
            for _, future in waiting:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise  # cancelled: the callers were told
            return
        for (_, future), answer in zip(waiting, answers, strict=True):
            if not future.done():
                future.set_result(answer)

    async def drain(self) -> None:
        """Send what is gathered now and wait for every group in flight."""
        self._flush()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
