"""Tools and servers built or fetched once into a cache folder: Go programs from their
module's source, and Java servers' jars from Maven Central.

Go: ``go install module@version`` refuses a module whose go.mod has replace or exclude
directives (they count only in the main module), so the scripts download the module
(:func:`go_mod_download`), copy its source where it may be written
(:func:`copy_module_source`) and run ``go build`` in the copy.

Maven: :func:`fetch_jars` has Maven copy a pom's runtime dependencies into
``<home>/lib`` by way of ``lib.partial`` and records their names in
``<home>/installed.txt`` last, so :func:`jars_installed` never takes a fetch that
stopped half-way for a finished one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------------- Go


def go_env(**overrides: str) -> dict[str, str]:
    """The environment for Go's module tooling: modules added to go.mod as needed
    (``-mod=mod``), the installed toolchain unless GOTOOLCHAIN names another, no cgo
    (static binaries); then ``overrides``."""
    env = dict(os.environ)
    env["GOFLAGS"] = "-mod=mod"
    env.setdefault("GOTOOLCHAIN", "local")
    env["CGO_ENABLED"] = "0"
    env.update(overrides)
    return env


def go_binary(error: type[Exception], message: str) -> str:
    """The ``go`` command's path; ``error(message)`` when Go is not installed."""
    go = shutil.which("go")
    if go is None:
        raise error(message)
    return go


def go_mod_download(module: str, version: str, *, go: str, error: type[Exception],
                    env: Mapping[str, str] | None = None, need: Sequence[str] = (),
                    timeout: float | None = None) -> dict[str, Any]:
    """``go mod download -json module@version`` in a throw-away module folder: the
    module's record (``GoMod``, ``Dir`` and ``Zip`` paths in Go's module cache, ...).
    ``error`` names what failed when the download fails, takes longer than ``timeout``
    seconds, or the record lacks a key of ``need``."""
    with tempfile.TemporaryDirectory(prefix="go-mod-download-") as tmp:
        init = subprocess.run([go, "mod", "init", "scripts.local/download"], cwd=tmp,
                              env=env, capture_output=True, text=True, check=False)
        if init.returncode != 0:
            raise error(f"go mod init failed: {(init.stderr or init.stdout).strip()}")
        try:
            proc = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"],
                                  cwd=tmp, env=env, capture_output=True, text=True,
                                  check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise error(f"go mod download {module}@{version} did not finish within "
                        f"{timeout:.0f} s") from None
    try:
        info: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise error(f"go mod download {module}@{version} failed: "
                    f"{proc.stderr.strip() or proc.stdout.strip()}") from None
    if ("GoMod" not in info or ("Dir" not in info and "Zip" not in info)
            or any(key not in info for key in need)):
        raise error(f"go mod download {module}@{version}: "
                    f"{info.get('Error', proc.stderr.strip())}")
    return info


def copy_module_source(module_dir: str | Path, dest: Path) -> None:
    """A copy of a downloaded module's source at ``dest`` (replacing what was there),
    made writable: the module cache is read-only and ``go build`` writes in the module."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(module_dir, dest)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)


# ------------------------------------------------------------------------------ Maven


def jars_installed(home: Path) -> bool:
    """True when ``<home>/lib`` holds every jar ``<home>/installed.txt`` names."""
    stamp = home / "installed.txt"
    if not stamp.is_file():
        return False
    names = stamp.read_text().split()
    return bool(names) and all((home / "lib" / name).is_file() for name in names)


def fetch_jars(home: Path, pom_text: str, what: str, *, run: Callable[[list[str]], None],
               error: type[Exception]) -> list[str]:
    """The runtime dependencies of the pom ``pom_text`` (written to ``<home>/pom.xml``)
    copied by Maven into ``<home>/lib``; their file names. ``run`` runs the mvn command
    (and says what it does, raising the script's error when it fails); ``what`` names
    the jars in messages."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise error("mvn (Apache Maven) not found: it fetches the server jars")
    home.mkdir(parents=True, exist_ok=True)
    pom = home / "pom.xml"
    pom.write_text(pom_text, encoding="utf-8")
    staging = home / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    run([mvn, "-B", "-q", "--strict-checksums", "-f", str(pom),
         "dependency:copy-dependencies", "-DincludeScope=runtime",
         f"-DoutputDirectory={staging}"])
    names = sorted(p.name for p in staging.glob("*.jar"))
    if not names:
        raise error(f"mvn copied no jars for {what}")
    shutil.rmtree(home / "lib", ignore_errors=True)
    staging.rename(home / "lib")
    (home / "installed.txt").write_text("\n".join(names) + "\n")
    return names
