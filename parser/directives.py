"""Robots directives of a page: ``<meta name="robots">`` and the X-Robots-Tag header.

Only the directives that change what the crawl does are kept: ``noindex`` (do not store
or index the page), ``nofollow`` (do not follow its links) and ``none`` (both). Names
are case-insensitive; ``index``, ``follow``, ``all`` and unknown directives change
nothing.

The X-Robots-Tag header may scope directives to one crawler by a user-agent prefix
(``PoliteCrawler: noindex, nofollow``); a scoped group applies only when the prefix is
our product token (case-insensitive) and runs until the next prefix or the end of the
header line. Several header lines are passed joined by newlines; joined by commas they
still parse, but an unscoped line after a scoped one then counts as part of that scope.
Directives that take a value after a colon (``unavailable_after: <date>``,
``max-snippet: 20``) are not taken for user-agent prefixes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["RobotsDirectives", "meta_robots", "x_robots_tag"]

_SPLIT = re.compile(r"[\s,]+")
_PREFIX = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_.\-]*)\s*:\s*(.*)$", re.DOTALL)
# Directives written "name: value" (Google's list); never a user-agent prefix.
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview",
                     "max-video-preview", "indexifembedded"})


@dataclass(frozen=True, slots=True)
class RobotsDirectives:
    """What a page's robots directives forbid."""

    noindex: bool = False
    nofollow: bool = False

    def __or__(self, other: RobotsDirectives) -> RobotsDirectives:
        return RobotsDirectives(self.noindex or other.noindex, self.nofollow or other.nofollow)


NONE = RobotsDirectives()


def _apply(tokens: Iterable[str], found: RobotsDirectives) -> RobotsDirectives:
    noindex, nofollow = found.noindex, found.nofollow
    for token in tokens:
        word = token.strip().lower()
        if word == "noindex":
            noindex = True
        elif word == "nofollow":
            nofollow = True
        elif word == "none":
            noindex = nofollow = True
    return RobotsDirectives(noindex, nofollow)


def meta_robots(content: str | None) -> RobotsDirectives:
    """Directives of one robots meta tag's ``content`` (comma or space separated)."""
    if not content:
        return NONE
    return _apply(_SPLIT.split(content), NONE)


def x_robots_tag(header: str | None, product_token: str | None = None) -> RobotsDirectives:
    """Directives of an X-Robots-Tag header value that apply to ``product_token``."""
    if not header:
        return NONE
    ours = product_token.strip().lower() if product_token else None
    found = NONE
    for line in header.splitlines():
        applies = True
        for part in line.split(","):
            token = part
            match = _PREFIX.match(part)
            if match is not None and match.group(1).lower() not in _VALUED:
                applies = ours is not None and match.group(1).lower() == ours
                token = match.group(2)
            if applies:
                found = _apply(token.split(), found)
    return found
