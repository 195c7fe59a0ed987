"""``crawler render``: one render instance (cluster mode; docs/rendering.md)."""

from __future__ import annotations

from common.archive import ArchiveWriter
from common.messages import Topic
from common.metrics import Metrics
from common.ports import BlobStore, Bus, StateStore
from common.runtime import make_blobs, make_bus, make_store, run_service, writer_id
from common.settings import Settings
from dedup.service import DedupStage
from fetcher.gate import HostGate
from fetcher.http import HttpFetcher
from fetcher.robots_cache import RobotsCache
from parser.service import ParserStage
from render.browser import ChromiumRenderer, render_problem
from render.service import RenderStage


def render_stage(settings: Settings, bus: Bus, store: StateStore, blobs: BlobStore,
                 archive: ArchiveWriter, renderer: ChromiumRenderer, *,
                 metrics: Metrics | None = None, gate: HostGate | None = None
                 ) -> RenderStage:
    """The render stage with the parser and dedup stages it hands pages to. Every page
    handed to it is rendered: the parser that handed it chose it (this service's own
    rules might differ)."""
    parser = ParserStage(settings, bus, blobs, archive, metrics=metrics, renderer=renderer,
                         render_all=True)
    dedup = DedupStage(settings, bus, store, metrics=metrics,
                       link_linger=settings.dedup.link_linger)
    return RenderStage(bus, parser.parse, dedup.judge, gate=gate)


async def run(settings: Settings) -> None:
    problem = render_problem(settings)
    if problem:
        raise RuntimeError(problem)
    metrics = Metrics.create(roles=("parser", "dedup"))
    writer = writer_id("render")
    bus = make_bus(settings, metrics=metrics)
    store = make_store(settings, metrics=metrics)
    blobs = make_blobs(settings, writer, metrics=metrics)
    archive = ArchiveWriter(blobs, software=settings.crawl.user_agent,
                            cdx_name=f"index-{writer}.cdxj")
    http = HttpFetcher(settings)
    await store.open()
    await http.start()
    # the browser's requests: the SSRF guard, robots.txt from the shared store, and a
    # gate of this instance's own (it keeps each host's delay among the requests of the
    # pages rendered here, and each page's first request waits the delay after the
    # page's own fetch; the frontier holds the host until the page's verdict, so no
    # fetcher requests it meanwhile: docs/rendering.md)
    gate = HostGate()
    renderer = ChromiumRenderer(settings, http=http, robots=RobotsCache(store, http, settings),
                                gate=gate, metrics=metrics.parser)
    stage = render_stage(settings, bus, store, blobs, archive, renderer, metrics=metrics,
                         gate=gate)

    async def stop() -> None:
        await bus.stop()
        await renderer.close()
        await http.close()
        blobs.flush()
        blobs.close()
        await store.close()

    await run_service("render", [
        bus.consume("render", (Topic.RENDER,), stage.handle,
                    concurrency=settings.render.concurrency),
    ], stop, settings=settings, metrics=metrics)
