"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from common.adapters.sqlite_store import SqliteStateStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStateStore]:
    """An open SQLite state store in the test's own folder."""
    s = SqliteStateStore(tmp_path / "state.sqlite")
    await s.open()
    try:
        yield s
    finally:
        await s.close()
