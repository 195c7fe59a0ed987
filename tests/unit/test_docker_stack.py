"""scripts/docker.d/docker_stack.py without an engine: which images the stack needs, the
versions its stand-ins carry, and that the stand-ins' recipes are complete."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ds() -> ModuleType:
    name = "docker_stack_under_test"
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "scripts" / "docker.d" / "docker_stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_stack_images_are_those_of_the_compose_file_and_the_dockerfile(
        ds: ModuleType) -> None:
    images = ds.stack_images()
    assert images["python"] == "python:3.11-slim"
    assert images["kafka"].startswith("apache/kafka:")
    assert images["cassandra"].startswith("cassandra:5")
    assert images["prometheus"].startswith("prom/prometheus:")
    assert images["grafana"].startswith("grafana/grafana:")


def test_stand_in_versions(ds: ModuleType) -> None:
    kafka = ds.StandIn("kafka", "apache/kafka:4.1.0")
    assert kafka.version() == "4.1.0"
    cassandra = ds.StandIn("cassandra", "cassandra:5.0")
    assert cassandra.version().startswith("5.0.")  # scripts/servers' Cassandra
    with pytest.raises(ds.DockerError, match="scripts/servers has Cassandra"):
        ds.cassandra_version("4.1")


def test_every_stand_in_has_a_recipe(ds: ModuleType) -> None:
    for kind in ("python", "kafka", "cassandra", "prometheus"):
        folder = ROOT / "scripts" / "docker.d" / "images" / kind
        assert (folder / "Dockerfile").is_file(), kind
        text = (folder / "Dockerfile").read_text()
        assert "ARG BASE" in text and "FROM ${BASE}" in text, kind
    for kind in ("kafka", "cassandra"):
        assert (ROOT / "scripts" / "docker.d" / "images" / kind / "pom.xml.in").is_file()
    for sources in ds.SHARED_FILES.values():
        assert all(path.is_file() for path in sources.values())


def test_the_mirror_is_the_one_apt_uses(ds: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBIAN_MIRROR", "http://mirror.example/debian")
    assert ds.debian_mirror() == "http://mirror.example/debian"
    monkeypatch.delenv("DEBIAN_MIRROR")
    assert ds.debian_mirror().endswith("/debian")
