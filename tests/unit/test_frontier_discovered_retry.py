"""A discovered message whose store write fails is retried by the bus; the retry must
still take its URLs (they are marked seen only once stored)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import Discovered, Link, Topic, UrlStatus
from common.ports import Delivery, UrlState
from common.settings import Settings
from frontier.service import Frontier


class FailsOnce(SqliteStateStore):
    """A real SQLite store whose first add_urls call fails (a store hiccup)."""

    failed = False

    async def add_urls(self, rows: Sequence[UrlState]) -> list[UrlState]:
        if not self.failed:
            self.failed = True
            raise ConnectionError("store unavailable")
        return await super().add_urls(rows)


async def test_a_retried_discovered_message_keeps_its_urls(tmp_path: Path) -> None:
    store = FailsOnce(tmp_path / "state.sqlite")
    await store.open()
    try:
        frontier = Frontier(Settings(), MemoryBus(), store)
        links = (Link(url="http://a.test/1"), Link(url="http://a.test/1"),
                 Link(url="http://a.test/2"))
        delivery = Delivery(topic=Topic.DISCOVERED, key="a.test",
                            message=Discovered(host="a.test", links=links))
        with pytest.raises(ConnectionError):
            await frontier.handle(delivery)
        await frontier.handle(delivery)  # the bus's retry
        rows = [await store.get_url("a.test", f"http://a.test/{i}") for i in (1, 2)]
        assert [r.status if r else None for r in rows] == [UrlStatus.QUEUED] * 2
        assert frontier.counters.accepted == 2
        await frontier.handle(delivery)  # a later repeat is skipped by the seen filter
        assert frontier.counters.seen_skipped == 3
    finally:
        await store.close()
