"""The fetcher's own politeness guard, behind the frontier's.

The frontier decides when a host may be fetched; this gate makes sure a fetcher never
breaks that promise when delivery repeats itself: a task redelivered after a crash, or
handed to this fetcher by a rebalance, may arrive right behind another request to the
same host. The gate keeps, per host, one request at a time and the earliest time the
next may start (end of the last response + the task's delay), and, per partition, the
time this fetcher took it over (a request from the previous owner may have just ended).
With a politeness key wider than the host (``CRAWLER_POLITENESS_KEY`` domain or ip), a
host's task names its key and :meth:`HostGate.follow` makes every call about that host
count under the key, so the hosts of one key share the one request and the gap. In a
cluster every task of a key arrives on one partition, so at one fetcher: the domain's
(``domain`` partitions hosts by it) or, with ``ip``, the address's (the frontier
publishes the task under its key), so the per-partition takeover rest covers the key.

The gate keeps its times on the monotonic clock, the one ``asyncio.sleep`` waits on. A
response's end arrives as a wall-clock time (it is stored with the page) and is moved
onto the monotonic clock at once: a pause worked out on the wall clock and slept on the
monotonic one comes out short whenever the wall clock is being slewed (up to 0.5 ms a
second under NTP), which is a request sent early. For the same reason a wait ends only
once the monotonic clock has reached its time: an event loop's timer may fire before
the time asked (uvloop's counts whole milliseconds, from a loop time rounded down, and
rounds the delay, so a sleep can end up to about 1.5 ms early).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from common.keyedlock import KeyedLock


class HostGate:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 max_hosts: int = 100_000) -> None:
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.max_hosts = max_hosts
        self._free_at: OrderedDict[str, float] = OrderedDict()
        self._locks = KeyedLock()
        self._taken_over: dict[int, float] = {}
        self._keys: OrderedDict[str, str] = OrderedDict()  # host -> its politeness key
        self.waits = 0
        self.waited_seconds = 0.0

    def took_over(self, partitions: frozenset[int]) -> None:
        """The bus assigned these partitions (new ones start a fresh wait)."""
        now = self.clock()
        for p in partitions:
            self._taken_over.setdefault(p, now)
        for p in [p for p in self._taken_over if p not in partitions]:
            del self._taken_over[p]

    def follow(self, host: str, key: str) -> None:
        """Requests to ``host`` count under ``key`` from now on (the host itself: its
        own); the last ``max_hosts`` hosts are remembered."""
        if key == host:
            self._keys.pop(host, None)
            return
        self._keys[host] = key
        self._keys.move_to_end(host)
        while len(self._keys) > self.max_hosts:
            self._keys.popitem(last=False)

    def key(self, host: str) -> str:
        """What requests to ``host`` are counted under."""
        return self._keys.get(host, host)

    def earliest(self, host: str, partition: int | None, delay: float) -> float:
        """Pure: when the next request to ``host`` may start."""
        host = self.key(host)
        at = self._free_at.get(host, 0.0)
        if partition is not None and partition in self._taken_over:
            at = max(at, self._taken_over[partition] + delay)
        return at

    async def wait(self, host: str, partition: int | None, delay: float) -> None:
        """Until the next request to ``host`` may start, by the monotonic clock (a timer
        that fires early is slept again for what is left)."""
        at = self.earliest(host, partition, delay)
        pause = at - self.clock()
        if pause <= 0:
            return
        self.waits += 1
        self.waited_seconds += pause
        while pause > 0:
            await self.sleep(pause)
            pause = at - self.clock()

    def done(self, host: str, ended_at: float, delay: float) -> None:
        """A request to ``host`` ended at ``ended_at`` (wall clock); the next waits
        ``delay``."""
        host = self.key(host)
        ended = self.clock() - max(0.0, self.wall() - ended_at)
        self._free_at[host] = max(self._free_at.get(host, 0.0), ended + delay)
        self._free_at.move_to_end(host)
        while len(self._free_at) > self.max_hosts:
            old, free_at = next(iter(self._free_at.items()))
            if free_at > self.clock():
                break
            del self._free_at[old]

    @asynccontextmanager
    async def hold(self, host: str) -> AsyncIterator[None]:
        """One request at a time to ``host`` (its key) from this fetcher."""
        async with self._locks.hold(self.key(host)):
            yield
