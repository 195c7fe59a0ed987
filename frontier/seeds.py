"""Seed URLs: canonicalise them, group them by host and publish them as Discovered.

Only the bus and the settings are needed, so the frontier (``Frontier.seed``), the
``crawler seed`` command and the control API (which may run as its own service) all
offer seeds the same way: each host's URLs reach that host's frontier owner through
topic discovered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from common import urls
from common.messages import Discovered, Link, LinkKind, Topic
from common.ports import Bus


@dataclass(frozen=True, slots=True)
class SeedBatch:
    """Seeds grouped by host, and the inputs that were not crawlable URLs (with the
    reason for each, in ``reasons``, in the same order)."""

    by_host: dict[str, Discovered] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(d.links) for d in self.by_host.values())

    @property
    def rejected(self) -> list[tuple[str, str]]:
        """(input, why it is not a crawlable URL) for each rejected input."""
        return list(zip(self.invalid, self.reasons, strict=True))

    @property
    def valid(self) -> list[str]:
        """The canonical URLs that will be offered."""
        return [link.url for d in self.by_host.values() for link in d.links]


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


def why_not_crawlable(raw: str, error: urls.UrlError) -> str:
    """Pure: a reason a person can act on, for a seed ``canonicalize`` refused."""
    text = raw.strip()
    if not text:
        return "empty"
    scheme = _SCHEME.match(text)
    host_port = scheme is not None and re.match(r"\d+(/|$)", text[scheme.end():])
    if scheme is None or host_port or (scheme.group(1).lower() not in ("http", "https")
                                       and "." in scheme.group(1)):
        head = text.split("/", 1)[0]
        looks_like_host = ("." in head or bool(host_port)) and " " not in text
        return ("no scheme; did you mean " + repr("https://" + text) + "?" if looks_like_host
                else "not a URL (expected one starting with http:// or https://)")
    name = scheme.group(1).lower()
    if name not in ("http", "https"):
        return f"only http and https URLs can be crawled, not {name}:"
    rest = text[scheme.end():].lstrip("/\\")
    if not rest or rest[0] in "?#":
        return "no host name"
    authority = re.split(r"[/?#\\]", rest, maxsplit=1)[0]
    if any(ch.isspace() for ch in authority):
        return "white space in the host name"
    return str(error)


def seed_batch(seed_urls: Iterable[str], priority: int,
               tracking: urls.TrackingRules) -> SeedBatch:
    """Pure: canonicalise ``seed_urls`` into one Discovered message per host. A URL whose
    host no DNS name can have (:func:`common.urls.host_name_problem`) is refused."""
    links: dict[str, list[Link]] = {}
    invalid: list[str] = []
    reasons: list[str] = []
    for raw in seed_urls:
        try:
            url = urls.canonicalize(raw, tracking=tracking)
            host = urls.host_key(url)
            problem = urls.host_name_problem(host)
            if problem:
                raise urls.UrlError(f"not a usable host name {host[:80]!r}: {problem}")
        except urls.UrlError as exc:
            invalid.append(raw)
            reasons.append(why_not_crawlable(raw, exc))
            continue
        links.setdefault(host, []).append(Link(url=url, depth=0, priority=priority,
                                               kind=LinkKind.SEED))
    return SeedBatch(by_host={h: Discovered(host=h, links=v) for h, v in links.items()},
                     invalid=invalid, reasons=reasons)


async def publish_batch(bus: Bus, batch: SeedBatch) -> int:
    """Publish each host's seeds keyed by host; returns how many URLs were sent."""
    for host, msg in batch.by_host.items():
        await bus.publish(Topic.DISCOVERED, host, msg)
    return batch.count
