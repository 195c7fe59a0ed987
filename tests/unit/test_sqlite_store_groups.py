"""The SQLite store's worker runs waiting calls as a group in one transaction."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from common.adapters.sqlite_store import SqliteStateStore
from common.ports import HostState


async def held_worker(store: SqliteStateStore) -> tuple[threading.Event, asyncio.Task[Any]]:
    """Keep the worker busy until the event is set, so the next calls queue up."""
    gate = threading.Event()
    blocker = asyncio.create_task(store._run(gate.wait, 10.0))
    await asyncio.sleep(0.05)
    return gate, blocker


def statements(store: SqliteStateStore) -> list[str]:
    seen: list[str] = []
    assert store._conn is not None
    store._conn.set_trace_callback(lambda sql: seen.append(sql.split()[0].upper()))
    return seen


async def test_waiting_writes_share_one_transaction(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "s.sqlite") as store:
        seen = statements(store)
        gate, blocker = await held_worker(store)
        writes = [asyncio.create_task(store.put_host(HostState(host=f"h{i}.test",
                                                                page_count=i)))
                  for i in range(20)]
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(blocker, *writes)
        assert seen.count("COMMIT") == 1
        assert seen.count("SAVEPOINT") == 20
        hosts = await store.list_hosts()
        assert [(h.host, h.page_count) for h in hosts] == sorted(
            (f"h{i}.test", i) for i in range(20))


async def test_a_failing_call_leaves_the_rest_of_its_group(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "s.sqlite") as store:
        gate, blocker = await held_worker(store)
        first = asyncio.create_task(store.put_host(HostState(host="a.test")))
        bad = asyncio.create_task(store._run(store._put_sync,
                                             "INSERT INTO hosts (host) VALUES (?)", ("x",)))
        last = asyncio.create_task(store.put_host(HostState(host="b.test")))
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(blocker, first, last)
        with pytest.raises(sqlite3.IntegrityError):
            await bad  # NOT NULL columns missing
        assert [h.host for h in await store.list_hosts()] == ["a.test", "b.test"]
        assert await store.get_host("x") is None


async def test_a_write_is_committed_when_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    async with SqliteStateStore(path) as store:
        await store.put_host(HostState(host="a.test", page_count=7))
        other = sqlite3.connect(path)
        try:
            rows = other.execute("SELECT host, page_count FROM hosts").fetchall()
        finally:
            other.close()
        assert rows == [("a.test", 7)]


async def test_calls_after_close_are_refused(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "s.sqlite")
    await store.open()
    await store.close()
    await store.close()  # twice is harmless
    with pytest.raises(RuntimeError, match="not open"):
        await store.get_host("a.test")
