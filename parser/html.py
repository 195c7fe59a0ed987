"""Parse an HTML page and pull out what the crawl needs: links, robots directives, title.

Links and directives come from selectolax's lexbor HTML5 parser (on a ~30 KB page:
parse and select 0.25 ms, against 0.77 ms with resiliparse, whose node objects cost
~5 us each, and 15 ms with BeautifulSoup on lxml); the main text's content root is
found on the same lexbor tree and converted by resiliparse (:mod:`parser.text`), itself
built on lexbor. Both trees are built from the same markup, after a guard that keeps
the work any page can cost linear in its size.

What an attacker can drive. Measured with ``python -m bench.hostile_html`` (each shape
at n and 2n; x4 when the size doubles is quadratic). Linear in both parsers and in the
main-text extraction: long attribute values and names, many attributes spread over
elements (a few distinct names), one attribute name repeated on an element, named,
numeric and unterminated character references, long and many comments, huge text
nodes, many scripts and styles, paragraphs, links, bare ``<``, stray end tags, an
unclosed tag, the doctype. Super-linear, and what the guard does:

=========================================  =============================  =======
shape                                      unguarded (parse and text)     guard
=========================================  =============================  =======
nesting depth (``<div>`` x n)              lexbor and main text: n^2      flatten
unclosed formatting elements with          both parsers and main text:    flatten
attributes, then ``<p>`` x n               n^2 elements
attributes on one start tag (any element,  n^2: 40,000 (350 KB) 5.6 s,    strip
svg and math too; '>' in quoted values)    80,000 (709 KB) 23 s
attributes on one end tag                  n^2: 200,000 (1.9 MB) 18 s     strip
``<html>``/``<body>`` tags with new        n^2 (merged into one element): strip
attributes                                 40,000 tags 8.4 s
distinct attribute names on the page       n^2, main text worst: 40,000   strip
(``<span nN=x>``)                          1.3 s, 120,000 12 s
distinct tag names (``<xN>``)              n^2: 40,000 0.6 s              flatten
options of one ``<select>``                n^2: 40,000 16 s               flatten
=========================================  =============================  =======

With the guard the same pages take 21-290 ms, and 120,000 distinct names 0.9 s
(2.6 MB), 500,000 attributes on one element 0.26 s (4.9 MB; unguarded the issue saw no
end after 600 s). CPU times from a 2-core machine.

The guard, all linear in the page (regular expressions with atomic groups and
possessive quantifiers: a failed match never backtracks). :func:`scan_markup`
estimates from the tags (its ASCII letters lower-cased) how deep the tree can get, how many
formatting elements stay open and how many options one select holds; when depth x
tags, open formatting elements x tags or option pairs exceed a budget, the page is
*flattened*: every tag except the ones links, robots directives and the title live in
is dropped, so the tree stays flat and parsing linear. Pages with few tags cannot reach
those budgets and skip that scan. :func:`scan_attributes` reads every tag's attributes
the way the HTML tokenizer does (a quoted value may hold ``>``) and counts attributes
per element (a start or end tag; all ``<html>`` or all ``<body>`` tags together),
attributes, attribute characters and distinct attribute names per page, and distinct
tag names (too many: flatten). Beyond any attribute bound (the ``MAX_ATTRIBUTE*``
constants) the page's attributes are *stripped* (:func:`strip_attributes`): every
start tag keeps only the first of each of :data:`KEPT_ATTRIBUTES` (links,
directives, charset, and the id, class, role, hidden and style the main-text
heuristics look at), end tags keep none; the tree keeps its shape. A stripped element
has at most 15 attributes and the page at most 15 distinct names. The guard costs
about 0.4 ms on a 45 KB page and 1-2 ms on a 100 KB page with 4,800 tags (10-15% of
what parsing, link extraction and main text cost there).

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
from itertools import compress
from operator import itemgetter

from resiliparse.parse.html import HTMLTree
from selectolax.lexbor import LexborHTMLParser

from common.urls import resolve
from parser.directives import RobotsDirectives, meta_robots
from parser.directives import x_robots_tag as header_directives

__all__ = [
    "DEFAULT_MAX_LINKS",
    "AttributeStats",
    "HtmlDocument",
    "LinkKind",
    "MarkupStats",
    "PageLink",
    "ParsedHtml",
    "document_base",
    "extract",
    "followable_links",
    "parse_document",
    "scan_attributes",
    "scan_markup",
    "strip_attributes",
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
#: Flatten when the options of one ``<select>`` make more pairs than this (n options
#: make n x n / 2; lexbor walks a select's options for every option it inserts).
OPTION_BUDGET = 10_000_000
#: Flatten when the page has more distinct tag names than this, start and end tags
#: counted apart (lexbor interns every tag name in a table whose look-ups slow down
#: with its size).
MAX_TAG_NAMES = 20_000

#: Strip attributes (see :data:`KEPT_ATTRIBUTES`) when one element has more than this
#: many (the tree builder checks every new attribute against the element's others).
#: Counted per start or end tag, and over all ``<html>`` and all ``<body>`` tags, whose
#: attributes are merged into one element.
MAX_ATTRIBUTES_PER_ELEMENT = 100
#: ... or when the page has more attributes than this (each costs about 100 bytes in
#: each of the two trees) ...
MAX_ATTRIBUTES_PER_PAGE = 200_000
#: ... or more characters of attribute text (names, values and the space between them)
#: than this ...
MAX_ATTRIBUTE_CHARS = 4_000_000
#: ... or more distinct attribute names than this (interned like tag names).
MAX_ATTRIBUTE_NAMES = 10_000
#: What stripping keeps: the attributes links, directives and the title need, and those
#: the main-text heuristics look at. Only the first of each name on an element is kept
#: (the tree builder ignores the others), so no element keeps more than these.
KEPT_ATTRIBUTES = frozenset({
    "href", "src", "rel", "name", "content", "http-equiv", "charset", "id", "class",
    "role", "hidden", "aria-hidden", "style", "type", "lang",
})

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
    #: Attributes beyond the bounds: all but :data:`KEPT_ATTRIBUTES` were removed.
    stripped: bool = False


@dataclass(frozen=True, slots=True)
class MarkupStats:
    """Estimates from the tags alone (see :func:`scan_markup`)."""

    tags: int
    depth: int  # largest number of elements open at once
    formatting: int  # largest number of formatting elements (b, i, font...) open at once
    option_pairs: int = 0  # pairs of options within one select, summed over selects

    @property
    def hostile(self) -> bool:
        return (self.depth > MAX_DEPTH or self.depth * self.tags > DEPTH_BUDGET
                or self.formatting * self.tags > FORMATTING_BUDGET
                or self.option_pairs > OPTION_BUDGET)


@dataclass(frozen=True, slots=True)
class AttributeStats:
    """Attribute and name figures (see :func:`scan_attributes`). Figures that were not
    counted (a short page, or a scan that stopped early) are 0."""

    #: The most attributes found on one element; only counted above
    #: :data:`MAX_ATTRIBUTES_PER_ELEMENT` (0 when no element has more).
    most_on_element: int = 0
    total: int = 0  # attributes on the page
    chars: int = 0  # characters of attribute text on the page
    names: int = 0  # distinct attribute names
    tag_names: int = 0  # distinct tag names

    @property
    def crowded(self) -> bool:
        """Attributes must be stripped before parsing."""
        return (self.most_on_element > MAX_ATTRIBUTES_PER_ELEMENT
                or self.total > MAX_ATTRIBUTES_PER_PAGE or self.chars > MAX_ATTRIBUTE_CHARS
                or self.names > MAX_ATTRIBUTE_NAMES)

    @property
    def hostile(self) -> bool:
        """The page must be flattened before parsing."""
        return self.tag_names > MAX_TAG_NAMES


class HtmlDocument:
    """A page ready for extraction: its (possibly flattened or stripped) markup, the
    guard's estimates (``stats`` is None for a page with too few tags to need them),
    and its trees, each parsed on first use: :attr:`lexbor` (selectolax, for links and
    directives) and :attr:`tree` (resiliparse, for main-text extraction)."""

    __slots__ = ("_lexbor", "_tree", "attributes", "flattened", "markup", "stats",
                 "stripped")

    def __init__(self, markup: str, stats: MarkupStats | None, flattened: bool, *,
                 attributes: AttributeStats | None = None, stripped: bool = False) -> None:
        self.markup = markup
        self.stats = stats
        self.flattened = flattened
        self.attributes = attributes
        self.stripped = stripped
        self._lexbor: LexborHTMLParser | None = None
        self._tree: HTMLTree | None = None

    @property
    def lexbor(self) -> LexborHTMLParser:
        if self._lexbor is None:
            self._lexbor = LexborHTMLParser(_usv(self.markup))
        return self._lexbor

    def take_lexbor(self) -> LexborHTMLParser:
        """The lexbor tree, handed over to a caller that changes it: the document
        forgets it, so a later :attr:`lexbor` parses the markup again."""
        page = self.lexbor
        self._lexbor = None
        return page

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

# Attributes as the HTML tokenizer reads them. Whitespace is HTML's (not Python's \s).
# An attribute is a name (whose first character may be '=') and an optional value,
# quoted or not; a quoted value may hold '>' and runs to the end of the page when its
# quote is not closed. Atomic groups and possessive quantifiers: a failed match never
# backtracks into an attribute, so every pattern below runs in linear time.
_WS = "\\t\\n\\f\\r "
_VALUE = rf"(?:[{_WS}]*+=[{_WS}]*+(?:\"[^\"]*+\"?|'[^']*+'?|[^{_WS}>]*+))?+"
_ATTR = rf"(?>[^{_WS}/>][^{_WS}/>=]*+{_VALUE})"
_REGION = rf"(?:[{_WS}/]++|{_ATTR})*+"  # everything between a tag's name and its '>'
_ATTR_RE = re.compile(_ATTR)
_ATTR_NAME = re.compile(rf"(?>([^{_WS}/>][^{_WS}/>=]*+){_VALUE})")

# Comments and raw-text elements are consumed whole (a missing end consumes the rest);
# everything else yields the tag name and the text of its attributes (on lower-cased
# text: raw name, its attributes, tag name, its attributes).
_SCAN = re.compile(
    r"<!--(?:.*?-->|.*)"
    rf"|<({_RAW_TEXT})(?=[{_WS}/>])({_REGION})(?:.*?</\1|.*)"
    rf"|<(/?[a-z][^{_WS}/>]*+)({_REGION})",
    re.DOTALL,
)
_RAW_NAME, _RAW_ATTRS, _TAG_NAME, _TAG_ATTRS = (itemgetter(i) for i in range(4))
_SKIP = frozenset(_NO_DEPTH | {"/" + name for name in _NO_DEPTH})
_FORMATTING_END = frozenset("/" + name for name in _FORMATTING)
_OPTIONS = frozenset({"option", "optgroup"})
_SELECT = frozenset({"select", "/select"})

# More than MAX_ATTRIBUTES_PER_ELEMENT attributes: matched on each long attribute text.
_CROWDED_REGION = re.compile(rf"(?:[{_WS}/]*+{_ATTR}){{{MAX_ATTRIBUTES_PER_ELEMENT + 1}}}")
# Every tag's attribute text, on a small page (comments and scripts included: a false
# alarm there only strips attributes).
_TAG_REGIONS = re.compile(rf"</?[a-zA-Z][^{_WS}/>]*+({_REGION})")
# <html> and <body> tags: the tree builder merges the attributes of every one of them
# into the one html or body element.
_MERGING = re.compile(
    rf"<([hH][tT][mM][lL]|[bB][oO][dD][yY])(?=[{_WS}/>])({_REGION})")
_MERGING_NAMES = ("html", "body")


def scan_markup(html_text: str) -> MarkupStats:
    """Estimate tree depth, open formatting elements and options per select from the
    tags, in linear time.

    ``tags`` is the number of ``<`` (an upper bound on the tags). The scan stops as soon
    as the page is known to be hostile, so ``depth``, ``formatting`` and
    ``option_pairs`` are then lower bounds that already exceed the limits.
    """
    tags = max(html_text.count("<"), 1)
    return _tag_figures(_SCAN.findall(_ascii_lower(html_text)), tags)


def scan_attributes(html_text: str) -> AttributeStats:
    """Count attributes and names the way the tokenizer reads them, in linear time.

    ``most_on_element`` is the most attributes of one element (a start or end tag, or
    all ``<html>`` or all ``<body>`` tags together), counted only above
    :data:`MAX_ATTRIBUTES_PER_ELEMENT` (0 below). On a page with more than
    :data:`SCAN_MIN_TAGS` tags the figures come from the same pass as
    :func:`scan_markup` (comments and the content of raw-text elements not counted),
    and count distinct tag names, start and end tags apart; a smaller page cannot hold
    enough of them to matter (0). ``total``, ``chars`` and ``names`` are counted where
    they can exceed their limits (0 elsewhere): on pages with more than
    ``2 x MAX_ATTRIBUTE_NAMES`` characters of attribute text, since an attribute takes
    at least two.
    """
    tags = html_text.count("<")
    if tags > SCAN_MIN_TAGS:
        return _attribute_figures(_SCAN.findall(_ascii_lower(html_text)))
    return _small_page_attributes(html_text)


def _ascii_lower(html_text: str) -> str:
    """``html_text`` with its ASCII letters in lower case, what :data:`_SCAN` reads.

    The scan's patterns tell characters apart only by ASCII letters and punctuation,
    so on this text they match where they would on ``html_text.lower()`` and capture
    the same text but for the case of non-ASCII letters, which the figures that count
    names lower (:func:`_attribute_figures`). Lowering only ASCII letters costs a
    fraction of ``str.lower`` on a text that is not all ASCII. U+0130 and U+212A are
    the only characters whose lower case is longer or ASCII: a text with either is
    lowered whole."""
    if html_text.isascii() or "\u0130" in html_text or "\u212a" in html_text:
        return html_text.lower()
    return (html_text.encode("utf-8", "surrogatepass").lower()
            .decode("utf-8", "surrogatepass"))


def _tag_figures(found: list[tuple[str, str, str, str]], tags: int) -> MarkupStats:
    depth_limit = min(MAX_DEPTH, DEPTH_BUDGET // tags)
    fmt_limit = FORMATTING_BUDGET // tags
    depth = max_depth = fmt = max_fmt = 0
    in_select = pairs = 0  # options since the last select start or end; their pairs
    for _raw, _raw_attrs, tag, _attrs in found:
        if not tag:
            continue
        if tag in _SKIP:
            if tag in _OPTIONS:
                pairs += in_select
                in_select += 1
                if pairs > OPTION_BUDGET:
                    break
            continue
        if tag in _SELECT:
            in_select = 0
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
    return MarkupStats(tags=tags, depth=max_depth, formatting=max_fmt, option_pairs=pairs)


def _attribute_figures(found: list[tuple[str, str, str, str]]) -> AttributeStats:
    if not found:
        return AttributeStats()
    names = list(map(_TAG_NAME, found))
    regions = list(filter(None, map(_RAW_ATTRS, found)))
    regions += map(_TAG_ATTRS, found)
    lengths = list(map(len, regions))
    most = _crowded(regions, lengths)
    for merging in _MERGING_NAMES:
        if not most and names.count(merging) > 1:
            merged = sum(len(_ATTR_RE.findall(row[3])) for row in found if row[2] == merging)
            most = merged if merged > MAX_ATTRIBUTES_PER_ELEMENT else 0
    # names in lower case (those of raw-text elements are), less the "" of comments
    tag_names = len({name.lower() for name in set(names)} | set(map(_RAW_NAME, found))) - 1
    return _page_wide(regions, lengths, most, tag_names, lower=True)


def _small_page_attributes(html_text: str) -> AttributeStats:
    regions = _TAG_REGIONS.findall(html_text)
    lengths = list(map(len, regions))
    most = _crowded(regions, lengths)
    if not most:
        merged: dict[str, int] = {}
        for name, region in _MERGING.findall(html_text):
            key = name.lower()
            merged[key] = merged.get(key, 0) + len(_ATTR_RE.findall(region))
            if merged[key] > MAX_ATTRIBUTES_PER_ELEMENT:
                most = merged[key]
                break
    return _page_wide(regions, lengths, most, 0, lower=True)


def _crowded(regions: list[str], lengths: list[int]) -> int:
    """MAX_ATTRIBUTES_PER_ELEMENT + 1 when one of ``regions`` (attribute texts, of
    ``lengths``) holds more attributes than that, else 0. An attribute takes at least
    two characters, so only long texts are tokenized."""
    longer = 2 * MAX_ATTRIBUTES_PER_ELEMENT
    if not lengths or max(lengths) <= longer:
        return 0
    for region in compress(regions, map(longer.__lt__, lengths)):
        if _CROWDED_REGION.match(region) is not None:
            return MAX_ATTRIBUTES_PER_ELEMENT + 1
    return 0


def _page_wide(regions: list[str], lengths: list[int], most: int, tag_names: int, *,
               lower: bool) -> AttributeStats:
    """The page-wide figures of ``regions``, every attribute text of the page (to be
    lower-cased first when ``lower``)."""
    chars = sum(lengths)
    if most or chars <= 2 * MAX_ATTRIBUTE_NAMES:  # stripped anyway, or cannot exceed
        return AttributeStats(most_on_element=most, chars=chars, tag_names=tag_names)
    # '>' between texts: no attribute holds one outside quotes
    joined = ">".join(regions)
    attribute_names = _ATTR_NAME.findall(joined.lower() if lower else joined)
    return AttributeStats(total=len(attribute_names), chars=chars,
                          names=len(set(attribute_names)), tag_names=tag_names)


# Bogus comments (<!doctype>, <?xml?>, </ x>) end at the first '>'.
_BOGUS = r"<!--(?:.*?-->|.*)|<[!?][^>]*+>?|</(?![a-zA-Z>])[^>]*+>?"
# Each match skips the attributes stripping drops and captures the next one it keeps,
# (text, name); ("", "") at the end. Always matching, so findall stays linear.
_KEPT_NAME = rf"(?i:{'|'.join(sorted(KEPT_ATTRIBUTES))})(?:[{_WS}/>=]|\Z)"
_KEEP_SCAN = re.compile(
    rf"(?:[{_WS}/]++|(?!{_KEPT_NAME}){_ATTR})*+"
    rf"((?=(?:{_KEPT_NAME}))(?>([^{_WS}/>][^{_WS}/>=]*+){_VALUE}))?", re.ASCII)
# The last attribute of a tag (the group keeps its last repetition).
_LAST_ATTR = re.compile(rf"(?:[{_WS}/]++|({_ATTR}))*+")
_STRIP_SCAN = re.compile(rf"{_BOGUS}|<(/?)([a-zA-Z][^{_WS}/>]*+)({_REGION})", re.DOTALL)
_RAW_NAMES = frozenset(_RAW_TEXT.split("|"))
_RAW_END = {name: re.compile(rf"</{name}(?=[{_WS}/>])", re.IGNORECASE)
            for name in _RAW_NAMES}


def strip_attributes(html_text: str) -> str:
    """Keep only :data:`KEPT_ATTRIBUTES` on start tags (the first of each name) and no
    attribute on end tags; comments and the content of raw-text elements stay as they
    are. Linear: one pass, and work per attribute only for tags that have some."""
    out: list[str] = []
    done = pos = 0
    search = _STRIP_SCAN.search
    while (m := search(html_text, pos)) is not None:
        pos = m.end()
        name = m[2]
        if name is None:  # a comment
            continue
        region = m[3]
        if region:
            out.append(html_text[done:m.start(3)])
            out.append(_kept_attributes(region) if not m[1] else "")
            done = pos
        raw = name.lower()
        if not m[1] and raw in _RAW_NAMES:
            end = _RAW_END[raw].search(html_text, pos)
            pos = end.start() if end is not None else len(html_text)
    out.append(html_text[done:])
    return "".join(out)


def _kept_attributes(region: str) -> str:
    kept: dict[str, str] = {}
    for full, name in filter(itemgetter(0), _KEEP_SCAN.findall(region)):
        key = name.lower()
        if key not in kept:
            kept[key] = full
    # a '/' just before '>' makes a self-closing tag (it matters in SVG and MathML),
    # unless it ends an unquoted value
    closing = False
    if region.endswith("/"):
        last = _LAST_ATTR.match(region)
        closing = last is None or last.end(1) != len(region)
    return "".join(" " + attr for attr in kept.values()) + (" /" if closing else "")


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
    """Prepare ``html_text`` for extraction: flatten it when the guard finds its tags
    hostile, strip its attributes when they are beyond the bounds. The trees are
    parsed on first use."""
    stats: MarkupStats | None = None
    tags = html_text.count("<")
    if tags > SCAN_MIN_TAGS:
        found = _SCAN.findall(_ascii_lower(html_text))  # one pass for both
        stats = _tag_figures(found, tags)
        attributes = _attribute_figures(found)
        del found
    else:
        attributes = _small_page_attributes(html_text)
    flattened = (stats is not None and stats.hostile) or attributes.hostile
    if flattened:
        html_text = flatten(html_text)
        # flattening removes text, which can join what was text into a kept tag
        attributes = scan_attributes(html_text)
    stripped = attributes.crowded
    if stripped:
        html_text = strip_attributes(html_text)
    return HtmlDocument(html_text, stats, flattened, attributes=attributes,
                        stripped=stripped)


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
                      nofollow=directives.nofollow, flattened=doc.flattened,
                      stripped=doc.stripped)


def document_base(doc: HtmlDocument, page_url: str) -> str:
    """The URL a page's relative links resolve against (as :func:`extract` finds it)."""
    return _document_base(doc.lexbor, page_url, DEFAULT_MAX_URL_LENGTH)


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
