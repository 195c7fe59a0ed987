"""Parse an HTML page and pull out what the crawl needs: links, robots directives, title.

Links and directives come from selectolax's lexbor HTML5 parser (on a ~30 KB page:
parse and select 0.25 ms, against 0.77 ms with resiliparse, whose node objects cost
~5 us each, and 15 ms with BeautifulSoup on lxml); main text comes from resiliparse
(:mod:`parser.text`). Both trees are built from the same markup. A conforming HTML5
parser has two costs an attacker can drive: deep nesting makes some steps of tree
construction scan the whole stack of open elements for every tag (``<span>`` x 20,000
then ``</div>`` x 20,000 takes ~1 s, and grows with the square), and unclosed
formatting elements with distinct attributes are re-created for every paragraph (a
100 KB page of ``<font color=N><p>x`` builds 8 million elements and 3 GB). So before
parsing, :func:`scan_markup` estimates from the tags alone (linear, on the lower-cased
text) how deep the tree can get and how many formatting elements stay open; when
depth x tags or open formatting elements x tags exceeds a budget, the page is
*flattened*: every tag except the ones links, robots directives and the title live in
is dropped, so the tree stays flat and parsing linear. Pages with few tags cannot reach
the budgets and skip the scan.

:func:`extract` returns links in document order, de-duplicated (fragments removed),
each with its kind and its own ``rel=nofollow``; the page's robots directives (meta
robots, meta ``<product token>``, X-Robots-Tag); the title; the canonical link. Links
are resolved with the WHATWG algorithm against the first ``<base href>`` (itself
resolved against the page URL) and only http(s) links are kept.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from resiliparse.parse.html import HTMLTree
from selectolax.lexbor import LexborHTMLParser

from common.urls import resolve
from parser.directives import RobotsDirectives, meta_robots
from parser.directives import x_robots_tag as header_directives

__all__ = [
    "DEFAULT_MAX_LINKS",
    "HtmlDocument",
    "LinkKind",
    "MarkupStats",
    "PageLink",
    "ParsedHtml",
    "extract",
    "followable_links",
    "parse_document",
    "scan_markup",
]

DEFAULT_MAX_LINKS = 5000
#: Longest href or resolved URL kept (longer ones are dropped, not truncated).
DEFAULT_MAX_URL_LENGTH = 8192
#: Longest title kept (characters); longer titles are cut.
MAX_TITLE_CHARS = 2048

#: Pages with at most this many ``<`` cannot exceed the budgets below (its square is
#: under each); they are not scanned.
SCAN_MIN_TAGS = 1400
#: Flatten when estimated depth x tags exceeds this (tree construction steps).
DEPTH_BUDGET = 100_000_000
#: Flatten when open formatting elements x tags exceeds this (re-created elements).
FORMATTING_BUDGET = 2_000_000
#: Flatten when the estimated depth exceeds this, whatever the size (browsers cap the
#: parser's tree depth at 512).
MAX_DEPTH = 512

_LINK_SELECTOR = "a[href], area[href], frame[src], iframe[src], link[href]"
_C0_AND_SPACE = "".join(chr(c) for c in range(0x21))
_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.\-]*:")
_SPACES = re.compile(r"\s+")


class LinkKind(enum.StrEnum):
    """Where a link was found."""

    ANCHOR = "anchor"  # a[href], area[href]
    FRAME = "frame"  # frame[src], iframe[src]
    CANONICAL = "canonical"  # link[rel~=canonical] in the head
    ALTERNATE = "alternate"  # link[rel~=alternate] (hreflang versions, feeds)


@dataclass(frozen=True, slots=True)
class PageLink:
    """One outgoing link: an absolute http(s) URL without fragment."""

    url: str
    kind: LinkKind
    #: rel=nofollow on every a/area that carried this URL (page-level nofollow is
    #: separate: :attr:`ParsedHtml.nofollow`).
    nofollow: bool = False


@dataclass(frozen=True, slots=True)
class ParsedHtml:
    """What :func:`extract` found on a page."""

    base_url: str  # the URL links were resolved against
    title: str | None
    canonical: str | None
    links: tuple[PageLink, ...]
    #: More than ``max_links`` distinct links: the rest were dropped.
    links_truncated: bool
    noindex: bool  # meta robots or X-Robots-Tag
    nofollow: bool  # meta robots or X-Robots-Tag: follow none of the links
    #: Hostile markup was flattened before parsing (see the module docstring).
    flattened: bool


@dataclass(frozen=True, slots=True)
class MarkupStats:
    """Estimates from the tags alone (see :func:`scan_markup`)."""

    tags: int
    depth: int  # largest number of elements open at once
    formatting: int  # largest number of formatting elements (b, i, font...) open at once

    @property
    def hostile(self) -> bool:
        return (self.depth > MAX_DEPTH or self.depth * self.tags > DEPTH_BUDGET
                or self.formatting * self.tags > FORMATTING_BUDGET)


class HtmlDocument:
    """A page ready for extraction: its (possibly flattened) markup, the guard's
    estimates (None for a page with too few tags to need them), and its trees, each
    parsed on first use: :attr:`lexbor` (selectolax, for links and directives) and
    :attr:`tree` (resiliparse, for main-text extraction)."""

    __slots__ = ("_lexbor", "_tree", "flattened", "markup", "stats")

    def __init__(self, markup: str, stats: MarkupStats | None, flattened: bool) -> None:
        self.markup = markup
        self.stats = stats
        self.flattened = flattened
        self._lexbor: LexborHTMLParser | None = None
        self._tree: HTMLTree | None = None

    @property
    def lexbor(self) -> LexborHTMLParser:
        if self._lexbor is None:
            self._lexbor = LexborHTMLParser(_usv(self.markup))
        return self._lexbor

    @property
    def tree(self) -> HTMLTree:
        if self._tree is None:
            self._tree = HTMLTree.parse(_usv(self.markup))
        return self._tree


def _usv(text: str) -> str:
    """``text`` with lone surrogates (a caller's str may carry them) as U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


# ---------------------------------------------------------------------------------
# Markup guard

# Elements whose end the tree builder finds by itself, and void elements: they do not
# make the tree deeper.
_NO_DEPTH = frozenset({
    "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "img",
    "input", "keygen", "link", "meta", "param", "source", "track", "wbr", "image",
    "p", "li", "dd", "dt", "option", "optgroup", "tr", "td", "th", "thead", "tbody",
    "tfoot", "colgroup", "caption", "rb", "rt", "rp", "rtc", "html", "head", "body",
    "a", "nobr",
})
# Formatting elements the tree builder re-creates when they were closed implicitly
# (a and nobr are never kept twice, so they do not pile up).
_FORMATTING = frozenset({"b", "big", "code", "em", "font", "i", "s", "small", "strike",
                         "strong", "tt", "u"})
_RAW_TEXT = "script|style|textarea|title|xmp|iframe|noembed|noframes|plaintext"
# Comments and raw-text elements are consumed whole (a missing end consumes the rest);
# everything else yields the tag name.
_SCAN = re.compile(
    r"<!--(?:.*?-->|.*)"
    rf"|<({_RAW_TEXT})(?=[\s/>])(?:.*?</\1|.*)"
    r"|<(/?[a-z][^\s/>]*)",
    re.DOTALL,
)
_SKIP = frozenset(_NO_DEPTH | {"/" + name for name in _NO_DEPTH})
_FORMATTING_END = frozenset("/" + name for name in _FORMATTING)


def scan_markup(html_text: str) -> MarkupStats:
    """Estimate tree depth and open formatting elements from the tags, in linear time.

    ``tags`` is the number of ``<`` (an upper bound on the tags). The scan stops as soon
    as the page is known to be hostile, so ``depth`` and ``formatting`` are then lower
    bounds that already exceed the limits.
    """
    tags = max(html_text.count("<"), 1)
    depth_limit = min(MAX_DEPTH, DEPTH_BUDGET // tags)
    fmt_limit = FORMATTING_BUDGET // tags
    depth = max_depth = fmt = max_fmt = 0
    for _raw, tag in _SCAN.findall(html_text.lower()):
        if not tag or tag in _SKIP:
            continue
        if tag[0] == "/":
            if depth:
                depth -= 1
            if fmt and tag in _FORMATTING_END:
                fmt -= 1
            continue
        depth += 1
        if depth > max_depth:
            max_depth = depth
            if depth > depth_limit:
                break
        if tag in _FORMATTING:
            fmt += 1
            if fmt > max_fmt:
                max_fmt = fmt
                if fmt > fmt_limit:
                    break
    return MarkupStats(tags=tags, depth=max_depth, formatting=max_fmt)


# Flattening keeps these tags (start and end) verbatim; frame becomes iframe, since a
# frame outside a frameset is dropped by the tree builder. Three substitutions, no
# Python code per tag: comments and raw-text elements go (their text is not markup),
# frames become iframes, every other tag becomes a space.
_FLAT_RAW = re.compile(
    r"<!--(?:.*?-->|.*)"
    r"|<(script|style|textarea|xmp|noembed|noframes|plaintext)(?=[\s/>])(?:.*?</\1\s*>|.*)",
    re.DOTALL | re.IGNORECASE)
_FLAT_FRAME = re.compile(r"<frame(?=[\s/>])([^>]*)>?", re.IGNORECASE)
_FLAT_TAG = re.compile(
    r"<(?!/?(?:a|area|link|meta|base|iframe|html|head|body|title)[\s/>])/?[a-z][^>]*>?",
    re.IGNORECASE)


def flatten(html_text: str) -> str:
    """Drop every tag but those links, directives and the title live in (linear)."""
    text = _FLAT_RAW.sub(" ", html_text)
    text = _FLAT_FRAME.sub(r"<iframe\1></iframe>", text)
    return _FLAT_TAG.sub(" ", text)


def parse_document(html_text: str) -> HtmlDocument:
    """Prepare ``html_text`` for extraction, flattening it when the guard finds it
    hostile. The trees are parsed on first use."""
    stats: MarkupStats | None = None
    flattened = False
    if html_text.count("<") > SCAN_MIN_TAGS:
        stats = scan_markup(html_text)
        flattened = stats.hostile
        if flattened:
            html_text = flatten(html_text)
    return HtmlDocument(html_text, stats, flattened)


# ---------------------------------------------------------------------------------
# Extraction


def extract(html: str | HtmlDocument, base_url: str, *, x_robots_tag: str | None = None,
            product_token: str | None = None, max_links: int = DEFAULT_MAX_LINKS,
            max_url_length: int = DEFAULT_MAX_URL_LENGTH) -> ParsedHtml:
    """Links, robots directives, title and canonical link of a page.

    ``base_url`` is the page's own URL. ``x_robots_tag`` is the X-Robots-Tag header
    (several header lines joined by newlines); ``product_token`` our crawler's name, so
    ``<meta name="PoliteCrawler">`` and ``PoliteCrawler: noindex`` count. At most
    ``max_links`` distinct links are returned (:attr:`ParsedHtml.links_truncated` says
    when more were dropped); hrefs and URLs longer than ``max_url_length`` are dropped.
    """
    doc = html if isinstance(html, HtmlDocument) else parse_document(html)
    page = doc.lexbor
    base = _document_base(page, base_url, max_url_length)
    directives = (_meta_directives(page, product_token)
                  | header_directives(x_robots_tag, product_token))
    links, truncated, canonical = _links(page, base, max_links, max_url_length)
    return ParsedHtml(base_url=base, title=_title(page), canonical=canonical,
                      links=links, links_truncated=truncated, noindex=directives.noindex,
                      nofollow=directives.nofollow, flattened=doc.flattened)


def followable_links(parsed: ParsedHtml) -> list[str]:
    """URLs the crawl may follow: none under page-level nofollow, else those without
    rel=nofollow."""
    if parsed.nofollow:
        return []
    return [link.url for link in parsed.links if not link.nofollow]


def _document_base(page: LexborHTMLParser, page_url: str, max_url_length: int) -> str:
    """The first <base href>, resolved against the page URL, if it is http(s)."""
    node = page.css_first("base[href]")
    if node is not None:
        href = node.attributes.get("href") or ""
        if len(href) <= max_url_length:
            url = resolve(href, page_url)
            if url is not None and _is_http(url):
                return url
    return page_url


def _meta_directives(page: LexborHTMLParser, product_token: str | None) -> RobotsDirectives:
    names = {"robots"}
    if product_token:
        names.add(product_token.strip().lower())
    found = RobotsDirectives()
    for node in page.css("meta[name][content]"):
        attrs = node.attributes
        if (attrs.get("name") or "").strip().lower() in names:
            found = found | meta_robots(attrs.get("content"))
    return found


def _title(page: LexborHTMLParser) -> str | None:
    node = page.css_first("title")
    if node is None:
        return None
    raw = node.text(deep=True)
    title = _SPACES.sub(" ", raw[:MAX_TITLE_CHARS * 2]).strip()[:MAX_TITLE_CHARS]
    return title or None


def _rel(value: str | None) -> list[str]:
    return value.lower().split() if value else []


def _links(page: LexborHTMLParser, base: str, max_links: int,
           max_url_length: int) -> tuple[tuple[PageLink, ...], bool, str | None]:
    found: dict[str, PageLink] = {}
    resolved: dict[str, str | None] = {}  # href -> URL: repeated hrefs resolve once
    canonical: str | None = None
    truncated = False
    for node in page.css(_LINK_SELECTOR):
        tag = node.tag
        attrs = node.attributes
        nofollow = False
        if tag == "a" or tag == "area":
            kind = LinkKind.ANCHOR
            href = attrs.get("href") or ""
            nofollow = "nofollow" in _rel(attrs.get("rel"))
        elif tag == "link":
            rel = _rel(attrs.get("rel"))
            if "canonical" in rel:
                parent = node.parent
                if parent is None or parent.tag != "head":
                    continue  # a canonical outside the head is ignored, as by search engines
                kind = LinkKind.CANONICAL
            elif "alternate" in rel and "stylesheet" not in rel:
                kind = LinkKind.ALTERNATE
            else:
                continue
            href = attrs.get("href") or ""
        else:
            kind = LinkKind.FRAME
            href = attrs.get("src") or ""
        if href in resolved:
            url = resolved[href]
        else:
            url = resolved[href] = _resolve_http(href, base, max_url_length)
        if url is None:
            continue
        if kind is LinkKind.CANONICAL and canonical is None:
            canonical = url
        seen = found.get(url)
        if seen is not None:
            if seen.nofollow and not nofollow:
                found[url] = PageLink(seen.url, seen.kind, nofollow=False)
            continue
        if len(found) >= max_links:
            truncated = True
            break
        found[url] = PageLink(url, kind, nofollow)
    return tuple(found.values()), truncated, canonical


def _resolve_http(href: str, base: str, max_url_length: int) -> str | None:
    """Resolve ``href``; the absolute http(s) URL without fragment, or None."""
    if len(href) > max_url_length:
        return None
    scheme = _SCHEME.match(href.lstrip(_C0_AND_SPACE))
    if scheme is not None and scheme.group().lower() not in ("http:", "https:"):
        return None  # javascript:, mailto:, data:, tel: ... need no resolving
    url = resolve(href, base)
    if url is None or not _is_http(url):
        return None
    url = url.split("#", 1)[0]
    return url if len(url) <= max_url_length else None


def _is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))
