"""Main text of a page, for the search index and for language-model corpora.

resiliparse's ``extract_plain_text`` with its main-content heuristics drops navigation,
headers, footers and sidebars and keeps paragraph breaks. Those heuristics cost time
proportional to the sum of all elements' depths, which a hostile page can make
quadratic (100,000 nested ``<div>`` take minutes). When the markup guard's estimate
``tags x depth`` is over :data:`MAIN_CONTENT_BUDGET`, or the page was flattened, the
whole visible text is extracted instead (linear time).
"""

from __future__ import annotations

from resiliparse.extract.html2text import extract_plain_text

from parser.html import HtmlDocument, parse_document

__all__ = ["MAIN_CONTENT_BUDGET", "main_text", "uses_main_content"]

#: Largest estimated ``tags x depth`` for which the main-content heuristics run.
MAIN_CONTENT_BUDGET = 20_000_000


def uses_main_content(doc: HtmlDocument) -> bool:
    """Whether :func:`main_text` applies the main-content heuristics to ``doc``."""
    if doc.flattened:
        return False
    stats = doc.stats
    return stats is None or stats.tags * stats.depth <= MAIN_CONTENT_BUDGET


def main_text(html: str | HtmlDocument, *, max_chars: int | None = None) -> str:
    """The page's main text: paragraphs separated by blank lines, whitespace collapsed.

    ``html`` is page text or a document from :func:`parser.html.parse_document` (parse
    once, then call both ``extract`` and ``main_text``). ``max_chars`` cuts the result.
    """
    doc = html if isinstance(html, HtmlDocument) else parse_document(html)
    text = extract_plain_text(doc.tree, preserve_formatting=True,
                              main_content=uses_main_content(doc), alt_texts=False,
                              noscript=False, form_fields=False, links=False)
    text = text.strip()
    return text[:max_chars] if max_chars is not None else text
