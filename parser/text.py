"""Main text of a page, for the search index and for language-model corpora.

The page's article or documentation body is found first, on the selectolax (lexbor)
tree the link extraction already built:

1. Scripts, styles, templates and ``<noscript>`` go; what is left of ``<body>`` is the
   page's *visible text* (its length, whitespace collapsed, is kept for the
   boilerplate ratio).
2. Every paragraph (``<p>`` of at least :data:`MIN_PARAGRAPH` characters) adds its
   length to its ancestors (at most :data:`MAX_ANCESTORS` levels up, so the walk stays
   linear in the page).
3. The *root* is looked for among elements that name themselves the content, in order
   of how specific the name is: ``itemprop=articleBody``, then ``<article>``,
   ``<div>``, ``<main>`` or ``<section>`` elements whose class or id holds a name
   such as ``entry-content`` or ``article-body`` (:data:`ROOT_PATTERNS`), then
   ``<article>``, then ``<main>``/``role=main``. The first rank whose best element
   holds at least :data:`MIN_ROOT_SHARE` of the page's paragraph text wins; of that
   rank's elements within :data:`NESTED_SHARE` of the best, the one with the least
   paragraph text (the innermost) is taken, except among ``<article>`` elements: there
   the first holding that share is the page's own (later ones are teasers, which on a
   blog can together outweigh a short post). No such element: the root is ``<body>``.
   (A bare ``content`` in a class is not taken as a name: on documentation pages it
   names tables, ``table-contents``, and the root would lose the prose around them.)
4. Inside the root, boilerplate is removed: the ``<h1>`` (the title, which the page
   record carries apart), navigation, asides, footers, forms, figures, buttons, ARIA
   navigation/complementary/dialog regions, hidden elements, and elements whose class
   or id names comments, related or recommended stories, sharing, newsletters,
   galleries, captions, bylines, post metadata and the like (:data:`BOILERPLATE`). An
   element holding more than :data:`PRUNE_CAP` of the root's text is never removed (a
   page-wide wrapper named ``comments-enabled``, an ASP.NET page-wide ``<form>``),
   except a table of contents (:data:`CONTENTS`), whatever its size. Ids of four
   words or more are headings made into anchors (Sphinx's ``s-csrf-cookie-age``):
   they are not read, and are removed so that resiliparse's rules do not read them
   either.
5. The root's markup is converted to text by resiliparse's ``extract_plain_text``
   with its own main-content rules, comments and post metadata off, inside three
   wrapping ``<div>``: its rules for page-level navigation (a ``<ul>`` or ``<aside>``
   less than three levels below ``<body>``) would otherwise drop lists of the article
   itself (PostgreSQL's ``<ul class="itemizedlist"><li><p>``). Those rules also drop
   whole sections whose class or id they read as boilerplate (Sphinx's
   ``<div class="section" id="s-what-to-read-next">`` before its id was removed in
   step 4); when the text is shorter than :data:`FALLBACK_SHARE` of the root's
   paragraph text, the root is converted again without them.
6. Lines that are only a label (``Advertisement``, ``Share this story:``,
   ``Read more...``: :data:`BOILERPLATE_LINE`) are dropped.

Measured on the article-extraction benchmark (181 news and blog pages) and on
documentation pages: see docs/text-quality.md.

Hostile pages. The walk over paragraphs' ancestors is bounded; selectors and
conversion are linear in C; the text lengths measured while pruning add up to at most
the sum of the elements' depths, which the guard's budget bounds. When the markup
guard's estimate ``tags x depth`` is over :data:`MAIN_CONTENT_BUDGET`, or the page
was flattened, the whole visible text is extracted instead, with no heuristics.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, overload

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from selectolax.lexbor import LexborNode

from parser.html import HtmlDocument, parse_document

__all__ = [
    "BOILERPLATE",
    "BOILERPLATE_LINE",
    "CONTENTS",
    "MAIN_CONTENT_BUDGET",
    "ROOT_PATTERNS",
    "MainText",
    "extract_main_text",
    "main_content",
    "main_text",
    "uses_main_content",
]

#: Largest estimated ``tags x depth`` for which the main-content heuristics run.
MAIN_CONTENT_BUDGET = 20_000_000
#: Shortest ``<p>`` (characters, stripped) counted as a paragraph.
MIN_PARAGRAPH = 20
#: How many levels a paragraph's length is added up through.
MAX_ANCESTORS = 40
#: Share of the page's paragraph text a root must hold.
MIN_ROOT_SHARE = 0.2
#: Elements of the winning rank within this share of the best are candidates; the
#: innermost (least paragraph text) is the root.
NESTED_SHARE = 0.75
#: An element holding more than this share of the root's text is never pruned.
PRUNE_CAP = 0.4
#: Longest id (in words) that boilerplate is recognised by.
MAX_ID_WORDS = 3
#: Converted text shorter than this share of the root's paragraph text: convert again
#: without resiliparse's main-content rules.
FALLBACK_SHARE = 0.5


def _words(*names: str) -> str:
    return "|".join(names)


#: Class or id patterns (substrings, lower-cased) of content containers. Tags are
#: ranked in :data:`_ROOT_TAGS`.
ROOT_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(_words(
        "post-text", "post_text", "post-body", "post-entry", "postentry", "post-content",
        "post_content", "postcontent", "article-text", "articletext", "entry-content",
        "entry-body", "article-content", "article__content", "article-body",
        "article__body", "article_body", "articlebody", "article-main", "page-content",
        "text-content", "body-text", "article__container", "art-content", "story-body",
        "story-text", "story-content", "storycontent", "content-body", "contentbody",
        "content__body", "main-content", "maincontent")),
)
# (rank, selector): rank 0 is itemprop=articleBody, 1 the pattern above, 2 <article>,
# 3 <main>.
_ROOT_TAGS = ((0, "[itemprop=articleBody]"), (2, "article"), (3, "main, [role=main]"))
_PATTERN_RANKS = (1,)
_ARTICLE_RANK = 2
_ROOT_ELEMENTS = frozenset({"article", "div", "main", "section", "body"})

#: Class or id tokens of boilerplate inside the root (case-insensitive; a token is
#: delimited by whitespace, ``-`` or ``_``).
BOILERPLATE = re.compile(
    r"(?:^|[\s_-])(?:"
    r"comments?|commentlist|disqus|respond|replies|related|recommended|more-stories"
    r"|newsletter|subscribe|subscription|signup|sign-up|share|sharing|social"
    r"|breadcrumbs?|promo|sponsored|outbrain|taboola|trending|popular|most-read"
    r"|mostread|cookie|consent|paywall|author-bio|authorbio|byline|gallery|slideshow"
    r"|caption|carousel|lightbox|modal|credits?|photo-credit|read-more|readmore"
    r"|also-read|dateline|entry-meta|post-meta|article-meta"
    r")(?:$|[\s_-])")
#: Lines that are only a label left by an advertisement, a gallery, a comment box or
#: a newsletter box (case-insensitive, the whole line).
BOILERPLATE_LINE = re.compile(
    r"(?im)^[^\S\n]*(?:advertisement|advertising|advert|ads?|sponsored(?: links)?|iklan"
    r"|anzeige|publicidad|publicité|pubblicità|реклама|caption|close|comments?"
    r"|post comment|leave a (?:reply|comment)|newsletter|subscribe|sign up|share"
    r"|share this(?: article| story)?|read more|related(?: articles| stories)?"
    r"|most popular|trending|you may also like)[\s.:!…(+)]*$")
#: Class or id tokens of a table of contents, removed whatever its size: on a chapter
#: page of a manual it is most of the text, and resiliparse's rules then drop the
#: chapter's prose along with it.
CONTENTS = re.compile(r"(?:^|[\s_-])toc(?:$|[\s_-])")
_BOILERPLATE_ELEMENTS = (
    "nav, aside, footer, form, figure, figcaption, button, select, [role=navigation], "
    "[role=contentinfo], [role=complementary], [role=dialog], [role=alert], [role=menu], "
    "[aria-hidden=true], [hidden], h1")
_INVISIBLE = ["script", "style", "noscript", "template"]
_WRAP = 3  # levels below <body>, see the module


@dataclass(frozen=True, slots=True)
class MainText:
    """A page's main text and the length of its whole visible text (whitespace
    collapsed), for :attr:`boilerplate_ratio`."""

    text: str
    visible_chars: int

    @property
    def chars(self) -> int:
        """Characters of the main text."""
        return len(self.text)

    @property
    def words(self) -> int:
        """Words (whitespace-separated) of the main text."""
        return len(self.text.split())

    @property
    def boilerplate_ratio(self) -> float:
        """Share of the visible text (whitespace collapsed) not in the main text."""
        if self.visible_chars <= 0:
            return 0.0
        kept = len(" ".join(self.text.split()))
        return max(0.0, 1.0 - kept / self.visible_chars)


def uses_main_content(doc: HtmlDocument) -> bool:
    """Whether :func:`main_text` applies the main-content heuristics to ``doc``."""
    if doc.flattened:
        return False
    stats = doc.stats
    return stats is None or stats.tags * stats.depth <= MAIN_CONTENT_BUDGET


def main_text(html: str | HtmlDocument, *, max_chars: int | None = None) -> str:
    """The page's main text: paragraphs separated by blank lines, whitespace collapsed.

    ``html`` is page text or a document from :func:`parser.html.parse_document` (parse
    once, call ``extract`` and then ``main_text``). ``max_chars`` cuts the result.
    """
    text = extract_main_text(html).text
    return text[:max_chars] if max_chars is not None else text


def extract_main_text(html: str | HtmlDocument) -> MainText:
    """The page's main text with the length of its visible text (see the module)."""
    return main_content(html)[0]


