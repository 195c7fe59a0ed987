"""docker-compose.yml pins every image and sets no Grafana admin password of its own:
read as YAML and interpolated as Compose does (scripts/check-deploy's interpolation), so
no Docker client is needed."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy_support import load_check_deploy

ROOT = Path(__file__).resolve().parents[2]
cd = load_check_deploy()
ENV = {"CRAWLER_API_TOKEN": "t", "GRAFANA_ADMIN_PASSWORD": "p"}
# a name, an explicit tag that is not "latest", or a digest
PINNED = re.compile(r"[a-z0-9][a-z0-9._/-]*(:(?!latest$)[A-Za-z0-9_][A-Za-z0-9_.-]*"
                    r"|@sha256:[0-9a-f]{64})")


def raw_compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return doc


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        version: str = tomllib.load(f)["project"]["version"]
    return version


def image_refs(doc: dict[str, Any]) -> dict[str, str]:
    """service -> its image reference (every service names one)."""
    refs = {}
    for name, service in doc["services"].items():
        assert service.get("image"), f"service {name} names no image"
        refs[name] = service["image"]
    return refs


@pytest.mark.parametrize("env", [ENV, {**ENV, "CRAWLER_IMAGE": ""},
                                 {**ENV, "COMPOSE_PROFILES": "demo,s3,render"}])
def test_every_image_is_pinned(env: dict[str, str]) -> None:
    refs = image_refs(cd.interpolate(raw_compose(), env))
    for name, ref in refs.items():
        assert PINNED.fullmatch(ref), f"service {name}: image {ref!r} is not pinned"


def test_the_defaults_written_in_the_file_are_pinned_too() -> None:
    # ${CRAWLER_IMAGE:-polite-crawler:latest} interpolates to a pinned-looking name
    # only when the variable is set: the default itself must be pinned
    for name, ref in image_refs(raw_compose()).items():
        for default in re.findall(r"\$\{[A-Z_]+:?-([^}]*)\}", ref):
            assert PINNED.fullmatch(default), f"service {name}: default {default!r}"


def test_the_project_images_carry_the_project_version() -> None:
    """scripts/docker builds polite-crawler:<version> (pyproject.toml), which compose
    names by default."""
    version = project_version()
    for name, ref in image_refs(cd.interpolate(raw_compose(), ENV)).items():
        if ref.startswith("polite-crawler"):
            assert ref.rpartition(":")[2] == version, (name, ref)
    stack = (ROOT / "scripts" / "docker.d" / "docker_stack.py").read_text()
    assert "project_version()" in stack


def test_grafana_has_no_default_admin_password() -> None:
    grafana = raw_compose()["services"]["grafana"]["environment"]
    value = str(grafana.get("GF_SECURITY_ADMIN_PASSWORD", ""))
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", value), value
    env = {"CRAWLER_API_TOKEN": "t"}
    with pytest.raises(cd.InterpolationError, match="GRAFANA_ADMIN_PASSWORD"):
        cd.load_compose(env)
    with pytest.raises(cd.InterpolationError, match="GRAFANA_ADMIN_PASSWORD"):
        cd.load_compose({**env, "GRAFANA_ADMIN_PASSWORD": ""})
    doc = cd.load_compose({**env, "GRAFANA_ADMIN_PASSWORD": "s3cret"})
    assert doc["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret"
    # nor does the demo's env file set one
    assert "GRAFANA_ADMIN_PASSWORD" not in cd.read_env_file(cd.DEMO_ENV)
    for key in ("GF_SECURITY_ADMIN_PASSWORD__FILE", "GF_SECURITY_ADMIN_USER"):
        assert key not in grafana or "${" in str(grafana[key])
