"""Embedded mode: every stage in one process, an in-process bus, SQLite, a WARC folder.

The stages are the same classes that run as separate services in cluster mode; only
the adapters differ. The crawl ends when the frontier has nothing due or in flight and
every message on the bus has been handled. Stopping (Ctrl-C) leaves the state
consistent; running again with the same output folder resumes.

Output folder layout::

    out/state.sqlite           url_state, hosts, robots, fingerprints
    out/warc/*.warc.gz         request, response, metadata and revisit records (and
                               rendered pages as conversion records)
    out/warc/*-text-*.warc.gz  extracted text as conversion records
    out/warc/index.cdxj        CDXJ index, one line per response or revisit
    out/warc/pages.jsonl       one page record per stored page
    out/warc/deadletter.jsonl  messages that failed too often
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import msgspec

from common.adapters.memory_bus import MemoryBus
from common.adapters.metered import MeteredStateStore
from common.adapters.sqlite_store import SqliteStateStore
from common.archive import ArchiveWriter
from common.clock import wall_clock
from common.messages import DeadLetter, FetchOutcome, FetchResult, PageRecord, Topic, encode
from common.metrics import HealthServer, Metrics, serve_health
from common.pagework import (
    KEEP_RECENT,
    PageWork,
    ProcessPageWork,
    ThreadPageWork,
    WorkContext,
)
from common.ports import Delivery
from common.runtime import blob_root, make_blobs, make_store, state_path
from common.settings import Settings
from dedup.service import DedupStage
from fetcher.archiving import warm_up as warm_up_archive
from fetcher.dns import Answer, CheckedResolver, DnsError, Resolver
from fetcher.http import HttpFetcher
from fetcher.robots_cache import RobotsCache
from fetcher.service import FetcherStage
from fetcher.ssrf import Guard, SsrfBlockedError, refusal_advice
from frontier.seeds import seed_batch
from frontier.service import Frontier
from frontier.stats import CrawlStats, collect
from parser.service import ParserStage

if TYPE_CHECKING:
    from crawler.api import ControlApi
    from render.browser import ChromiumRenderer

log = logging.getLogger(__name__)


TTY_PROGRESS_INTERVAL = 1.0
"""Seconds between updates of the live progress line on a terminal."""

LOG_PROGRESS_INTERVAL = 5.0
"""Seconds between progress lines when the output is not a terminal (a log, a pipe)."""


class Progress:
    """The progress of a crawl run, written to ``stream``.

    On a terminal it is one live line, rewritten in place (``\\r``) every
    :data:`TTY_PROGRESS_INTERVAL` seconds; otherwise a plain line every
    :data:`LOG_PROGRESS_INTERVAL` seconds. Lines fall due at whole multiples of the
    interval from the start of the run, so they keep a steady beat however long
    collecting the figures takes, and :meth:`report` with ``final`` writes the last
    one (and ends the live line). ``pages`` counts every page fetch of the crawl,
    earlier runs included; the rate and the time are this run's.
    """

    def __init__(self, stream: TextIO, *, tty: bool | None = None,
                 interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.interval = interval or (TTY_PROGRESS_INTERVAL if self.tty
                                     else LOG_PROGRESS_INTERVAL)
        self.clock = clock
        self.started = clock()
        self.baseline = 0  # pages fetched before this run
        self._next = self.started + self.interval
        self._live = False  # a live line is on the terminal, without its newline

    def start(self, fetched_before: int) -> None:
        """The run begins now, with ``fetched_before`` pages from earlier runs."""
        self.started = self.clock()
        self.baseline = fetched_before
        self._next = self.started + self.interval

    def due(self) -> bool:
        return self.clock() >= self._next

    def line(self, stats: CrawlStats) -> str:
        elapsed = max(1e-6, self.clock() - self.started)
        rate = max(0, stats.fetched - self.baseline) / elapsed
        errors = sum(stats.errors.values())
        refreshed = f"  refreshed {stats.refreshed:>6}" if stats.refreshed else ""
        return (f"pages {stats.fetched:>7}{refreshed}  {rate:6.1f}/s  queued {stats.queued:>7}  "
                f"in flight {stats.in_flight:>4}  errors {errors:>5}  {elapsed:6.1f}s")

    def report(self, stats: CrawlStats, *, final: bool = False) -> None:
        now = self.clock()
        self._next = self.started + self.interval * (
            math.floor((now - self.started) / self.interval) + 1)
        text = self.line(stats)
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K" + ("\n" if final else ""))
            self._live = not final
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own (a warning), above the live line on a terminal."""
        if self._live:
            self.stream.write("\r\x1b[K")
            self._live = False
        self.stream.write(text + "\n")
        self.stream.flush()


