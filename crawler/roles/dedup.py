"""``crawler dedup``: one dedup instance."""

from __future__ import annotations

from common.messages import Topic
from common.metrics import Metrics
from common.runtime import make_bus, make_store, run_service
from common.settings import Settings
from dedup.service import DedupStage


async def run(settings: Settings) -> None:
    metrics = Metrics.create(roles=("dedup",))
    bus = make_bus(settings, metrics=metrics)
    store = make_store(settings, metrics=metrics)
    await store.open()
    stage = DedupStage(settings, bus, store, metrics=metrics,
                       link_linger=settings.dedup.link_linger)

    async def stop() -> None:
        await bus.stop()
        await store.close()

    await run_service("dedup", [bus.consume("dedup", (Topic.PARSED,), stage.handle,
                                             concurrency=settings.crawl.dedup_concurrency)], stop,
                      settings=settings, metrics=metrics)
