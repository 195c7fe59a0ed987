"""Main-text extraction (parser.text)."""

from __future__ import annotations

import gc

import pytest
from resiliparse.parse.html import HTMLTree
from selectolax.lexbor import LexborHTMLParser, LexborNode

from parser import text as text_module
from parser.html import parse_document
from parser.text import extract_main_text, main_content, main_text, uses_main_content

ARTICLE = [
    "The city council voted on Tuesday to rebuild the old river bridge before winter.",
    "Engineers said the project would take two years and cost less than expected.",
    "Residents who attended the meeting asked for a temporary footbridge meanwhile.",
]


def page(paragraphs: list[str]) -> str:
    nav = "".join(f'<li><a href="/s{i}">Navigation item {i}</a></li>' for i in range(30))
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return f"""<html><head><title>Bridge</title><script>var tracking = "secret";</script>
    <style>p {{ color: red }}</style></head><body>
    <header><nav><ul>{nav}</ul></nav></header>
    <main><article><h1>Council approves bridge</h1>{body}</article></main>
    <aside class="sidebar"><h3>Most read</h3><ul><li><a href="/x">Other story</a></li></ul>
    </aside><footer><p>Copyright 2024 Example News. All rights reserved.</p></footer>
    </body></html>"""


def test_main_text_keeps_the_article_and_drops_boilerplate() -> None:
    text = main_text(page(ARTICLE))
    for paragraph in ARTICLE:
        assert paragraph in text
    assert "Council approves bridge" not in text  # the title: the page record has it
    assert "Navigation item" not in text
    assert "secret" not in text and "color: red" not in text
    assert "All rights reserved" not in text


def test_paragraphs_are_separated() -> None:
    text = main_text(page(ARTICLE))
    assert text.index(ARTICLE[0]) < text.index(ARTICLE[1]) < text.index(ARTICLE[2])
    between = text[text.index(ARTICLE[0]) + len(ARTICLE[0]):text.index(ARTICLE[1])]
    assert "\n" in between


def test_max_chars() -> None:
    assert len(main_text(page(ARTICLE), max_chars=40)) == 40


def test_empty_and_textless_pages() -> None:
    assert main_text("") == ""
    assert main_text("<html><head><title>t</title></head><body></body></html>") == ""
    assert main_text("just text") == "just text"


def test_document_is_reused() -> None:
    doc = parse_document(page(ARTICLE))
    assert uses_main_content(doc)
    assert main_text(doc) == main_text(page(ARTICLE))


def _page_trees_alive() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is LexborHTMLParser)


