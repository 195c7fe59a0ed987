"""Operator patterns: the regular expressions an operator gives to block URL paths.

They come from ``CRAWLER_TRAPS_BLOCKED_PATTERNS`` and ``POST /v1/blocked-paths`` and
are searched in the path and query of every URL the frontier takes in or hands out,
on the event loop. Python's ``re`` backtracks, so one pattern such as ``^/a/(x+)+$``
and one URL made to miss it (``/a/xxxx…x!``) take time exponential in the URL's
length: a single link froze a crawl and its control API for over a minute. These
patterns are therefore compiled with RE2 (the ``google-re2`` bindings, Google's own),
whose matching time is linear in the text and never backtracks. RE2 does not run
what needs backtracking (backreferences such as ``\\1``, lookahead and lookbehind,
possessive and atomic groups) and knows ``\\z`` where Python writes ``\\Z``: such a
pattern is refused up front, with the reason, by :func:`compile_operator_pattern`,
which every entry point uses (settings validation, the API, the frontier).

Why google-re2 and not pyre2: google-re2 is published by the RE2 authors with wheels
for every CPython release, and it raises on a pattern RE2 cannot run, whereas pyre2
silently falls back to Python's ``re`` for such patterns, which would bring the
backtracking back.
"""

from __future__ import annotations

from typing import Any, Protocol

import re2


class PatternError(ValueError):
    """A pattern that is not a regular expression RE2 can run; the message says why."""


class OperatorPattern(Protocol):
    """A compiled pattern: RE2's, or (in tests) anything with the same ``search``."""

    def search(self, text: str, /) -> Any: ...


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the error is raised with its reason; no stderr noise
    return options


_OPTIONS = _options()

_HINTS = (
    ("\\Z", "RE2 writes Python's \\Z as \\z"),
    ("(?=", "RE2 has no lookahead or lookbehind"),
    ("(?!", "RE2 has no lookahead or lookbehind"),
    ("(?<=", "RE2 has no lookahead or lookbehind"),
    ("(?<!", "RE2 has no lookahead or lookbehind"),
    ("(?P=", "RE2 has no backreferences"),
    ("(?>", "RE2 has no atomic groups"),
)


def _reason(exc: BaseException, pattern: str) -> str:
    raw = exc.args[0] if exc.args else exc
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    hints = [hint for token, hint in _HINTS if token in pattern]
    if "invalid escape sequence: \\" in text and text.rstrip()[-1:].isdigit():
        hints.append("RE2 has no backreferences")
    if hints:
        text += " (" + "; ".join(dict.fromkeys(hints)) + ")"
    return text


def compile_operator_pattern(pattern: str) -> OperatorPattern:
    """Compile an operator's pattern with RE2 (linear-time matching).

    Raises :class:`PatternError` for a pattern that is not valid RE2 syntax or that
    needs backtracking (backreferences, lookaround); the message gives RE2's reason.
    """
    if not isinstance(pattern, str):
        raise PatternError(f"expected a string, got {type(pattern).__name__}")
    try:
        compiled: OperatorPattern = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raise PatternError(f"{pattern[:200]!r} is not a regular expression RE2 can run: "
                           f"{_reason(exc, pattern)}") from None
    except UnicodeError:
        raise PatternError(f"{pattern[:200]!r} is not valid Unicode text") from None
    return compiled
