"""The real Prometheus server (Debian package ``prometheus``) for tests: it listens on
127.0.0.1 only, scrapes what the given config names, and is stopped by PID."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS = shutil.which("prometheus")


@contextmanager
def run_prometheus(folder: Path, config: dict[str, Any], port: int) -> Iterator[str]:
    """Prometheus on 127.0.0.1:``port`` with ``config`` (data and log in ``folder``);
    yields its base URL."""
    if PROMETHEUS is None:
        raise RuntimeError("prometheus is not installed (apt-get install prometheus)")
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with (folder / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}",
             f"--storage.tsdb.path={folder / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=log)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