def test_keep_gets_the_root_and_the_page_tree_is_gone_before_the_text_parse(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a large page's lexbor tree and the root's resiliparse tree are never held at
    # once: what keep makes of the root comes back, the root itself does not
    alive_at_parse: list[int] = []
    parse = HTMLTree.parse

    def watched(markup: str) -> HTMLTree:
        alive_at_parse.append(_page_trees_alive())
        return parse(markup)

    monkeypatch.setattr(text_module.HTMLTree, "parse", watched)
    gc.collect()
    before = _page_trees_alive()
    seen: list[str] = []

    def keep(root: LexborNode) -> int:
        seen.append(root.tag)
        return len(root.text(deep=True))

    main, kept = main_content(parse_document(page(ARTICLE)), keep)
    assert seen == ["article"] and kept is not None and kept > len(ARTICLE[0])
    assert main.text == main_text(page(ARTICLE))
    assert alive_at_parse and alive_at_parse[0] == before  # released before the parse
    alive_at_parse.clear()
    main, root = main_content(parse_document(page(ARTICLE)))  # no keep: the root comes back
    assert root is not None and root.tag == "article"
    assert alive_at_parse and alive_at_parse[0] == before + 1


def test_flattened_page_gives_whole_visible_text() -> None:
    source = "<body>" + "<div>" * 20_000 + "<p>deep words</p>" + "</div>" * 20_000
    doc = parse_document(source)
    assert doc.flattened and not uses_main_content(doc)
    assert main_text(doc) == "deep words"


# Documentation pages: the structure of two real pages whose prose was lost, with text
# written for the test. Sphinx (Django's documentation, intro/whatsnext.html): every
# section is a <div class="section"> whose id is its heading made into an anchor; a
# heading "What to read next" gives s-what-to-read-next, which looks like a "read next"
# box.
SPHINX_PROSE = [
    "This section explains where the reader should continue after the tutorial pages.",
    "The reference pages describe every public function with its arguments in detail.",
    "Topic guides discuss one area at a time and link to the reference where useful.",
]
SPHINX_PAGE = """<!DOCTYPE html><html lang="en"><head><title>What to read next</title>
<script src="../_static/jquery.js"></script></head><body>
<div class="document"><div id="custom-doc" class="yui-t6">
<div id="hd"><h1><a href="../index.html">Framework documentation</a></h1>
<div id="global-nav"><a href="../index.html">Home</a> | <a href="../contents.html">Table of
contents</a> | <a href="../genindex.html">Index</a></div>
<div class="nav">&laquo; <a href="prev.html">previous</a> | <a href="index.html">up</a> |
<a href="next.html">next</a> &raquo;</div></div>
<div id="bd"><div id="yui-main"><div class="yui-b"><div class="yui-g" id="intro-whatsnext">
<div class="section" id="s-what-to-read-next"><span id="what-to-read-next"></span>
<h1>What to read next<a class="headerlink" href="#what-to-read-next">¶</a></h1>
<p>{}</p>
<div class="section" id="s-finding-documentation"><h2>Finding documentation</h2>
<p>{}</p>
<div class="section" id="s-how-the-documentation-is-organized"><h3>How it is organized</h3>
<p>{}</p></div></div></div>
</div></div></div>
<div class="yui-b" id="sidebar"><div class="sphinxsidebar"><h3>Browse</h3><ul>
<li>Prev: <a href="prev.html">Advanced tutorial</a></li>
<li>Next: <a href="next.html">Writing your first patch</a></li></ul></div></div></div>
<div id="ft"><div class="nav"><a href="prev.html">previous</a> | <a href="next.html">next</a>
</div></div></div></div></body></html>""".format(*SPHINX_PROSE)

# DocBook (PostgreSQL's documentation, logical-replication-restrictions.html): the
# content sits one level below <body>, and prose items are <ul class="itemizedlist">
# <li><p>, a list two levels below <body>, which resiliparse takes for page-level
# navigation.
DOCBOOK_ITEMS = [
    "The schema of the database is not copied, and later changes must be made by hand.",
    "Sequence values are not copied either, so a switchover needs them set beforehand.",
    "Large objects are not replicated, and there is no workaround other than a table.",
]
DOCBOOK_PAGE = """<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd"><html
xmlns="http://www.w3.org/1999/xhtml"><head><title>31.6. Restrictions</title></head>
<body id="docContent" class="container-fluid col-10"><div class="navheader"><table
width="100%" summary="Navigation header"><tr><th colspan="5" align="center">31.6.
Restrictions</th></tr><tr><td><a accesskey="p" href="prev.html">Prev</a></td><td><a
accesskey="u" href="up.html">Up</a></td><td><a accesskey="n" href="next.html">Next</a></td>
</tr></table><hr /></div><div class="sect1" id="LOGICAL-REPLICATION-RESTRICTIONS"><div
class="titlepage"><div><div><h2 class="title" style="clear: both">31.6. Restrictions</h2>
</div></div></div><p>Logical replication has the following restrictions, which later
releases may lift.</p><div class="itemizedlist"><ul class="itemizedlist"
style="list-style-type: disc; "><li class="listitem"><p>{}</p></li><li
class="listitem"><p>{}</p></li><li class="listitem"><p>{}</p></li></ul></div></div>
<div class="navfooter"><hr /><table width="100%" summary="Navigation footer"><tr><td><a
accesskey="p" href="prev.html">Prev</a></td><td><a accesskey="h" href="index.html">Home</a>
</td><td><a accesskey="n" href="next.html">Next</a></td></tr></table></div></body>
</html>""".format(*DOCBOOK_ITEMS)


def test_sphinx_section_whose_anchor_looks_like_a_read_next_box_is_kept() -> None:
    text = main_text(SPHINX_PAGE)
    for paragraph in SPHINX_PROSE:
        assert paragraph in text
    assert "Writing your first patch" not in text  # the sidebar


def test_docbook_prose_in_list_items_is_kept() -> None:
    text = main_text(DOCBOOK_PAGE)
    assert "which later releases may lift" in " ".join(text.split())
    for item in DOCBOOK_ITEMS:
        assert item in text


def test_heading_anchor_ids_do_not_count_as_boilerplate() -> None:
    prose = "The cookie age setting controls how long the browser keeps the token."
    html = (f'<html><body><div class="body"><div class="section" id="s-csrf-cookie-age">'
            f'<h2>CSRF_COOKIE_AGE</h2><p>{prose}</p></div>'
            f'<div class="section" id="s-select-related-and-prefetch">'
            f'<h2>Related lookups</h2><p>{prose.upper()}</p></div></div></body></html>')
    text = main_text(html)
    assert prose in text and prose.upper() in text


def test_comments_and_related_stories_are_dropped() -> None:
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    comments = "".join(f'<li class="comment"><p>Reader comment number {i} says the bridge '
                       f"is a waste of money and time.</p></li>" for i in range(12))
    related = "".join(f'<li><a href="/r{i}">Related story {i} about the river</a></li>'
                      for i in range(8))
    html = (f'<html><body><div class="site"><div class="entry-content">{body}'
            f'<div class="related-posts"><h3>Related</h3><ul>{related}</ul></div></div>'
            f'<div id="comments"><h3>12 comments</h3><ol class="commentlist">{comments}'
            f"</ol></div></div></body></html>")
    text = main_text(html)
    for paragraph in ARTICLE:
        assert paragraph in text
    assert "Reader comment" not in text
    assert "Related story" not in text


def test_main_text_leaves_the_documents_link_tree_usable() -> None:
    doc = parse_document(page(ARTICLE))
    before = len(doc.lexbor.css("a"))
    main_text(doc)
    assert len(doc.lexbor.css("a")) == before


def test_extract_main_text_figures() -> None:
    found = extract_main_text(page(ARTICLE))
    assert found.text == main_text(page(ARTICLE))
    assert found.chars == len(found.text)
    assert found.words == len(found.text.split())
    assert 0.2 < found.boilerplate_ratio < 0.9  # navigation, title, sidebar, footer
    whole = extract_main_text("<p>" + " ".join(ARTICLE) + "</p>")
    assert whole.boilerplate_ratio == 0.0
    assert extract_main_text("").boilerplate_ratio == 0.0


def test_chapter_page_keeps_its_prose_beside_a_long_table_of_contents() -> None:
    """A DocBook chapter page (PostgreSQL's storage.html): a short introduction beside
    a table of contents that is most of the page's text."""
    entries = "".join(f'<dt><span class="sect1"><a href="s{i}.html">73.{i}. Section '
                      f"title number {i}</a></span></dt>" for i in range(1, 40))
    intro = "This chapter gives an overview of the format the database stores data in."
    html = (f'<html><body id="docContent"><div class="navheader"><table><tr><td><a '
            f'href="p.html">Prev</a></td><td><a href="n.html">Next</a></td></tr></table>'
            f'</div><div class="chapter" id="STORAGE"><div class="titlepage"><div><div>'
            f'<h2 class="title">Chapter 73. Physical Storage</h2></div></div></div>'
            f'<div class="toc"><p><strong>Table of Contents</strong></p><dl class="toc">'
            f"{entries}</dl></div><p>{intro}</p></div></body></html>")
    text = main_text(html)
    assert intro in text
    assert "Section title number 7" not in text


def test_lines_that_are_only_a_boilerplate_label_are_dropped() -> None:
    body = "".join(f"<p>{p}</p><div>Advertisement</div>" for p in ARTICLE)
    html = (f'<html><body><div class="entry-content">{body}<p>Share this story:</p>'
            f"<p>Read more...</p><p>Read more about the bridge in the council minutes, "
            f"which list every vote.</p></div></body></html>")
    text = main_text(html)
    for paragraph in ARTICLE:
        assert paragraph in text
    assert "Advertisement" not in text and "Share this" not in text
    assert "Read more..." not in text
    assert "Read more about the bridge" in text  # a sentence, not a label
    assert "\n\n\n" not in text


def test_the_first_article_is_the_pages_own_even_when_teasers_outweigh_it() -> None:
    excerpt = "".join(f"<p>Teaser number {i} of another post, long enough to count as "
                      f"a paragraph of its own here.</p>" for i in range(4))
    teasers = "".join(f'<article class="postbox"><h2><a href="/p{i}">Other post {i}</a>'
                      f"</h2>{excerpt}</article>" for i in range(2))  # each outweighs it
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    html = (f'<html><body><div id="primary"><article class="articlebox"><h1>Bridge</h1>'
            f"{body}</article><h3>You may like</h3>{teasers}</div></body></html>")
    text = main_text(html)
    for paragraph in ARTICLE:
        assert paragraph in text
    assert "Teaser number" not in text
