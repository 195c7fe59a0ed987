"""Hostile HTML ends in a clear outcome: no exception, no stall, bounded memory.

Each test runs under a per-test timeout that also stops code stuck inside the C parser
(method "thread"); the bounds are generous, no timing is asserted.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parser.charset import decode_html
from parser.html import extract, parse_document, scan_markup
from parser.text import main_text, uses_main_content

BASE = "http://example.com/dir/page"

pytestmark = pytest.mark.timeout(30, method="thread")


def run(source: str) -> tuple[list[str], str, bool]:
    """Parse once, extract links and text; return (urls, text, flattened)."""
    doc = parse_document(source)
    parsed = extract(doc, BASE)
    text = main_text(doc)
    return [link.url for link in parsed.links], text, parsed.flattened


def test_deep_nesting() -> None:
    depth = 100_000
    source = ("<html><body>" + "<div>" * depth + '<a href="/deep">deep</a> text'
              + "</div>" * depth + "</body></html>")
    found, text, flattened = run(source)
    assert flattened
    assert found == ["http://example.com/deep"]
    assert text == "deep text"


def test_deep_open_elements_then_stray_end_tags() -> None:
    # Each stray end tag makes a conforming tree builder scan the open elements.
    source = "<body>" + "<span>" * 50_000 + "</div>x" * 50_000 + '<a href="/end">e</a>'
    found, text, flattened = run(source)
    assert flattened
    assert found == ["http://example.com/end"]
    assert text.startswith("x x x")


def test_anchor_around_deep_nesting() -> None:
    source = '<body><a href="/a">' + "<div>" * 50_000 + "</a>" * 50_000
    found, _text, flattened = run(source)
    assert flattened and found == ["http://example.com/a"]


def test_formatting_elements_are_not_multiplied() -> None:
    # Unclosed formatting elements with distinct attributes are re-created in every
    # paragraph: n of them build about n * n / 2 elements in a conforming parser.
    n = 1200
    source = "<body>" + "".join(f'<font color="#{i:06x}"><p>x{i}' for i in range(n))
    stats = scan_markup(source)
    assert stats.hostile and stats.formatting > 500
    found, text, flattened = run(source + '<a href="/f">f</a>')
    assert flattened and found == ["http://example.com/f"]
    assert "x0" in text and f"x{n - 1}" in text


def test_moderately_deep_but_large_page_skips_main_content_heuristics() -> None:
    source = "<body>" + ("<div>" * 100 + "<p>words here</p>" + "</div>" * 100) * 2000
    doc = parse_document(source)
    assert not doc.flattened
    assert not uses_main_content(doc)
    assert main_text(doc).count("words here") == 2000


def test_huge_attributes() -> None:
    big = "y" * 10_000_000
    source = (f'<body><a href="/x" title="{big}">t</a> <a href="/{big}">big</a> '
              '<a href="/after">after</a></body>')
    found, text, _flattened = run(source)
    assert found == ["http://example.com/x", "http://example.com/after"]
    assert text.split() == ["t", "big", "after"]


def test_unterminated_constructs() -> None:
    for tail in ("<!--" * 50_000, "<script>" * 50_000, '<a href="' * 50_000,
                 "<style>" + "x" * 100_000, "<textarea>" + "<a href=/no>" * 1000):
        found, _text, _flattened = run('<body><a href="/ok">ok</a>' + tail)
        assert found[0] == "http://example.com/ok"


@pytest.mark.parametrize(("source", "expected"), [
    ('<a href="/a"><a href="/b">nested anchors</a></a>', ["/a", "/b"]),
    ("<a href=/unquoted?x=1&y=2>u</a>", ["/unquoted?x=1&y=2"]),
    ('<a href="/amp?a=1&amp;b=2">e</a>', ["/amp?a=1&b=2"]),
    ("<table><a href=/t>foster</a><tr><td><a href=/td>c</td></table>", ["/t", "/td"]),
    ("<b><p><a href=/mis>x</b>nested</p></a>", ["/mis"]),
    ('<a href="/one"<a href="/two">broken</a>', ["/one"]),
    ("</a></div></body></html><a href=/late>late</a>", ["/late"]),
    ("<A HREF='/UPPER'>u</A>", ["/UPPER"]),
    ("<svg><a href='/svg'>s</a></svg><math><a href='/m'>m</a></math>", ["/svg", "/m"]),
    ('<a href="\n /spaced \t">s</a>', ["/spaced"]),
])
def test_broken_markup(source: str, expected: list[str]) -> None:
    found, _text, _flattened = run(source)
    assert found == ["http://example.com" + path for path in expected]


def test_binary_junk() -> None:
    rng = random.Random(1)
    body = rng.randbytes(2_000_000)
    decoded = decode_html(body, "text/html")
    found, text, _flattened = run(decoded.text)
    assert isinstance(text, str)
    assert all(u.startswith("http") for u in found)


def test_nul_bytes() -> None:
    source = '<body>\x00<a href="/n\x00ul">a\x00b</a><title>t\x00</title>' * 1000
    found, text, _flattened = run(source)
    assert found == ["http://example.com/n%EF%BF%BDul"]
    assert "\x00" not in text
    decoded = decode_html(b"<p>a\x00b</p>" * 1000, None)
    assert decoded.text.count("\x00") == 1000


def test_lone_surrogates_in_text() -> None:
    found, text, _flattened = run('<p>a\ud800b</p><a href="/s\udc00">s</a>')
    assert found == ["http://example.com/s%EF%BF%BD"]
    assert text.startswith("a\ufffdb")


def test_enormous_number_of_links() -> None:
    source = "<body>" + "".join(f'<a href="/p{i}">{i}</a>' for i in range(100_000))
    parsed = extract(source, BASE, max_links=5000)
    assert parsed.links_truncated and len(parsed.links) == 5000
    same = "<body>" + '<a href="/same">x</a>' * 200_000
    parsed = extract(same, BASE)
    assert not parsed.links_truncated and len(parsed.links) == 1


_FRAGMENTS = st.sampled_from([
    "<div>", "</div>", "<p>", "</p>", "<b>", "</b>", "<font color=1>", "<font color=2>",
    "<a href='/x'>", "</a>", "<table>", "<tr>", "<td>", "</table>", "<script>",
    "</script>", "<!--", "-->", "<base href='/b/'>", "<meta name=robots content=none>",
    "<title>", "</title>", "<frame src=f>", "<iframe src=i>", "</iframe>", "text ",
    "\x00", "&amp;", "&", "<", ">", '"', "'", "=", "<svg>", "<select>", "<li>",
])


@settings(max_examples=200, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=300))
def test_random_tag_soup_never_raises(parts: list[str]) -> None:
    source = "".join(parts)
    doc = parse_document(source)
    parsed = extract(doc, BASE, product_token="PoliteCrawler")
    assert all(link.url.startswith("http://example.com/") for link in parsed.links)
    assert isinstance(main_text(doc), str)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=20_000))
def test_random_bytes_never_raise(body: bytes) -> None:
    doc = parse_document(decode_html(body, None).text)
    parsed = extract(doc, BASE)
    assert len(parsed.links) <= 5000
    assert isinstance(main_text(doc), str)


def test_nested_boilerplate_and_root_names_within_the_budget() -> None:
    """The main-text heuristics measure the text of every element named like
    boilerplate or a content root, and walk every paragraph's ancestors: nested, as deep
    as the guard lets a page through, they stay bounded."""
    depth = 400
    comments = ('<div class="comment">reply words ' * depth + "</div>" * depth)
    roots = ('<div class="entry-content"><p>a paragraph long enough to count</p>' * depth
             + "</div>" * depth)
    paragraphs = ("<section>" * depth + "<p>a paragraph long enough to count</p>" * 20_000
                  + "</section>" * depth)
    texts = []
    for source in (comments, roots, paragraphs):
        doc = parse_document("<body>" + source)
        assert not doc.flattened and uses_main_content(doc)
        texts.append(main_text(doc))
    assert "reply words" not in texts[0]  # a page of nothing but comments
    assert texts[1].count("a paragraph long enough") == depth
    assert texts[2].count("a paragraph long enough") == 20_000
