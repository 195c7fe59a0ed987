"""The fetcher stage: one FetchTask in, one FetchResult out.

For each task: robots.txt for the URL's origin (cached; fetched first when unknown, and
then the host rests its politeness gap before the page request), the page itself
(SSRF-guarded, capped, never following redirects), and the archive: a body whose
SHA-256 is new is written as a WARC response; a body already stored under another URL
(or an earlier capture of the same URL) is written as a revisit record that refers to
the first copy, and a 304 as a server-not-modified revisit. The result carries a
pointer to the record, never the body.

Other answers are archived as received, except a body refused unread (a media type not
allowed, a Content-Length over the cap): no record at all, since a response record
would look like a complete empty capture; the outcome is in the result. A body cut at
the cap, a time-out or a dropped connection is archived as far as it arrived, with
WARC-Truncated saying why; it is neither deduplicated nor parsed (only OK bodies are).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from common import urls
from common.adapters.handling import dependency_down, while_down
from common.archive import (
    ArchiveWriter,
    Written,
    content_hash,
    payload_digest,
    read_response,
)
from common.clock import Clock, wall_clock
from common.messages import (
    FetchOutcome,
    FetchResult,
    FetchTask,
    Reason,
    RecordPointer,
    StatusUpdate,
    TaskKind,
    Topic,
    UrlStatus,
)
from common.metrics import Metrics
from common.pagework import PageWork, ThreadPageWork, WorkContext
from common.politeness import key_address, key_mode, split_host_key
from common.ports import BlobStore, Bus, Delivery, StateStore
from common.settings import Settings
from common.sitemaps import SITEMAP_MEDIA_TYPES, robots_sitemaps
from fetcher.archiving import write_exchange_job
from fetcher.gate import HostGate
from fetcher.http import HttpFetcher, Response
from fetcher.robots_cache import RobotsCache, RobotsDecision

log = logging.getLogger(__name__)

# results remembered for tasks delivered again (a few hundred bytes each: pointers and
# headers, never bodies)
RESULT_MEMORY = 20_000

# outcomes decided before any request reached the host
NO_REQUEST = frozenset({FetchOutcome.ROBOTS_BLOCKED, FetchOutcome.ROBOTS_UNAVAILABLE,
                        FetchOutcome.SSRF_BLOCKED, FetchOutcome.DNS_ERROR,
                        FetchOutcome.UNSUPPORTED})

ROBOTS_FAILURES = {
    FetchOutcome.SSRF_BLOCKED: FetchOutcome.SSRF_BLOCKED,
    FetchOutcome.DNS_ERROR: FetchOutcome.DNS_ERROR,
}


PageJudge = Callable[[FetchResult], Awaitable[StatusUpdate | None]]
"""Parses a stored page, publishes what it leads to (outlinks, page record) and returns
its verdict: the fetcher's ``judge`` in cluster mode with ``parse_inline`` (composed in
:mod:`crawler.inline` from the parser and dedup stages); None when a later stage
(the render service) sends the verdict."""


@dataclass(slots=True)
class FetcherCounters:
    tasks: int = 0
    pages: int = 0
    robots_fetches: int = 0
    stored: int = 0
    revisits: int = 0
    errors: int = 0
    redelivered: int = 0  # tasks delivered again and answered from memory


class FetcherStage:
    def __init__(self, settings: Settings, bus: Bus, store: StateStore, blobs: BlobStore,
                 archive: ArchiveWriter, http: HttpFetcher, robots: RobotsCache, *,
                 metrics: Metrics | None = None, work: PageWork | None = None,
                 judge: PageJudge | None = None, clock: Clock | None = None) -> None:
        self.settings = settings
        # the crawl's clock (see common.clock), as the frontier's and the fetcher's
        self.clock = clock if clock is not None else wall_clock(settings)
        self.judge = judge
        self.bus = bus
        self.store = store
        self.blobs = blobs
        self.archive = archive
        self.http = http
        self.robots = robots
        # where WARC exchanges are written: worker threads here, or worker processes
        self.work: PageWork = work or ThreadPageWork(WorkContext(settings, blobs, archive))
        # the gate waits on the monotonic clock; a response's end comes on the crawl's clock
        self.gate = HostGate(wall=self.clock)
        self.metrics = metrics or Metrics.create(roles=(), process=False)
        self.counters = FetcherCounters()
        # the results of the most recent tasks, by task id, for tasks delivered again
        self._done: OrderedDict[str, FetchResult] = OrderedDict()
        # tasks being handled now, by task id, for a delivery of one that comes again
        # meanwhile
        self._running: dict[str, asyncio.Future[FetchResult]] = {}
        # bodies being written here now: SHA-256 -> the URL whose copy it is
        self._writing: dict[str, str] = {}

    def _remember(self, task_id: str, result: FetchResult) -> None:
        self._done[task_id] = result
        self._done.move_to_end(task_id)
        while len(self._done) > RESULT_MEMORY:
            self._done.popitem(last=False)

    async def on_assign(self, partitions: frozenset[int]) -> None:
        """Cluster mode: partitions taken over from another fetcher start with a rest."""
        self.gate.took_over(partitions)

    async def handle(self, delivery: Delivery) -> None:
        task = delivery.message
        if not isinstance(task, FetchTask):
            raise TypeError(f"fetcher cannot handle {type(task).__name__}")
        self.counters.tasks += 1
        done = self._done.get(task.task_id)
        running = self._running.get(task.task_id)
        if done is None and running is not None:
            # delivered again while its first delivery is still being handled (the
            # partition was lost in a broker outage and given back): that one's result
            # is this one's, with no second request
            done = await asyncio.shield(running)
        if done is not None:
            # delivered again (its offset was not committed before an outage or a
            # rebalance): the server already answered it, so only the result goes out
            self.counters.redelivered += 1
            answer = done
            await while_down(lambda: self.bus.publish(Topic.FETCHED, task.host, answer),
                             f"publishing the result of {task.url}")
            return
        mine = asyncio.get_running_loop().create_future()
        # a waiter may never come: an exception nobody awaited is not worth a warning
        mine.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._running[task.task_id] = mine
        try:
            result = await self._fetch_and_judge(task, delivery)
        except BaseException as exc:
            mine.set_exception(RuntimeError(f"the first delivery of this task failed: "
                                            f"{exc!r}"))
            raise
        else:
            mine.set_result(result)
        finally:
            if self._running.get(task.task_id) is mine:
                del self._running[task.task_id]
        # the page was fetched: an outage of the bus must not fetch it again
        await while_down(lambda: self.bus.publish(Topic.FETCHED, task.host, result),
                         f"publishing the result of {task.url}")

    async def _fetch_and_judge(self, task: FetchTask, delivery: Delivery) -> FetchResult:
        """The task's request (after its host's gap), its records, and in cluster mode
        with ``judge`` the page's parse and verdict; remembered for a redelivery."""
        # requests to the host count under its politeness key (its address or domain,
        # shared with other hosts), the rendering of its pages' requests included
        self.gate.follow(task.host, task.gate_key)
        async with self.gate.hold(task.host):
            await self.gate.wait(task.host, delivery.partition, task.delay)
            try:
                result = await self.fetch(task)
            except BaseException:
                # a request may have reached the host before the failure: the task is
                # tried again only after the host's full gap
                self.gate.done(task.host, self.clock(), task.delay)
                raise
            self.metrics.fetcher.record_fetch(result.status or None, result.outcome,
                                              nbytes=result.body_bytes, seconds=result.elapsed)
            if result.robots_fetched or result.outcome not in NO_REQUEST:
                self.gate.done(task.host, result.fetched_at or self.clock(),
                               max(task.delay, result.robots_crawl_delay or 0.0))
        if (self.judge is not None and result.outcome is FetchOutcome.OK
                and result.record is not None):
            # parsed and judged here; an outage of the bus or the store waits here
            # rather than fetch the page again
            fetched = result
            verdict = await while_down(lambda: self._judge(fetched),
                                       f"parsing and judging {task.url}")
            if verdict is not None:
                result = msgspec.structs.replace(result, verdict=verdict)
        self._remember(task.task_id, result)
        return result

    async def _judge(self, result: FetchResult) -> StatusUpdate | None:
        assert self.judge is not None
        try:
            return await self.judge(result)
        except Exception as exc:
            if dependency_down(exc) is not None:
                raise  # waited out by the caller
            # a failure of the page's own (a broker refusing its message for good, a
            # bug): a recorded outcome for this URL, never the fetch repeated
            log.warning("parsing and judging %s failed: %r", result.task.url, exc)
            return StatusUpdate(url=result.task.url, host=result.task.host,
                                status=UrlStatus.DONE, reason=Reason.PARSE_ERROR,
                                content_hash=result.content_hash)

    async def fetch(self, task: FetchTask) -> FetchResult:
        """The task's robots.txt (when not cached) and request. With ``ip`` politeness
        keying both connect only to the address the task's key names
        (:meth:`HttpFetcher.only_address`), so they reach the server the gate counted
        them for."""
        mode = key_mode(self.settings.politeness.key)
        if mode != "ip" or task.politeness_key is None:
            return await self._fetch(task)
        name, _ = split_host_key(task.host)
        with self.http.only_address(name, key_address(task.politeness_key, mode)):
            return await self._fetch(task)

    async def _fetch(self, task: FetchTask) -> FetchResult:
        try:
            decision = await self.robots.for_url(task.url, attempt=task.attempt)
        except ValueError as exc:
            return FetchResult(task=task, outcome=FetchOutcome.UNSUPPORTED, error=str(exc))
        robots_fetched = decision.fetched
        if robots_fetched:
            body = decision.response.body if decision.response is not None else b""
            self.metrics.fetcher.record_robots(decision.basis, nbytes=len(body))
            self.gate.done(task.host, decision.fetched_at,
                           self._gap_after_robots(task, decision))
            self.counters.robots_fetches += 1
            if decision.response is not None and self.settings.fetcher.store_robots_in_warc:
                for hop in decision.response.responses:
                    if hop.status:
                        await while_down(functools.partial(self._write_exchange, hop),
                                         f"archiving {hop.url}")
        if robots_fetched and decision.outcome in ROBOTS_FAILURES:
            return _robots_result(task, decision, ROBOTS_FAILURES[decision.outcome],
                                  error=decision.error)
        if not decision.available:
            if not robots_fetched:
                # a cached failure does not say why robots.txt failed; a host the SSRF
                # guard refuses is a final outcome, not one to retry
                refusal = await self.http.ssrf_refusal(task.url)
                if refusal is not None:
                    return _robots_result(task, decision, FetchOutcome.SSRF_BLOCKED,
                                          error=refusal)
            # tried again once the remembered failure runs out, when robots.txt is asked
            # again; not before, when it would be answered from memory
            return _robots_result(task, decision, FetchOutcome.ROBOTS_UNAVAILABLE,
                                  status=decision.status,
                                  error=decision.error
                                  or f"robots.txt status {decision.status}",
                                  retry_after=max(0.0, decision.expires_at - self.clock()))
        # a robots.txt read now names the host's sitemaps, for the frontier to queue
        sitemaps = self._sitemaps_named(task, decision) if robots_fetched else []
        if not decision.allowed(task.url):
            result = _robots_result(task, decision, FetchOutcome.ROBOTS_BLOCKED)
            return msgspec.structs.replace(result, sitemaps=sitemaps) if sitemaps else result
        if robots_fetched:
            await self.gate.wait(task.host, None, 0.0)
        if task.kind is TaskKind.SITEMAP:
            # a sitemap: XML, gzip or text, up to the protocol's size
            resp = await self.http.fetch(task.url, etag=task.etag,
                                         last_modified=task.last_modified,
                                         accept_types=SITEMAP_MEDIA_TYPES,
                                         cap=self.settings.sitemaps.max_bytes)
        else:
            resp = await self.http.fetch(task.url, etag=task.etag,
                                         last_modified=task.last_modified)
        self.counters.pages += 1
        # the response is kept here and its storing tried again while the store is
        # down: the server sees one request, whatever the outage
        written: list[Written] = []  # the body's records once written, for a retry
        result = await while_down(
            lambda: self._result(task, resp, robots_fetched, decision.crawl_delay,
                                 written),
            f"storing {task.url}")
        return msgspec.structs.replace(result, sitemaps=sitemaps) if sitemaps else result

    def _sitemaps_named(self, task: FetchTask, decision: RobotsDecision) -> list[str]:
        """The sitemaps a robots.txt just read names (or /sitemap.xml when it names none
        and probing is on); none when sitemaps are off or robots.txt is unavailable."""
        sm = self.settings.sitemaps
        if not sm.enabled or not decision.available:
            return []
        try:
            robots = urls.robots_url(task.url)
        except urls.UrlError:
            return []
        return robots_sitemaps(decision.sitemaps(), robots, probe=sm.probe)

    def _gap_after_robots(self, task: FetchTask, decision: RobotsDecision) -> float:
        gap = task.delay
        if decision.crawl_delay is not None:
            gap = max(gap, decision.crawl_delay)
        return gap

    async def _result(self, task: FetchTask, resp: Response, robots_fetched: bool,
                      crawl_delay: float | None, written: list[Written] | None = None
                      ) -> FetchResult:
        """The result of a response, its records written. ``written``: the body's
        records from an earlier try of this call, which a later try does not write
        again (an outage of the store between writing them and recording the copy)."""
        record = None
        payload = None
        digest = None
        duplicate_of = None
        outcome = resp.outcome
        if outcome is FetchOutcome.OK:
            digest = content_hash(resp.body)
            stored, duplicate_of, payload = await self._store_body(
                task, resp, digest, [] if written is None else written)
            record = stored.pointer
        elif outcome is FetchOutcome.NOT_MODIFIED:
            record = (await self._store_not_modified(task, resp)).pointer
        elif resp.status and not resp.body_refused:
            # errors, redirects, throttling, cut bodies: archived as received
            record = (await self._write_exchange(resp)).pointer
        if outcome not in (FetchOutcome.OK, FetchOutcome.NOT_MODIFIED, FetchOutcome.REDIRECT):
            self.counters.errors += 1
        return FetchResult(
            task=task, outcome=outcome, status=resp.status, fetched_at=resp.fetched_at,
            elapsed=resp.elapsed, content_type=resp.content_type, charset=resp.charset,
            location=resp.location, retry_after=resp.retry_after, etag=resp.etag,
            last_modified=resp.last_modified, x_robots_tag=resp.x_robots_tag,
            record=record, payload_record=payload, content_hash=digest,
            body_bytes=len(resp.body), duplicate_of=duplicate_of, robots_crawl_delay=crawl_delay,
            robots_fetched=robots_fetched, error=resp.error)

    async def _store_body(self, task: FetchTask, resp: Response, digest: str,
                          written: list[Written]
                          ) -> tuple[Written, str | None, RecordPointer | None]:
        """Write a new body once; any later copy becomes a revisit record. Returns the
        record, the URL whose copy this is (another URL's) and, for a revisit of the
        URL's own copy on a first fetch, the record that holds the payload.

        Looks for the body's first copy (one read); when there is none, writes the
        body and records the copy (one write; in Cassandra the earliest copy stays
        the holder, without a lightweight transaction). A body this fetcher is
        writing right now for another URL is stored in full as well, naming that URL
        (the first copy is not readable yet).

        The URL's own copy on a first fetch (no page of it stored before) means
        an earlier delivery of this task stored the body and its fetcher stopped
        before the page was parsed: the payload is named so that the page is parsed
        from it, or its links would never be followed. On a refresh the own copy is
        the page last parsed, and the unchanged page is not parsed again.

        ``written`` holds the body's records once an earlier try wrote them (and then
        failed to record the copy): a retry records or names that copy, never writes
        the body a second time."""
        found = await self.store.content_holder(digest)
        holder_url, holder_record = found if found is not None else ("", None)
        if written:
            mine = written[0]
            if holder_record is None:
                await self.store.record_content(digest, task.url, mine.pointer)
            self.counters.stored += 1
            if holder_record is None or holder_record == mine.pointer:
                return mine, None, None
            # another URL's copy was recorded first: ours is stored in full, naming it
            return mine, holder_url if holder_url != task.url else None, None
        if holder_record is not None:
            revisit, duplicate_of = await self._store_revisit(task, resp, holder_url,
                                                              holder_record)
            # no page of this URL was stored before (previous_fetch_at is no sign: a
            # failed attempt sets it too, and a retry after one is still a first fetch)
            first_fetch = holder_url == task.url and task.previous_record is None
            return revisit, duplicate_of, holder_record if first_fetch else None
        writing = self._writing.get(digest)
        if writing is not None and writing != task.url:
            full = await self._write_exchange(resp)
            self.counters.stored += 1
            return full, writing, None
        self._writing[digest] = task.url
        try:
            mine = await self._write_exchange(resp)
            written.append(mine)
            await self.store.record_content(digest, task.url, mine.pointer)
        finally:
            if self._writing.get(digest) == task.url:
                del self._writing[digest]
        self.counters.stored += 1
        return mine, None, None

    async def _store_revisit(self, task: FetchTask, resp: Response, holder_url: str,
                             holder_record: RecordPointer) -> tuple[Written, str | None]:
        original = await asyncio.to_thread(read_response, self.blobs, holder_record)
        written = await asyncio.to_thread(
            self.archive.write_revisit, url=resp.url, fetched_at=resp.fetched_at,
            status=resp.status, reason=resp.reason, response_headers=list(resp.headers),
            refers_to_url=original.url, refers_to_date=original.warc_date,
            refers_to_record_id=original.record_id, profile="identical-payload-digest",
            payload_digest=original.payload_digest or payload_digest(resp.body),
            ip=resp.peer_ip, body_length=len(resp.body))
        self.counters.revisits += 1
        return written, (holder_url if holder_url != task.url else None)

    async def _store_not_modified(self, task: FetchTask, resp: Response) -> Written:
        if task.previous_record is not None:
            try:
                original = await asyncio.to_thread(read_response, self.blobs,
                                                   task.previous_record)
            except (OSError, ValueError) as exc:
                log.warning("cannot read the stored copy of %s: %s", task.url, exc)
            else:
                url, date, record_id = original.url, original.warc_date, original.record_id
                if original.record_type == "revisit" and original.refers_to_record_id:
                    # the stored copy is itself a revisit (an earlier 304): refer to the
                    # record that holds the payload
                    url = original.refers_to_url or url
                    date = original.refers_to_date or date
                    record_id = original.refers_to_record_id
                self.counters.revisits += 1
                return await asyncio.to_thread(
                    self.archive.write_revisit, url=resp.url, fetched_at=resp.fetched_at,
                    status=resp.status, reason=resp.reason,
                    response_headers=list(resp.headers), refers_to_url=url,
                    refers_to_date=date, refers_to_record_id=record_id,
                    profile="server-not-modified", payload_digest=original.payload_digest,
                    ip=resp.peer_ip)
        return await self._write_exchange(resp)

    async def _write_exchange(self, resp: Response) -> Written:
        return await self.work.run(
            write_exchange_job, url=resp.url, request_headers=list(resp.request_headers),
            status=resp.status, reason=resp.reason, response_headers=list(resp.headers),
            body=resp.body, fetched_at=resp.fetched_at, ip=resp.peer_ip,
            http_version=resp.http_version or "1.1",
            metadata={"fetchTimeMs": str(round(resp.elapsed * 1000))},
            truncated=resp.truncated)


def _robots_result(task: FetchTask, decision: RobotsDecision, outcome: FetchOutcome, *,
                   status: int = 0, error: str | None = None,
                   retry_after: float | None = None) -> FetchResult:
    """A result decided by robots.txt alone: no page request was made."""
    return FetchResult(task=task, outcome=outcome, status=status,
                       fetched_at=decision.fetched_at, error=error, retry_after=retry_after,
                       robots_fetched=decision.fetched,
                       robots_crawl_delay=decision.crawl_delay)
