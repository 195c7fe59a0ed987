"""The dedup stage: exact and near-duplicate verdicts, outlinks of unique pages.

Exact duplicates are found where the body is stored (the fetcher looks each SHA-256
up in the content table before writing, so a second copy becomes a WARC revisit record);
the verdict arrives here as ``ParsedPage.duplicate_of``. Near duplicates are found
here, in two stages: the page's 64-bit SimHash block keys and its MinHash sketch's
keys are looked up in the block index (a few probes, not a scan), and each candidate
is judged by the estimated Jaccard similarity of the two sketches (docs/text-quality.md,
"Near duplicates").

For each page this stage publishes, in this order: the outlinks of a unique page
(topic discovered, one message per bus partition, so per frontier owner; in cluster
mode the links of the pages handled within ``link_linger`` seconds share that message,
see :class:`LinkBatcher`), one page
record (topic pages), and the verdict (topic status) that closes the URL in its
frontier. Redelivery repeats them harmlessly: the frontier ignores known links and
closed URLs.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from common import urls
from common.messages import (
    Discovered,
    Link,
    LinkKind,
    NearIndex,
    PageRecord,
    ParsedPage,
    Reason,
    StatusUpdate,
    TaskKind,
    Topic,
    UrlStatus,
)
from common.metrics import Metrics
from common.ports import Bus, Delivery, StateStore
from common.settings import Settings
from common.simhash import block_keys

log = logging.getLogger(__name__)


MAX_BATCH_LINKS = 2_000  # links per batched Discovered message (well under 1 MB)


@dataclass(slots=True)
class _Pending:
    host: str  # the message key: a host of the partition
    links: list[Link] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


class LinkBatcher:
    """Outlinks of many pages bound for one bus partition, in one Discovered message.

    :meth:`add` returns once the message holding its links is published (so a handler
    that awaits it acknowledges its page only after its links are on the bus), or
    raises what the publish raised (the page is then handled again). A partition's
    links go out ``linger`` seconds after the first of them, or at once past
    :data:`MAX_BATCH_LINKS`. With many pages handled at once, this turns several
    messages per page into a few per partition and second, and the frontier records
    each in one store write per host.
    """

    def __init__(self, bus: Bus, linger: float) -> None:
        self.bus = bus
        self.linger = linger
        self._pending: dict[int, _Pending] = {}
        self._timers: set[asyncio.Task[None]] = set()

    async def add(self, partition: int, host: str, links: list[Link]) -> None:
        pending = self._pending.get(partition)
        if pending is None:
            pending = self._pending[partition] = _Pending(host)
            timer = asyncio.create_task(self._later(partition, pending))
            self._timers.add(timer)
            timer.add_done_callback(self._timers.discard)
        pending.links += links
        done = asyncio.get_running_loop().create_future()
        pending.waiters.append(done)
        if len(pending.links) >= MAX_BATCH_LINKS:
            await self._flush(partition, pending)
        await done

    async def _later(self, partition: int, pending: _Pending) -> None:
        await asyncio.sleep(self.linger)
        await self._flush(partition, pending)

    async def _flush(self, partition: int, pending: _Pending) -> None:
        if self._pending.get(partition) is not pending:
            return  # already sent
        del self._pending[partition]
        try:
            await self.bus.publish(Topic.DISCOVERED, pending.host,
                                   Discovered(host=pending.host, links=pending.links))
        except BaseException as exc:
            for waiter in pending.waiters:
                if not waiter.done():
                    waiter.set_exception(exc if isinstance(exc, Exception)
                                         else RuntimeError(f"publishing links: {exc!r}"))
            if not isinstance(exc, Exception):
                raise
        else:
            for waiter in pending.waiters:
                if not waiter.done():
                    waiter.set_result(None)


class DedupStage:
    def __init__(self, settings: Settings, bus: Bus, store: StateStore, *,
                 metrics: Metrics | None = None, link_linger: float = 0.0,
                 defer_index: bool = False) -> None:
        self.settings = settings
        self.bus = bus
        self.store = store
        # a unique page's near-duplicate index entries go with its verdict, for the
        # frontier to write with the page's result (one store write less per page);
        # otherwise this stage writes them (add_simhash)
        self.defer_index = defer_index
        self.links = LinkBatcher(bus, link_linger) if link_linger > 0 else None
        self.exact = 0
        self.near = 0
        self.unique = 0
        self.metrics = metrics or Metrics.create(roles=(), process=False)

    async def handle(self, delivery: Delivery) -> None:
        page = delivery.message
        if not isinstance(page, ParsedPage):
            raise TypeError(f"dedup cannot handle {type(page).__name__}")
        verdict = await self.judge(page)
        await self.bus.publish(Topic.STATUS, page.host, verdict)

    async def judge(self, page: ParsedPage) -> StatusUpdate:
        """The page's verdict: look it up among near-duplicates, publish its outlinks
        (when unique and followable) and its page record; the caller delivers the
        verdict to the frontier (topic status, or with the fetch result)."""
        if page.kind is TaskKind.SITEMAP:
            return sitemap_verdict(page)
        near_of: str | None = None
        reason: Reason | None = None
        index: NearIndex | None = None
        if page.duplicate_of is not None:
            reason = Reason.DUPLICATE
            self.exact += 1
            self.metrics.dedup.exact_duplicates.inc()
        elif page.error is not None:
            reason = Reason.PARSE_TIMEOUT if page.timed_out else Reason.PARSE_ERROR
        elif page.simhash is not None and page.text_chars >= self.settings.dedup.min_text_chars:
            near_of, index = await self._near_duplicate_of(page, page.simhash)
            if near_of is not None:
                reason = Reason.NEAR_DUPLICATE
                self.near += 1
                self.metrics.dedup.near_duplicates.inc()
        if reason is None:
            self.unique += 1
            self.metrics.dedup.unique_pages.inc()
            if not page.nofollow:
                await self._publish_links(page)
            if page.render_error is not None:
                # its plain parse was used (links followed, page record written); the
                # failed rendering is its recorded outcome
                reason = Reason.RENDER_ERROR
        if not page.noindex and page.error is None:
            await self.bus.publish(Topic.PAGES, page.host, page_record(page, near_of))
        return StatusUpdate(
            url=page.url, host=page.host, status=UrlStatus.DONE, reason=reason,
            duplicate_of=page.duplicate_of or near_of, simhash=page.simhash,
            content_hash=page.content_hash,
            detail=page.render_error if reason is Reason.RENDER_ERROR else None,
            index=index)

    async def _near_duplicate_of(self, page: ParsedPage, simhash: int
                                 ) -> tuple[str | None, NearIndex | None]:
        """The URL of an indexed page that ``page`` nearly duplicates, or None; a page
        that duplicates none is indexed (its keys, SimHash and sketch): here, or with
        ``defer_index`` by its frontier owner, with the entries returned second.

        First stage, candidates: the pages sharing a SimHash block key (within
        ``simhash_threshold`` bits) or one of the sketch's keys (common.minhash
        .index_keys), kept when within ``CANDIDATE_BITS`` SimHash bits. Second stage,
        the verdict: the estimated Jaccard similarity of the sketches
        (common.minhash.closest).
        """
        # numpy's arrays, imported with the first page rather than at start-up
        from common.minhash import closest, index_keys, plausible

        settings = self.settings.dedup
        k = settings.simhash_threshold
        sketch = page.sketch or b""
        keys = block_keys(simhash, k) + index_keys(sketch)
        candidates = plausible(simhash, [c for c in await self.store.simhash_candidates(keys)
                                         if c[0] != page.url], k)
        sketches = (await self.store.simhash_sketches([url for url, _ in candidates])
                    if candidates and sketch else {})
        match = closest(simhash, sketch,
                        [(url, other, sketches.get(url)) for url, other in candidates],
                        k=k, threshold=settings.jaccard_threshold)
        if match is None:
            if self.defer_index:
                return None, NearIndex(keys=keys, sketch=sketch or None)
            await self.store.add_simhash(keys, page.url, simhash, sketch or None)
            return None, None
        return match[0], None

    async def _publish_links(self, page: ParsedPage) -> None:
        """One Discovered message per bus partition that the page links into.

        Every host of a partition has the same frontier owner, so one message carries
        all the links that owner takes, and it records them in one store write (in
        embedded mode, with one partition: one message per page). The message is keyed
        by the first host of its group, which puts it in that partition.
        """
        groups: dict[int, tuple[str, list[Link]]] = {}
        partition_of: dict[str, int] = {}
        depth = page.depth + 1
        priority = min(self.settings.crawl.priority_levels - 1, max(page.priority, 1))
        for url in page.links:
            try:
                host = urls.host_key(url)
            except urls.UrlError:
                continue
            partition = partition_of.get(host)
            if partition is None:
                partition = partition_of[host] = self.bus.partition_of(Topic.DISCOVERED, host)
            link = Link(url=url, depth=depth, priority=priority, kind=LinkKind.LINK,
                        source=page.url)
            group = groups.get(partition)
            if group is None:
                groups[partition] = (host, [link])
            else:
                group[1].append(link)
        if self.links is not None:
            await asyncio.gather(*(self.links.add(partition, host, links)
                                   for partition, (host, links) in groups.items()))
            return
        for host, links in groups.values():
            await self.bus.publish(Topic.DISCOVERED, host, Discovered(host=host, links=links))


def sitemap_verdict(page: ParsedPage) -> StatusUpdate:
    """A sitemap file's verdict: its URLs were offered when it was read; it is no page
    (no near-duplicate check, no page record)."""
    reason: Reason | None = page.reason or Reason.SITEMAP
    if page.duplicate_of is not None:
        reason = Reason.DUPLICATE
    elif page.error is not None:
        reason = Reason.PARSE_TIMEOUT if page.timed_out else Reason.PARSE_ERROR
    return StatusUpdate(url=page.url, host=page.host, status=UrlStatus.DONE, reason=reason,
                        duplicate_of=page.duplicate_of, content_hash=page.content_hash,
                        detail=page.detail or page.error)


def page_record(page: ParsedPage, near_of: str | None) -> PageRecord:
    fetched = datetime.fromtimestamp(page.fetched_at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    text = page.text_record is not None  # text signals only for a page with text
    return PageRecord(
        url=page.url, fetched_at=fetched, status=page.status, content_hash=page.content_hash,
        simhash=None if page.simhash is None else f"{page.simhash:016x}",
        storage_key=page.record, text_key=page.text_record, duplicate_of=page.duplicate_of,
        near_duplicate_of=near_of,
        language=page.language if text else None,
        language_confidence=page.language_confidence if text else None,
        text_chars=page.text_chars if text else None,
        text_words=page.text_words if text else None,
        boilerplate_ratio=page.boilerplate_ratio if text else None,
        markdown_key=page.markdown_record if text else None,
        document_pages=page.document_pages if text else None, extra=page.extra)
