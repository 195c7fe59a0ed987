"""The Markdown of a page's main content (parser/markdown.py): structure, links,
boilerplate dropped as the main text drops it, and bounds on hostile markup."""

from __future__ import annotations

import time

from selectolax.lexbor import LexborHTMLParser

from parser.markdown import (
    MAX_INDENT_LEVELS,
    markdown_text,
    page_markdown,
    plain_markdown,
    render_markdown,
)
from parser.text import MainText, main_text

URL = "https://example.com/docs/page.html"
FILLER = ("The council met on Tuesday evening and agreed to rebuild the old bridge over the "
          "river before winter, after engineers found the piers unsafe.")


def article(inner: str, *, head: str = "", outside: str = "") -> str:
    return (f"<html><head><title>T</title>{head}</head><body>{outside}<article>"
            f"<h1>Title</h1><p>{FILLER}</p>{inner}</article></body></html>")


def md(inner: str, **kwargs: str) -> str:
    return page_markdown(article(inner, **kwargs), URL)


def test_headings_and_paragraphs() -> None:
    out = md("<h2>Section  two</h2><p>First paragraph of the section.</p>"
             "<h3>Sub</h3><p>Second <b>bold</b> and <em>light</em> words.</p>")
    assert out.startswith(FILLER + "\n\n## Section two\n\nFirst paragraph of the section.")
    assert "### Sub\n\nSecond **bold** and *light* words." in out
    assert "# Title" not in out  # the title is the page record's, as in the main text



def test_heading_permalinks_are_not_content() -> None:
    # Sphinx and MkDocs end headings with an in-page link to themselves; the main text
    # has no symbol there, so a heading keeping it would match no line and be dropped
    out = md("<h2>Usage<a class='headerlink' href='#usage'>\u00b6</a></h2><p>How to.</p>"
             "<h3>Notes <a href='#notes'>#</a></h3><p>See <a href='#usage'>usage</a>.</p>")
    assert "## Usage\n\nHow to." in out
    assert "### Notes\n" in out
    assert "[usage](https://example.com/a/page#usage)" in out or "[usage](" in out

def test_nested_lists_ordered_and_unordered() -> None:
    out = md("<ul><li>one<ul><li>one a</li><li>one b<ol start=3><li>deep</li></ol></li>"
             "</ul></li><li>two</li></ul><ol><li>first</li><li>second</li></ol>")
    assert "- one\n  - one a\n  - one b\n    3. deep\n- two" in out
    assert "- two\n\n1. first\n2. second" in out


def test_tables_are_pipe_tables_with_escaped_cells() -> None:
    out = md("<table><thead><tr><th>Name</th><th>Value</th></tr></thead><tbody>"
             "<tr><td>a | b</td><td><a href='x'>link</a> *star*</td></tr>"
             "<tr><td>line<br>break</td><td></td></tr></tbody></table>")
    assert ("| Name | Value |\n| --- | --- |\n"
            "| a \\| b | [link](https://example.com/docs/x) \\*star\\* |\n"
            "| line break |  |") in out


def test_layout_table_is_rendered_as_its_blocks() -> None:
    out = md("<table><tr><td><h2>Inside</h2><p>A paragraph laid out in a table cell.</p>"
             "</td></tr></table>")
    assert "## Inside\n\nA paragraph laid out in a table cell." in out
    assert "|" not in out


def test_code_blocks_verbatim_and_inline_code() -> None:
    code = "def f(x):\n    return `x` + ```y```\n\n\tindented"
    out = md(f"<pre><code class='language-python'>{code}</code></pre>"
             "<p>Call <code>f(`1`)</code> now.</p>")
    assert f"````python\n{code}\n````" in out
    assert "Call ``f(`1`)`` now." in out


def test_links_resolved_against_the_base_and_javascript_dropped() -> None:
    out = md("<p>See <a href='../other?q=1#part'>the other page</a>, "
             "<a href='javascript:alert(1)'>a widget</a>, <a href='mailto:a@b.example'>"
             "mail</a>, <a href='data:text/html,x'>data</a> and "
             "<a href='/p(1)'>parens</a>.</p>",
             head="<base href='https://cdn.example.org/base/'>")
    assert "[the other page](https://cdn.example.org/other?q=1#part)" in out
    assert "a widget" in out and "javascript" not in out and "data:" not in out
    assert "[mail](mailto:a@b.example)" in out
    assert "[parens](<https://cdn.example.org/p(1)>)" in out


