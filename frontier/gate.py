"""The frontier's ownership gate: handlers and dispatches hold it shared; an ownership
change (assign, recover, a stall recovery) holds it exclusively."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class OwnershipGate:
    """Shared or exclusive: handlers and dispatches hold it shared, many at once; an
    ownership change holds it exclusively. An exclusive holder waits until the shared
    holders are done, and while it waits or holds, new shared holders wait behind it
    (so a steady flow of messages cannot starve a rebalance). Not reentrant: a holder
    never asks again."""

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._writers = 0  # exclusive holders, waiting or holding
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def shared_holders(self) -> int:
        return self._shared

    @property
    def exclusive_held(self) -> bool:
        return self._exclusive

    def _notify(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        await self._until(lambda: self._writers == 0)
        self._shared += 1
        try:
            yield
        finally:
            self._shared -= 1
            if self._shared == 0:
                self._notify()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        self._writers += 1
        try:
            await self._until(lambda: not self._exclusive and self._shared == 0)
        except BaseException:
            self._writers -= 1
            self._notify()
            raise
        self._exclusive = True
        try:
            yield
        finally:
            self._exclusive = False
            self._writers -= 1
            self._notify()
