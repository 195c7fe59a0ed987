"""Markdown of a page's main content, for language-model corpora.

The Markdown holds the same content as the main text (:mod:`parser.text`): the same
content root, the same boilerplate removed. It is rendered from the pruned root the
main text was converted from, block by block (paragraphs, headings, list items, table
rows, code blocks), and a block is kept only when the main text kept its text: its
whitespace-collapsed text is a line of the main text, or (three words or more) at
least :data:`MIN_SHARED` of its word trigrams are in the main text. So what
resiliparse's main-content rules and the label-line filter dropped from the main text
is dropped here too, and nothing the main text lacks is added.

What is rendered:

- headings ``#`` to ``######``; paragraphs separated by blank lines;
- lists, ordered (``1.``, from the list's ``start``) and unordered (``-``), nested by
  indentation (at most :data:`MAX_INDENT_LEVELS` levels of it are counted);
- tables with at least two rows and two cells in a row, and no lists, headings, code
  or tables directly in a cell, as GitHub pipe tables whose first row is the header
  (cells on one line, ``|`` escaped, at most :data:`MAX_COLUMNS` columns); other
  tables (layout) as their blocks;
- ``<pre>`` as a fenced code block, its text verbatim (the fence longer than any run
  of backticks in it; ``language-x`` or ``lang-x`` classes name the language);
  ``<code>`` elsewhere as inline code;
- links as ``[text](URL)``, the URL resolved against the page's base URL (its
  ``<base href>``); only http, https and mailto links are kept (a ``javascript:``
  link is its text alone), and URLs longer than :data:`MAX_URL_LENGTH` are dropped;
- ``<strong>``/``<b>`` as ``**``, ``<em>``/``<i>`` as ``*``; blockquotes as ``>``;
- images are dropped (the main text has no alt texts either).

Text is escaped so that it reads as text: ``\\ ` * [ ] < > |``, ``_`` at a word's
edge, ``&`` before an entity-like name, and a line that would start a heading, a list
item, a quote or a rule.

Pages given their whole visible text (flattened by the markup guard, over the
main-content budget) and ``text/plain`` pages get their text, escaped, as paragraphs.

Bounds: the walk over the tree is iterative (no recursion, whatever the nesting),
linear in the root's size, and stops once :data:`DEFAULT_MAX_CHARS` (``max_chars``)
characters are produced; the result is cut at a block boundary to at most
``max_chars``. Indentation and quote prefixes are capped, and emphasis is not nested
in itself, so deep markup cannot make long lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from selectolax.lexbor import LexborNode

from common.urls import resolve
from parser.html import HtmlDocument, document_base, parse_document
from parser.text import MainText, main_content

__all__ = [
    "DEFAULT_MAX_CHARS",
    "MAX_URL_LENGTH",
    "markdown_text",
    "page_markdown",
    "plain_markdown",
    "render_markdown",
]

#: Longest Markdown (characters): the fetcher's default body cap, which bounds the
#: main text too.
DEFAULT_MAX_CHARS = 5_000_000
#: Longest link URL kept (longer links keep their text only).
MAX_URL_LENGTH = 8192
#: List nesting counted for indentation; deeper items are indented as at this level.
MAX_INDENT_LEVELS = 8
#: Blockquote nesting rendered.
MAX_QUOTE_LEVELS = 8
#: Columns of a pipe table.
MAX_COLUMNS = 64
#: Share of a block's word trigrams the main text must hold for the block to be kept.
MIN_SHARED = 0.5

_SKIP = frozenset({
    "script", "style", "noscript", "template", "svg", "math", "iframe", "object", "embed",
    "video", "audio", "canvas", "map", "img", "picture", "source", "track", "head",
    "title", "meta", "link", "input", "select", "textarea", "button", "option", "base",
})
_BLOCKS = frozenset({
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside",
    "address", "figure", "figcaption", "details", "summary", "dl", "dt", "dd", "center",
    "form", "fieldset", "legend", "caption", "tr", "td", "th", "thead", "tbody", "tfoot",
    "body", "html", "hgroup", "menu", "search", "dialog", "noframes", "frameset", "hr",
    "li", "ul", "ol", "blockquote", "table", "pre", "h1", "h2", "h3", "h4", "h5", "h6",
})
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_EMPHASIS = {"b": "**", "strong": "**", "em": "*", "i": "*"}
# elements directly in a cell that make a table a layout table
_LAYOUT = frozenset({"table", "ul", "ol", "dl", "pre", "blockquote", "h1", "h2", "h3",
                     "h4", "h5", "h6", "form", "section", "article"})
_LINK_SCHEMES = ("http:", "https:", "mailto:")

_PERMALINKS = frozenset({"¶", "§", "#", "🔗", "∞"})
"""Texts of an in-page link that marks a heading's anchor rather than saying anything."""
_PERMALINK_CHARS = "".join(_PERMALINKS) + " "


