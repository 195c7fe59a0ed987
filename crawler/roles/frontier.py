"""``crawler frontier``: one frontier instance in cluster mode (any number may run;
the bus gives each the hosts of its partitions)."""

from __future__ import annotations

from common.messages import Topic
from common.metrics import Metrics
from common.politeness import key_mode
from common.runtime import make_bus, make_store, on_dump, run_service
from common.settings import Settings
from frontier.service import Frontier
from frontier.state import Resolve


def resolver(settings: Settings) -> Resolve | None:
    """With ``CRAWLER_POLITENESS_KEY=ip``, the resolver a frontier process keys hosts by:
    the fetcher's, with the fetcher's DNS settings and cache rules (so the address
    keyed is the one a fetcher connects to). None otherwise: nothing is resolved."""
    if key_mode(settings.politeness.key) != "ip":
        return None
    from fetcher.dns import Resolver  # this process's wiring; the frontier needs none

    return Resolver.from_settings(settings.fetcher).resolve


async def run(settings: Settings) -> None:
    metrics = Metrics.create(roles=("frontier",))
    bus = make_bus(settings, metrics=metrics)
    store = make_store(settings, metrics=metrics, owner=True)
    await store.open()
    frontier = Frontier(settings, bus, store, embedded=False, metrics=metrics,
                        resolve=resolver(settings))
    on_dump(frontier.describe)

    async def stop() -> None:
        await frontier.stop()
        await bus.stop()
        await store.close()

    await run_service("frontier", [
        bus.consume("frontier",
                    (Topic.DISCOVERED, Topic.FETCHED, Topic.STATUS, Topic.CONTROL),
                    frontier.handle, concurrency=settings.crawl.frontier_concurrency,
                    on_assign=frontier.assign),
        frontier.run(),
        frontier.watch_control(settings.crawl.control_interval),
    ], stop, settings=settings, metrics=metrics)
