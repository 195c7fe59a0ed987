"""Shared fixtures. Conformance data lives outside the project, in ../shared/conformance."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def conformance_path(*parts: str) -> Path:
    """Path into the shared conformance data (CONFORMANCE_DIR overrides)."""
    base = Path(os.environ.get("CONFORMANCE_DIR", ROOT.parent / "shared" / "conformance"))
    path = base.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"conformance data missing: {path}")
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests under tests/unit are marked unit unless they say otherwise."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "unit" in parts and not any(m.name in ("integration", "e2e")
                                       for m in item.iter_markers()):
            item.add_marker(pytest.mark.unit)
        elif "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
        elif "integration" in parts:
            item.add_marker(pytest.mark.integration)
