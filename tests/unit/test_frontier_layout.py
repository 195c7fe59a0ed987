"""The frontier keys hosts by address only with a resolver its builder hands it (it
imports no resolver of its own: the import rules are checked for every stage by
tests/unit/test_import_boundaries.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.settings import Settings
from frontier.service import Frontier


def test_keying_hosts_by_address_needs_a_resolver(tmp_path: Path) -> None:
    settings = Settings().replace(politeness={"key": "ip"})
    store = SqliteStateStore(tmp_path / "state.sqlite")
    with pytest.raises(ValueError, match="resolver"):
        Frontier(settings, MemoryBus(), store)
    Frontier(Settings().replace(politeness={"key": "domain"}), MemoryBus(), store)
