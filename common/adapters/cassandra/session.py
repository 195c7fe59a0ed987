"""The Cassandra store's connection and statement plumbing.

:class:`CassandraSession` holds the driver's cluster and session: it connects (retrying
until ``connect_timeout`` for a server that is still starting), runs statements on the
driver's own I/O thread (``execute_async``) bridged into asyncio, at most
``max_concurrency`` at a time, pages through results, builds batches, counts
statements for metrics, and holds this process's per-host write locks. It reports
outages to ``DEPENDENCIES`` (and so ``/readyz``): a request that failed because
Cassandra is down, and the driver finding no node up (:class:`NodeWatch`).

Consistency levels come from the settings: ``read_consistency`` for plain reads,
``write_consistency`` for writes, and for the reads a write depends on a level that
overlaps the write level (:func:`overlapping_read`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cassandra import ConsistencyLevel, OperationTimedOut, UnresolvableContactPoints
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
from cassandra.policies import (
    ConstantReconnectionPolicy,
    DCAwareRoundRobinPolicy,
    HostStateListener,
    TokenAwarePolicy,
)
from cassandra.query import BatchStatement, BatchType, tuple_factory

from common.adapters.cassandra.schema import KEYSPACE_RE
from common.adapters.grouping import Grouped
from common.adapters.handling import DEPENDENCIES, STORE, dependency_down, describe
from common.settings import StoreSettings

RECONNECT_SECONDS = 1.0  # how often the driver tries a node that is down
IN_ROWS = 100  # clustering keys per "url IN ?" read


class CassandraUnavailableError(ConnectionError):
    """Cassandra did not answer at the configured contact points in time."""


def level(name: str, variable: str) -> int:
    """The driver's consistency level named ``name`` (the setting ``variable``)."""
    try:
        return int(ConsistencyLevel.name_to_value[name.strip().upper()])
    except KeyError:
        known = ", ".join(sorted(ConsistencyLevel.name_to_value))
        raise ValueError(f"{variable}: unknown consistency level {name!r} "
                         f"(expected one of {known})") from None


def overlapping_read(read: int, write: int) -> int:
    """A read level that sees every write made at ``write`` (R + W > RF)."""
    cl = ConsistencyLevel
    if write == cl.ALL:
        return read
    if write in (cl.QUORUM, cl.EACH_QUORUM):
        return read if read in (cl.QUORUM, cl.ALL) else cl.QUORUM
    if write == cl.LOCAL_QUORUM:
        return read if read in (cl.LOCAL_QUORUM, cl.QUORUM, cl.EACH_QUORUM, cl.ALL) \
            else cl.LOCAL_QUORUM
    return int(cl.ALL)


def chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    """Consecutive slices of ``items`` of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


@dataclass(slots=True)
class _HostLock:
    lock: asyncio.Lock
    users: int = 0


class NodeWatch(HostStateListener):  # type: ignore[misc]
    """Reports to ``DEPENDENCIES`` (and so ``/readyz``) when the driver finds no node up,
    and when one comes back, whether or not this process was sending requests then: an
    idle process (a fetcher waiting on politeness) knows of an outage too. Called from
    the driver's threads; ``DEPENDENCIES`` is thread-safe."""

    def __init__(self, hosts: Any) -> None:
        self._lock = threading.Lock()
        self._up = {h.endpoint for h in hosts if h.is_up is not False}

    def on_up(self, host: Any) -> None:
        with self._lock:
            self._up.add(host.endpoint)
        DEPENDENCIES.up(STORE)

    def on_down(self, host: Any) -> None:
        with self._lock:
            self._up.discard(host.endpoint)
            none_up = not self._up
        if none_up:
            DEPENDENCIES.down(STORE, f"no Cassandra node is up (the driver lost {host})")

    def on_add(self, host: Any) -> None:
        if host.is_up:
            self.on_up(host)

    def on_remove(self, host: Any) -> None:
        self.on_down(host)