_Kept = TypeVar("_Kept")


@overload
def main_content(html: str | HtmlDocument) -> tuple[MainText, LexborNode | None]: ...


@overload
def main_content(html: str | HtmlDocument, keep: Callable[[LexborNode], _Kept]
                 ) -> tuple[MainText, _Kept | None]: ...


def main_content(html: str | HtmlDocument, keep: Callable[[LexborNode], object] | None = None
                 ) -> tuple[MainText, object]:
    """:func:`extract_main_text`, and the content root its text was converted from,
    boilerplate already removed (steps 1-4 of the module), for a renderer that keeps
    the markup (:mod:`parser.markdown`). The root is None when the page got its whole
    visible text (flattened, over budget) or has no body.

    With ``keep``, what ``keep`` makes of the root comes back instead of the root
    (None where there is no root), and the page's tree is released before the root's
    markup is parsed again for its text, so a large page's two trees are never in
    memory at once (a 2.5 MB table of contents: 94 -> 62 MiB at the parse's peak)."""
    doc = html if isinstance(html, HtmlDocument) else parse_document(html)
    if not uses_main_content(doc):
        text = _convert(doc.tree, main_content=False)
        return MainText(text, len(" ".join(text.split()))), None
    page = doc.take_lexbor()
    page.strip_tags(_INVISIBLE)
    body = page.body
    if body is None:
        return MainText("", 0), None
    visible = len(" ".join(body.text(deep=True).split()))
    root, root_paragraphs = _root(body)
    _prune(root)
    markup = "<div>" * _WRAP + (root.html or "") + "</div>" * _WRAP
    kept: object = root
    if keep is not None:
        kept = keep(root)
        del page, body, root  # the last references to the tree: lexbor frees it here
    tree = HTMLTree.parse(markup)
    text = _convert(tree, main_content=True)
    if len(text) < FALLBACK_SHARE * root_paragraphs:
        text = _convert(tree, main_content=False)
    return MainText(_drop_boilerplate_lines(text), visible), kept


