"""Extraction hooks for the tests: one that behaves, and one that misbehaves on cue.

:func:`by_path` answers like the example hook, except on pages whose path says
otherwise: ``/raise`` raises, ``/slow`` sleeps far past any time limit, ``/spin`` loops
in Python, ``/notdict`` returns a list, ``/notjson`` returns an object JSON cannot hold
and ``/big`` returns a megabyte of text.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

from examples.hooks import title_and_description
from parser.hook import PageView


def by_path(page: PageView) -> Any:
    path = urlsplit(page.url).path
    if path.startswith("/raise"):
        raise RuntimeError("the hook failed on purpose")
    if path.startswith("/slow"):
        time.sleep(600)
    if path.startswith("/spin"):
        while True:
            pass
    if path.startswith("/notdict"):
        return ["a", "list"]
    if path.startswith("/notjson"):
        return {"when": object()}
    if path.startswith("/big"):
        return {"text": "x" * 1_000_000}
    fields = title_and_description(page)
    fields["words"] = len(page.text.split())
    fields["language"] = page.language
    return fields


NOT_CALLABLE = 42