def test_boilerplate_dropped_like_the_main_text() -> None:
    html = article("<div class='share-tools'>Share on every network you know of today</div>"
                   "<aside><p>An aside with a long paragraph of unrelated text.</p></aside>"
                   "<p>Advertisement</p><p>The last real paragraph of the story.</p>"
                   "<div class='related'><a href='/r'>A related story headline here</a></div>",
                   outside="<nav><a href='/'>Home page navigation link</a></nav>")
    out = page_markdown(html, URL)
    text = main_text(html)
    assert "The last real paragraph of the story." in out and FILLER in out
    for dropped in ("Share on", "aside", "Advertisement", "related story", "navigation"):
        assert dropped not in out and dropped not in text
    assert markdown_text(out).split() == text.split()


def test_blocks_the_main_text_lacks_are_not_added() -> None:
    """A teaser repeating the start of the story is not kept beside the story."""
    root = LexborHTMLParser(
        f"<div><ul><li><a href='/s'>{FILLER[:60]}...</a></li></ul><p>{FILLER}</p></div>"
    ).css_first("div")
    assert root is not None
    out = render_markdown(MainText(FILLER, len(FILLER)), root, URL)
    assert out == FILLER


def test_text_is_escaped_so_it_reads_as_text() -> None:
    out = md("<p># not a heading</p><p>- not an item</p><p>2024. A year</p>"
             "<p>[x](javascript:alert(1)) *a* _b_ snake_case &amp;amp; <b>&lt;i&gt;</b></p>")
    assert "\\# not a heading" in out and "\\- not an item" in out
    assert "2024\\. A year" in out
    assert "\\[x\\](javascript:alert(1)) \\*a\\* \\_b\\_ snake_case \\&amp; **\\<i\\>**" in out
    assert "javascript:alert(1)) *a* _b_ snake_case &amp; <i>" in markdown_text(out)


def test_whole_text_pages_and_plain_text_are_escaped_paragraphs() -> None:
    assert (plain_markdown("# one\n\n* two [x]\n\n\n\nthree")
            == "\\# one\n\n\\* two \\[x\\]\n\nthree")
    flat = "<body>" + "<div>" * 600 + "<p># deep text</p>" + "</div>" * 600 + "</body>"
    assert page_markdown(flat, URL) == "\\# deep text"  # flattened by the markup guard


def test_deep_nesting_is_walked_without_recursion_and_bounded() -> None:
    depth = 20_000  # far past Python's recursion limit
    html = "<ul>" + "<li>level text<ul>" * depth + "</ul></li>" * depth + "</ul>"
    root = LexborHTMLParser(html).css_first("ul")
    assert root is not None
    text = "\n".join(["level text"] * depth)
    started = time.process_time()
    out = render_markdown(MainText(text, len(text)), root, URL)
    assert time.process_time() - started < 5
    lines = out.split("\n")
    assert len(lines) == depth
    # indentation counts at most MAX_INDENT_LEVELS levels: lines stay short
    assert max(len(line) for line in lines) <= 2 * MAX_INDENT_LEVELS + len("- level text")
    deep_emphasis = "<p>" + "<b><i>" * 200 + "bold" + "</i></b>" * 200 + "</p>"
    assert "***bold***" in md(deep_emphasis) and "****" not in md(deep_emphasis)


def test_output_is_cut_at_max_chars() -> None:
    links = "".join(f"<a href='{i}'>x</a> " for i in range(3000))
    html = article(f"<p>{links}</p>", head=f"<base href='https://example.com/{'a' * 2000}/'>")
    started = time.process_time()
    out = page_markdown(html, URL, max_chars=50_000)
    assert time.process_time() - started < 5
    assert len(out) <= 50_000
    assert out.startswith(FILLER)
    long_link = f"<p>A <a href='/{'b' * 9000}'>long link</a> here and more words.</p>"
    assert "long link here" in md(long_link) and "bbbb" not in md(long_link)


def test_markdown_text_removes_the_markup() -> None:
    source = ("## Head\n\n- item [link](https://e.x/a) and `code`\n  - sub **bold**\n\n"
              "| a | b \\| c |\n| --- | --- |\n| 1 | 2 |\n\n> quoted\n\n```\n# kept verbatim\n```")
    assert markdown_text(source).split("\n") == [
        "Head", "", "item link and code", "sub bold", "", "a\tb | c", "1\t2", "",
        "quoted", "", "# kept verbatim"]
