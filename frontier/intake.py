"""Intake of discovered URLs (topic discovered): seeds, links found on pages, redirect
targets and the URLs sitemaps list. The URLs of owned hosts are admitted or rejected
(frontier.policy decides) and stored, and their hosts scheduled; the others go on to
their owners. A URL a sitemap lists again with a newer lastmod may queue a stored page
for a refresh, and a URL rejected for its depth is queued when a link reaches it on a
shorter path (URLs rejected for depth go into a filter of their own, not the seen
filter, for that)."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from common import urls
from common.messages import Discovered, Link, Reason, Topic, UrlStatus
from common.ports import HostState, UrlState
from common.scope import seed_root
from frontier.control import Operator
from frontier.hosts import HostTable
from frontier.policy import (
    admission_reason,
    discovered_row,
    head_outranked,
    host_refusal,
    listed_change,
    readmitted,
    refresh_priority,
    scope_applies,
)
from frontier.scope import SeedRegistry
from frontier.seen import SeenFilter
from frontier.state import Context


class Intake:
    """Takes the Discovered messages of the hosts this frontier owns."""

    def __init__(self, ctx: Context, hosts: HostTable, operator: Operator,
                 seed_roots: SeedRegistry, seen: SeenFilter) -> None:
        self.ctx = ctx
        self.hosts = hosts
        self.operator = operator
        self.seed_roots = seed_roots
        self.seen = seen
        # URLs stored as rejected for their depth (by this process): a link at the same
        # depth or deeper is skipped like a seen one; a shorter path is looked up
        self.deep = SeenFilter(capacity=100_000, error_rate=0.01)

    async def on_discovered(self, msg: Discovered, *, retry: bool = False) -> None:
        """Store the new URLs of owned hosts and schedule their hosts; forward the rest.

        A ``retry`` (the bus delivering the message again after this handler raised)
        may find its URLs stored and marked seen by the failed attempt, whose hosts
        were perhaps never scheduled: it skips neither the seen filter nor the URLs the
        store already holds, and schedules every host with a URL queued by it."""
        ctx, hosts, store = self.ctx, self.hosts, self.ctx.store
        counters, metrics = ctx.counters, ctx.metrics
        now = ctx.clock()
        rows: list[UrlState] = []
        forward: dict[str, list[Link]] = {}
        states: dict[str, HostState | None] = {}  # host rows read for this message
        taken: set[str] = set()  # URLs of this message already in ``rows``
        metrics.urls_discovered.inc(len(msg.links))
        if any(link.depth == 0 for link in msg.links):
            await self._record_seeds(msg.links)
        reread: set[str] = set()  # domains whose seed roots were read again (cluster)
        shorter: set[str] = set()  # admitted URLs perhaps stored as rejected for depth
        for link in msg.links:
            try:
                url = urls.canonicalize(link.url, tracking=ctx.tracking)
                host = urls.host_key(url)
            except urls.UrlError:
                counters.invalid += 1
                continue
            if not hosts.owns(host):
                forward.setdefault(host, []).append(msgspec.structs.replace(link, url=url))
                continue
            if url in taken:
                continue
            # a sitemap's lastmod for a known URL is news: it goes on to the store
            if url in self.seen and not retry and link.lastmod is None:
                counters.seen_skipped += 1
                metrics.seen_filter_skips.inc()
                continue
            taken.add(url)
            row = discovered_row(link, url, host, now, ctx.settings)
            reason = admission_reason(link, url, host, ctx.settings, ctx.rules,
                                      self.operator.blocked_paths)
            scope = self.operator.scope
            if reason is None and scope_applies(link, scope):
                why = await self.seed_roots.verdict(url, host, scope, reread)
                if why is not None:
                    reason, row.detail = Reason.OUT_OF_SCOPE, f"out of scope: {why}"
            if reason is None:
                # read without the host's lock: a host capped or blocked meanwhile is
                # caught again when it is dispatched
                slot = hosts.slots.get(host)
                if slot is not None:
                    state: HostState | None = slot.state
                elif host in states:
                    state = states[host]
                else:
                    state = states[host] = await store.get_host(host)
                reason = host_refusal(state)
            if url in self.deep and not retry:
                if reason is Reason.DEPTH:  # as deep as before, or deeper
                    counters.seen_skipped += 1
                    metrics.seen_filter_skips.inc()
                    continue
                if reason is None:
                    shorter.add(url)
            if reason is not None:
                row.status = UrlStatus.REJECTED
                row.reason = reason
            rows.append(row)
        inserted = await store.add_urls(rows) if rows else []
        # only now, with the rows stored: a failed store call retries this message, and
        # a URL marked seen before that would be skipped by the retry and lost
        for row in rows:
            (self.deep if row.reason is Reason.DEPTH else self.seen).add(row.url)
        counters.known += len(rows) - len(inserted)
        queued: dict[str, float] = {}
        best: dict[str, int] = {}  # the highest priority (lowest level) queued per host
        if shorter and len(inserted) < len(rows):
            await self._readmit(rows, inserted, shorter, queued, best)
        if len(inserted) < len(rows):
            await self._listed_again(rows, inserted, now, queued)
        for row in inserted:
            if row.status is UrlStatus.QUEUED:
                self._accepted(row, queued, best)
            elif row.reason is not None:
                counters.rejected[row.reason.value] += 1
                metrics.count_rejected(row.reason)
        if retry:  # URLs stored by the failed attempt, whose hosts it may not have woken
            for row in rows:
                if row.status is UrlStatus.QUEUED and row.host not in queued:
                    queued[row.host] = now
        for host, due in queued.items():
            async with hosts.locks.hold(host):
                slot = await hosts.slot(host)
                if head_outranked(slot.head, best.get(host)):
                    slot.head.clear()  # still queued in the store: read again in order
                hosts.schedule(host, slot, max(slot.state.next_allowed_at, due))
        for host, links in forward.items():
            await ctx.bus.publish(Topic.DISCOVERED, host, Discovered(host=host, links=links))

    async def _readmit(self, rows: list[UrlState], inserted: list[UrlState],
                       shorter: set[str], queued: dict[str, float],
                       best: dict[str, int]) -> None:
        """URLs of ``shorter`` the store already held: one stored as rejected for its
        depth, admitted now on a shorter path, is queued (see ``readmitted``) and its
        host goes into ``queued``."""
        ctx, hosts = self.ctx, self.hosts
        new = {(r.host, r.url) for r in inserted}
        for row in rows:
            if row.url not in shorter or (row.host, row.url) in new:
                continue
            async with hosts.locks.hold(row.host):
                stored = await ctx.store.get_url(row.host, row.url)
                again = None if stored is None else readmitted(stored, row)
                if again is None:
                    continue
                await ctx.store.put_url(again)
            self.seen.add(row.url)
            ctx.counters.readmitted += 1
            self._accepted(again, queued, best)

    def _accepted(self, row: UrlState, queued: dict[str, float],
                  best: dict[str, int]) -> None:
        """Count a row queued by this message, and note when its host is due
        (``queued``) and its best priority level (``best``)."""
        self.ctx.counters.accepted += 1
        self.ctx.metrics.urls_accepted.inc()
        due = queued.get(row.host)
        queued[row.host] = row.next_fetch_at if due is None else min(due, row.next_fetch_at)
        best[row.host] = min(best.get(row.host, row.priority), row.priority)

    async def _listed_again(self, rows: list[UrlState], inserted: list[UrlState],
                            now: float, queued: dict[str, float]) -> None:
        """URLs a sitemap listed with a lastmod that the store already held: a stored
        page changed since its fetch is queued for a refresh (its host goes into
        ``queued``); otherwise the lastmod is recorded, whatever the row's status (see
        ``listed_change``)."""
        ctx, hosts = self.ctx, self.hosts
        new = {(r.host, r.url) for r in inserted}
        for row in rows:
            if row.lastmod is None or (row.host, row.url) in new:
                continue
            async with hosts.locks.hold(row.host):
                # under the host's lock: no dispatch or result writes the row meanwhile
                stored = await ctx.store.get_url(row.host, row.url)
                changed = None if stored is None else listed_change(
                    stored, row.lastmod, now, refresh_priority(ctx.settings))
                if changed is None:
                    continue
                await ctx.store.put_url(changed)
                slot = hosts.slots.get(row.host)
                held_rows = ([*slot.head, *slot.flying.values()] if slot is not None
                             else [])
                for held in held_rows:
                    # the copies in the queue head and in flight are written later
                    if held.url == row.url:
                        held.lastmod = changed.lastmod
            if (changed.status is UrlStatus.QUEUED and stored is not None
                    and stored.status is not UrlStatus.QUEUED):
                ctx.counters.refreshed += 1  # a stored page its sitemap says changed
                ctx.metrics.refreshes_queued.inc()
                slot = hosts.slots.get(row.host)
                if slot is not None and not slot.head:
                    slot.refresh_next = True
                queued[row.host] = now

    async def _record_seeds(self, links: Iterable[Link]) -> None:
        """Record the seed roots of the depth-0 links of owned hosts (seeds and their
        redirect targets), before their rows are stored: so before any link found on
        them can be judged against the crawl scope."""
        roots = []
        for link in links:
            if link.depth != 0:
                continue
            try:
                url = urls.canonicalize(link.url, tracking=self.ctx.tracking)
                if self.hosts.owns(urls.host_key(url)):
                    roots.append(seed_root(url))
            except urls.UrlError:
                continue
        await self.seed_roots.add(roots)
