"""An extraction hook: each page's <title> and meta description.

Run a crawl with it (from the repository's folder, or with this folder on PYTHONPATH)::

    CRAWLER_PARSER_HOOK=examples.hooks:title_and_description crawler crawl https://example.org/

and every page record in pages.jsonl carries
``"extra": {"title": "...", "description": "..."}`` (a field is left out when the page
has none). docs/extraction-hook.md says what a hook is given and may return.
"""

from __future__ import annotations

from typing import Any

from parser.hook import PageView

MAX_CHARS = 1_000  # of each field: a page's own text is unbounded, a record is not


def _clean(text: str | None) -> str | None:
    """Whitespace collapsed and cut to :data:`MAX_CHARS`; None for nothing left."""
    if text is None:
        return None
    text = " ".join(text.split())[:MAX_CHARS]
    return text or None


def title_and_description(page: PageView) -> dict[str, Any]:
    """The page's <title> and <meta name="description"> (for a PDF: the title the
    parser found in the document's information, and its page count)."""
    fields: dict[str, Any] = {}
    doc = page.document()
    if doc is None:  # a PDF or a plain-text page
        title = _clean(page.title)
        if title:
            fields["title"] = title
        if page.document_pages is not None:
            fields["pages"] = page.document_pages
        return fields
    node = doc.css_first("title")
    title = _clean(node.text() if node is not None else None)
    if title:
        fields["title"] = title
    for meta in doc.css("meta[name]"):
        if (meta.attributes.get("name") or "").strip().lower() == "description":
            description = _clean(meta.attributes.get("content"))
            if description:
                fields["description"] = description
            break
    return fields
