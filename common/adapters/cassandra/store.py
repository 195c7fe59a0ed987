"""The cluster-mode :class:`~common.ports.StateStore`: :class:`CassandraStateStore`, the
store's parts put together (see :mod:`common.adapters.cassandra`), and what concerns the
store as a whole: opening (connect, create or check the schema, prepare statements),
closing, forgetting what it keeps in memory, emptying or dropping the keyspace."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from common.adapters.cassandra.schema import TABLES, migrate
from common.adapters.cassandra.session import NodeWatch
from common.adapters.cassandra.small_tables import SmallTables
from common.adapters.cassandra.statements import prepare
from common.adapters.cassandra.url_state import REPAIR_AFTER, UrlStateTables
from common.settings import StoreSettings


class CassandraStateStore(UrlStateTables, SmallTables):
    """:class:`~common.ports.StateStore` over a Cassandra keyspace (cluster mode).

    ``connect_timeout`` bounds how long :meth:`open` waits for the contact points (it
    retries until then, for a server that is still starting); ``request_timeout`` bounds
    each request; ``max_concurrency`` bounds requests in flight from this store. Use
    ``await store.open()`` and ``await store.close()``, or ``async with``.
    """

    def __init__(self, settings: StoreSettings, *, connect_timeout: float = 10.0,
                 request_timeout: float = 30.0, max_concurrency: int = 128,
                 on_statement: Callable[[str, int], None] | None = None,
                 row_cache: int = 0, repair_after: float = REPAIR_AFTER) -> None:
        super().__init__(settings, connect_timeout=connect_timeout,
                         request_timeout=request_timeout, max_concurrency=max_concurrency,
                         on_statement=on_statement, row_cache=row_cache,
                         repair_after=repair_after)

    async def __aenter__(self) -> CassandraStateStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect, create or check the keyspace and schema, prepare statements.

        Raises :class:`~common.adapters.cassandra.session.CassandraUnavailableError`
        naming the contact points when none answers within ``connect_timeout``;
        :class:`~common.ports.SchemaError` when the keyspace holds a newer or
        incompatible schema, or the old layout of version 1. Calling it twice is harmless.
        """
        if self._session is not None:
            return
        cluster, session = await self._connect()
        try:
            await asyncio.to_thread(
                migrate, cluster, session, self.keyspace,
                replication_factor=self.settings.replication_factor,
                write_level=self._write, request_timeout=self._request_timeout)
            self._ps = await asyncio.to_thread(prepare, session, self.keyspace,
                                               read=self._read, write=self._write,
                                               rmw=self._rmw)
        except BaseException:
            await asyncio.to_thread(cluster.shutdown)
            raise
        self._cluster, self._session = cluster, session
        self._slots = asyncio.Semaphore(self._max_concurrency)
        cluster.register_listener(NodeWatch(cluster.metadata.all_hosts()))

    async def close(self) -> None:
        """Disconnect (after sending the grouped requests gathered). Calling it twice
        is harmless."""
        for group in list(self._groups.values()):
            await group.drain()
        repairs = list(self._repairs.values())
        self._repairs.clear()
        for task in repairs:
            task.cancel()
        for task in repairs:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        cluster, self._cluster, self._session = self._cluster, None, None
        self._slots = None
        if cluster is not None:
            await asyncio.to_thread(cluster.shutdown)

    def forget_cached(self) -> None:
        """Drop the rows kept in memory (see ``row_cache``): the caller's hosts changed.
        Repairs of counts still to come are dropped too: the hosts may have another
        writer now."""
        if self._cache is not None:
            self._cache.clear()
        self._suspect.clear()
        for task in self._repairs.values():
            task.cancel()
        self._repairs.clear()

    async def truncate(self) -> None:
        """Empty every table of the keyspace and keep the schema (tests; a crawl anew)."""
        self.forget_cached()
        for table in TABLES:
            if table.name == "schema_version":
                continue
            probe = SimpleStatement(f"SELECT * FROM {self.keyspace}.{table.name} LIMIT 1",
                                    consistency_level=ConsistencyLevel.ALL)
            if (await self._send(probe)).current_rows:
                await self._send(SimpleStatement(f"TRUNCATE {self.keyspace}.{table.name}"),
                                 request_timeout=max(self._request_timeout, 60.0))

    async def drop_keyspace(self) -> None:
        """Drop this crawl's keyspace and everything in it."""
        await self._send(SimpleStatement(f"DROP KEYSPACE IF EXISTS {self.keyspace}"),
                         request_timeout=max(self._request_timeout, 120.0))
