"""``crawler fetcher``: one fetcher instance (stateless apart from its caches)."""

from __future__ import annotations

from common.archive import ArchiveWriter
from common.messages import Topic
from common.metrics import Metrics
from common.pagework import KEEP_RECENT, ThreadPageWork, WorkContext
from common.runtime import make_blobs, make_bus, make_store, run_service, writer_id
from common.settings import Settings
from common.sitemap_work import sitemap_work
from fetcher.archiving import warm_up as warm_up_archive
from fetcher.http import HttpFetcher
from fetcher.robots_cache import RobotsCache
from fetcher.service import FetcherStage


async def run(settings: Settings) -> None:
    inline = settings.fetcher.parse_inline
    # parsing and judging here: their metrics are served here too
    metrics = Metrics.create(roles=("fetcher", "parser", "dedup") if inline
                             else ("fetcher",))
    writer = writer_id("fetcher")
    # a static group member: after a broker outage it gets its own partitions back, so
    # the tasks it had not committed come back to it and are answered from its memory
    # of finished tasks, not fetched again by another fetcher
    bus = make_bus(settings, metrics=metrics, instance_id=writer)
    store = make_store(settings, metrics=metrics)
    blobs = make_blobs(settings, writer, metrics=metrics)
    archive = ArchiveWriter(blobs, software=settings.crawl.user_agent,
                            cdx_name=f"index-{writer}.cdxj")
    http = HttpFetcher(settings)
    await store.open()
    await http.start()
    robots = RobotsCache(store, http, settings)
    # WARC records written on worker threads, which keep the latest responses for the
    # parse that follows (parse_inline): no read back from the file
    work = ThreadPageWork(WorkContext(settings, blobs, archive,
                                      keep_recent=KEEP_RECENT if inline else 0))
    judge = None
    # sitemaps read here are read in a worker process, with a time and a memory limit
    sitemaps = sitemap_work(settings, writer) if inline else None
    if inline:
        # the composition of the fetcher, parser and dedup stages lives beside embedded
        # mode's, so the service packages never import each other
        from crawler.inline import page_judge

        judge = page_judge(settings, bus, store, blobs, archive, work, metrics,
                           sitemap_work=sitemaps)
    stage = FetcherStage(settings, bus, store, blobs, archive, http, robots, metrics=metrics,
                         work=work, judge=judge)
    # what the first pages need, loaded before the service reports ready rather than
    # while they wait: the archive's index library and, parsing here, the language model
    # (the parser's warm-up loads both)
    if inline:
        from parser.jobs import warm_up as warm_up_parser

        warm_up_parser()
    else:
        warm_up_archive()

    async def stop() -> None:
        await bus.stop()
        if sitemaps is not None:
            await sitemaps.close()
        await http.close()
        blobs.flush()
        blobs.close()
        await store.close()

    await run_service("fetcher", [
        bus.consume("fetcher", (Topic.FETCH,), stage.handle,
                    concurrency=settings.fetcher.concurrency, on_assign=stage.on_assign),
    ], stop, settings=settings, metrics=metrics)
