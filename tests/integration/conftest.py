"""The ``kube`` tests (a real Kubernetes API server from scripts/kube) run only when asked.

Building Kubernetes the first time takes longer than a CI run can spare, so tests marked
``kube`` are deselected unless ``CRAWLER_TEST_KUBE=1`` or the ``-m`` expression names
``kube``. Asked for, they need the API server (``scripts/kube start``) and fail under
``CI=true`` without it, as every test here does.
"""

from __future__ import annotations

import os

import pytest

from tests.integration.s3_support import S3Server, s3_server


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kube: needs a Kubernetes API server (scripts/kube start); deselected "
        "unless CRAWLER_TEST_KUBE=1 or -m names kube")


def kube_tests_wanted(config: pytest.Config) -> bool:
    if os.environ.get("CRAWLER_TEST_KUBE", "").strip().lower() in ("1", "true", "yes"):
        return True
    return "kube" in (config.getoption("markexpr", "") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if kube_tests_wanted(config):
        return
    deselected = [item for item in items if item.get_closest_marker("kube") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.get_closest_marker("kube") is None]


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server of scripts/servers, its endpoint and keys in the environment."""
    server = s3_server()
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    return server
