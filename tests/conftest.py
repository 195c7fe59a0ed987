"""Shared fixtures. Conformance data (written outside this project) is in tests/conformance."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[1]


def conformance_path(*parts: str) -> Path:
    """Path into the conformance data in tests/conformance (CONFORMANCE_DIR overrides)."""
    base = Path(os.environ.get("CONFORMANCE_DIR", ROOT / "tests" / "conformance"))
    path = base.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"conformance data missing: {path}")
    return path


def in_ci() -> bool:
    """True under CI (``CI=true``), where every test must run."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """A server or tool the test needs is missing: skip it, or fail it under CI.

    A green CI run must mean every test ran, so under ``CI=true`` a missing server
    (Kafka, Cassandra, Prometheus, helm) is a failure that names what is missing.
    """
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a test that needs it may not skip)", pytrace=False)
    pytest.skip(reason)


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
