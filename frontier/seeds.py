"""Seed URLs: canonicalise them, group them by host and publish them as Discovered.

Only the bus and the settings are needed, so the frontier (``Frontier.seed``), the
``crawler seed`` command and the control API (which may run as its own service) all
offer seeds the same way: each host's URLs reach that host's frontier owner through
topic discovered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from common import urls
from common.messages import Discovered, Link, LinkKind, Topic
from common.ports import Bus
from common.settings import Settings


@dataclass(frozen=True, slots=True)
class SeedBatch:
    """Seeds grouped by host, and the inputs that were not crawlable URLs."""

    by_host: dict[str, Discovered] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(d.links) for d in self.by_host.values())


def seed_batch(seed_urls: Iterable[str], priority: int,
               tracking: urls.TrackingRules) -> SeedBatch:
    """Pure: canonicalise ``seed_urls`` into one Discovered message per host."""
    links: dict[str, list[Link]] = {}
    invalid: list[str] = []
    for raw in seed_urls:
        try:
            url = urls.canonicalize(raw, tracking=tracking)
            host = urls.host_key(url)
        except urls.UrlError:
            invalid.append(raw)
            continue
        links.setdefault(host, []).append(Link(url=url, depth=0, priority=priority,
                                               kind=LinkKind.SEED))
    return SeedBatch(by_host={h: Discovered(host=h, links=v) for h, v in links.items()},
                     invalid=invalid)


async def publish_batch(bus: Bus, batch: SeedBatch) -> int:
    """Publish each host's seeds keyed by host; returns how many URLs were sent."""
    for host, msg in batch.by_host.items():
        await bus.publish(Topic.DISCOVERED, host, msg)
    return batch.count


async def publish_seeds(bus: Bus, settings: Settings, seed_urls: Iterable[str],
                        priority: int | None = None) -> SeedBatch:
    """Canonicalise and publish ``seed_urls`` (priority default: ``crawl.seed_priority``)."""
    prio = settings.crawl.seed_priority if priority is None else priority
    batch = seed_batch(seed_urls, prio, urls.TrackingRules.from_settings(settings.urls))
    await publish_batch(bus, batch)
    return batch
