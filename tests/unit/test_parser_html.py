"""Links, base URL, robots directives, title and canonical link (parser.html)."""

from __future__ import annotations

import html
import json
import random

import pytest

from parser.html import (
    SCAN_MIN_TAGS,
    LinkKind,
    PageLink,
    ParsedHtml,
    extract,
    followable_links,
    parse_document,
    scan_markup,
)
from tests.conftest import conformance_path

PAGE_URL = "https://news.example.com/2024/05/story"
WORDS = [
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "they", "you", "were", "her", "she", "there", "been", "one", "all", "we", "their",
    "market", "city", "council", "report", "water", "energy", "school", "police", "river",
    "project", "study", "data", "model", "people", "year", "time", "government", "company",
    "system", "program", "question", "work",
]


def sentence(rng: random.Random, words: int | None = None) -> str:
    count = words or rng.randint(8, 22)
    return " ".join(rng.choice(WORDS) for _ in range(count)).capitalize() + "."


def news_page(seed: int = 0, paragraphs: int = 36) -> str:
    """A ~30 KB news article page: head, navigation, article, comments, sidebar, footer."""
    rng = random.Random(seed)
    nav = "".join(f'<li class="nav-item"><a class="nav-link" href="/section/{i}">'
                  f"Section {i}</a></li>" for i in range(40))
    body = []
    for number in range(paragraphs):
        text = " ".join(sentence(rng) for _ in range(rng.randint(3, 6)))
        if number % 3 == 0:
            text += f' See <a href="/article/{number}?ref=inline">related story</a>.'
        body.append(f'<p class="para">{text}</p>')
    side = "".join(f'<li><a href="https://other{i}.example.org/p/{i}">{sentence(rng, 5)}</a>'
                   "</li>" for i in range(30))
    foot = "".join(f'<a href="/legal/{i}" rel="nofollow">Legal {i}</a> | ' for i in range(20))
    script = "<script>window.dataLayer=[];" + "var x=1;" * 300 + "</script>"
    style = "<style>" + "".join(f".c{i}{{margin:{i}px}}" for i in range(150)) + "</style>"
    comments = "".join(f'<div class="comment"><b>user{i}</b><p>{sentence(rng)}</p></div>'
                       for i in range(8))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{sentence(rng, 7)} - Daily Example</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="index, follow">
