"""The house's import rules, read from the source with :mod:`ast` (nothing is imported).

- A stage package (frontier, fetcher, parser, dedup, render) imports only ``common`` and
  itself: what one stage needs of another is handed to it as a callable by the
  composition root in ``crawler/`` (:mod:`crawler.roles`, :mod:`crawler.embedded`).
  Every ``import`` counts: at module level, inside a function, under ``TYPE_CHECKING``.
- ``common`` imports no stage, no ``crawler`` and no ``simweb``.
- The modules of ``common`` and of each stage form no cycle, counting imports inside
  functions too (a cycle hidden in a function is still a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("frontier", "fetcher", "parser", "dedup", "render")
PROJECT = (*STAGES, "common", "crawler", "simweb")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports (line, dotted name), relative imports resolved;
    ``from a import b`` counts as ``a.b`` when ``a.b`` is a module of the project."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                if _is_module(candidate):
                    found.append((node.lineno, candidate))
    return found


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _top(name: str) -> str:
    return name.split(".", 1)[0]


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_stage_imports_only_common_and_itself(stage: str) -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {name}"
             for path in _sources(stage) for line, name in _imports(path)
             if _top(name) in PROJECT and _top(name) not in (stage, "common")]
    assert not wrong, "stages import only common/ and themselves:\n" + "\n".join(wrong)


def test_common_imports_no_stage() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {name}"
             for path in _sources("common") for line, name in _imports(path)
             if _top(name) in PROJECT and _top(name) != "common"]
    assert not wrong, "common/ imports nothing above it:\n" + "\n".join(wrong)


def _cycles(package: str) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for path in _sources(package):
        name = _module_name(path)
        graph[name] = {dep for _, dep in _imports(path)
                       if _top(dep) == package and _is_module(dep) and dep != name
                       and not name.startswith(dep + ".")}  # a package's own __init__
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


@pytest.mark.parametrize("package", ["common", *STAGES, "crawler"])
def test_no_import_cycles(package: str) -> None:
    cycles = _cycles(package)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_reader_sees_imports_inside_functions(tmp_path: Path) -> None:
    """The rule's own check: an import inside a function, a relative import and a
    ``from package import module`` are all found."""
    probe = ROOT / "fetcher" / "_import_probe_for_test.py"
    probe.write_text("from . import gate\n\ndef f() -> None:\n"
                     "    from crawler import inline  # noqa\n", encoding="utf-8")
    try:
        names = {name for _, name in _imports(probe)}
    finally:
        probe.unlink()
    assert "crawler" in names and "crawler.inline" in names
    assert "fetcher.gate" in names
