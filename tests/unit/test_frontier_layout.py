"""The frontier package's shape: its modules import only common/ and each other (no
other stage's code; the resolver it keys hosts by with ``CRAWLER_POLITENESS_KEY=ip``
is passed in by whoever builds it), without import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.settings import Settings
from frontier.service import Frontier
from tests.conftest import ROOT


def _imports(path: Path) -> set[str]:
    """The modules a file imports, at any depth (imports inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            if node.module == "frontier":
                found.update(f"frontier.{alias.name}" for alias in node.names)
    return found


MODULES = {p.stem: _imports(p) for p in (ROOT / "frontier").glob("*.py")}


def test_frontier_modules_import_no_other_stage() -> None:
    stages = ("fetcher", "parser", "dedup", "render", "crawler", "simweb")
    wrong = {name: sorted(m for m in imports if m.split(".")[0] in stages)
             for name, imports in MODULES.items()}
    assert not {name: found for name, found in wrong.items() if found}


def test_frontier_modules_import_each_other_without_cycles() -> None:
    graph = {name: {m.split(".")[1] for m in imports
                    if m.startswith("frontier.") and m.split(".")[1] in MODULES}
             for name, imports in MODULES.items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for each in sorted(graph[name]):
            visit(each, (*path, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_keying_hosts_by_address_needs_a_resolver(tmp_path: Path) -> None:
    settings = Settings().replace(politeness={"key": "ip"})
    store = SqliteStateStore(tmp_path / "state.sqlite")
    with pytest.raises(ValueError, match="resolver"):
        Frontier(settings, MemoryBus(), store)
    Frontier(Settings().replace(politeness={"key": "domain"}), MemoryBus(), store)
