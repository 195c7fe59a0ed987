"""The parser's input bounds: attributes and names (parser.html).

Pages whose parse grows with the square of something (attributes of one element,
distinct attribute or tag names, options of one select, attributes merged into html or
body) are stripped of attributes or flattened before parsing, so they parse in time
linear in their size and keep the links, directives and title the crawl needs. The
timing bounds are generous (the unguarded parsers take many times longer, see the
parser.html docstring); each test also runs under a per-test timeout.
"""

from __future__ import annotations

import time

import pytest

from parser.html import (
    KEPT_ATTRIBUTES,
    MAX_ATTRIBUTE_CHARS,
    MAX_ATTRIBUTE_NAMES,
    MAX_ATTRIBUTES_PER_ELEMENT,
    MAX_ATTRIBUTES_PER_PAGE,
    MAX_TAG_NAMES,
    OPTION_BUDGET,
    extract,
    parse_document,
    scan_attributes,
    scan_markup,
    strip_attributes,
)
from parser.text import main_text

BASE = "http://example.com/dir/page"
TAIL = '<p>after the markup</p><a href="/after" rel="nofollow" data-x="1">after</a>'

pytestmark = pytest.mark.timeout(60, method="thread")


def _attrs(n: int, prefix: str = "a") -> str:
    return " ".join(f"{prefix}{i}=x" for i in range(n))


def _run(source: str) -> tuple[list[tuple[str, bool]], str, float, bool, bool]:
    started = time.perf_counter()
    doc = parse_document(source)
    parsed = extract(doc, BASE)
    text = main_text(doc)
    took = time.perf_counter() - started
    links = [(link.url, link.nofollow) for link in parsed.links]
    return links, text, took, parsed.stripped, parsed.flattened


AFTER = [("http://example.com/after", True)]


# -- one element ------------------------------------------------------------------


def test_attributes_up_to_the_limit_are_left_alone() -> None:
    source = f"<body><div {_attrs(MAX_ATTRIBUTES_PER_ELEMENT)}>t</div>{TAIL}"
    assert scan_attributes(source).most_on_element == 0
    links, _text, _took, stripped, _flat = _run(source)
    assert not stripped and links == AFTER


@pytest.mark.parametrize("tag", ["div", "svg", "math", "template", "input", "a"])
def test_one_start_tag_over_the_limit_is_stripped(tag: str) -> None:
    source = f"<body><{tag} {_attrs(MAX_ATTRIBUTES_PER_ELEMENT + 1)} id=k>t</{tag}>{TAIL}"
    assert scan_attributes(source).most_on_element > MAX_ATTRIBUTES_PER_ELEMENT
    doc = parse_document(source)
    assert doc.stripped and not doc.flattened
    assert f"<{tag} id=k>" in doc.markup


def test_the_issues_shape_parses_in_linear_time() -> None:
    # one <div> with 80,000 attributes (709 KB): 14 to 17 s in each parser unguarded
    source = f"<html><body><div {_attrs(80_000)}>one element</div>{TAIL}"
    links, text, took, stripped, flattened = _run(source)
    assert stripped and not flattened
    assert links == AFTER
    assert text.split() == ["one", "element", "after", "the", "markup", "after"]
    assert took < 5, took


def test_half_a_million_attributes_in_five_megabytes() -> None:
    # was still parsing after 600 s
    source = f"<html><body><div {_attrs(500_000)}>one element</div>{TAIL}"
    assert len(source) > 4_800_000
    links, _text, took, stripped, _flat = _run(source)
    assert stripped and links == AFTER
    assert took < 15, took


def test_attributes_whose_values_hold_angle_brackets_are_counted() -> None:
    # '>' inside quotes does not end the tag, so a naive tag scan would miss these
    crowded = " ".join(f'a{i}=">"' for i in range(5000))
    source = f"<body><div {crowded}>t</div>{TAIL}"
    assert scan_attributes(source).most_on_element > MAX_ATTRIBUTES_PER_ELEMENT
    links, _text, took, stripped, _flat = _run(source)
    assert stripped and links == AFTER and took < 5


def test_an_end_tag_with_many_attributes_is_stripped() -> None:
    source = f"<body><div>t</div {_attrs(100_000)}>{TAIL}"
    links, _text, took, stripped, _flat = _run(source)
    assert stripped and links == AFTER and took < 5


@pytest.mark.parametrize("tag", ["body", "html", "BODY"])
def test_attributes_merged_from_many_html_or_body_tags_are_counted_together(
        tag: str) -> None:
    # each <body b=..> adds its attribute to the one body element
    few = "<body>" + "".join(f"<{tag} b{i}=x>" for i in range(MAX_ATTRIBUTES_PER_ELEMENT))
    assert not parse_document(few).stripped
    many = "<body>" + "".join(f"<{tag} b{i}=x>" for i in range(40_000)) + TAIL
    assert scan_attributes(many).most_on_element > MAX_ATTRIBUTES_PER_ELEMENT
    links, _text, took, stripped, _flat = _run(many)
    assert stripped and links == AFTER and took < 5


# -- the whole page ---------------------------------------------------------------


def test_distinct_attribute_names_over_many_elements_are_bounded() -> None:
    # lexbor interns every attribute name: distinct names cost their square
    source = "<body>" + "".join(f"<span n{i}=x>s</span>" for i in range(150_000)) + TAIL
    stats = scan_attributes(source)
    assert stats.names > MAX_ATTRIBUTE_NAMES and stats.crowded
    links, _text, took, stripped, _flat = _run(source)
    assert stripped and links == AFTER and took < 10


