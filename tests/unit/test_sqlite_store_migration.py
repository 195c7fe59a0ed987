"""A crawl folder made before a column was added still opens: the column is added and
rows written before it read back with the field's default."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from common.adapters.sqlite_store import SqliteStateStore
from common.ports import HostState


async def test_a_hosts_table_from_before_the_refresh_count_is_migrated(
        tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = SqliteStateStore(path)
    await store.open()
    await store.put_host(HostState(host="old.test", page_count=4))
    await store.close()
    with sqlite3.connect(path) as db:  # the table as an older version made it
        db.execute("ALTER TABLE hosts DROP COLUMN refreshes")
        assert "refreshes" not in {r[1] for r in db.execute("PRAGMA table_info(hosts)")}

    store = SqliteStateStore(path)
    await store.open()
    try:
        old = await store.get_host("old.test")
        assert old is not None and (old.page_count, old.refreshes) == (4, 0)
        await store.put_host(HostState(host="new.test", page_count=5, refreshes=3))
        assert await store.get_host("new.test") == HostState(host="new.test", page_count=5,
                                                             refreshes=3)
    finally:
        await store.close()