class CassandraSession:
    """The connection to a keyspace and the running of statements on it; the store's
    parts (:mod:`~common.adapters.cassandra.url_state`,
    :mod:`~common.adapters.cassandra.small_tables`) build on it.

    ``connect_timeout`` bounds how long :meth:`_connect` waits for the contact points;
    ``request_timeout`` bounds each request; ``max_concurrency`` bounds requests in
    flight; ``on_statement`` is told each statement's kind (read, write, lwt, batch)
    and its number of rows.
    """

    def __init__(self, settings: StoreSettings, *, connect_timeout: float,
                 request_timeout: float, max_concurrency: int,
                 on_statement: Callable[[str, int], None] | None) -> None:
        keyspace = settings.keyspace.strip()
        if not KEYSPACE_RE.fullmatch(keyspace):
            raise ValueError(f"CRAWLER_STORE_KEYSPACE: {settings.keyspace!r} is not a valid "
                             "keyspace name (a lower-case letter, then lower-case letters, "
                             "digits or _; at most 48)")
        if not settings.cassandra_hosts:
            raise ValueError("CRAWLER_STORE_CASSANDRA_HOSTS: no contact points")
        self.settings = settings
        self.keyspace = keyspace
        self._read = level(settings.read_consistency, "CRAWLER_STORE_READ_CONSISTENCY")
        self._write = level(settings.write_consistency, "CRAWLER_STORE_WRITE_CONSISTENCY")
        self._rmw = overlapping_read(self._read, self._write)
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._max_concurrency = max_concurrency
        self._cluster: Any = None
        self._session: Any = None
        self._slots: asyncio.Semaphore | None = None
        self._ps: dict[str, Any] = {}
        self._locks: dict[str, _HostLock] = {}
        self._on_statement = on_statement
        self._kinds: dict[int, str] = {}
        self._trouble = 0.0  # monotonic time the store last failed a request for an outage
        # requests of a kind sent together, by statement name (see small_tables)
        self._groups: dict[str, Grouped[Any, Any]] = {}

    @property
    def contact_points(self) -> str:
        port = self.settings.cassandra_port
        return ", ".join(f"{h}:{port}" for h in self.settings.cassandra_hosts)

    async def _connect(self) -> tuple[Any, Any]:
        deadline = time.monotonic() + self._connect_timeout
        while True:
            left = max(deadline - time.monotonic(), 0.5)
            profile = ExecutionProfile(
                load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
                consistency_level=self._read, request_timeout=self._request_timeout,
                row_factory=tuple_factory)
            cluster = None
            try:
                cluster = Cluster(list(self.settings.cassandra_hosts),
                                  port=self.settings.cassandra_port,
                                  protocol_version=5,
                                  connect_timeout=min(left, 5.0),
                                  control_connection_timeout=min(left, 5.0),
                                  execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                                  # without it, requests over a few KiB wait ~40 ms (Nagle)
                                  sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                                  # a node that comes back is used again within about
                                  # a second, not after the default's growing wait
                                  # (up to 10 min)
                                  reconnection_policy=ConstantReconnectionPolicy(
                                      RECONNECT_SECONDS),
                                  max_schema_agreement_wait=30)
                session = await asyncio.to_thread(cluster.connect)
            except (NoHostAvailable, UnresolvableContactPoints, OperationTimedOut,
                    OSError) as exc:
                if cluster is not None:
                    await asyncio.to_thread(cluster.shutdown)
                if time.monotonic() + 1.0 >= deadline:
                    detail = ("no contact point resolves"
                              if isinstance(exc, UnresolvableContactPoints) else str(exc))
                    raise CassandraUnavailableError(
                        f"Cassandra did not answer at {self.contact_points} within "
                        f"{self._connect_timeout:g} s: {detail}") from exc
                await asyncio.sleep(1.0)
                continue
            except BaseException:
                if cluster is not None:
                    await asyncio.to_thread(cluster.shutdown)
                raise
            return cluster, session

    async def _send(self, statement: Any, paging_state: Any = None, *,
                    request_timeout: float | None = None) -> Any:
        """Run one statement on the driver's I/O thread; the result set of one page."""
        if self._session is None or self._slots is None:
            raise RuntimeError("the state store is not open")
        if self._on_statement is not None:
            self._count(statement)
        async with self._slots:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[Any] = loop.create_future()
            future = self._session.execute_async(
                statement, paging_state=paging_state,
                timeout=self._request_timeout if request_timeout is None else request_timeout)

            def settle(outcome: Any, failed: bool) -> None:
                if done.done():
                    return
                if failed:
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)

            def on_result(_rows: Any) -> None:
                try:
                    result, failed = future.result(), False
                except Exception as exc:  # the driver re-raises what ended the request
                    result, failed = exc, True
                with contextlib.suppress(RuntimeError):  # the loop already closed
                    loop.call_soon_threadsafe(settle, result, failed)

            def on_error(exc: BaseException) -> None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(settle, exc, True)

            future.add_callbacks(on_result, on_error)
            try:
                result = await done
            except Exception as exc:
                if dependency_down(exc) == STORE:
                    DEPENDENCIES.down(STORE, describe(exc))  # /readyz: not ready
                    self._trouble = time.monotonic()
                raise
            if DEPENDENCIES.is_down(STORE):
                DEPENDENCIES.up(STORE)  # a request succeeded: Cassandra is back
            return result

    def _count(self, statement: Any) -> None:
        """Report one statement to ``on_statement``: its kind and, for a batch, rows."""
        assert self._on_statement is not None
        if isinstance(statement, BatchStatement):
            self._on_statement("batch", len(statement))
            return
        prepared = getattr(statement, "prepared_statement", statement)
        kind = self._kinds.get(id(prepared))
        if kind is None:
            text = " ".join(str(getattr(prepared, "query_string", "")).upper().split())
            kind = ("read" if text.startswith("SELECT")
                    else "lwt" if " IF " in f"{text} " else "write")
            self._kinds[id(prepared)] = kind
        self._on_statement(kind, 1)

    def _bind(self, name: str, params: Sequence[Any]) -> Any:
        if self._session is None:
            raise RuntimeError("the state store is not open")
        return self._ps[name].bind(params)

    async def _query(self, name: str, params: Sequence[Any], *,
                     fetch_size: int | None = None) -> Any:
        bound = self._bind(name, params)
        if fetch_size is not None:
            bound.fetch_size = fetch_size
        return await self._send(bound)

    async def _rows(self, name: str, params: Sequence[Any]) -> list[Any]:
        return list((await self._query(name, params)).current_rows)

    async def _pages(self, name: str, params: Sequence[Any],
                     fetch_size: int = 5000) -> AsyncGenerator[list[Any], None]:
        bound = self._bind(name, params)
        bound.fetch_size = fetch_size
        paging_state = None
        while True:
            result = await self._send(bound, paging_state)
            yield list(result.current_rows)
            paging_state = result.paging_state
            if paging_state is None:
                return

    async def _all_rows(self, name: str, params: Sequence[Any]) -> list[Any]:
        rows: list[Any] = []
        async with contextlib.aclosing(self._pages(name, params)) as pages:
            async for page in pages:
                rows += page
        return rows

    def _batch(self, *, logged: bool = True) -> Any:
        """A batch at the write level. Callers put one partition in a logged batch
        (one mutation: atomic on each replica, no batch log write)."""
        return BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED,
                              consistency_level=self._write)

    @contextlib.asynccontextmanager
    async def _locked(self, hosts: Iterable[str]) -> AsyncIterator[None]:
        """Hold this process's write lock of each host (in sorted order: no deadlock)."""
        names = sorted(set(hosts))
        entries: list[_HostLock] = []
        for host in names:
            entry = self._locks.get(host)
            if entry is None:
                entry = self._locks[host] = _HostLock(asyncio.Lock())
            entry.users += 1
            entries.append(entry)
        held: list[asyncio.Lock] = []
        try:
            for entry in entries:
                await entry.lock.acquire()
                held.append(entry.lock)
            yield
        finally:
            for lock in held:
                lock.release()
            for host, entry in zip(names, entries, strict=True):
                entry.users -= 1
                if entry.users == 0:
                    del self._locks[host]
