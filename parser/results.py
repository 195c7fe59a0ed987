"""What the parser's page work hands back to its stage, shared by both sides
(:mod:`parser.service`, :mod:`parser.jobs`) without either importing the other's
libraries."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from common.archive import Written
from common.rendering import RenderWhy
from common.sitemaps import SitemapRead


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
