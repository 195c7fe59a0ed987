"""The deployment checker (scripts/check-deploy.d/check_deploy.py) as a module, for the
tests that call its functions directly."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_check_deploy() -> ModuleType:
    name = "check_deploy"
    if name in sys.modules:
        return sys.modules[name]
    path = ROOT / "scripts" / "check-deploy.d" / "check_deploy.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