def _match_key(line: str) -> str:
    """A whitespace-collapsed line as the matcher compares it: without trailing
    permalink symbols (each one character)."""
    return line.rstrip(_PERMALINK_CHARS)
_SPACES = re.compile(r"\s+")
_RUNS = re.compile(r" {2,}")
_ESCAPE = re.compile(r"[\\`*\[\]<>|]|(?<!\w)_|_(?!\w)|&(?=#?\w{1,32};)")
_MAY_ESCAPE = re.compile(r"[\\`*\[\]<>|_&]")  # the characters _ESCAPE can match
_ORDERED = re.compile(r"(\d{1,9})(?=[.)](?:\s|$))")
_LEADER = re.compile(r"(?:[#+]|-+|=+|~{3,})(?:\s|$)")
_LEADER_FIRST = frozenset("#+-=~")  # the characters a _LEADER match starts with
_BACKTICKS = re.compile(r"`+")
_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.\-]*:")
_LANGUAGE = re.compile(r"(?:^|\s)(?:language|lang)-([\w+#.-]{1,32})")
_C0_AND_SPACE = "".join(chr(c) for c in range(0x21))


def page_markdown(html: str | HtmlDocument, page_url: str, *,
                  max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The Markdown of a page's main content (see the module). ``page_url`` is the
    page's own URL; links resolve against its ``<base href>``, if any."""
    doc = html if isinstance(html, HtmlDocument) else parse_document(html)
    base = document_base(doc, page_url)  # before main_content takes the tree
    main, walked = main_content(doc, Walker(base, max_chars=max_chars))
    return markdown_of(main, walked, max_chars=max_chars)


def render_markdown(main: MainText, root: LexborNode | None, base_url: str, *,
                    max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The Markdown of ``root`` (from :func:`parser.text.main_content`), keeping the
    blocks ``main`` kept. Without a root: ``main``'s text, escaped."""
    walked = None if root is None else Walker(base_url, max_chars=max_chars)(root)
    return markdown_of(main, walked, max_chars=max_chars)


class Walked:
    """A content root's Markdown blocks, before they are matched against the main
    text (:class:`Walker`): what is kept of the root once its tree is released."""

    __slots__ = ("blocks",)

    def __init__(self, blocks: list[_Block]) -> None:
        self.blocks = blocks


class Walker:
    """Walks a content root into its Markdown blocks; given to
    :func:`parser.text.main_content` as ``keep``, so the page's tree can be released
    before the main text is converted."""

    __slots__ = ("base_url", "max_chars")

    def __init__(self, base_url: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.base_url = base_url
        self.max_chars = max_chars

    def __call__(self, root: LexborNode) -> Walked:
        walk = _Walk(self.base_url, 2 * self.max_chars)
        walk.run(root)
        return Walked(walk.blocks)


def markdown_of(main: MainText, walked: Walked | None, *,
                max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The Markdown of a walked root, keeping the blocks ``main`` kept. Without one:
    ``main``'s text, escaped."""
    if walked is None:
        return plain_markdown(main.text, max_chars=max_chars)
    return _render(_kept(walked.blocks, main.text), max_chars)


def plain_markdown(text: str, *, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Plain text as Markdown: escaped, a paragraph per blank-line-separated block."""
    lines = [_guard(_escape(" ".join(line.split()))) for line in text[:max_chars].split("\n")]
    joined = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return joined[:max_chars]


# -- the walk ----------------------------------------------------------------------


class _Item:
    """A list item: its marker, whether a block showed it yet, and the item it is
    nested in."""

    __slots__ = ("list", "marker", "parent", "shown")

    def __init__(self, marker: str, parent: _Item | None, owner: list[int]) -> None:
        self.marker = marker
        self.parent = parent
        self.list = owner  # the list's counter: the same object for its items
        self.shown = False


@dataclass(slots=True)
class _Block:
    lines: list[str]  # Markdown lines, without the list and quote prefixes
    plain: str  # whitespace-collapsed text, matched against the main text
    item: _Item | None  # the innermost list item it is in
    quote: int  # blockquote depth
    # a table: per row its Markdown, plain text and the plain text of its lines
    rows: list[tuple[str, str, list[str] | None]] | None = None
    columns: int = 0
    parts: list[str] | None = None  # the plain text of each line, when it has several


@dataclass(slots=True)
class _Wrap:
    """An open link or emphasis: where its content starts in the buffer."""

    start: int  # -1: broken by a block boundary, rendered as its text alone
    before: str
    after: str
    emphasis: str = ""


_EXIT = 1
_EXIT_BLOCK = 2
_EXIT_HEADING = 3
_EXIT_LIST = 4
_EXIT_ITEM = 5
_EXIT_QUOTE = 6
#: What :meth:`_Walk._enter` returns for an element whose children are walked and
#: whose end needs nothing done.
_DESCEND: tuple[None, int, object] = (None, 0, None)


class _Walk:
    """An iterative walk over a subtree that collects blocks (or, ``inline``, one line
    of inline Markdown, for a table cell)."""

    def __init__(self, base: str, budget: int, *, inline: bool = False) -> None:
        self.base = base
        self.budget = budget
        self.inline = inline
        self.blocks: list[_Block] = []
        self.md: list[str] = []
        self.plain: list[str] = []
        self.size = 0
        self.lists: list[list[int]] = []  # per open list: [next number] or [-1]
        self.item: _Item | None = None
        self.quote = 0
        self.heading = 0
        self.wraps: list[_Wrap] = []
        self.emphasis: dict[str, int] = {"**": 0, "*": 0}
        self.urls: dict[str, str | None] = {}

    def run(self, root: LexborNode) -> None:
        # the stack holds nodes to enter and, below an element's children, the action
        # to take when it is left
        stack: list[LexborNode | tuple[None, int, object]] = [root]
        pop = stack.pop
        push = stack.append
        extend = stack.extend
        enter = self._enter
        leave = self._exit
        add_text = self._text
        skip = _SKIP
        while stack and self.size <= self.budget:
            node = pop()
            if isinstance(node, tuple):
                leave(node[1], node[2])
                continue
            tag = node.tag or ""
            if tag == "-text":
                add_text(node.text_content or "")
                continue
            if tag[:1] in ("-", "!", "_") or tag in skip:
                continue
            exit_action = enter(node, tag)
            if exit_action is None:
                continue  # handled whole, children skipped
            if exit_action is not _DESCEND:
                push(exit_action)
            children = list(node.iter(include_text=True))
            children.reverse()
            extend(children)
        if not self.inline:
            self.flush()

    # -- inline pieces

    def _add(self, md: str, plain: str) -> None:
        self.md.append(md)
        self.plain.append(plain)
        self.size += len(md)

    def _text(self, text: str) -> None:
        if not text:
            return
        # whitespace runs collapsed to one space, as _SPACES.sub(" ", text) does
        # (str.split and \s agree on what whitespace is)
        if text.isspace():
            text = " "
        else:
            collapsed = " ".join(text.split())
            if text[0].isspace():
                collapsed = " " + collapsed
            if text[-1].isspace():
                collapsed += " "
            text = collapsed
        self._add(_escape(text), text)

    def _link(self, href: str) -> str | None:
        if href in self.urls:
            return self.urls[href]
        url: str | None = None
        if len(href) <= MAX_URL_LENGTH:
            scheme = _SCHEME.match(href.lstrip(_C0_AND_SPACE))
            if scheme is None or scheme.group().lower() in _LINK_SCHEMES:
                url = resolve(href, self.base)
                if url is not None and (not url.startswith(_LINK_SCHEMES)
                                        or len(url) > MAX_URL_LENGTH):
                    url = None
        if len(self.urls) < 10_000:
            self.urls[href] = url
        return url

    # -- elements

    def _enter(self, node: LexborNode, tag: str) -> tuple[None, int, object] | None:
        if tag == "br":  # in a cell: a space, but still a line of the main text
            self._add(" " if self.inline else "\n", "\n")
            return None
        if tag == "hr":
            self._boundary()
            return None
        if tag == "pre":
            self._pre(node)
            return None
        if tag == "code":
            self._code(node.text(deep=True))
            return None
        if tag == "a":
            href = node.attributes.get("href") or ""
            if href.startswith("#") and (symbol := node.text(deep=True).strip()) in _PERMALINKS:
                # a heading's permalink (Sphinx, MkDocs, Hugo): its symbol is not content
                # (the main text keeps some of these symbols and not others, so the
                # match below leaves a line's trailing symbols out on both sides)
                self._add("", symbol)
                return None
            url = self._link(href)
            if url is None:
                return _DESCEND
            wrap = _Wrap(len(self.md), "[", "](" + _destination(url) + ")")
            self.wraps.append(wrap)
            return (None, _EXIT, wrap)
        mark = _EMPHASIS.get(tag)
        if mark is not None:
            if self.emphasis[mark]:
                return _DESCEND
            self.emphasis[mark] += 1
            wrap = _Wrap(len(self.md), mark, mark, emphasis=mark)
            self.wraps.append(wrap)
            return (None, _EXIT, wrap)
        if tag not in _BLOCKS:
            return _DESCEND
        self._boundary()
        if self.inline:
            return (None, _EXIT_BLOCK, None)
        level = _HEADINGS.get(tag)
        if level is not None:
            self.heading = level
            return (None, _EXIT_HEADING, None)
        if tag == "ul" or tag == "ol":
            self.lists.append([_start(node.attributes.get("start")) if tag == "ol" else -1])
            return (None, _EXIT_LIST, None)
        if tag == "li":
            number = self.lists[-1] if self.lists else [-1]
            if number[0] >= 0:
                marker = f"{number[0]}. "
                number[0] += 1
            else:
                marker = "- "
            self.item = _Item(marker, self.item, number)
            return (None, _EXIT_ITEM, None)
        if tag == "blockquote":
            self.quote += 1
            return (None, _EXIT_QUOTE, None)
        if tag == "table" and self._table(node):
            return None
        return (None, _EXIT_BLOCK, None)

    def _exit(self, action: int, data: object) -> None:
        if action == _EXIT:
            if isinstance(data, _Wrap):
                self._close(data)
            return
        self._boundary()
        if action == _EXIT_HEADING:
            self.heading = 0
        elif action == _EXIT_LIST:
            if self.lists:
                self.lists.pop()
        elif action == _EXIT_ITEM:
            if self.item is not None:
                self.item = self.item.parent
        elif action == _EXIT_QUOTE:
            self.quote -= 1

    def _close(self, wrap: _Wrap) -> None:
        if self.wraps and self.wraps[-1] is wrap:
            self.wraps.pop()
        if wrap.emphasis:
            self.emphasis[wrap.emphasis] -= 1
        if wrap.start < 0:
            return
        content = "".join(self.md[wrap.start:])
        inner = content.strip()
        if not inner:
            return
        lead = " " if content[:1].isspace() else ""
        trail = " " if content[-1:].isspace() else ""
        if wrap.emphasis and "\n" in inner:
            return  # emphasis does not span lines
        if not wrap.emphasis:
            inner = inner.replace("\n", " ")
        del self.md[wrap.start:]
        piece = lead + wrap.before + inner + wrap.after + trail
        self.md.append(piece)
        self.size += len(wrap.before) + len(wrap.after)

    def _code(self, text: str) -> None:
        content = " ".join(text.split())
        if not content:
            return
        run = max((len(m) for m in _BACKTICKS.findall(content)), default=0)
        fence = "`" * (run + 1)
        pad = " " if content[0] == "`" or content[-1] == "`" else ""
        self._add(fence + pad + content + pad + fence, content)

    def _pre(self, node: LexborNode) -> None:
        code = node.text(deep=True).replace("\r\n", "\n").replace("\r", "\n").strip("\n")
        if self.inline:
            self._code(code)
            return
        self._boundary()
        if not code.strip():
            return
        run = max((len(m) for m in _BACKTICKS.findall(code)), default=0)
        fence = "`" * max(3, run + 1)
        classes = f"{node.attributes.get('class') or ''} "
        inner = node.css_first("code") if node.child is not None else None
        if inner is not None:
            classes += inner.attributes.get("class") or ""
        found = _LANGUAGE.search(classes)
        language = found.group(1) if found else ""
        lines = [fence + language, *code.split("\n"), fence]
        self.size += len(code)
        self.blocks.append(_Block(lines, " ".join(code.split()), self.item, self.quote))

    def _table(self, table: LexborNode) -> bool:
        """Render ``table`` as a pipe table; False when it is a layout table."""
        rows: list[list[LexborNode]] = []
        caption: LexborNode | None = None
        for child in _children(table):
            tag = child.tag
            if tag in ("thead", "tbody", "tfoot"):
                rows.extend(_cells(r) for r in _children(child) if r.tag == "tr")
            elif tag == "tr":
                rows.append(_cells(child))
            elif tag == "caption":
                caption = child
        rows = [r for r in rows if r]
        if len(rows) < 2 or max(len(r) for r in rows) < 2:
            return False
        if any(c.tag in _LAYOUT for row in rows for cell in row for c in _children(cell)):
            return False
        if caption is not None:
            text, joined = self._cell(caption)
            plain = " ".join(joined.split())
            if plain:
                self.blocks.append(_Block([text], plain, self.item, self.quote,
                                          parts=_parts(joined)))
        columns = min(MAX_COLUMNS, max(len(r) for r in rows))
        rendered: list[tuple[str, str, list[str] | None]] = []
        for row in rows:
            cells = [self._cell(c) for c in row[:columns]]
            if self.size > self.budget:
                break
            joined = " ".join(p for _, p in cells)
            plain = " ".join(joined.split())
            if not plain:
                continue
            texts = [md for md, _ in cells] + [""] * (columns - len(cells))
            rendered.append(("| " + " | ".join(texts) + " |", plain, _parts(joined)))
        if rendered:
            self.blocks.append(_Block([], "", self.item, self.quote, rows=rendered,
                                      columns=columns))
        return True

    def _cell(self, cell: LexborNode) -> tuple[str, str]:
        walk = _Walk(self.base, self.budget - self.size, inline=True)
        walk.urls = self.urls
        walk.run(cell)
        self.size += walk.size
        md = _RUNS.sub(" ", "".join(walk.md).replace("\n", " ")).strip()
        return md, "".join(walk.plain)

    def _boundary(self) -> None:
        if self.inline:
            if self.md and not self.md[-1].endswith(" "):
                self._add(" ", " ")
            return
        self.flush()

    def flush(self) -> None:
        """End the current block: its inline pieces become a block."""
        if not self.md:
            return
        for wrap in self.wraps:
            wrap.start = -1  # a link or emphasis cut by a block keeps its text only
        text = "".join(self.md)
        joined = "".join(self.plain)
        plain = " ".join(joined.split())
        self.md.clear()
        self.plain.clear()
        if not plain or self.inline:
            return
        lines = [_guard(_RUNS.sub(" ", line).strip() if "  " in line else line.strip())
                 for line in text.split("\n")]
        lines = [line for line in lines if line]
        if not lines:
            return
        if self.heading:
            lines = ["#" * self.heading + " " + " ".join(lines)]
        self.blocks.append(_Block(lines, plain, self.item, self.quote, parts=_parts(joined)))


def _parts(joined: str) -> list[str] | None:
    """The whitespace-collapsed lines of a block's text, when it has several."""
    if "\n" not in joined:
        return None
    parts = (" ".join(part.split()) for part in joined.split("\n"))
    return [part for part in parts if part]


def _children(node: LexborNode) -> Iterator[LexborNode]:
    child = node.child
    while child is not None:
        if child.is_element_node:
            yield child
        child = child.next


def _cells(row: LexborNode) -> list[LexborNode]:
    return [c for c in _children(row) if c.tag in ("td", "th")]


def _start(value: str | None) -> int:
    try:
        number = int((value or "1").strip())
    except ValueError:
        return 1
    return min(max(number, 0), 999_999_999)


def _escape(text: str) -> str:
    # most text has nothing to escape: one scan of a character class settles it, eight
    # times faster than the escaping pattern's own scan with its look-arounds
    if _MAY_ESCAPE.search(text) is None:
        return text
    return _ESCAPE.sub(r"\\\g<0>", text)


def _guard(line: str) -> str:
    """``line`` escaped where its start would read as block markup."""
    first = line[:1]
    if first not in _LEADER_FIRST and not first.isdecimal():
        return line  # neither pattern can match (\d matches a decimal digit)
    ordered = _ORDERED.match(line)
    if ordered is not None:
        return line[:ordered.end()] + "\\" + line[ordered.end():]
    if _LEADER.match(line) is not None:
        return "\\" + line
    return line


def _destination(url: str) -> str:
    if any(c in url for c in " ()<>"):
        return "<" + url.replace("<", "%3C").replace(">", "%3E") + ">"
    return url


# -- keeping what the main text kept, and rendering -----------------------------------


class _Matcher:
    """Which blocks the main text kept (see the module), in two passes: a block whose
    text is a line of the main text takes that line (each line once); the others are
    kept when the lines no block took hold most of their word trigrams. So a teaser
    that repeats the start of a paragraph is not kept beside the paragraph."""

    def __init__(self, text: str) -> None:
        self.lines: dict[str, int] = {}
        self.order: list[str] = []
        for line in text.split("\n"):
            key = _match_key(" ".join(line.split()))
            if key:
                if key not in self.lines:
                    self.order.append(key)
                self.lines[key] = self.lines.get(key, 0) + 1
        self._grams: set[int] | None = None

    def take_line(self, plain: str, parts: list[str] | None = None) -> bool:
        """Pass 1: ``plain`` is a line of the main text no block took yet, or each of
        its ``parts`` (its lines) is."""
        plain = _match_key(plain)
        left = self.lines.get(plain, 0)
        if left:
            self.lines[plain] = left - 1
            return True
        if not parts or len(parts) < 2:
            return False
        counts: dict[str, int] = {}
        for part in map(_match_key, parts):
            counts[part] = counts.get(part, 0) + 1
        if any(self.lines.get(part, 0) < count for part, count in counts.items()):
            return False
        for part, count in counts.items():
            self.lines[part] -= count
        return True

    def shares(self, plain: str) -> bool:
        """Pass 2: most of ``plain``'s word trigrams are in the lines left."""
        words = plain.split()
        if len(words) < 3:
            return False
        if self._grams is None:
            left = [word for key in self.order for word in key.split() * min(1, self.lines[key])]
            self._grams = set(map(hash, zip(left, left[1:], left[2:], strict=False)))
        triples = list(map(hash, zip(words, words[1:], words[2:], strict=False)))
        found = sum(1 for g in triples if g in self._grams)
        return found >= MIN_SHARED * len(triples)


def _kept(blocks: list[_Block], text: str) -> list[tuple[_Block, list[str]]]:
    """The blocks the main text kept, each with its lines (a table: its kept rows)."""
    match = _Matcher(text)
    verdicts: list[list[bool]] = []
    for block in blocks:
        if block.rows is not None:
            verdicts.append([match.take_line(plain, parts) for _, plain, parts in block.rows])
        else:
            verdicts.append([match.take_line(block.plain, block.parts)])
    kept: list[tuple[_Block, list[str]]] = []
    for block, verdict in zip(blocks, verdicts, strict=True):
        if block.rows is not None:
            rows = [md for (md, plain, _), taken in zip(block.rows, verdict, strict=True)
                    if taken or match.shares(plain)]
            if rows:
                kept.append((block, [rows[0], "|" + " --- |" * block.columns, *rows[1:]]))
        elif verdict[0] or match.shares(block.plain):
            kept.append((block, block.lines))
    return kept


def _render(blocks: list[tuple[_Block, list[str]]], max_chars: int) -> str:
    out: list[str] = []
    total = 0
    previous: _Block | None = None
    for block, lines in blocks:
        first, rest, starts_item = _prefixes(block)
        quote = "> " * min(block.quote, MAX_QUOTE_LEVELS)
        chunk = "\n".join([quote + first + lines[0]]
                          + [(quote + rest + line).rstrip() if line else quote.rstrip()
                             for line in lines[1:]])
        if previous is not None:
            tight = (starts_item and previous.quote == block.quote
                     and _same_list(block.item, previous.item))
            chunk = ("\n" if tight else "\n\n") + chunk
        if total + len(chunk) > max_chars:
            if not out:
                out.append(chunk[:max_chars])
            break
        out.append(chunk)
        total += len(chunk)
        previous = block
    return "".join(out)


def _same_list(item: _Item | None, previous: _Item | None) -> bool:
    """Whether ``item`` is in the list of ``previous`` or of one of the items it is
    nested in, or nested in ``previous`` (then no blank line is needed between
    them)."""
    if item is None or previous is None:
        return False
    parent = item.parent
    for _ in range(MAX_INDENT_LEVELS):
        if parent is None:
            break
        if parent is previous:
            return True
        parent = parent.parent
    for _ in range(MAX_INDENT_LEVELS):
        if previous is None:
            return False
        if previous.list is item.list:
            return True
        previous = previous.parent
    return False


def _prefixes(block: _Block) -> tuple[str, str, bool]:
    """The prefix of a block's first line and of its other lines (list markers and
    indentation), and whether it starts a list item."""
    item = block.item
    if item is None:
        return "", "", False
    indent = 0
    parent = item.parent
    for _ in range(MAX_INDENT_LEVELS - 1):
        if parent is None:
            break
        if parent.shown:
            indent += len(parent.marker)
        parent = parent.parent
    pad = " " * indent
    width = " " * len(item.marker)
    if item.shown:
        return pad + width, pad + width, False
    item.shown = True
    return pad + item.marker, pad + width, True


# -- back to plain text ------------------------------------------------------------

_FENCE = re.compile(r"(`{3,}|~{3,})")
_QUOTES = re.compile(r"^(?:> ?)+")
_MARKER = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s+")
_HEADING = re.compile(r"^#{1,6}\s+")
_RULE_ROW = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+\s*$")
_LINK_MD = re.compile(r"(?<!\\)!?\[((?:\\.|[^\]\\])*)\]\((?:<[^>]*>|[^)\s]*)\)")
_CODE_SPAN = re.compile(r"(`+) ?(.*?) ?\1")
_STARS = re.compile(r"(?<!\\)\*+")
_UNESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def markdown_text(markdown: str) -> str:
    """Markdown as written by this module, with its markup removed: the text a reader
    sees (for measuring it against plain-text extraction)."""
    out: list[str] = []
    fence: str | None = None
    for raw in markdown.split("\n"):
        line = _QUOTES.sub("", raw)
        stripped = line.strip()
        if fence is not None:
            if stripped == fence:
                fence = None
            else:
                out.append(line)
            continue
        opening = _FENCE.match(_MARKER.sub("", stripped))
        if opening is not None:
            fence = opening.group(1)
            continue
        line = _HEADING.sub("", _MARKER.sub("", stripped))
        if _RULE_ROW.match(line):
            continue
        if line.startswith("|") and line.endswith("|"):
            line = "\t".join(cell.strip() for cell in _CELL_SPLIT.split(line[1:-1]))
        out.append(_inline_text(line))
    return "\n".join(out)


def _inline_text(line: str) -> str:
    codes: list[str] = []

    def keep_code(m: re.Match[str]) -> str:
        codes.append(m.group(2))
        return f"\x00{len(codes) - 1}\x00"

    line = _CODE_SPAN.sub(keep_code, line)
    line = _LINK_MD.sub(lambda m: m.group(1), line)
    line = _STARS.sub("", line)
    line = _UNESCAPE.sub(r"\1", line)
    return re.sub(r"\x00(\d+)\x00", lambda m: codes[int(m.group(1))], line)
