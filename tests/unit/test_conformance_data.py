"""The conformance data the tests read is inside the repository, with its provenance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, conformance_path

DATA = ROOT / "tests" / "conformance"


def _listed_files() -> list[str]:
    text = (DATA / "README.md").read_text(encoding="utf-8")
    return sorted(set(re.findall(r"`((?:robots|url|article-extraction)/[\w.\-]+\.json)`", text)))


def test_every_data_file_is_listed_with_its_source() -> None:
    on_disk = sorted(str(p.relative_to(DATA)) for p in DATA.rglob("*.json"))
    assert on_disk, "no conformance data in tests/conformance"
    assert _listed_files() == on_disk


@pytest.mark.parametrize("name", _listed_files())
def test_conformance_path_reads_the_copy_in_the_repository(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFORMANCE_DIR", raising=False)
    path = conformance_path(*name.split("/"))
    assert path.resolve().is_relative_to(ROOT)
    assert json.loads(path.read_text(encoding="utf-8"))


def test_conformance_dir_overrides(tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path))
    (tmp_path / "x.json").write_text("[]")
    assert conformance_path("x.json").parent == tmp_path