<link rel="canonical" href="https://news.example.com/2024/05/story-{seed}">
<link rel="alternate" hreflang="fr" href="https://news.example.com/fr/2024/05/story-{seed}">
<link rel="stylesheet" href="/static/site.css">{style}{script}</head>
<body><header><div class="logo"><a href="/">Daily Example</a></div>
<nav class="main-nav"><ul>{nav}</ul></nav></header>
<div class="container"><main><article class="article"><h1>{sentence(rng, 9)}</h1>
<div class="byline">By <a href="/author/jane">Jane Doe</a> | <time>May 4, 2024</time></div>
{"".join(body)}</article><div class="comments"><h3>Comments</h3>{comments}</div></main>
<aside class="sidebar"><h3>Most read</h3><ul>{side}</ul><div class="ad">
<iframe src="https://ads.example.net/frame?id=123" width="300" height="250"></iframe></div>
</aside></div><footer><p>{foot}</p><p>&copy; 2024 Daily Example.</p>
<a href="mailto:editor@example.com">Contact</a> <a href="javascript:void(0)">Top</a>
</footer></body></html>"""


def urls(parsed: ParsedHtml) -> list[str]:
    return [link.url for link in parsed.links]


def test_news_page() -> None:
    source = news_page(7)
    assert 25_000 < len(source) < 40_000
    parsed = extract(source, PAGE_URL, product_token="PoliteCrawler")
    assert parsed.title is not None and parsed.title.endswith("- Daily Example")
    assert parsed.canonical == "https://news.example.com/2024/05/story-7"
    assert not parsed.noindex and not parsed.nofollow and not parsed.flattened
    assert not parsed.links_truncated
    found = urls(parsed)
    assert found[:4] == [
        "https://news.example.com/2024/05/story-7",
        "https://news.example.com/fr/2024/05/story-7",
        "https://news.example.com/",
        "https://news.example.com/section/0",
    ]
    assert parsed.links[0].kind is LinkKind.CANONICAL
    assert parsed.links[1].kind is LinkKind.ALTERNATE
    assert "https://news.example.com/static/site.css" not in found
    assert "https://news.example.com/article/0?ref=inline" in found
    assert "https://ads.example.net/frame?id=123" in found
    assert not any(u.startswith(("mailto:", "javascript:")) for u in found)
    inline = len(range(0, 36, 3))
    # 2 head links, home, 40 sections, author, inline, 30 sidebar, the iframe, 20 legal
    assert len(found) == 2 + 1 + 40 + 1 + inline + 30 + 1 + 20
    legal = [link for link in parsed.links if "/legal/" in link.url]
    assert len(legal) == 20 and all(link.nofollow for link in legal)
    follow = followable_links(parsed)
    assert len(follow) == len(found) - 20 and not any("/legal/" in u for u in follow)


def test_link_kinds_and_frames() -> None:
    source = """<html><head><title>f</title></head><frameset cols="50%,50%">
    <frame src="left.html"><frame src="/right.html"></frameset></html>"""
    parsed = extract(source, "http://example.com/dir/index.html")
    assert parsed.links == (
        PageLink("http://example.com/dir/left.html", LinkKind.FRAME),
        PageLink("http://example.com/right.html", LinkKind.FRAME),
    )
    source = '<map><area href="/a" rel="nofollow"><area nohref></map><iframe src="//cdn.x/y">'
    parsed = extract(source, "https://example.com/")
    assert parsed.links == (
        PageLink("https://example.com/a", LinkKind.ANCHOR, nofollow=True),
        PageLink("https://cdn.x/y", LinkKind.FRAME),
    )


def test_base_href() -> None:
    source = ('<head><base href="/docs/v2/"><base href="http://other.example/"></head>'
              '<a href="intro.html">i</a><a href="../v1/">v1</a><a href="?q=1">q</a>')
    parsed = extract(source, "https://example.com/index.html")
    assert parsed.base_url == "https://example.com/docs/v2/"
    assert urls(parsed) == [
        "https://example.com/docs/v2/intro.html",
        "https://example.com/docs/v1/",
        "https://example.com/docs/v2/?q=1",
    ]


@pytest.mark.parametrize("base", ["javascript:alert(1)", "data:text/html,x", "http://[::1"])
def test_unusable_base_is_ignored(base: str) -> None:
    parsed = extract(f'<base href="{base}"><a href="x">x</a>', "http://example.com/a/b")
    assert parsed.base_url == "http://example.com/a/b"
    assert urls(parsed) == ["http://example.com/a/x"]


def test_non_http_links_are_dropped() -> None:
    hrefs = ["javascript:void(0)", " JavaScript:x", "mailto:a@b.c", "tel:+1", "data:,x",
             "ftp://example.com/f", "file:///etc/passwd", "http://[bad", "ja\nvascript:x",
             "https://ok.example/"]
    source = "".join(f'<a href="{html.escape(h)}">x</a>' for h in hrefs)
    assert urls(extract(source, "http://example.com/")) == ["https://ok.example/"]


def test_fragments_are_removed_and_links_deduplicated() -> None:
    source = ('<a href="/p#a">1</a><a href="/p#b">2</a><a href="/p">3</a>'
              '<a href="#top">self</a><a href="">self</a><a href>self</a>')
    assert urls(extract(source, "http://example.com/p")) == ["http://example.com/p"]


def test_duplicate_link_is_followable_if_any_occurrence_is() -> None:
    source = '<a href="/x" rel="nofollow">1</a><a href="/x">2</a><a href="/y">3</a>'
    parsed = extract(source, "http://example.com/")
    assert parsed.links == (PageLink("http://example.com/x", LinkKind.ANCHOR),
                            PageLink("http://example.com/y", LinkKind.ANCHOR))


@pytest.mark.parametrize("rel", ["nofollow", "NoFollow", "noopener nofollow", "ugc nofollow"])
def test_rel_nofollow_tokens(rel: str) -> None:
    parsed = extract(f'<a href="/x" rel="{rel}">x</a>', "http://example.com/")
    assert parsed.links[0].nofollow


def test_rel_without_nofollow_token() -> None:
    parsed = extract('<a href="/x" rel="nofollowing noopener">x</a>', "http://example.com/")
    assert not parsed.links[0].nofollow


def test_canonical_outside_head_and_stylesheets_are_ignored() -> None:
    source = ('<html><head><link rel="alternate stylesheet" href="/alt.css">'
              '<link rel="icon" href="/favicon.ico"></head><body><p>x</p>'
              '<link rel="canonical" href="/fake"></body></html>')
    parsed = extract(source, "http://example.com/")
    assert parsed.canonical is None
    assert parsed.links == ()


def test_first_canonical_wins() -> None:
    source = ('<head><link rel="Canonical" href="/one"><link rel="canonical" href="/two">'
              "</head>")
    parsed = extract(source, "http://example.com/")
    assert parsed.canonical == "http://example.com/one"
    assert [link.kind for link in parsed.links] == [LinkKind.CANONICAL, LinkKind.CANONICAL]


@pytest.mark.parametrize(("meta", "noindex", "nofollow"), [
    ('<meta name="robots" content="noindex">', True, False),
    ('<meta name="ROBOTS" content="nofollow">', False, True),
    ('<meta name="robots" content="none">', True, True),
    ('<meta name="politecrawler" content="noindex, nofollow">', True, True),
    ('<meta name="googlebot" content="noindex, nofollow">', False, False),
    ('<meta name="robots" content="noindex"><meta name="PoliteCrawler" content="nofollow">',
     True, True),
    ('<meta name="robots">', False, False),
])
def test_meta_robots(meta: str, noindex: bool, nofollow: bool) -> None:
    source = f'<html><head>{meta}</head><body><a href="/x">x</a></body></html>'
    parsed = extract(source, "http://example.com/", product_token="PoliteCrawler")
    assert (parsed.noindex, parsed.nofollow) == (noindex, nofollow)
    assert len(parsed.links) == 1  # links are reported either way
    assert followable_links(parsed) == ([] if nofollow else ["http://example.com/x"])


@pytest.mark.parametrize(("header", "noindex", "nofollow"), [
    ("noindex", True, False),
    ("PoliteCrawler: nofollow", False, True),
    ("otherbot: noindex, nofollow", False, False),
    (None, False, False),
])
def test_x_robots_tag_header(header: str | None, noindex: bool, nofollow: bool) -> None:
    parsed = extract('<a href="/x">x</a>', "http://example.com/", x_robots_tag=header,
                     product_token="PoliteCrawler")
    assert (parsed.noindex, parsed.nofollow) == (noindex, nofollow)


def test_meta_and_header_combine() -> None:
    parsed = extract('<meta name="robots" content="noindex">', "http://example.com/",
                     x_robots_tag="nofollow")
    assert parsed.noindex and parsed.nofollow


@pytest.mark.parametrize(("source", "title"), [
    ("<title>  Hello \n\t world  </title>", "Hello world"),
    ("<title>A &amp; B</title>", "A & B"),
    ("<title></title>", None),
    ("<p>no title</p>", None),
    ("<title>" + "x" * 10_000 + "</title>", "x" * 2048),
])
def test_title(source: str, title: str | None) -> None:
    assert extract(source, "http://example.com/").title == title


def test_link_cap_reports_truncation() -> None:
    source = "".join(f'<a href="/p{i}">{i}</a>' for i in range(20_000))
    parsed = extract(source, "http://example.com/", max_links=5000)
    assert len(parsed.links) == 5000 and parsed.links_truncated
    assert parsed.links[0].url == "http://example.com/p0"
    assert parsed.links[-1].url == "http://example.com/p4999"
    exact = extract(source[: source.index('<a href="/p100">')], "http://example.com/",
                    max_links=100)
    assert len(exact.links) == 100 and not exact.links_truncated


def test_long_urls_are_dropped() -> None:
    source = f'<a href="/{"a" * 100}">long</a><a href="/short">s</a>'
    parsed = extract(source, "http://example.com/", max_url_length=50)
    assert urls(parsed) == ["http://example.com/short"]


def test_document_can_be_shared() -> None:
    doc = parse_document(news_page(3))
    first = extract(doc, PAGE_URL)
    assert extract(doc, PAGE_URL) == first
    assert extract(doc, "https://elsewhere.example/x/").links[3].url.startswith(
        "https://elsewhere.example/")


def test_large_normal_page_is_scanned_but_not_flattened() -> None:
    source = "".join(news_page(seed) for seed in range(6))
    assert source.count("<") > SCAN_MIN_TAGS
    doc = parse_document(source)
    assert doc.stats is not None and not doc.stats.hostile
    assert not doc.flattened
    assert 3 <= doc.stats.depth < 50


def test_scan_estimates() -> None:
    stats = scan_markup("<div><div><p>x<b>y</b><i>z" + "<br>" * 10 + "</div></div>")
    assert stats.depth == 3  # div, div, then b (closed) or i; p and br do not count
    assert stats.formatting == 1
    # Markup inside scripts, styles and comments is not counted.
    stats = scan_markup("<script>" + "<div>" * 50 + "</script><!--" + "<div>" * 50 + "-->")
    assert stats.depth == 0


# The WHATWG URL Standard's test data, with links written into real HTML.

def _url_cases() -> list[tuple[str, str, str | None]]:
    cases = []
    data = json.loads(conformance_path("url", "urltestdata.json").read_text("utf-8"))
    for case in data:
        if not isinstance(case, dict) or not isinstance(case.get("base"), str):
            continue
        base, href = case["base"], case["input"]
        if not base.startswith(("http:", "https:")) or "\x00" in href:
            continue
        try:
            href.encode("utf-8")
        except UnicodeEncodeError:
            continue  # lone surrogates cannot be written into a page
        expected = None if case.get("failure") else case["href"]
        if expected is not None and not expected.startswith(("http:", "https:")):
            expected = None
        cases.append((href, base, expected))
    return cases


def test_links_resolve_like_browsers() -> None:
    cases = _url_cases()
    assert len(cases) > 150
    mismatches = []
    for href, base, expected in cases:
        source = f'<a href="{html.escape(href, quote=True)}">x</a>'
        found = urls(extract(source, base))
        want = [] if expected is None else [expected.split("#", 1)[0]]
        if found != want:
            mismatches.append((href, base, want, found))
    assert mismatches == []
