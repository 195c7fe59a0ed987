"""Every runtime dependency in pyproject.toml is used by the product code."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import ROOT

PACKAGES = ("common", "frontier", "fetcher", "parser", "dedup", "simweb", "crawler", "render")

#: Distribution name -> module it is imported as, where the two differ.
MODULE = {"ada-url": "ada_url", "prometheus-client": "prometheus_client",
          "cassandra-driver": "cassandra", "confluent-kafka": "confluent_kafka",
          "google-re2": "re2"}

#: Dependencies used through another library rather than imported; each is checked.
INDIRECT = {
    "brotli": "aiohttp decodes Content-Encoding: br with it",
}


def _requirements(items: list[str]) -> list[str]:
    return [re.split(r"[<>=!~\[; ]", item, maxsplit=1)[0].lower() for item in items]


def _imported_modules() -> set[str]:
    found: set[str] = set()
    pattern = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_][\w]*)", re.MULTILINE)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found.update(pattern.findall(path.read_text(encoding="utf-8")))
    return found


def test_every_runtime_dependency_is_imported() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = _requirements(project["dependencies"])
    names += _requirements(project["optional-dependencies"]["cluster"])
    names += _requirements(project["optional-dependencies"]["render"])
    imported = _imported_modules()
    unused = [n for n in names
              if n not in INDIRECT and MODULE.get(n, n.replace("-", "_")) not in imported]
    assert not unused, f"runtime dependencies nothing imports: {unused}"


def test_indirect_dependencies_are_really_used() -> None:
    import aiohttp.compression_utils

    assert aiohttp.compression_utils.HAS_BROTLI, INDIRECT["brotli"]
