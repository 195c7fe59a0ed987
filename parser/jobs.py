"""The parser's page work: what runs in a page worker (a process in embedded mode, a
thread of the service in cluster mode), away from the stage's event loop.

Each ``*_job`` reads a stored response back (or takes what it is given), decodes it,
extracts its links, main text and signals (:mod:`parser.html`, :mod:`parser.text`,
:mod:`parser.signals`), renders the Markdown (:mod:`parser.markdown`), reads a PDF
(:mod:`parser.pdf`) or a sitemap (:mod:`common.sitemaps`), calls the extraction hook
(:mod:`parser.hook`), writes the conversion records and fingerprints the text
(:mod:`common.simhash`, :mod:`common.minhash`). The stage (:mod:`parser.service`) names
these jobs without importing this module, so only the processes that run them load the
parsing libraries.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import msgspec

from common import minhash, urls
from common.archive import StoredResponse, TextFields, read_response
from common.archive import warm_up as _warm_archive
from common.hooks import load_hook
from common.messages import FetchResult, RecordPointer
from common.pagework import WorkContext
from common.rendering import RenderRules, RenderWhy, ShellSignal, count_scripts, render_decision
from common.settings import Settings
from common.simhash import encoded_tokens, simhash_of
from common.sitemap_work import read_job
from common.sitemaps import SitemapRead, vouched_hosts
from parser import pdf as pdfs
from parser.charset import decode_html
from parser.hook import PageView, call_hook
from parser.html import extract, followable_links, parse_document
from parser.markdown import DEFAULT_MAX_CHARS, Walker, markdown_of, plain_markdown
from parser.results import Extracted, Texts, ToRender, unchanged_sitemap
from parser.signals import TextSignals, text_signals
from parser.signals import warm_up as _warm_signals
from parser.text import MainText, main_content

HTML_TYPES = ("text/html", "application/xhtml+xml")
MARKDOWN_TYPE = "text/markdown; charset=utf-8"


def analyse(body: bytes, content_type: str | None, url: str, *, x_robots_tag: str | None,
            product_token: str, tracking: urls.TrackingRules, markdown: bool = False,
            markdown_chars: int = DEFAULT_MAX_CHARS) -> Extracted:
    """Pure: decode, extract links and text (and, with ``markdown``, the Markdown of
    the same content, at most ``markdown_chars`` long: :mod:`parser.markdown`). Links
    come back canonical and followable."""
    decoded = decode_html(body, content_type)
    media = (content_type or "text/html").split(";", 1)[0].strip().lower()
    if media in HTML_TYPES or not media.startswith("text/plain"):
        doc = parse_document(decoded.text)
        parsed = extract(doc, url, x_robots_tag=x_robots_tag, product_token=product_token)
        # after extract: it takes the document's tree, and releases it once the content
        # root is walked for the Markdown and before its text is converted
        main, walked = main_content(doc, Walker(parsed.base_url, max_chars=markdown_chars)
                                    if markdown else _nothing)
        links: list[str] = []
        seen: set[str] = set()
        for link in followable_links(parsed):
            try:
                canon = urls.canonicalize(link, tracking=tracking)
            except urls.UrlError:
                continue
            if canon not in seen:
                seen.add(canon)
                links.append(canon)
        return Extracted(title=parsed.title, text=main.text, links=links,
                         noindex=parsed.noindex, nofollow=parsed.nofollow,
                         signals=text_signals(main),
                         markdown=(markdown_of(main, walked, max_chars=markdown_chars)
                                   if markdown else None))
    plain = MainText(decoded.text, len(" ".join(decoded.text.split())))
    return Extracted(title=None, text=decoded.text, links=[], noindex=False, nofollow=False,
                     signals=text_signals(plain),
                     markdown=(plain_markdown(decoded.text, max_chars=markdown_chars)
                               if markdown else None))


def _nothing(root: object) -> None:
    """What is kept of a content root when no Markdown is made of it."""
    return None


def fingerprints(text: str) -> tuple[int | None, bytes | None]:
    """The SimHash and MinHash sketch of a page's text, from one pass over its words;
    (None, None) for a blank text, no sketch for a text without words."""
    if not text.strip():
        return None, None
    words = encoded_tokens(text)
    return simhash_of(words), minhash.sketch_of(minhash.shingle_hashes_of(words)) or None



def warm_up() -> None:
    """Called by a page worker after it imported this module (``preload``), and by a
    service that parses before it reports ready: the language model and the archive's
    index library (a page's text records) are loaded before the first page, not in it."""
    _warm_signals()
    _warm_archive()



def sitemap_body_job(ctx: WorkContext, result: FetchResult,
                     record: RecordPointer) -> bytes | None:
    """Page work: the stored sitemap file's body; None when the record is a revisit
    without one (the same bytes as this URL's last capture, from a server without
    validators: its URLs were offered when that one was read)."""
    stored = ctx.recall(record) or read_response(ctx.blobs, record)
    if stored.record_type == "revisit" and not stored.body:
        return None
    return stored.body


def sitemap_job(ctx: WorkContext, result: FetchResult, record: RecordPointer) -> SitemapRead:
    """Page work: read the stored sitemap file and the URLs it lists."""
    body = sitemap_body_job(ctx, result, record)
    if body is None:
        return unchanged_sitemap()
    task = result.task
    return read_job(ctx, body, task.url, now=result.fetched_at or time.time(),
                    vouched=vouched_hosts(task.source))


def parse_job(ctx: WorkContext, result: FetchResult, record: RecordPointer, *,
              text_written: Texts | None = None, render: bool = False,
              render_all: bool = False,
              operator: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
              pdf: pdfs.PdfText | None = None
              ) -> tuple[Extracted, Texts | None, int | None, bytes | None, float,
                         ToRender | None]:
    """Page work: read the stored response, analyse it, write its text record and
    fingerprint the text. Returns the analysis, the text record, the SimHash and the
    MinHash sketch (both None for a text without words), the seconds spent reading
    and analysing, and None. With
    ``text_written`` (the page's conversion records from an earlier delivery) no text
    or Markdown record is written again. The Markdown record (CRAWLER_PARSER_MARKDOWN)
    refers to the response record like the text record, and carries its payload
    digest.

    With ``render``, a page the render rules choose (:mod:`common.rendering`) is not
    finished here: the last item is then what a browser needs to load it, and there is
    no text record and no SimHash yet. ``render_all``: every HTML page is chosen (the
    render service, whose pages a parser chose already). ``operator``: the hosts and
    patterns of the control API's render rules.

    A PDF is read here (in a worker process, with its memory capped), unless ``pdf``
    gives what was read of it elsewhere. The extraction hook, where one is set, is
    called with the page before its text record is written."""
    task = result.task
    started = time.perf_counter()
    stored = ctx.recall(record) or read_response(ctx.blobs, record)
    content_type = _header(stored.headers, "content-type") or result.content_type
    x_robots = _header(stored.headers, "x-robots-tag") or result.x_robots_tag
    if pdf is not None or pdfs.is_pdf(content_type):
        found = pdf_analysis(pdf or pdfs.read_job(ctx, stored.body),
                             markdown=ctx.settings.parser.markdown,
                             markdown_chars=ctx.settings.fetcher.max_body_bytes)
    else:
        found = analyse(stored.body, content_type, task.url, x_robots_tag=x_robots,
                        product_token=ctx.settings.crawl.user_agent_product,
                        tracking=ctx.tracking, markdown=ctx.settings.parser.markdown,
                        markdown_chars=ctx.settings.fetcher.max_body_bytes)
    elapsed = time.perf_counter() - started
    if render and _is_html(content_type):
        signal = ShellSignal(text_chars=len(found.text), links=len(found.links),
                             scripts=count_scripts(stored.body))
        why = render_decision(task.url, signal, _render_rules(ctx.settings, *operator))
        if why is RenderWhy.NO and render_all:
            why = RenderWhy.HANDED
        if why is not RenderWhy.NO:
            return found, None, None, None, elapsed, _to_render(why, task.url, stored)
    found = with_hook(ctx, found, stored, task.url, content_type)
    if text_written is None:
        text_written = write_texts(ctx, task.url, found, result.fetched_at,
                                   stored.record_id, stored.payload_digest)
    simhash, sketch = fingerprints(found.text)
    return found, text_written, simhash, sketch, elapsed, None


def write_texts(ctx: WorkContext, url: str, found: Extracted, fetched_at: float,
                refers_to: str, digest: str | None) -> Texts:
    """Write the page's text record and, when there is one, its Markdown record
    (``text/markdown``), both referring to the record ``refers_to`` (whose payload
    digest ``digest`` the Markdown record carries) and with the text's signals."""
    fields = text_fields(found.signals)
    text = ctx.archive.write_text(url=url, text=found.text, fetched_at=fetched_at,
                                  refers_to_record_id=refers_to, signals=fields)
    markdown = None
    if found.markdown is not None:
        markdown = ctx.archive.write_text(
            url=url, text=found.markdown, fetched_at=fetched_at,
            refers_to_record_id=refers_to, content_type=MARKDOWN_TYPE, signals=fields,
            refers_to_digest=digest)
    return Texts(text=text, markdown=markdown)


def rendered_job(ctx: WorkContext, result: FetchResult, record_id: str, html: str,
                 fields: dict[str, str], *, text_written: Texts | None = None
                 ) -> tuple[Extracted, RecordPointer, Texts, int | None, bytes | None,
                            float]:
    """Page work: archive the DOM a browser built (a conversion record that refers to
    the response ``record_id``), analyse it like a fetched page, write its text record
    (referring to the rendered record) and fingerprint the text. Returns the analysis,
    the rendered record, the text record, the SimHash, the MinHash sketch and the
    seconds spent."""
    task = result.task
    started = time.perf_counter()
    dom = ctx.archive.write_rendered(url=task.url, html=html, rendered_at=time.time(),
                                     refers_to_record_id=record_id, fields=fields)
    found = analyse(html.encode("utf-8", "replace"), "text/html; charset=utf-8", task.url,
                    x_robots_tag=result.x_robots_tag,
                    product_token=ctx.settings.crawl.user_agent_product,
                    tracking=ctx.tracking, markdown=ctx.settings.parser.markdown,
                    markdown_chars=ctx.settings.fetcher.max_body_bytes)
    elapsed = time.perf_counter() - started
    response = msgspec.structs.replace(_STUB, url=task.url, status=result.status)
    found = with_hook(ctx, found, response, task.url, "text/html; charset=utf-8", html=html)
    if text_written is None:  # made from the DOM: they refer to the rendered record
        text_written = write_texts(ctx, task.url, found, result.fetched_at,
                                   dom.record_id, None)
    simhash, sketch = fingerprints(found.text)
    return found, dom.pointer, text_written, simhash, sketch, elapsed


def pdf_body_job(ctx: WorkContext, record: RecordPointer) -> bytes:
    """Page work: the stored body of a PDF, to read elsewhere (kept for the parse that
    follows, which writes its text record)."""
    stored = ctx.recent.get(record) or read_response(ctx.blobs, record)
    return stored.body


def pdf_analysis(pdf: pdfs.PdfText, *, markdown: bool = False,
                 markdown_chars: int = DEFAULT_MAX_CHARS) -> Extracted:
    """Pure: a PDF's text as a page's main text (no links; the whole text is the main
    text, so the boilerplate ratio is 0), and with ``markdown`` that text as Markdown
    paragraphs."""
    plain = MainText(pdf.text, len(" ".join(pdf.text.split())))
    return Extracted(title=pdf.title, text=pdf.text, links=[], noindex=False,
                     nofollow=False, signals=text_signals(plain), document_pages=pdf.pages,
                     markdown=(plain_markdown(pdf.text, max_chars=markdown_chars)
                               if markdown else None))


def with_hook(ctx: WorkContext, found: Extracted, stored: StoredResponse, url: str,
              content_type: str | None, *, html: str | None = None) -> Extracted:
    """``found`` with the extraction hook's answer, where one is set."""
    spec = ctx.settings.parser.hook
    if not spec:
        return found
    hook = load_hook(spec)  # once per process (cached)
    if html is None and _is_html(content_type) and found.document_pages is None:
        html = decode_html(stored.body, content_type).text
    view = PageView(url=url, final_url=stored.url, status=stored.status,
                    headers=tuple(stored.headers), content_type=content_type, html=html,
                    text=found.text, title=found.title, language=found.signals.language,
                    document_pages=found.document_pages)
    answer = call_hook(hook, view, timeout=ctx.settings.parser.hook_timeout,
                       max_bytes=ctx.settings.parser.hook_max_bytes)
    return dataclasses.replace(found, hook=answer)


# what the hook of a rendered page is told of its response (the DOM is the page)
_STUB = StoredResponse(url="", record_type="conversion", status=200, reason="", headers=[],
                       body=b"", record_id="", warc_date="", payload_digest=None)


@functools.lru_cache(maxsize=8)
def _render_rules(settings: Settings, hosts: tuple[str, ...],
                  patterns: tuple[str, ...]) -> RenderRules:
    return RenderRules.from_settings(settings.render, hosts=hosts, patterns=patterns)


def _is_html(content_type: str | None) -> bool:
    media = (content_type or "text/html").split(";", 1)[0].strip().lower()
    return media in HTML_TYPES


def _to_render(why: RenderWhy, url: str, stored: StoredResponse) -> ToRender:
    return ToRender(why=why, url=url, status=stored.status, headers=stored.headers,
                    body=stored.body, record_id=stored.record_id)


def text_fields(signals: TextSignals) -> TextFields:
    """The conversion record's header fields for ``signals``."""
    return TextFields(language=signals.language,
                      language_confidence=(None if signals.language is None
                                           else signals.language_confidence),
                      chars=signals.chars, words=signals.words,
                      boilerplate_ratio=signals.boilerplate_ratio)


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    values = [v for k, v in headers if k.lower() == name]
    return ", ".join(values) if values else None