def _drop_boilerplate_lines(text: str) -> str:
    """``text`` without the lines that are only a boilerplate label
    (:data:`BOILERPLATE_LINE`)."""
    if BOILERPLATE_LINE.search(text) is None:
        return text
    kept = [line for line in text.split("\n")
            if BOILERPLATE_LINE.fullmatch(line.strip()) is None]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def _convert(tree: HTMLTree, *, main_content: bool) -> str:
    text: str = extract_plain_text(
        tree, preserve_formatting=True, main_content=main_content, list_bullets=False,
        alt_texts=False, noscript=False, form_fields=False, links=False, comments=False,
        post_meta=False)
    return text.strip()


def _paragraph_weights(body: LexborNode) -> tuple[dict[int, int], int]:
    """Paragraph characters under each element (by ``mem_id``), and in all."""
    weights: dict[int, int] = {}
    total = 0
    body_id = body.mem_id
    for paragraph in body.css("p"):
        length = len(paragraph.text(deep=True).strip())
        if length < MIN_PARAGRAPH:
            continue
        total += length
        node: LexborNode | None = paragraph.parent
        for _ in range(MAX_ANCESTORS):
            if node is None:
                break
            key = node.mem_id
            weights[key] = weights.get(key, 0) + length
            if key == body_id:
                break
            node = node.parent
    return weights, total


