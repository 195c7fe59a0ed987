"""Embedded mode: every stage in one process, an in-process bus, SQLite, a WARC folder.

The stages are the same classes that run as separate services in cluster mode; only
the adapters differ. The crawl ends when the frontier has nothing due or in flight and
every message on the bus has been handled. Stopping (Ctrl-C) leaves the state
consistent; running again with the same output folder resumes.

Output folder layout::

    out/state.sqlite           url_state, hosts, robots, fingerprints
    out/warc/*.warc.gz         request, response, metadata and revisit records
    out/warc/*-text-*.warc.gz  extracted text as conversion records
    out/warc/index.cdxj        CDXJ index, one line per response or revisit
    out/warc/pages.jsonl       one page record per stored page
    out/warc/deadletter.jsonl  messages that failed too often
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from common.adapters.local_blobs import LocalBlobStore
from common.adapters.memory_bus import MemoryBus
from common.adapters.metered import MeteredStateStore
from common.adapters.sqlite_store import SqliteStateStore
from common.archive import ArchiveWriter
from common.messages import DeadLetter, PageRecord, Topic, encode
from common.metrics import HealthServer, Metrics, serve_health
from common.pagework import (
    KEEP_RECENT,
    PageWork,
    ProcessPageWork,
    ThreadPageWork,
    WorkContext,
)
from common.ports import Delivery
from common.runtime import blob_root, make_store, state_path
from common.settings import Settings
from crawler.api import ControlApi
from dedup.service import DedupStage
from fetcher.http import HttpFetcher
from fetcher.robots_cache import RobotsCache
from fetcher.service import FetcherStage
from frontier.service import Frontier
from frontier.stats import CrawlStats, collect
from parser.service import ParserStage

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Progress:
    """What the live progress line shows."""

    started: float = field(default_factory=time.monotonic)
    last_line: float = 0.0

    def line(self, fetched: int, queued: int, errors: int, in_flight: int) -> str:
        elapsed = max(1e-6, time.monotonic() - self.started)
        return (f"pages {fetched:>7}  {fetched / elapsed:6.1f}/s  queued {queued:>7}  "
                f"in flight {in_flight:>4}  errors {errors:>5}  {elapsed:6.1f}s")


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
        self.blobs = LocalBlobStore(str(blob_root(settings)), writer_id=writer_id,
                                    prefix=settings.blob.prefix,
                                    max_bytes=settings.blob.warc_max_bytes)
        self.archive = ArchiveWriter(self.blobs, software=settings.crawl.user_agent)
        # WARC writing and parsing: in worker processes, or on threads of this one
        self.work: PageWork
        if settings.crawl.page_processes:
            self.work = ProcessPageWork(settings, processes=settings.crawl.page_processes,
                                        root=str(blob_root(settings)), writer=writer_id,
                                        cdx_name=self.archive.cdx_name)
        else:
            self.work = ThreadPageWork(WorkContext(settings, self.blobs, self.archive,
                                                   keep_recent=KEEP_RECENT))
        self.bus = MemoryBus(settings.bus, partitions=1, metrics=self.metrics.bus)
        self.http = HttpFetcher(settings)
        self.robots = RobotsCache(self.store, self.http, settings)
        self.frontier = Frontier(settings, self.bus, self.store, metrics=self.metrics)
        self.fetcher = FetcherStage(settings, self.bus, self.store, self.blobs, self.archive,
                                    self.http, self.robots, metrics=self.metrics,
                                    work=self.work)
        self.parser = ParserStage(settings, self.bus, self.blobs, self.archive,
                                  metrics=self.metrics, work=self.work)
        self.dedup = DedupStage(settings, self.bus, self.store, metrics=self.metrics)
        self.health: HealthServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # the control API, served when CRAWLER_API_PORT is set (or serve_api is true:
        # then port 0 means any free port); it refuses to start without a token
        self.api: ControlApi | None = None
        if serve_api or (serve_api is None and settings.api.port):
            self.api = ControlApi(settings, self.bus, self.store, frontier=self.frontier,
                                  stats=self.stats)

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
        await self.work.start()
        fs = self.settings.fetcher
        consumers: list[tuple[str, Sequence[Topic], Callable[[Delivery], object], int]] = [
            ("frontier", (Topic.DISCOVERED, Topic.FETCHED, Topic.STATUS),
             self.frontier.handle, 1),
            ("fetcher", (Topic.FETCH,), self.fetcher.handle, fs.concurrency),
            ("parser", (Topic.FETCHED,), self.parser.handle, 2),
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

    def done(self) -> bool:
        return self.bus.pending() == 0 and self.frontier.idle()

    async def wait(self, *, progress: Callable[[CrawlStats], None] | None = None,
                   poll: float = 0.1) -> None:
        """Until the crawl has nothing left (checked twice, ``poll`` apart)."""
        quiet = 0
        last_report = 0.0
        while quiet < 2:
            await asyncio.sleep(poll)
            for t in self._tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    raise RuntimeError(f"stage task {t.get_name()} failed") from t.exception()
            quiet = quiet + 1 if self.done() else 0
            if progress is not None and time.monotonic() - last_report >= 0.5:
                last_report = time.monotonic()
                progress(await self.stats())

    async def stats(self) -> CrawlStats:
        return await collect(self.store, seen_skipped=self.frontier.counters.seen_skipped,
                             invalid=self.frontier.counters.invalid)

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
        await self.http.close()
        await self.work.close()  # the workers close their own files
        self.blobs.flush()
        self.blobs.close()
        await self.store.close()


async def crawl(settings: Settings, seeds: Sequence[str], *, progress: bool = False,
                stream: TextIO | None = None) -> CrawlStats:
    """Crawl from ``seeds`` (or resume the crawl in the output folder) to the end."""
    crawler = EmbeddedCrawler(settings)
    out = sys.stderr if stream is None else stream
    show = progress
    meter = Progress()
    tty = out.isatty()

    def report(stats: CrawlStats, *, final: bool = False) -> None:
        # a terminal gets a live line; a log gets one line every 5 seconds
        if not tty and not final and time.monotonic() - meter.last_line < 5.0:
            return
        meter.last_line = time.monotonic()
        line = meter.line(stats.fetched, stats.queued, sum(stats.errors.values()),
                          stats.in_flight)
        print(("\r" + line) if tty else line, end="" if tty else "\n", file=out, flush=True)

    await crawler.start()
    try:
        if seeds:
            await crawler.frontier.seed(seeds)
        await crawler.wait(progress=report if show else None)
        stats = await crawler.stats()
        if show:
            report(stats, final=True)
            if tty:
                print(file=out)
        return stats
    finally:
        await crawler.close()


async def read_stats(settings: Settings) -> CrawlStats:
    """Figures of a crawl: the SQLite file of an embedded crawl, or the cluster's store."""
    if settings.store.backend == "sqlite" and not state_path(settings).exists():
        raise FileNotFoundError(f"no crawl state at {state_path(settings)}")
    store = make_store(settings)
    await store.open()
    try:
        return await collect(store)
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
