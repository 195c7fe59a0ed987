"""Shared fixtures. Conformance data (written outside this project) is in tests/conformance."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from tests.servers_source import Servers

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


# Integration tests that need no Kafka or Cassandra (the compose test brings its own;
# the kube tests need scripts/kube's cluster instead; the S3 tests need only the S3
# server, tests/integration/s3_support.py).
NO_SERVERS = {"test_deploy.py", "test_compose.py", "test_helm_install.py",
              "test_kube_crawl.py", "test_s3_blobs.py", "test_s3_crawl.py"}


def _needs_servers(item: pytest.Item) -> bool:
    return (item.get_closest_marker("integration") is not None
            and Path(str(item.fspath)).name not in NO_SERVERS)


@pytest.fixture(scope="session", autouse=True)
def integration_servers(request: pytest.FixtureRequest) -> Iterator[Servers | None]:
    """Kafka and Cassandra for the integration tests: scripts/servers' (or the ones the
    environment names) or testcontainers' (``CRAWLER_TEST_SERVERS``; tests/servers_source.py).

    Started once, and only when the run selects a test that needs them; testcontainers'
    addresses are exported as the variables the tests read, and restored afterwards.
    """
    if not any(_needs_servers(item) for item in request.session.items):
        yield None
        return
    from tests import servers_source

    with contextlib.ExitStack() as stack:
        try:
            found = stack.enter_context(servers_source.servers())
        except servers_source.ServersError as exc:
            pytest.exit(f"integration servers: {exc}", returncode=1)
        # local: the tests read the same variables and defaults themselves
        exported = found.env() if found.source == "docker" else {}
        saved = {name: os.environ.get(name) for name in exported}
        os.environ.update(exported)
        try:
            yield found
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
