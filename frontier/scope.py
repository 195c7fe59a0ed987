"""Crawl scope in the frontier: the verdict (pure) and the seed roots it reads.

:func:`scope_verdict` decides whether a URL is in the crawl scope (rules in
common.scope). :class:`SeedRegistry` records the seed roots (the frontier that owns a
seed's host records it when the seed, or its redirect target, arrives at depth 0) in
the state store, where every frontier finds them, and keeps the ones it read in a
bounded memory.

Cluster mode: the seeds of one registered domain may have been recorded by other
frontiers since they were read, so a verdict that the seeds decide ("not a seed
host", "above the seed's folder") is checked once more against a fresh read before
the URL is rejected. A seed is always recorded before its own URL is queued, so before
any link found on it exists: a fresh read always sees it. Embedded mode has one
frontier, which records every seed itself: what it read once stays complete.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable
from urllib.parse import urlsplit

from common.ports import ScopeRules, SeedRoot, StateStore
from common.scope import host_name, limits, needs_seeds, site_of

__all__ = ["SEED_VERDICTS", "SeedRegistry", "domain_covers", "scope_verdict",
           "under_prefix"]

DENIED = "denied domain"
OUTSIDE_PATHS = "outside the path prefixes"
NOT_ALLOWED = "not an allowed domain"
NOT_SEED_HOST = "not a seed host"
NOT_SEED_DOMAIN = "not under a seed's domain"
ABOVE_SEED = "above its seeds' folders"
SEED_VERDICTS = frozenset({NOT_SEED_HOST, NOT_SEED_DOMAIN, ABOVE_SEED})
"""Verdicts that more seed roots could change."""


def domain_covers(name: str, domains: Iterable[str]) -> bool:
    """True if host name ``name`` is one of ``domains`` or a subdomain of one."""
    return any(name == d or name.endswith("." + d) for d in domains)


def under_prefix(path: str, prefix: str) -> bool:
    """True if ``path`` is ``prefix`` or below it at a segment boundary (prefixes are
    normalised without a trailing '/'; '/' covers every path)."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def scope_verdict(host: str, path: str, rules: ScopeRules,
                  seeds: Collection[SeedRoot] = ()) -> str | None:
    """Why a URL is out of scope, or None if it is in scope. Pure.

    ``host`` is the URL's host key (its port is ignored), ``path`` its canonical path,
    ``seeds`` the seed roots recorded under the host's registered domain
    (:func:`common.scope.site_of`; more do no harm). Seeds themselves are not asked
    about: they are always in scope.
    """
    name = host_name(host)
    if rules.deny_domains and domain_covers(name, rules.deny_domains):
        return DENIED
    if rules.path_prefixes and not any(under_prefix(path, p) for p in rules.path_prefixes):
        return OUTSIDE_PATHS
    allowed = bool(rules.allow_domains) and domain_covers(name, rules.allow_domains)
    if rules.mode == "seed-hosts":
        if not allowed and not any(s.host == name for s in seeds):
            return NOT_SEED_HOST
    elif rules.mode == "seed-domains":
        domain = site_of(name)
        if not allowed and not any(s.domain == domain for s in seeds):
            return NOT_SEED_DOMAIN
    elif rules.allow_domains and not allowed:
        return NOT_ALLOWED
    if rules.no_parent:
        folders = [s.path for s in seeds if s.host == name]
        if folders and not any(path.startswith(f) or path == f.rstrip("/")
                               for f in folders):
            return ABOVE_SEED
    return None


RECORDED_ROOTS = 4_096  # roots a registry remembers writing (a few hundred bytes each)


class SeedRegistry:
    """The seed roots of the crawl: recorded in the store, read back per registered
    domain and kept in a bounded memory (least recently used out first).

    ``complete``: this registry records every seed of the crawl itself (embedded
    mode), so what it read once stays complete; otherwise (cluster mode) a caller may
    ask for a fresh read (see the module's note)."""

    def __init__(self, store: StateStore, *, complete: bool, capacity: int = 100_000
                 ) -> None:
        self.store = store
        self.complete = complete
        self.capacity = capacity
        self._roots: OrderedDict[str, frozenset[SeedRoot]] = OrderedDict()
        # written by this process lately (bounded: writing a root again is harmless,
        # and a crawl may have millions of seeds)
        self._recorded: OrderedDict[SeedRoot, None] = OrderedDict()

    async def add(self, roots: Iterable[SeedRoot]) -> None:
        """Record ``roots`` (before the seeds' own rows are stored)."""
        new = [r for r in dict.fromkeys(roots) if r not in self._recorded]
        if not new:
            return
        await self.store.add_seed_roots(new)
        for root in new:
            self._recorded[root] = None
        while len(self._recorded) > RECORDED_ROOTS:
            self._recorded.popitem(last=False)
        for root in new:
            known = self._roots.get(root.domain)
            if known is not None:
                self._roots[root.domain] = known | {root}

    async def of(self, domain: str, *, fresh: bool = False) -> frozenset[SeedRoot]:
        """The seed roots under ``domain``; ``fresh`` reads the store again."""
        known = self._roots.get(domain)
        if known is not None and not fresh:
            self._roots.move_to_end(domain)
            return known
        roots = frozenset(await self.store.seed_roots(domain))
        self._roots[domain] = roots
        self._roots.move_to_end(domain)
        while len(self._roots) > self.capacity:
            self._roots.popitem(last=False)
        return roots

    async def verdict(self, url: str, host: str, rules: ScopeRules,
                      reread: set[str] | None = None) -> str | None:
        """:func:`scope_verdict` for a canonical URL, with the seed roots of its
        domain. Not complete: a verdict the seeds decide is checked again against a
        fresh read, once per domain in ``reread`` (the caller's batch)."""
        if not limits(rules):
            return None
        path = urlsplit(url).path or "/"
        if not needs_seeds(rules):
            return scope_verdict(host, path, rules)
        domain = site_of(host)
        why = scope_verdict(host, path, rules, await self.of(domain))
        if (why in SEED_VERDICTS and not self.complete
                and (reread is None or domain not in reread)):
            if reread is not None:
                reread.add(domain)
            why = scope_verdict(host, path, rules, await self.of(domain, fresh=True))
        return why
