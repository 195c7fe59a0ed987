"""Robots directives from meta tags and the X-Robots-Tag header (parser.directives)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parser.directives import RobotsDirectives, meta_robots, x_robots_tag

NOINDEX = RobotsDirectives(noindex=True)
NOFOLLOW = RobotsDirectives(nofollow=True)
BOTH = RobotsDirectives(noindex=True, nofollow=True)
NEITHER = RobotsDirectives()


@pytest.mark.parametrize(("content", "expected"), [
    ("noindex", NOINDEX),
    ("NoFollow", NOFOLLOW),
    ("noindex, nofollow", BOTH),
    ("noindex,nofollow", BOTH),
    ("noindex nofollow", BOTH),
    ("none", BOTH),
    ("index, follow", NEITHER),
    ("all", NEITHER),
    ("noarchive, nosnippet", NEITHER),
    ("", NEITHER),
    (None, NEITHER),
    ("  NOINDEX  ", NOINDEX),
])
def test_meta_robots(content: str | None, expected: RobotsDirectives) -> None:
    assert meta_robots(content) == expected


@pytest.mark.parametrize(("header", "expected"), [
    ("noindex", NOINDEX),
    ("noindex, nofollow", BOTH),
    ("none", BOTH),
    ("PoliteCrawler: noindex", NOINDEX),
    ("politecrawler: nofollow", NOFOLLOW),
    ("googlebot: noindex", NEITHER),
    ("googlebot: noindex, nofollow", NEITHER),  # the scope runs to the end of the line
    ("googlebot: noindex\nnofollow", NOFOLLOW),  # a new header line starts unscoped
    ("googlebot: noindex, PoliteCrawler: nofollow", NOFOLLOW),
    ("unavailable_after: 25 Jun 2010 15:00:00 PST", NEITHER),
    ("unavailable_after: Sat, 25 Jun 2010 15:00:00 PST, noindex", NOINDEX),
    ("max-snippet: 20, nofollow", NOFOLLOW),
    ("all", NEITHER),
    ("", NEITHER),
    (None, NEITHER),
])
def test_x_robots_tag(header: str | None, expected: RobotsDirectives) -> None:
    assert x_robots_tag(header, "PoliteCrawler") == expected


def test_scoped_header_without_product_token_applies_to_nobody() -> None:
    assert x_robots_tag("PoliteCrawler: noindex", None) == NEITHER
    assert x_robots_tag("noindex", None) == NOINDEX


def test_union() -> None:
    assert NOINDEX | NOFOLLOW == BOTH
    assert NEITHER | NEITHER == NEITHER


@given(st.text(max_size=200))
def test_header_parser_never_raises(header: str) -> None:
    result = x_robots_tag(header, "PoliteCrawler")
    # A header that does not mention a directive cannot forbid anything.
    if "noindex" not in header.lower() and "none" not in header.lower():
        assert not result.noindex
