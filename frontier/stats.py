"""Crawl statistics, read from the durable state (so they survive restarts).

Every figure is counted from the store's rows, so a crawl's end, ``crawler stats``
afterwards and ``GET /v1/stats`` agree, except the per-run figures
(``seen_filter_skipped``, ``invalid_links``): they leave no row, only the process that
ran the frontier knows them, and they are ``None`` wherever that process is not the one
asking (``crawler stats``, a cluster's API).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from common.messages import Reason, UrlStatus
from common.ports import StateStore
from frontier.policy import due_buckets, refresh_at

TRAP_REASONS = (Reason.TRAP_LENGTH, Reason.TRAP_SEGMENTS, Reason.TRAP_REPEAT,
                Reason.TRAP_QUERY, Reason.DEPTH, Reason.REDIRECT_CAP)
ERROR_REASONS = (Reason.HTTP_ERROR, Reason.TOO_LARGE, Reason.BAD_CONTENT_TYPE, Reason.SSRF,
                 Reason.DEAD, Reason.PARSE_ERROR, Reason.PARSE_TIMEOUT, Reason.NOT_HTTP,
                 Reason.INVALID_URL, Reason.SITEMAP_INVALID, Reason.SITEMAP_CAPPED,
                 Reason.SITEMAP_DEPTH, Reason.SITEMAP_FILES, Reason.RENDER_ERROR)


class CrawlStats(msgspec.Struct, kw_only=True):
    """The figures a crawl reports (``crawler crawl``, ``GET /v1/stats``)."""

    fetched: int = 0  # page requests that reached a server (robots.txt not counted)
    fetched_new: int = 0  # of fetched: pages fetched for the first time (and retries)
    refreshed: int = 0  # of fetched: stored pages fetched again (refreshes)
    kept: int = 0  # stored pages that are neither exact nor near duplicates
    exact_duplicates: int = 0
    near_duplicates: int = 0
    not_modified: int = 0
    redirects: int = 0
    robots_blocked: int = 0
    blocked: int = 0  # operator blocks
    out_of_scope: int = 0  # links outside the crawl scope (hosts, domains, paths)
    host_capped_urls: int = 0
    hosts_capped: int = 0
    trap_cut: int = 0  # URLs cut by length, segment, repeat, query, depth and hop caps
    errors: dict[str, int] = msgspec.field(default_factory=dict)
    dead: int = 0
    queued: int = 0
    in_flight: int = 0
    awaiting_parse: int = 0
    known_urls: int = 0
    hosts: int = 0
    # stored pages by when their next refresh is due (now: due or queued, next_hour,
    # next_day, next_week, later, never); None when refresh is off
    refresh_due: dict[str, int] | None = None
    # per run: known only to the process that runs the frontier; None elsewhere
    seen_filter_skipped: int | None = None  # links the seen filter dropped
    invalid_links: int | None = None  # links that were not crawlable URLs


def stats_from_counts(counts: Mapping[tuple[str, str], int], *, fetched: int,
                      hosts: int, hosts_capped: int, seen_skipped: int | None = None,
                      invalid: int | None = None, refreshed: int = 0,
                      refresh_due: dict[str, int] | None = None) -> CrawlStats:
    """Pure: fold (status, reason) counts into :class:`CrawlStats`."""

    def n(status: UrlStatus, reason: Reason | None) -> int:
        return counts.get((status.value, reason.value if reason else ""), 0)

    def any_status(reason: Reason) -> int:
        return sum(v for (_, r), v in counts.items() if r == reason.value)

    errors = {r.value: any_status(r) for r in ERROR_REASONS if any_status(r)}
    return CrawlStats(
        fetched=fetched,
        fetched_new=fetched - refreshed,
        refreshed=refreshed,
        refresh_due=refresh_due,
        kept=n(UrlStatus.DONE, None),
        exact_duplicates=any_status(Reason.DUPLICATE),
        near_duplicates=any_status(Reason.NEAR_DUPLICATE),
        not_modified=any_status(Reason.NOT_MODIFIED),
        redirects=any_status(Reason.REDIRECTED),
        robots_blocked=any_status(Reason.ROBOTS),
        blocked=any_status(Reason.BLOCKED),
        out_of_scope=any_status(Reason.OUT_OF_SCOPE),
        host_capped_urls=any_status(Reason.HOST_CAP),
        hosts_capped=hosts_capped,
        trap_cut=sum(any_status(r) for r in TRAP_REASONS),
        errors=errors,
        dead=sum(v for (s, _), v in counts.items() if s == UrlStatus.DEAD.value),
        queued=sum(v for (s, _), v in counts.items() if s == UrlStatus.QUEUED.value),
        in_flight=sum(v for (s, _), v in counts.items() if s == UrlStatus.IN_FLIGHT.value),
        awaiting_parse=sum(v for (s, _), v in counts.items() if s == UrlStatus.FETCHED.value),
        known_urls=sum(counts.values()),
        hosts=hosts,
        seen_filter_skipped=seen_skipped,
        invalid_links=invalid,
    )


async def collect(store: StateStore, *, seen_skipped: int | None = None,
                  invalid: int | None = None, recrawl_interval: float = 0.0,
                  now: float | None = None) -> CrawlStats:
    """The figures, from the store. With ``recrawl_interval`` (refresh on) also when the
    stored pages are due (reads every stored page's row: one pass over the store)."""
    counts = await store.count_urls()
    hosts = await store.list_hosts()
    due = None
    if recrawl_interval > 0 and now is not None:
        due = await refresh_schedule(store, recrawl_interval, now)
    return stats_from_counts(counts, fetched=sum(h.page_count for h in hosts),
                             hosts=len(hosts), hosts_capped=sum(1 for h in hosts if h.capped),
                             seen_skipped=seen_skipped, invalid=invalid,
                             refreshed=sum(h.refreshes for h in hosts), refresh_due=due)


async def refresh_schedule(store: StateStore, recrawl_interval: float,
                           now: float) -> dict[str, int]:
    """Stored pages by when their next refresh is due (see
    :func:`frontier.policy.due_buckets`); refreshes already queued count as due now."""
    times: list[float | None] = []
    queued = 0
    for host in await store.hosts_with_status(UrlStatus.DONE):
        times += [refresh_at(r, recrawl_interval)
                  for r in await store.urls_with_status(UrlStatus.DONE, 10_000_000, host)]
    for host in await store.hosts_with_status(UrlStatus.QUEUED):
        queued += sum(1 for r in await store.urls_with_status(UrlStatus.QUEUED, 10_000_000,
                                                              host)
                      if r.record is not None)
    due = due_buckets(times, now)
    due["now"] += queued
    return due