class EmbeddedCrawler:
    """Wires the stages to the embedded adapters and runs them until the crawl ends."""

    def __init__(self, settings: Settings, *, writer_id: str = "embedded",
                 serve_api: bool | None = None) -> None:
        self.settings = settings
        out = Path(settings.crawl.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.metrics = Metrics.create()  # every role; served when CRAWLER_METRICS_PORT is set
        self.store = MeteredStateStore(SqliteStateStore(state_path(settings)),
                                       self.metrics.store)
        self.blobs = make_blobs(settings, writer_id, metrics=self.metrics)
        self.archive = ArchiveWriter(self.blobs, software=settings.crawl.user_agent)
        # Parsing in worker processes (a lane of its own, which grows while pages wait
        # for a parse), WARC writing on threads of this process: compression, digests
        # and file writes run outside the interpreter's lock, so a writer process (40
        # MiB) bought no pace; a parse reads its page back from the file it went to.
        # With page_processes 0, both on these threads (a parse then finds the page just
        # written among the responses they keep).
        self.write_work: PageWork = ThreadPageWork(WorkContext(
            settings, self.blobs, self.archive,
            keep_recent=0 if settings.crawl.page_processes else KEEP_RECENT))
        self.work: PageWork = self.write_work
        self.bus = MemoryBus(settings.bus, partitions=1, metrics=self.metrics.bus)
        if settings.crawl.page_processes:
            self.work = ProcessPageWork(settings, processes=settings.crawl.page_processes,
                                        root=str(blob_root(settings)), writer=writer_id,
                                        cdx_name=self.archive.cdx_name,
                                        lanes=("parse",), keep_recent=0,
                                        preload={"parse": ("parser.jobs",)},
                                        lane_processes={
                                            "parse": settings.crawl.parse_processes},
                                        # the pages fetched and not yet handed to it
                                        waiting=lambda _lane: self.bus.waiting("parser"))
        # one clock for every stage (common.clock): the wall clock unless a test moves it
        self.clock = wall_clock(settings)
        self.http = HttpFetcher(settings, wall_clock=self.clock)
        self.robots = RobotsCache(self.store, self.http, settings, clock=self.clock)
        # with CRAWLER_POLITENESS_KEY=ip the frontier keys hosts by the answers of the
        # fetcher's own resolver (one cache: the address keyed is the one connected to)
        self.frontier = Frontier(settings, self.bus, self.store, metrics=self.metrics,
                                 clock=self.clock, resolve=self.http.resolver.resolve)
        self.fetcher = FetcherStage(settings, self.bus, self.store, self.blobs, self.archive,
                                    self.http, self.robots, metrics=self.metrics,
                                    work=self.write_work, clock=self.clock)
        # pages the render rules choose are loaded in headless Chromium, whose every
        # request goes through this crawler's SSRF guard, robots.txt and host gate
        self.renderer: ChromiumRenderer | None = None
        if settings.render.enabled:
            from render.browser import ChromiumRenderer

            self.renderer = ChromiumRenderer(settings, http=self.http, robots=self.robots,
                                             gate=self.fetcher.gate,
                                             metrics=self.metrics.parser)
        self.parser = ParserStage(settings, self.bus, self.blobs, self.archive,
                                  metrics=self.metrics, work=self.work.lane("parse"),
                                  renderer=self.renderer,
                                  control=self.store if self.renderer is not None else None)
        self.dedup = DedupStage(settings, self.bus, self.store, metrics=self.metrics)
        self.health: HealthServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # seeds (depth 0: seed URLs and their redirect targets) the SSRF guard refused
        # in this run: URL -> advice naming the address class and the setting
        self.seed_refusals: dict[str, str] = {}
        self.on_seed_refused: Callable[[FetchResult, str], None] | None = None
        # the control API, served when CRAWLER_API_PORT is set (or serve_api is true:
        # then port 0 means any free port); it refuses to start without a token
        self.api: ControlApi | None = None
        if serve_api or (serve_api is None and settings.api.port):
            from crawler.api import ControlApi  # its web server only where it is served

            self.api = ControlApi(settings, self.bus, self.store, frontier=self.frontier,
                                  stats=self.stats)

    async def _frontier_handle(self, delivery: Delivery) -> None:
        msg = delivery.message
        if (isinstance(msg, FetchResult) and msg.outcome is FetchOutcome.SSRF_BLOCKED
                and msg.task.depth == 0 and msg.task.url not in self.seed_refusals):
            advice = await self._refusal_advice(msg)
            self.seed_refusals[msg.task.url] = advice
            if self.on_seed_refused is not None:
                self.on_seed_refused(msg, advice)
        await self.frontier.handle(delivery)

    async def _refusal_advice(self, result: FetchResult) -> str:
        """Why the guard refused a seed, from the guard's own verdicts (the DNS answer
        is cached, so no query goes out again); the fetch's error text otherwise."""
        import yarl

        try:
            target = yarl.URL(result.task.url, encoded=True)
            if target.host:
                await self.http.checked.resolve_checked(target.host, target.port)
        except SsrfBlockedError as exc:
            return refusal_advice(exc)
        except (DnsError, OSError, ValueError):
            pass
        return result.error or "refused by the SSRF guard"

    async def _sink_pages(self, delivery: Delivery) -> None:
        msg = delivery.message
        if isinstance(msg, PageRecord):
            self.blobs.append_line("pages.jsonl", encode(msg).decode())

    async def _sink_dead(self, delivery: Delivery) -> None:
        msg = delivery.message
        if isinstance(msg, DeadLetter):
            log.warning("dead letter on %s: %s", msg.topic, msg.error)
            self.blobs.append_line("deadletter.jsonl", encode(msg).decode())

    async def start(self) -> None:
        await self.store.open()
        await self.http.start()
        if self.renderer is not None:
            await self.renderer.start()  # refuses to start without a browser
        # the workers set themselves up (imports, the language model) while the crawl
        # fetches its first robots.txt: pages wait in their queues meanwhile
        await self.work.start(wait=False)
        # WARC records are written here: the SURT library their index lines need (0.3 s
        # of imports) loads on a thread now, not within the first page's record
        self._tasks.append(asyncio.create_task(asyncio.to_thread(warm_up_archive),
                                               name="archive-warm-up"))
        fs = self.settings.fetcher
        consumers: list[tuple[str, Sequence[Topic], Callable[[Delivery], object], int]] = [
            ("frontier", (Topic.DISCOVERED, Topic.FETCHED, Topic.STATUS),
             self._frontier_handle, 1),
            ("fetcher", (Topic.FETCH,), self.fetcher.handle, fs.concurrency),
            # two pages per parse worker at most, one parsing and one waiting for it
            ("parser", (Topic.FETCHED,), self.parser.handle, 2 * self._parsers()),
            ("dedup", (Topic.PARSED,), self.dedup.handle, 1),
            ("pages", (Topic.PAGES,), self._sink_pages, 1),
            ("deadletter", (Topic.DEAD_LETTER,), self._sink_dead, 1),
        ]
        for group, topics, _, _ in consumers:
            self.bus.declare_group(group, topics)
        for group, topics, handler, n in consumers:
            self._tasks.append(asyncio.create_task(
                self.bus.consume(group, topics, handler, concurrency=n),  # type: ignore[arg-type]
                name=f"consume-{group}"))
        await self.frontier.recover()
        self._tasks.append(asyncio.create_task(self.frontier.run(), name="frontier-run"))
        if self.api is not None:
            await self.api.start()
        self.health = await serve_health(self.settings.metrics, self.metrics.registry,
                                         ready=lambda: True)

    def _parsers(self) -> int:
        """The most pages parsed at once: the parse workers (one on threads)."""
        crawl = self.settings.crawl
        return max(crawl.page_processes, crawl.parse_processes) if crawl.page_processes else 1

    def done(self) -> bool:
        return self.bus.pending() == 0 and self.frontier.idle()

    async def wait(self, *, progress: Progress | None = None, poll: float = 0.1,
                   continuous: bool = False) -> None:
        """Until the crawl has nothing left (checked twice, ``poll`` apart); with
        ``progress``, a progress line whenever one falls due. With ``continuous``, until
        cancelled: a crawl with nothing due now waits for its next refresh."""
        quiet = 0
        while quiet < 2 or continuous:
            await asyncio.sleep(poll)
            for t in self._tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    raise RuntimeError(f"stage task {t.get_name()} failed") from t.exception()
            quiet = quiet + 1 if self.done() else 0
            if progress is not None and (quiet < 2 or continuous) and progress.due():
                progress.report(await self.stats())

    async def stats(self) -> CrawlStats:
        figures = await collect(self.store, seen_skipped=self.frontier.counters.seen_skipped,
                                invalid=self.frontier.counters.invalid,
                                recrawl_interval=self.settings.crawl.recrawl_interval,
                                now=self.clock())
        # the store keeps a row in flight QUEUED (frontier.dispatch); this process
        # knows which of them are in flight
        flying = self.frontier.in_flight()
        return msgspec.structs.replace(figures, in_flight=figures.in_flight + flying,
                                       queued=max(0, figures.queued - flying))

    async def close(self) -> None:
        if self.health is not None:
            await self.health.stop()
        if self.api is not None:
            await self.api.stop()
        await self.frontier.stop()
        await self.bus.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        if self.renderer is not None:
            await self.renderer.close()
        await self.http.close()
        await self.work.close()  # the workers close their own files
        self.blobs.flush()
        self.blobs.close()
        await self.store.close()


@dataclass(slots=True)
class CrawlRun:
    """What one run of :func:`run_crawl` did."""

    stats: CrawlStats
    seeds: list[str] = field(default_factory=list)  # canonical seed URLs offered
    refused: dict[str, str] = field(default_factory=dict)  # URL -> the guard's advice

    @property
    def no_seed_crawled(self) -> bool:
        """Seeds were given and the SSRF guard refused every one of them."""
        return bool(self.seeds) and all(u in self.refused for u in self.seeds)


async def run_crawl(settings: Settings, seeds: Sequence[str], *, progress: bool = False,
                    stream: TextIO | None = None, tty: bool | None = None,
                    progress_interval: float | None = None,
                    continuous: bool = False) -> CrawlRun:
    """Crawl from ``seeds`` (or resume the crawl in the output folder) to the end.

    With ``progress``, progress lines go to ``stream`` (default: stderr; see
    :class:`Progress`). A seed the SSRF guard refuses is reported on ``stream`` at
    once, with the setting that would allow it. With ``continuous`` the crawl does not
    end when nothing is due now: it waits for the next refresh, until cancelled."""
    out = sys.stderr if stream is None else stream
    meter = Progress(out, tty=tty, interval=progress_interval) if progress else None
    crawler = EmbeddedCrawler(settings)
    offered = seed_batch(seeds, 0, crawler.frontier.tracking).valid if seeds else []

    def refused(result: FetchResult, advice: str) -> None:
        what = "seed" if result.task.hops == 0 else "redirect target of a seed"
        text = f"crawler: {what} {result.task.url} refused: {advice}"
        if meter is not None:
            meter.message(text)
        else:
            print(text, file=out, flush=True)

    crawler.on_seed_refused = refused
    await crawler.start()
    try:
        if meter is not None:
            meter.start((await crawler.stats()).fetched)
        if seeds:
            await crawler.frontier.seed(seeds)
        await crawler.wait(progress=meter, continuous=continuous)
        stats = await crawler.stats()
        if meter is not None:
            meter.report(stats, final=True)
        return CrawlRun(stats=stats, seeds=offered, refused=dict(crawler.seed_refusals))
    finally:
        await crawler.close()


async def crawl(settings: Settings, seeds: Sequence[str], *, progress: bool = False,
                stream: TextIO | None = None) -> CrawlStats:
    """Crawl from ``seeds`` (or resume the crawl in the output folder) to the end."""
    return (await run_crawl(settings, seeds, progress=progress, stream=stream)).stats


class _NoDns:
    """A DNS backend that never sends a query (for checks made before a crawl)."""

    async def query(self, host: str, qtype: str) -> Answer:
        raise DnsError(host, "not looked up", not_found=False)

    async def close(self) -> None:
        return None


async def refused_before_start(settings: Settings, seed_urls: Sequence[str]
                               ) -> dict[str, str]:
    """Seeds the SSRF guard refuses whatever DNS says: IP-literal hosts and names
    ``fetcher.resolve`` answers. URL -> advice. Sends nothing; names that need DNS
    are checked when they are fetched."""
    import yarl

    resolver = Resolver(backend=_NoDns(), overrides=settings.fetcher.resolve)
    checked = CheckedResolver(resolver, Guard(settings.fetcher.allow_networks))
    refused: dict[str, str] = {}
    try:
        for url in seed_urls:
            try:
                target = yarl.URL(url, encoded=True)
                if target.host:
                    await checked.resolve_checked(target.host, target.port)
            except SsrfBlockedError as exc:
                refused[url] = refusal_advice(exc)
            except (DnsError, ValueError):
                continue
    finally:
        await resolver.close()
    return refused


async def read_stats(settings: Settings) -> CrawlStats:
    """Figures of a crawl: the SQLite file of an embedded crawl, or the cluster's store."""
    if settings.store.backend == "sqlite" and not state_path(settings).exists():
        raise FileNotFoundError(f"no crawl state at {state_path(settings)}")
    store = make_store(settings)
    await store.open()
    try:
        return await collect(store, recrawl_interval=settings.crawl.recrawl_interval,
                             now=wall_clock(settings)())
    finally:
        await store.close()


async def demo(settings: Settings, *, progress: bool = True, out: str | None = None
               ) -> CrawlStats:
    """Start the simulated web's seed scenario on loopback and crawl it."""
    import tempfile

    from simweb.scenarios import seed
    from simweb.server import SimWeb

    folder = out or tempfile.mkdtemp(prefix="crawler-demo-")
    async with SimWeb(seed(), dns=True) as web:
        settings = settings.replace(
            crawl={"out_dir": folder},
            traps={"max_pages_per_host": 80, "max_depth": 1000},
            fetcher={"dns_servers": tuple(web.dns_servers), "allow_networks": ("127.0.0.1/32",)},
        )
        print(f"simulated web on 127.0.0.1:{web.port} (DNS on port {web.dns_port}); "
              f"output in {folder}", file=sys.stderr)
        stats = await crawl(settings, web.seed_urls(), progress=progress)
    print(f"WARC files in {blob_root(settings)}", file=sys.stderr)
    return stats