def test_distinct_attribute_names_on_a_page_with_few_tags() -> None:
    # under SCAN_MIN_TAGS tags, yet 1,000 x 99 distinct names
    source = "<body>" + "".join(f"<i {_attrs(99, f'n{t}x')}>" for t in range(1000)) + TAIL
    stats = scan_attributes(source)
    assert stats.most_on_element == 0 and stats.names > MAX_ATTRIBUTE_NAMES
    assert parse_document(source).stripped


def test_too_many_attributes_or_too_much_attribute_text_on_a_page() -> None:
    many = "<body>" + f"<br {_attrs(20)}>" * (MAX_ATTRIBUTES_PER_PAGE // 20 + 100) + TAIL
    stats = scan_attributes(many)
    assert stats.total > MAX_ATTRIBUTES_PER_PAGE and stats.names < 25
    assert parse_document(many).stripped
    long_values = "<body>" + f'<br title="{"y" * 1000}">' * (MAX_ATTRIBUTE_CHARS // 1000 + 10)
    stats = scan_attributes(long_values + TAIL)
    assert stats.chars > MAX_ATTRIBUTE_CHARS and stats.total < MAX_ATTRIBUTES_PER_PAGE
    links, _text, _took, stripped, _flat = _run(long_values + TAIL)
    assert stripped and links == AFTER


def test_distinct_tag_names_flatten_the_page() -> None:
    source = "<body>" + "".join(f"<x{i}>t</x{i}>" for i in range(MAX_TAG_NAMES)) + TAIL
    stats = scan_attributes(source)
    assert stats.tag_names > MAX_TAG_NAMES and stats.hostile
    links, text, took, _stripped, flattened = _run(source)
    assert flattened and links == AFTER and took < 10
    assert text.startswith("t t t")


def test_options_of_one_select_flatten_the_page() -> None:
    source = "<body><select>" + "<option>o" * 20_000 + "</select>" + TAIL
    stats = scan_markup(source)
    assert stats.option_pairs > OPTION_BUDGET and stats.hostile
    links, _text, took, _stripped, flattened = _run(source)
    assert flattened and links == AFTER and took < 5


def test_options_of_many_small_selects_are_fine() -> None:
    source = "<body>" + ("<select>" + "<option>o" * 300 + "</select>") * 60 + TAIL
    stats = scan_markup(source)
    assert stats.option_pairs < OPTION_BUDGET and not stats.hostile
    assert not parse_document(source).flattened


# -- stripping --------------------------------------------------------------------


@pytest.mark.parametrize(("source", "expected"), [
    ('<a href="/x" title="t" data-a=1 HREF="/y">x</a>', '<a href="/x">x</a>'),
    ('<div a="x"href=/h b=1>', "<div href=/h>"),
    ("<div>t</div e=1 f=2>", "<div>t</div>"),
    # self-closing: a '/' before '>' unless it ends an unquoted value
    ('<svg><path d="M0" fill="red"/><g x=1/></svg>', "<svg><path /><g></svg>"),
    ("<br/><img src=/i.png alt=x />", "<br /><img src=/i.png />"),
    # comments, raw text and bogus comments are left as they are
    ('<!-- <a x=1> --><script a=1>if (a<b c d) {}</script><title a=1>t <b c=1></title>',
     "<!-- <a x=1> --><script>if (a<b c d) {}</script><title>t <b c=1></title>"),
    ("<!doctype html x=1><?xml y=2?>", "<!doctype html x=1><?xml y=2?>"),
    ('<meta name=robots content="noindex" x=1><link rel=canonical href=/c y=2>',
     "<meta name=robots content=\"noindex\"><link rel=canonical href=/c>"),
    ('<a href="abc', '<a href="abc'),
])
def test_strip_attributes(source: str, expected: str) -> None:
    assert strip_attributes(source) == expected


def test_stripping_keeps_what_the_crawl_and_the_text_need() -> None:
    assert {"href", "src", "rel", "name", "content", "http-equiv", "charset", "id",
            "class"} <= KEPT_ATTRIBUTES
    head = ('<html><head><title>T</title><base href="/b/" x=1>'
            '<meta name="robots" content="nofollow" z=2>'
            '<link rel="canonical" href="/canon" q=3></head>')
    body = (f'<body><div {_attrs(200)} class="main"><p>words</p>'
            '<a href="rel" rel="nofollow" w=4>a</a><iframe src="/f" v=5></iframe></div>')
    doc = parse_document(head + body)
    assert doc.stripped
    parsed = extract(doc, BASE)
    assert parsed.title == "T" and parsed.nofollow
    assert parsed.canonical == "http://example.com/canon"
    assert [link.url for link in parsed.links] == [
        "http://example.com/canon", "http://example.com/b/rel", "http://example.com/f"]


def test_an_ordinary_page_is_neither_stripped_nor_flattened() -> None:
    item = ('<li class="item" id="i{0}" data-id="{0}"><a href="/p{0}" title="Item {0}">'
            'Item {0}</a> <img src="/i{0}.png" alt="" width="10" height="10"></li>')
    source = ('<html lang="en"><head><meta charset="utf-8"><title>Shop</title></head>'
              '<body><ul>' + "".join(item.format(i) for i in range(3000)) + "</ul></body>")
    doc = parse_document(source)
    assert doc.stats is not None and not doc.stats.hostile
    assert doc.attributes is not None and not doc.attributes.crowded
    assert not doc.stripped and not doc.flattened
    assert 0 < doc.attributes.names < 20 and doc.attributes.total > 20_000
