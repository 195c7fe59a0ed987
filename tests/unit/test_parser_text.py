"""Main-text extraction (parser.text)."""

from __future__ import annotations

from parser.html import parse_document
from parser.text import main_text, uses_main_content

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
    assert "Council approves bridge" in text
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


def test_flattened_page_gives_whole_visible_text() -> None:
    source = "<body>" + "<div>" * 20_000 + "<p>deep words</p>" + "</div>" * 20_000
    doc = parse_document(source)
    assert doc.flattened and not uses_main_content(doc)
    assert main_text(doc) == "deep words"
