"""The request log: every request the simulated web answered, with its timing.

Records are appended when a response ends (or the client goes away), under a lock, so
tests may read the log from another thread while the server runs. Times are taken at
the server: ``started`` when the request reached the handler; ``ended``, for a complete
answer, just before its last bytes were handed to the transport (never later than the
client could have read them, however late the server thread runs), and for an abandoned
one when the server noticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request and its answer."""

    seq: int
    """Order of arrival (0-based)."""
    host: str
    """Host header without port, lower case."""
    target: str
    """Path with query, as sent."""
    method: str
    headers: tuple[tuple[str, str], ...]
    started: float
    """time.monotonic() when the request arrived."""
    ended: float
    """time.monotonic() just before the answer's last bytes were sent (or when the server
    saw it abandoned)."""
    started_wall: float
    """time.time() when the request arrived."""
    ended_wall: float
    status: int
    bytes_sent: int
    """Body bytes written (as sent on the wire, i.e. compressed for gzip bodies)."""
    completed: bool
    """False when the client went away before the answer was complete."""
    remote: str = ""
    """Client address and port: requests on one kept-alive connection share it."""

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.split("?", 1)[0]

    @property
    def duration(self) -> float:
        return self.ended - self.started

    def header(self, name: str) -> str | None:
        lname = name.lower()
        for key, value in self.headers:
            if key.lower() == lname:
                return value
        return None


Hosts = str | Collection[str] | None
"""One host, any of several, or (None) any host at all."""


class RequestLog:
    """Thread-safe list of :class:`RequestRecord` with helpers for politeness checks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._seq = 0
        self._active: Counter[str] = Counter()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    # --- writing (the server) -----------------------------------------------------

    def begin(self, host: str) -> int:
        """Note a request that has arrived; returns its sequence number."""
        with self._lock:
            seq = self._seq
            self._seq += 1
            self._active[host] += 1
            return seq

    def finish(self, record: RequestRecord) -> None:
        with self._lock:
            self._active[record.host] -= 1
            if self._active[record.host] <= 0:
                del self._active[record.host]
            self._records.append(record)
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # the waiter's loop is closed
                loop.call_soon_threadsafe(event.set)

    # --- reading ------------------------------------------------------------------

    def records(self, host: str | None = None) -> list[RequestRecord]:
        """Finished requests in order of arrival, optionally of one host."""
        with self._lock:
            items = list(self._records)
        items.sort(key=lambda r: r.seq)
        return [r for r in items if host is None or r.host == host]

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def in_flight(self, host: str | None = None) -> int:
        """Requests that arrived and are not answered yet."""
        with self._lock:
            if host is None:
                return sum(self._active.values())
            return self._active.get(host, 0)

    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.records()})

    def counts_by_host(self, exclude_paths: Iterable[str] = ()) -> dict[str, int]:
        """Requests per host, leaving out the given paths (e.g. '/robots.txt')."""
        skip = set(exclude_paths)
        return dict(Counter(r.host for r in self.records() if r.path not in skip))

    def counts_by_path(self, host: str, *, with_query: bool = False) -> dict[str, int]:
        """Requests per path (or per path and query) of one host."""
        return dict(Counter(r.target if with_query else r.path for r in self.records(host)))

    def count(self, host: str, path: str | None = None) -> int:
        """Requests to a host, or to one path (query ignored) of it."""
        return sum(1 for r in self.records(host) if path is None or r.path == path)

    def _of(self, hosts: Hosts) -> list[RequestRecord]:
        if hosts is None or isinstance(hosts, str):
            return self.records(hosts)
        names = set(hosts)
        return [r for r in self.records() if r.host in names]

    def gaps(self, host: Hosts,
             exclude_paths: Iterable[str] = ("/robots.txt",)) -> list[float]:
        """For each request to ``host`` (a collection of hosts: to any of them; None: to
        any host) after the first: its start minus the latest end of the requests that
        started before it. Negative means overlap."""
        skip = set(exclude_paths)
        items = sorted((r for r in self._of(host) if r.path not in skip),
                       key=lambda r: r.started)
        out: list[float] = []
        latest_end: float | None = None
        for r in items:
            if latest_end is not None:
                out.append(r.started - latest_end)
            latest_end = r.ended if latest_end is None else max(latest_end, r.ended)
        return out

    def min_gap(self, host: Hosts,
                exclude_paths: Iterable[str] = ("/robots.txt",)) -> float | None:
        """Smallest gap between the end of one response and the start of the next
        request to ``host`` (as in :meth:`gaps`); None with fewer than two requests."""
        gaps = self.gaps(host, exclude_paths)
        return min(gaps) if gaps else None

    def max_in_flight(self, host: Hosts, exclude_paths: Iterable[str] = ()) -> int:
        """Most requests to ``host`` (as in :meth:`gaps`) that were being answered at
        the same moment."""
        skip = set(exclude_paths)
        events: list[tuple[float, int]] = []
        for r in self._of(host):
            if r.path not in skip:
                events.append((r.started, 1))
                events.append((r.ended, -1))
        events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same instant
        best = cur = 0
        for _, delta in events:
            cur += delta
            best = max(best, cur)
        return best

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def wait_for(self, predicate: Callable[[RequestLog], bool], timeout: float,
                 interval: float = 0.02) -> bool:
        """Block (in the calling thread) until ``predicate(log)`` holds or ``timeout``
        passes; for synchronous tests against a server in another thread."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate(self):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)

    async def wait_until(self, predicate: Callable[[RequestLog], bool]) -> None:
        """Return once ``predicate(log)`` holds, checked after every finished request;
        for tests that share the server's event loop. Bound it with ``asyncio.timeout``."""
        event = asyncio.Event()
        waiter = (asyncio.get_running_loop(), event)
        with self._lock:
            self._waiters.append(waiter)
        try:
            while not predicate(self):
                await event.wait()
                event.clear()
        finally:
            with self._lock:
                self._waiters.remove(waiter)
