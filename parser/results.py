"""What the parser's page work hands back to its stage, shared by both sides
(:mod:`parser.service`, :mod:`parser.jobs`) without either importing the other's
libraries. A page worker's answer is unpickled in the crawl's main process, which
imports the module of every class in it: the classes of an answer live here, so that
reading one does not load the parsing libraries, numpy or the language model there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from common.archive import Written
from common.rendering import RenderWhy
from common.sitemaps import SitemapRead

if TYPE_CHECKING:
    from parser.hook import HookAnswer


@dataclass(frozen=True, slots=True)
class TextSignals:
    """``language`` (None: not identified) with its ``language_confidence`` (0-1),
    ``chars`` and ``words`` of the main text, and ``boilerplate_ratio``: the share of
    the page's visible text (whitespace collapsed) that is not in the main text."""

    language: str | None
    language_confidence: float
    chars: int
    words: int
    boilerplate_ratio: float


@dataclass(frozen=True, slots=True)
class Extracted:
    """What the analysis of one page found (:func:`parser.jobs.analyse`)."""

    title: str | None
    text: str
    links: list[str]
    noindex: bool
    nofollow: bool
    signals: TextSignals
    markdown: str | None = None  # the main content as Markdown, when asked for
    document_pages: int | None = None  # a PDF's page count
    hook: HookAnswer | None = None  # what the extraction hook returned, where one is set


@dataclass(frozen=True, slots=True)
class ToRender:
    """A page the render rules chose: what a browser needs to load it again."""

    why: RenderWhy
    url: str
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    record_id: str  # the response record the rendered DOM refers to


class Texts(msgspec.Struct, frozen=True, kw_only=True):
    """A page's conversion records: its main text and (when on) its Markdown."""

    text: Written
    markdown: Written | None = None


def unchanged_sitemap() -> SitemapRead:
    """How a sitemap whose record is a revisit without a body is read: not again."""
    return SitemapRead(form="unchanged", problem="the same as its last capture")
