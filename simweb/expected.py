"""What a correct crawler fetches from a scenario, computed from the scenario itself.

The walk models the crawler's contract: start from the seeds, canonicalise URLs (drop
fragments and tracking parameters such as utm_*), obey robots.txt (4xx: allow all; 5xx
and timeouts: fetch nothing), fetch each canonical URL once, follow each redirect hop as
a new URL (up to ``max_redirect_hops`` per chain), retry 429/503 pages until they
recover, follow the links of pages that are neither exact nor near duplicates of a page
fetched before, and stop a host at ``max_pages_per_host`` fetches.

The result is exact when no host reaches its cap, or when the capped part of a host is
a single chain (as the seed scenario's calendar trap is); otherwise which pages fall
under the cap depends on the crawler's order and the walk shows one breadth-first
answer.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections import Counter, deque
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from protego import Protego

from simweb.model import Scenario
from simweb.site import Site

TRACKING_PARAMS = ("utm_*", "gclid", "fbclid", "msclkid", "dclid", "mc_cid", "mc_eid", "_ga",
                   "yclid")
USER_AGENT = "PoliteCrawler"


def canonical(url: str, tracking: tuple[str, ...] = TRACKING_PARAMS) -> str:
    """Lower-case scheme and host, no default port, no fragment, no tracking parameters,
    path '/' when empty. Other parameters keep their order."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    netloc = host if port is None or (scheme, port) in (("http", 80), ("https", 443)) \
        else f"{host}:{port}"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if not any(fnmatch.fnmatchcase(k, pat) for pat in tracking)]
    return urlunsplit((scheme, netloc, parts.path or "/", urlencode(query), ""))


@dataclass(frozen=True, slots=True)
class Expectation:
    """The outcome of a correct crawl; URLs are canonical and carry the server's port."""

    fetched: frozenset[str]
    """Page URLs fetched (robots.txt not counted), redirect sources included."""
    blocked_by_robots: frozenset[str]
    duplicates: frozenset[str]
    """Fetched pages whose body is byte-identical to a page fetched before."""
    near_duplicates: frozenset[str]
    """Fetched pages that copy an earlier one with a small change."""
    capped: frozenset[str]
    """Discovered but not fetched because their host reached the cap."""
    external: frozenset[str] = field(default_factory=frozenset)
    """Links to hosts outside the scenario (never fetched)."""
    truncated: bool = False
    """True when the walk stopped at ``max_urls`` (an endless trap without a cap)."""

    def per_host(self) -> dict[str, int]:
        """Page fetches per host."""
        return dict(Counter(urlsplit(u).hostname or "" for u in self.fetched))


def _robots_rules(site: Site, scenario: Scenario, host: str,
                  max_bytes: int) -> Protego | bool:
    """Protego rules, True (allow all) or False (fetch nothing)."""
    robots = scenario.host(host).robots
    if site.page(host, "/robots.txt") is not None:
        reply = site.render(host, "/robots.txt")
        if 400 <= reply.status < 500:
            return True
        if reply.status >= 500:
            return False
        return Protego.parse(reply.body[:max_bytes].decode("utf-8", "replace"))
    if robots.kind == "missing":
        return True
    if robots.kind in ("error", "timeout"):
        return False
    return Protego.parse(site.robots_bytes(host)[:max_bytes].decode("utf-8", "replace"))


def expected_crawl(scenario: Scenario, *, port: int | None = None,
                   max_pages_per_host: int | None = None, max_redirect_hops: int = 5,
                   max_urls: int = 200_000, robots_max_bytes: int = 512_000) -> Expectation:
    """Walk the scenario as a correct crawler would (see the module docstring)."""
    site = Site(scenario, port)
    hosts = set(scenario.host_names())
    rules: dict[str, Protego | bool] = {}
    seen: set[str] = set()
    queue: deque[tuple[str, int]] = deque()  # (canonical URL, redirect hops so far)
    fetched: set[str] = set()
    blocked: set[str] = set()
    dups: set[str] = set()
    near: set[str] = set()
    capped: set[str] = set()
    external: set[str] = set()
    bodies: set[bytes] = set()
    sources: set[tuple[str, str]] = set()
    per_host: Counter[str] = Counter()
    truncated = False

    def push(url: str, hops: int) -> None:
        url = canonical(url)
        if url not in seen:
            seen.add(url)
            queue.append((url, hops))

    for url in site.seed_urls():
        push(url, 0)
    while queue:
        url, hops = queue.popleft()
        parts = urlsplit(url)
        host = parts.hostname or ""
        if host not in hosts or parts.scheme != "http":
            external.add(url)
            continue
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        if host not in rules:
            rules[host] = _robots_rules(site, scenario, host, robots_max_bytes)
        rule = rules[host]
        allowed = rule if isinstance(rule, bool) else rule.can_fetch(url, USER_AGENT)
        if not allowed:
            blocked.add(url)
            continue
        if max_pages_per_host is not None and per_host[host] >= max_pages_per_host:
            capped.add(url)
            continue
        if len(fetched) >= max_urls:
            truncated = True
            break
        fetched.add(url)
        per_host[host] += 1
        page = site.page(host, target)
        visit = (page.recover_after or 0) if page is not None else 0
        reply = site.render(host, target, visit=visit)
        if 300 <= reply.status < 400:
            location = reply.header("Location")
            if location and hops < max_redirect_hops:
                push(urljoin(url, location), hops + 1)
            continue
        if reply.status != 200:
            continue
        digest = hashlib.sha256(reply.body).digest()
        if digest in bodies:
            dups.add(url)
            continue
        bodies.add(digest)
        if page is not None:
            source = site.content_source(host, page)
            if (host, source.path) in sources:
                near.add(url)
                continue
            sources.add((host, source.path))
        for href in site.links(host, target, visit=visit):
            push(urljoin(url, href), 0)
    return Expectation(frozenset(fetched), frozenset(blocked), frozenset(dups),
                       frozenset(near), frozenset(capped), frozenset(external), truncated)


def expected_urls(scenario: Scenario, *, port: int | None = None,
                  max_pages_per_host: int | None = None) -> set[str]:
    """The canonical URLs a correct crawler fetches (see :func:`expected_crawl`)."""
    return set(expected_crawl(scenario, port=port,
                              max_pages_per_host=max_pages_per_host).fetched)
