"""The parser stage: a stored page in, links, text and a SimHash out.

It consumes fetch results (topic fetched). For a page stored in full it reads the
response record back by pointer (queues carry pointers, not bodies), decodes the
charset, extracts links (honouring <base>, rel=nofollow, meta robots and X-Robots-Tag)
and the main text with its signals (language, length, boilerplate ratio:
:mod:`parser.signals`), writes the text as a WARC conversion record (the signals in
its header), and publishes a ParsedPage carrying them too. An exact duplicate
(stored as a revisit) is passed on without parsing, so its links are never followed.
Any failure on a hostile page ends as a ParsedPage with ``error`` set: a recorded
outcome for that URL (parse_error, or parse_timeout when the page job ran over its
time limit), never a crash of the stage.

A sitemap file (a task of kind ``sitemap``) is read as a sitemap instead
(:mod:`common.sitemaps`, in the page work like a parse, or in a worker process of its
own where the stage is given one, :mod:`common.sitemap_work`): the URLs it lists go to
the frontier here (topic discovered, at most :data:`MAX_LINKS_PER_MESSAGE` a message),
and its ParsedPage carries no links, only how reading it ended (``reason``) and what
it held (``detail``).

A PDF (``application/pdf``, downloaded when the allowed types list it) is read by
:mod:`parser.pdf`: its text is stored and judged like an HTML page's main text, with its
page count, and no links are taken from it. It is read in a worker process with a
memory cap: the parse worker itself (embedded mode), or the stage's sitemap worker
where it has one (cluster services, whose page work is threads). The user's extraction
hook (:mod:`parser.hook`), where one is set, is called with every parsed page.

The stage runs in the process that consumes the results; the page work it hands out
(:mod:`parser.jobs`: decoding, HTML, main text, Markdown, fingerprints, PDF text) is
named, not imported, here (:class:`common.pagework.JobRef`), so that a process whose
page work runs in worker processes never loads the parsing libraries.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from common import urls
from common.adapters.handling import while_down
from common.archive import ArchiveWriter
from common.messages import (
    Discovered,
    FetchOutcome,
    FetchResult,
    Link,
    LinkKind,
    ParsedPage,
    RecordPointer,
    TaskKind,
    Topic,
)
from common.metrics import Metrics
from common.pagework import JobRef, PageJobTimeoutError, PageWork, ThreadPageWork, WorkContext
from common.ports import BlobStore, Bus, Delivery, StateStore
from common.settings import Settings
from common.sitemap_work import read_job
from common.sitemaps import vouched_hosts
from parser import pdf as pdfs
from parser.results import Texts, ToRender, unchanged_sitemap

if TYPE_CHECKING:
    from parser.hook import HookAnswer
    from parser.jobs import (
        parse_job,
        pdf_body_job,
        rendered_job,
        sitemap_body_job,
        sitemap_job,
    )
else:  # named, not imported (see the module docstring)
    parse_job = JobRef("parser.jobs", "parse_job")
    pdf_body_job = JobRef("parser.jobs", "pdf_body_job")
    rendered_job = JobRef("parser.jobs", "rendered_job")
    sitemap_body_job = JobRef("parser.jobs", "sitemap_body_job")
    sitemap_job = JobRef("parser.jobs", "sitemap_job")

log = logging.getLogger(__name__)

# conversion records (text and Markdown) remembered per response record, so that a
# page delivered again gets no second ones (about 600 bytes each)
TEXT_MEMORY = 50_000
MAX_LINKS_PER_MESSAGE = 2_000  # URLs of a sitemap per Discovered message
MAX_MESSAGE_BYTES = 512 * 1024  # and about this many bytes of JSON (Kafka takes 1 MB)
LINK_OVERHEAD = 120  # bytes of a link's JSON besides its URL and source


class RenderedDom(Protocol):
    @property
    def html(self) -> str: ...

    def fields(self) -> dict[str, str]: ...


class PageRenderer(Protocol):
    """Loads a page in a browser (:class:`render.browser.ChromiumRenderer`)."""

    async def render_page(self, page: ToRender, *, delay: float) -> RenderedDom:
        """The DOM the page's scripts built; raises on any failure."""
        ...