def _root(body: LexborNode) -> tuple[LexborNode, int]:
    """The content root (see the module) and its paragraph characters."""
    weights, total = _paragraph_weights(body)
    if not total:
        return body, 0
    ranks: dict[int, list[LexborNode]] = {}
    for rank, selector in _ROOT_TAGS:
        ranks[rank] = body.css(selector)
    named: dict[str, int | None] = {}
    for node in body.css("[class], [id]"):
        if node.tag not in _ROOT_ELEMENTS:
            continue
        attributes = node.attributes
        key = f"{attributes.get('class') or ''} {attributes.get('id') or ''}".lower()
        if key not in named:
            named[key] = next((rank for rank, pattern in zip(_PATTERN_RANKS, ROOT_PATTERNS,
                                                              strict=True)
                               if pattern.search(key)), None)
        found = named[key]
        if found is not None:
            ranks.setdefault(found, []).append(node)
    for rank in sorted(ranks):
        scored = [(weights.get(node.mem_id, 0), node) for node in ranks[rank]]
        best = max((weight for weight, _node in scored), default=0)
        if best and best >= MIN_ROOT_SHARE * total:
            if rank == _ARTICLE_RANK:  # the page's own article comes first
                weight, node = next(pair for pair in scored
                                    if pair[0] >= MIN_ROOT_SHARE * total)
                return node, weight
            weight, node = min((pair for pair in scored if pair[0] >= NESTED_SHARE * best),
                               key=lambda pair: pair[0])
            return node, weight
    return body, weights.get(body.mem_id, total)


_ID_SEPARATORS = re.compile(r"[-_]")


def _short_id(value: str | None) -> str:
    """``value`` if it is a short id (at most :data:`MAX_ID_WORDS` words): a long one
    is a heading made into an anchor (Sphinx's ``s-csrf-cookie-age``,
    ``s-select-related-prohibits-...``), which says nothing about the element."""
    if not value or len(_ID_SEPARATORS.findall(value)) >= MAX_ID_WORDS:
        return ""
    return value


def _prune(root: LexborNode) -> None:
    """Remove boilerplate elements inside ``root`` (see the module). Elements are only
    unlinked, so a removed element's descendants later in a selection stay valid."""
    cap = PRUNE_CAP * len(root.text(deep=True))
    for node in root.css(_BOILERPLATE_ELEMENTS):
        if node.mem_id != root.mem_id and len(node.text(deep=True)) < cap:
            node.decompose(recursive=False)
    seen: dict[str, int] = {}  # 0: keep, 1: boilerplate, 2: table of contents
    for node in root.css("[class], [id]"):
        attributes = node.attributes
        anchor = attributes.get("id")
        short = _short_id(anchor)
        if anchor and not short:
            del node.attrs["id"]  # resiliparse's rules would read it too
        key = f"{attributes.get('class') or ''} {short}".lower()
        verdict = seen.get(key)
        if verdict is None:
            verdict = seen[key] = (2 if CONTENTS.search(key) else
                                   1 if BOILERPLATE.search(key) else 0)
        if verdict and node.mem_id != root.mem_id and (
                verdict == 2 or len(node.text(deep=True)) < cap):
            node.decompose(recursive=False)
