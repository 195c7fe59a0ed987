"""Fixtures and markers of the integration tests.

Tests marked ``kube`` need scripts/kube's Kubernetes API server (and, for the crawl on
pods, its node). ``scripts/test`` starts the cluster, runs them on their own
(``-m kube``) and stops it before the other servers start; run elsewhere without the
cluster they skip, naming it, or fail under ``CI=true``, as every test here does.
"""

from __future__ import annotations

import pytest

from tests.integration.s3_support import S3Server, s3_server


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kube: needs scripts/kube's Kubernetes API server (scripts/test runs "
        "these on their own, with the cluster started)")


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server of scripts/servers, its endpoint and keys in the environment."""
    server = s3_server()
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    return server