class ParserStage:
    def __init__(self, settings: Settings, bus: Bus, blobs: BlobStore,
                 archive: ArchiveWriter, *, metrics: Metrics | None = None,
                 work: PageWork | None = None, renderer: PageRenderer | None = None,
                 defer_render: bool = False, render_all: bool = False,
                 control: StateStore | None = None,
                 sitemap_work: PageWork | None = None) -> None:
        self.settings = settings
        self.bus = bus
        # pages the render rules choose are loaded in a browser (docs/rendering.md): by
        # ``renderer`` here, or (``defer_render``, cluster mode) handed to the render
        # service on topic render, which parses, judges and sends their verdict
        self.renderer = renderer
        self.defer_render = defer_render and renderer is None
        # the render service: every page it is handed was chosen already
        self.render_all = render_all and renderer is not None
        # the operator's render rules (PUT /v1/render), read from the store's control
        # row at most every CRAWLER_CRAWL_CONTROL_INTERVAL seconds
        self.control = control
        self._operator: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        self._operator_read = -math.inf
        self.deferred = 0
        self.rendered = 0
        self.render_failed = 0
        self.blobs = blobs
        self.archive = archive
        # where pages are parsed: worker threads here, or worker processes
        self.work: PageWork = work or ThreadPageWork(WorkContext(settings, blobs, archive))
        # where sitemap files are read: in ``work`` with the pages, or (cluster mode,
        # whose page work is threads) a killable worker process of their own, which
        # ``work`` sends the stored body to
        self.sitemap_work = sitemap_work
        self.metrics = metrics or Metrics.create(roles=(), process=False)
        self.parsed = 0
        self.failed = 0
        # response record (file, offset) -> its conversion records (text, Markdown),
        # the most recent ones
        self._texts: OrderedDict[tuple[str, int], Texts] = OrderedDict()

    def _remember_text(self, key: tuple[str, int], written: Texts) -> None:
        self._texts[key] = written
        self._texts.move_to_end(key)
        while len(self._texts) > TEXT_MEMORY:
            self._texts.popitem(last=False)

    async def handle(self, delivery: Delivery) -> None:
        result = delivery.message
        if not isinstance(result, FetchResult):
            raise TypeError(f"parser cannot handle {type(result).__name__}")
        if result.outcome is not FetchOutcome.OK or result.record is None:
            return  # the frontier records every other outcome
        if result.verdict is not None:
            return  # parsed and judged by its fetcher (parse_inline)
        page = await self.parse(result, result.record)
        if page is None:
            return  # handed to the render service
        # parsed and its text archived: a bus outage waits here rather than parse again
        await while_down(lambda: self.bus.publish(Topic.PARSED, page.host, page),
                         f"publishing the parse of {page.url}")

    async def parse(self, result: FetchResult, record: RecordPointer) -> ParsedPage | None:
        """The page's parse; None when it was handed to the render service (then that
        service sends its verdict)."""
        task = result.task
        base = ParsedPage(url=task.url, host=task.host, depth=task.depth,
                          priority=task.priority, status=result.status,
                          fetched_at=result.fetched_at, content_hash=result.content_hash,
                          simhash=None, record=record)
        if result.duplicate_of is not None:
            return msgspec.structs.replace(base, duplicate_of=result.duplicate_of,
                                           kind=task.kind)
        if result.payload_record is not None:
            # a revisit of the URL's own copy that was never parsed: read that copy
            record = result.payload_record
        if task.kind is TaskKind.SITEMAP:
            return await self._sitemap(result, record, base)
        key = (record.file, record.offset)
        render_error: str | None = None
        rendered: RecordPointer | None = None
        try:
            # one hop to a worker for the whole page: each hop costs the event loop a
            # wake-up, and these steps always run together
            # a page delivered again (a retry, a redelivery after a rebalance) keeps the
            # conversion record written the first time: one per response record
            render = self.renderer is not None or self.defer_render
            pdf = None
            if self.sitemap_work is not None and pdfs.is_pdf(result.content_type):
                # threads cannot be stopped: the PDF is read in the killable worker
                body = await self.work.run(pdf_body_job, record)
                pdf = await self.sitemap_work.run(pdfs.read_job, body)
            found, text_written, simhash, sketch, elapsed, to_render = await self.work.run(
                parse_job, result, record, text_written=self._texts.get(key),
                render=render, render_all=self.render_all,
                operator=await self._operator_rules() if render else ((), ()), pdf=pdf)
            if to_render is not None and self.renderer is None:
                self.deferred += 1
                await while_down(lambda: self.bus.publish(Topic.RENDER, task.host, result),
                                 f"handing {task.url} to the render service")
                return None
            if to_render is not None:
                assert self.renderer is not None
                try:
                    dom = await self.renderer.render_page(to_render, delay=task.delay)
                except Exception as exc:
                    # a recorded outcome (render_error); the plain parse stands
                    self.render_failed += 1
                    render_error = f"{type(exc).__name__}: {exc}"
                    log.warning("rendering %s failed: %s", task.url, exc)
                    found, text_written, simhash, sketch, elapsed, _ = await self.work.run(
                        parse_job, result, record, text_written=self._texts.get(key))
                else:
                    self.rendered += 1
                    (found, rendered, text_written, simhash, sketch,
                     elapsed) = await self.work.run(
                        rendered_job, result, to_render.record_id, dom.html, dom.fields(),
                        text_written=self._texts.get(key))
            assert text_written is not None
            self._remember_text(key, text_written)
        except Exception as exc:  # a hostile page must end as a recorded outcome
            self.failed += 1
            self.metrics.parser.parse_failures.inc()
            log.warning("parse failed for %s: %s", task.url, exc)
            return msgspec.structs.replace(base, error=f"{type(exc).__name__}: {exc}",
                                           timed_out=isinstance(exc, PageJobTimeoutError))
        self.parsed += 1
        pm = self.metrics.parser
        pm.pages_parsed.inc()
        pm.parse_duration.observe(elapsed)
        pm.links_extracted.inc(len(found.links))
        pm.text_bytes.inc(len(found.text.encode()))
        extra = self._hook_extra(task.url, found.hook)
        return msgspec.structs.replace(
            base, simhash=simhash, sketch=sketch,
            text_chars=len(found.text), title=found.title,
            text_record=text_written.text.pointer,
            markdown_record=(None if text_written.markdown is None
                             else text_written.markdown.pointer),
            links=found.links, noindex=found.noindex,
            nofollow=found.nofollow, text_words=found.signals.words,
            language=found.signals.language,
            language_confidence=(None if found.signals.language is None
                                 else found.signals.language_confidence),
            boilerplate_ratio=found.signals.boilerplate_ratio,
            rendered=rendered, render_error=render_error,
            document_pages=found.document_pages, extra=extra)

    def _hook_extra(self, url: str, answer: HookAnswer | None) -> dict[str, Any] | None:
        """The hook's fields for the page record; a dropped answer is counted and
        logged (the page is stored all the same)."""
        if answer is None:
            return None
        if answer.problem is not None:
            self.metrics.parser.hook_problems.labels(answer.problem).inc()
            log.warning("extraction hook on %s: %s (%s); the page is stored without "
                        "its extra fields", url, answer.problem, answer.detail)
        return answer.extra

    async def _operator_rules(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The operator's render hosts and patterns (cached; the last ones known while
        the store does not answer)."""
        if self.control is None:
            return self._operator
        now = time.monotonic()
        if now - self._operator_read >= self.settings.crawl.control_interval:
            self._operator_read = now
            try:
                row = await self.control.get_control()
            except Exception as exc:  # an outage: keep the rules known
                log.warning("reading the operator's render rules failed: %r", exc)
            else:
                self._operator = (tuple(row.render_hosts), tuple(row.render_patterns))
        return self._operator

    async def _sitemap(self, result: FetchResult, record: RecordPointer,
                       base: ParsedPage) -> ParsedPage:
        """Read a sitemap file and offer the URLs it lists to the frontier."""
        task = result.task
        base = msgspec.structs.replace(base, kind=TaskKind.SITEMAP)
        try:
            if self.sitemap_work is None:
                read = await self.work.run(sitemap_job, result, record)
            else:
                body = await self.work.run(sitemap_body_job, result, record)
                read = unchanged_sitemap() if body is None else await self.sitemap_work.run(
                    read_job, body, task.url, now=result.fetched_at or time.time(),
                    vouched=vouched_hosts(task.source))
        except Exception as exc:  # a hostile file must end as a recorded outcome
            self.failed += 1
            self.metrics.parser.parse_failures.inc()
            self.metrics.parser.sitemaps_read.labels("parse_error").inc()
            log.warning("reading the sitemap %s failed: %s", task.url, exc)
            return msgspec.structs.replace(base, error=f"{type(exc).__name__}: {exc}",
                                           timed_out=isinstance(exc, PageJobTimeoutError))
        crawl = self.settings.crawl
        listed = min(crawl.priority_levels - 1, self.settings.sitemaps.priority)
        nested = min(crawl.priority_levels - 1, self.settings.sitemaps.file_priority)
        # the sitemaps an index lists keep the robots.txt that vouches for them
        source = task.source if vouched_hosts(task.source) else task.url
        links = [Link(url=e.url, depth=task.depth + 1, priority=nested,
                      kind=LinkKind.SITEMAP, source=source) for e in read.sitemaps]
        links += [Link(url=e.url, depth=task.depth, priority=listed, kind=LinkKind.LISTED,
                       source=task.url, lastmod=e.lastmod, changefreq=e.changefreq)
                  for e in read.pages]
        await self._publish(links)
        self.parsed += 1
        pm = self.metrics.parser
        pm.pages_parsed.inc()
        pm.links_extracted.inc(len(links))
        pm.sitemaps_read.labels(read.reason.value).inc()
        pm.sitemap_urls.labels("offered").inc(len(links))
        pm.sitemap_urls.labels("other_host").inc(read.off_host)
        pm.sitemap_urls.labels("invalid").inc(read.invalid)
        return msgspec.structs.replace(base, reason=read.reason, detail=read.summary())

    async def _publish(self, links: list[Link]) -> None:
        """Links to the frontier: one message per bus partition and up to
        :data:`MAX_LINKS_PER_MESSAGE` links or about :data:`MAX_MESSAGE_BYTES`, keyed by
        a host of the partition."""
        groups: dict[int, tuple[str, list[Link]]] = {}
        sizes: dict[int, int] = {}
        for link in links:
            try:
                host = urls.host_key(link.url)
            except urls.UrlError:
                continue
            partition = self.bus.partition_of(Topic.DISCOVERED, host)
            group = groups.setdefault(partition, (host, []))
            group[1].append(link)
            # a generous estimate of the link's JSON (URLs may be 2 KB each)
            sizes[partition] = (sizes.get(partition, 0) + len(link.url)
                                + len(link.source or "") + LINK_OVERHEAD)
            if (len(group[1]) >= MAX_LINKS_PER_MESSAGE
                    or sizes[partition] >= MAX_MESSAGE_BYTES):
                del groups[partition], sizes[partition]
                await self.bus.publish(Topic.DISCOVERED, group[0],
                                       Discovered(host=group[0], links=group[1]))
        for host, batch in groups.values():
            await self.bus.publish(Topic.DISCOVERED, host, Discovered(host=host, links=batch))
