"""``crawler parser``: one parser instance."""

from __future__ import annotations

from common.archive import ArchiveWriter
from common.messages import Topic
from common.metrics import Metrics
from common.runtime import make_blobs, make_bus, run_service, writer_id
from common.settings import Settings
from common.sitemap_work import sitemap_work
from parser.jobs import warm_up
from parser.service import ParserStage


async def run(settings: Settings) -> None:
    metrics = Metrics.create(roles=("parser",))
    bus = make_bus(settings, metrics=metrics)
    writer = writer_id("parser")
    blobs = make_blobs(settings, writer, metrics=metrics)
    archive = ArchiveWriter(blobs, software=settings.crawl.user_agent,
                            cdx_name=f"index-{writer}.cdxj")
    # sitemap files are read in a worker process, with a time and a memory limit
    sitemaps = sitemap_work(settings, writer)
    # with rendering on, pages the render rules choose go to the render service
    stage = ParserStage(settings, bus, blobs, archive, metrics=metrics,
                        defer_render=settings.render.enabled, sitemap_work=sitemaps)
    # the language model and the archive's index library, loaded before the service
    # reports ready rather than in its first page
    warm_up()

    async def stop() -> None:
        await bus.stop()
        await sitemaps.close()
        blobs.flush()
        blobs.close()

    await run_service("parser", [
        bus.consume("parser", (Topic.FETCHED,), stage.handle,
                    concurrency=settings.crawl.parser_concurrency),
    ], stop, settings=settings, metrics=metrics)
