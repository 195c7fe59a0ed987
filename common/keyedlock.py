"""One asyncio lock per key (a host, a politeness key), made on first use and dropped
when nobody holds or waits for it any more, so memory follows the keys in use.

The frontier holds a host's lock around everything it reads or changes of that host;
the fetcher's gate holds one around each request to a host (or its politeness key).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class _Held:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # holding it or waiting for it


class KeyedLock:
    """Reference-counted locks by key. A key's lock is counted from before the wait: a
    released lock whose next holder has been woken but has not run yet is not
    ``locked()``, yet must not be dropped, or a newcomer would make a second lock for
    the same key."""

    def __init__(self) -> None:
        self._locks: dict[str, _Held] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold ``key``'s lock for the ``async with`` block (one holder at a time)."""
        held = self._locks.get(key)
        if held is None:
            held = self._locks[key] = _Held()
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0 and self._locks.get(key) is held:
                del self._locks[key]

    def locked(self, key: str) -> bool:
        """Whether someone holds ``key``'s lock now."""
        held = self._locks.get(key)
        return held is not None and held.lock.locked()

    def __len__(self) -> int:
        """Keys with a holder or a waiter."""
        return len(self._locks)
