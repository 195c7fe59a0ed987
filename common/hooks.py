"""Loading the user's extraction hook named by ``CRAWLER_PARSER_HOOK``.

The setting names one Python callable as ``package.module:function`` (a dotted
attribute path after the colon is allowed: ``module:Class.method``). The settings check
loads it once at start, so a missing module or a name that is not callable stops every
role with a message naming the variable, before any page is fetched; page workers load
it again, once each (:func:`load_hook` caches it per process). What the hook is given
and may return is the parser's (:mod:`parser.hook`, docs/extraction-hook.md).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

_SPEC = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")
_loaded: dict[str, Callable[[Any], Any]] = {}


def load_hook(spec: str) -> Callable[[Any], Any]:
    """The callable ``spec`` names (cached); ValueError saying what is wrong."""
    found = _loaded.get(spec)
    if found is not None:
        return found
    if not _SPEC.fullmatch(spec):
        raise ValueError(f"expected package.module:function, got {spec!r}")
    module_name, _, attribute = spec.partition(":")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # the module's own code failed while it was imported
        raise ValueError(f"importing {module_name!r} failed: "
                         f"{type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no {attribute!r}") from None
    if not callable(value):
        raise ValueError(f"{spec!r} is not callable (a {type(value).__name__})")
    hook: Callable[[Any], Any] = value
    _loaded[spec] = hook
    return hook
