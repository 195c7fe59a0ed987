"""Frontier policy: pure functions, no I/O.

- :func:`trap_reason`: caps and trap rules a URL must pass to enter the frontier.
- :func:`politeness_delay`: the gap a host rests between requests.
- :func:`retry_delay`: back-off after a failed attempt.
- :func:`apply_result`: what a fetch result does to a URL's row and its host's row.
- :func:`refresh_at`, :func:`refreshed`: when a stored page is due again, and its row
  queued for that refresh.
- :func:`next_revisit_interval`: the adaptive revisit interval (halved when a page
  changed, doubled when it did not, within bounds).
- :func:`take_refresh`: the refresh budget, whether the next fetch slot goes to a
  refresh or to a page never fetched when both wait.
- :func:`due_buckets`: how many stored pages are due when (stats).
- :func:`sitemap_reason`, :func:`listed_change`: a sitemap nested too deep, and what a
  sitemap's lastmod says about a URL already stored.
- :func:`readmitted`: a URL rejected for its depth, found again on a shorter path.
- :func:`discovered_row`, :func:`admission_reason`, :func:`scope_applies`,
  :func:`host_refusal`: the row a discovered link makes and whether it is admitted.
- :func:`with_verdict`, :func:`replay_result`: a stored page's row closed with a later
  stage's verdict, and a fetch result rebuilt from a stored row for the parser.

The frontier service (service.py) calls these and does the I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

import msgspec

from common.messages import (
    RETRYABLE_OUTCOMES,
    FetchOutcome,
    FetchResult,
    FetchTask,
    HostControl,
    Link,
    LinkKind,
    Reason,
    StatusUpdate,
    TaskKind,
    UrlStatus,
)
from common.patterns import OperatorPattern, PatternError, compile_operator_pattern
from common.politeness import retry_backoff
from common.ports import HostState, ScopeRules, UrlState
from common.scope import limits
from common.settings import (
    PolitenessSettings,
    RefreshSettings,
    Settings,
    SettingsError,
    TrapSettings,
    parse_host_map,
)
from common.urls import UrlError, robots_url

# Outcomes that mean no request reached the host's server.
NO_REQUEST_OUTCOMES = frozenset({
    FetchOutcome.ROBOTS_BLOCKED, FetchOutcome.SSRF_BLOCKED, FetchOutcome.UNSUPPORTED,
    FetchOutcome.DNS_ERROR, FetchOutcome.ROBOTS_UNAVAILABLE,
})

FINAL_REASONS: dict[FetchOutcome, Reason] = {
    FetchOutcome.ROBOTS_BLOCKED: Reason.ROBOTS,
    FetchOutcome.SSRF_BLOCKED: Reason.SSRF,
    FetchOutcome.TOO_LARGE: Reason.TOO_LARGE,
    FetchOutcome.BAD_CONTENT_TYPE: Reason.BAD_CONTENT_TYPE,
    FetchOutcome.HTTP_ERROR: Reason.HTTP_ERROR,
    FetchOutcome.UNSUPPORTED: Reason.NOT_HTTP,
}


@dataclass(frozen=True, slots=True)
class TrapRules:
    """Trap settings compiled once (patterns, with RE2: see common.patterns; per-host
    overrides)."""

    settings: TrapSettings
    patterns: tuple[OperatorPattern, ...]
    host_caps: dict[str, int]

    @classmethod
    def from_settings(cls, settings: TrapSettings) -> TrapRules:
        try:
            patterns = tuple(compile_operator_pattern(p) for p in settings.blocked_patterns)
        except PatternError as exc:
            raise SettingsError(f"CRAWLER_TRAPS_BLOCKED_PATTERNS: {exc}") from None
        caps = parse_host_map(settings.host_page_overrides,
                              "CRAWLER_TRAPS_HOST_PAGE_OVERRIDES", int)
        return cls(settings=settings, patterns=patterns, host_caps=caps)

    def page_cap(self, host: str, state: HostState | None = None) -> int:
        if state is not None and state.max_pages is not None:
            return state.max_pages
        return self.host_caps.get(host, self.settings.max_pages_per_host)


def host_blocked(host: str, blocked: Sequence[str]) -> bool:
    """True if ``host`` is listed, or is a subdomain of a listed '.domain'."""
    name = host.split(":", 1)[0]
    for b in blocked:
        b = b.lower()
        if b.startswith("."):
            if name == b[1:] or name.endswith(b):
                return True
        elif name == b or host == b:
            return True
    return False


def path_blocked(url: str, patterns: Sequence[OperatorPattern],
                 parts: SplitResult | None = None) -> bool:
    """True if any pattern matches the URL's path and query (``/a/b?x=1``)."""
    if parts is None:
        parts = urlsplit(url)
    path_query = parts.path + ("?" + parts.query if parts.query else "")
    return any(p.search(path_query) for p in patterns)


def apply_host_control(state: HostState, change: HostControl) -> HostState:
    """The host row after an operator's change (pure; the row is copied). Raising the
    page cap reopens a host that had reached it."""
    state = msgspec.structs.replace(state)
    if change.clear_delay:
        state.delay_override = None
    elif change.delay is not None:
        state.delay_override = change.delay
    if change.blocked is not None:
        state.blocked = change.blocked
    if change.max_pages is not None:
        state.max_pages = change.max_pages
        state.capped = False
    return state


def trap_reason(url: str, host: str, depth: int, rules: TrapRules,
                extra_patterns: Sequence[OperatorPattern] = (),
                extra_blocked_hosts: Sequence[str] = ()) -> Reason | None:
    """The reason ``url`` may not enter the frontier, or None if it may.

    ``url`` is canonical. Checks, cheapest first: length, depth, operator blocks by
    host and path pattern, path segment count, repeated path segments, query size.
    """
    s = rules.settings
    if len(url) > s.max_url_length:
        return Reason.TRAP_LENGTH
    if depth > s.max_depth:
        return Reason.DEPTH
    if host_blocked(host, s.blocked_hosts) or host_blocked(host, extra_blocked_hosts):
        return Reason.BLOCKED
    parts = urlsplit(url)
    if path_blocked(url, (*rules.patterns, *extra_patterns), parts):
        return Reason.BLOCKED
    segments = [seg for seg in parts.path.split("/") if seg]
    if len(segments) > s.max_path_segments:
        return Reason.TRAP_SEGMENTS
    if segments:
        most = Counter(segments).most_common(1)[0][1]
        if most > s.max_repeated_segment:
            return Reason.TRAP_REPEAT
    if parts.query and parts.query.count("&") + 1 > s.max_query_params:
        return Reason.TRAP_QUERY
    return None


def politeness_delay(host: HostState, settings: PolitenessSettings,
                     overrides: dict[str, float] | None = None) -> float:
    """max(default delay, robots Crawl-delay (capped), k x last response time, override)."""
    delay = settings.default_delay
    if host.crawl_delay is not None:
        delay = max(delay, min(host.crawl_delay, settings.max_crawl_delay))
    delay = max(delay, settings.response_time_factor * host.last_response_time)
    override = host.delay_override
    if override is None and overrides:
        override = overrides.get(host.host)
    if override is not None:
        delay = max(delay, override)
    return delay


def retry_delay(attempt: int, retry_after: float | None, settings: PolitenessSettings) -> float:
    """Exponential back-off after the ``attempt``-th failure; Retry-After wins if longer."""
    backoff = retry_backoff(attempt, settings.backoff_base, settings.backoff_max)
    if retry_after is not None:
        backoff = max(backoff, min(retry_after, settings.max_retry_after))
    return backoff


def refresh_at(row: UrlState, interval: float) -> float | None:
    """When the stored page of ``row`` is due to be fetched again, or None if never.

    Pages that were kept or found not modified (DONE with a record) are due
    ``row.revisit_interval`` (the adaptive interval, see :func:`next_revisit_interval`;
    else ``interval``) seconds after their last fetch; an ``interval``
    (``crawl.recrawl_interval``) of 0 turns refresh off. Duplicates, redirects and
    rejections stay closed.

    A page whose sitemap gave a lastmod no later than its last fetch is not due: the
    sitemap says it has not changed (when a sitemap read later gives a newer lastmod,
    :func:`listed_change` queues it). Sitemap files (reason ``sitemap``) are refreshed
    like pages.
    """
    if interval <= 0:
        return None
    every = row.revisit_interval or interval
    if (every <= 0 or row.status is not UrlStatus.DONE or row.record is None
            or row.last_fetch_at is None):
        return None
    if row.reason is not None and row.reason not in (Reason.NOT_MODIFIED, Reason.SITEMAP):
        return None
    if row.lastmod is not None and row.lastmod <= row.last_fetch_at:
        return None
    return row.last_fetch_at + every


def sitemap_reason(link: Link, settings: Settings) -> Reason | None:
    """Why a sitemap file (a ``LinkKind.SITEMAP`` link) may not be fetched: nested in
    indexes deeper than ``sitemaps.max_index_depth`` (a sitemap robots.txt names has
    depth 1, one an index lists its index's depth + 1), so an endless chain of
    indexes ends. None for other links."""
    if link.kind is not LinkKind.SITEMAP:
        return None
    if link.depth - 1 > settings.sitemaps.max_index_depth:
        return Reason.SITEMAP_DEPTH
    return None


def first_sitemap_fetch(row: UrlState) -> bool:
    """Whether dispatching ``row`` fetches a sitemap file for the first time: what the
    host's count of sitemap files (``HostState.sitemap_files``) counts. A retry after a
    failed attempt or a refresh of a file already read is no new file."""
    return row.kind is TaskKind.SITEMAP and row.attempts == 0 and row.last_fetch_at is None


def sitemap_files_refusal(row: UrlState, state: HostState,
                          max_files: int) -> tuple[Reason, str] | None:
    """(reason, detail) when the sitemap file ``row`` may not be fetched because its
    host already had ``max_files`` sitemap files dispatched
    (``sitemaps.max_files_per_host``); None otherwise. Checked at dispatch, where the
    frontier holds the host's row: the count is in that row, so it holds in every
    store and across restarts, and the files past the cap end as recorded outcomes
    without a request. They are queued below the pages
    (``sitemaps.file_priority``), so their turn, and this refusal, come after them."""
    if not first_sitemap_fetch(row) or state.sitemap_files < max_files:
        return None
    return Reason.SITEMAP_FILES, (f"the host's {max_files} sitemap files were fetched "
                                  "(CRAWLER_SITEMAPS_MAX_FILES_PER_HOST)")


def head_outranked(head: Sequence[UrlState], queued: int | None) -> bool:
    """Whether a host's queue head (the next few due rows, read from the store in
    priority order) must be read again because a row of priority level ``queued`` (the
    best of those just queued for the host; None: none) goes before its last row:
    else the rows read before it, such as the sitemap files an index listed, would
    be fetched first, up to a whole head."""
    return bool(head) and queued is not None and queued < head[-1].priority


def listed_change(row: UrlState, lastmod: float | None, now: float,
                  priority: int | None = None) -> UrlState | None:
    """A URL the store holds that a sitemap lists again with ``lastmod``: the row to
    write, or None when nothing changes. A stored page (DONE with a record, kept or
    not modified) changed since its copy was fetched (lastmod later than that fetch)
    is queued for a refresh now (at ``priority``, the refresh level); otherwise only
    the lastmod is recorded, so a page that stays unchanged is not refetched."""
    if lastmod is None or row.lastmod == lastmod:
        return None
    stored = (row.status is UrlStatus.DONE and row.record is not None
              and row.reason in (None, Reason.NOT_MODIFIED))
    if stored and row.last_fetch_at is not None and lastmod > row.last_fetch_at:
        return msgspec.structs.replace(refreshed(row, now, priority), lastmod=lastmod)
    return msgspec.structs.replace(row, lastmod=lastmod)


def readmitted(stored: UrlState, found: UrlState) -> UrlState | None:
    """The row to write when a link admits ``found`` (queued) for a URL the store holds
    as ``stored``, or None when the stored row stays. A URL rejected because its depth
    was over the limit, found again at a smaller depth, is queued in its place (keeping
    its number, ``seq``): the first path a crawl finds to a page is not always its
    shortest (pages are parsed side by side, a large one finishing after a small
    deeper one), and a crawler with a depth limit is expected to fetch every page
    within it."""
    if (stored.status is UrlStatus.REJECTED and stored.reason is Reason.DEPTH
            and found.status is UrlStatus.QUEUED and found.depth < stored.depth):
        return msgspec.structs.replace(found, seq=stored.seq)
    return None


def refreshed(row: UrlState, now: float, priority: int | None = None) -> UrlState:
    """A copy of ``row`` queued for its refresh (a fresh retry budget), at ``priority``
    (the refresh level, see :func:`refresh_priority`) when given. The validators (ETag,
    Last-Modified) and the record of the stored copy stay, for a conditional GET and a
    revisit record."""
    return msgspec.structs.replace(row, status=UrlStatus.QUEUED, reason=None, detail=None,
                                   attempts=0, next_fetch_at=now,
                                   priority=row.priority if priority is None else priority)


def refresh_priority(settings: Settings) -> int:
    """The priority level of refreshes: ``refresh.priority`` capped at the lowest level.

    The levels, best first (0 is served first across hosts when fetch slots are short):
    seeds and sitemap files (``crawl.seed_priority``, 0), links found on pages (1),
    URLs a sitemap lists (``sitemaps.priority``, 2), refreshes (``refresh.priority``, 3).
    Refreshes also have a share of the fetch slots of their own (:func:`take_refresh`),
    so the lowest level does not starve them."""
    return min(settings.crawl.priority_levels - 1, settings.refresh.priority)


def is_refresh(row: UrlState) -> bool:
    """True for a queued row whose page is already stored (a refresh, not a new page)."""
    return row.record is not None


def next_revisit_interval(previous: float | None, changed: bool, start: float,
                          settings: RefreshSettings) -> float:
    """The revisit interval after a fetch of a stored page (pure).

    ``previous`` is the page's interval so far (None: ``start``, the first interval,
    ``crawl.recrawl_interval``). Halved when the fetch found the content changed,
    doubled when it found it unchanged (same content hash, or a 304); then held within
    [least, most]: least is ``settings.min_interval`` or ``start`` if shorter, most is
    ``settings.max_interval`` or ``start`` if longer. Not adaptive: always ``start``.
    """
    if not settings.adaptive:
        return start
    current = previous if previous is not None and previous > 0 else start
    return _within_bounds(current / 2.0 if changed else current * 2.0, start, settings)


def _within_bounds(interval: float, start: float, settings: RefreshSettings) -> float:
    """``interval`` held within [least, most]: ``settings.min_interval`` or ``start`` if
    shorter, ``settings.max_interval`` or ``start`` if longer."""
    least = min(settings.min_interval, start)
    most = max(settings.max_interval, start)
    return min(most, max(least, interval))


def first_revisit_interval(changefreq: float | None, start: float,
                           settings: RefreshSettings) -> float | None:
    """The revisit interval a page starts with (pure): its sitemap's changefreq (seconds)
    held within the bounds of :func:`next_revisit_interval`; None (``start``, the
    crawl's recrawl interval) without one or when intervals are not adaptive."""
    if changefreq is None or not settings.adaptive:
        return None
    return _within_bounds(changefreq, start, settings)


def take_refresh(refreshes: int, total: int, share: float) -> bool:
    """The refresh budget (pure): with both a refresh and a page never fetched waiting
    for a free fetch slot, whether the slot goes to the refresh. ``refreshes`` of the
    ``total`` slots given while both kinds waited went to refreshes; a refresh is taken
    when that keeps their part at most ``share`` (so with share 0.25: new, new, new,
    refresh, new, ...). When only one kind waits it takes the slot (not decided here)."""
    return refreshes + 1 <= share * (total + 1) + 1e-9


DUE_BUCKETS = (("now", 0.0), ("next_hour", 3600.0), ("next_day", 86_400.0),
               ("next_week", 7 * 86_400.0))


def due_buckets(times: Sequence[float | None], now: float) -> dict[str, int]:
    """How many of the refresh times ``times`` (None: never) fall due: ``now`` (already
    due), within the next hour, day, week, ``later``, and ``never`` (pure)."""
    out = {name: 0 for name, _ in DUE_BUCKETS} | {"later": 0, "never": 0}
    for at in times:
        if at is None:
            out["never"] += 1
            continue
        for name, within in DUE_BUCKETS:
            if at <= now + within:
                out[name] += 1
                break
        else:
            out["later"] += 1
    return out


@dataclass(slots=True)
class ResultEffect:
    """What :func:`apply_result` decided."""

    row: UrlState
    host: HostState
    request_made: bool
    follow: list[Link] = field(default_factory=list)  # redirect targets to discover
    retry: bool = False
    dead: bool = False


def apply_result(result: FetchResult, row: UrlState, host: HostState, settings: Settings,
                 now: float, delay_overrides: dict[str, float] | None = None) -> ResultEffect:
    """Turn a fetch result into the new url and host rows (pure; rows are copied)."""
    pol = settings.politeness
    row = msgspec.structs.replace(row)
    host = msgspec.structs.replace(host)
    outcome = result.outcome
    request_made = outcome not in NO_REQUEST_OUTCOMES or result.robots_fetched
    effect = ResultEffect(row=row, host=host, request_made=request_made)

    # host.lease_until stays: it covers a period of requests (frontier.hosts)
    refresh = result.task.previous_record is not None  # of a page stored before
    if outcome not in NO_REQUEST_OUTCOMES:
        host.page_count += 1
        if refresh:
            host.refreshes += 1
    if result.robots_crawl_delay is not None:
        host.crawl_delay = result.robots_crawl_delay
    if request_made:
        if outcome not in NO_REQUEST_OUTCOMES:
            host.last_response_time = max(0.0, result.elapsed)
        end = result.fetched_at or now
        host.next_allowed_at = max(host.next_allowed_at,
                                   end + politeness_delay(host, pol, delay_overrides))

    previous_fetch = row.last_fetch_at
    row.last_fetch_at = result.fetched_at or now
    if result.status:
        row.http_status = result.status

    start = settings.crawl.recrawl_interval
    if outcome is FetchOutcome.OK:
        if start > 0:
            row.revisit_interval = (
                next_revisit_interval(row.revisit_interval,
                                      result.content_hash != row.content_hash, start,
                                      settings.refresh)
                if refresh and row.record is not None
                # a first fetch: the interval the page started with (its sitemap's
                # changefreq, first_revisit_interval) or the crawl's
                else row.revisit_interval or start)
        row.status = UrlStatus.FETCHED
        row.reason = None
        row.content_hash = result.content_hash
        row.record = result.record
        row.etag = result.etag
        row.last_modified = result.last_modified
        row.duplicate_of = result.duplicate_of
        row.detail = None
    elif outcome is FetchOutcome.NOT_MODIFIED:
        if start > 0:
            row.revisit_interval = next_revisit_interval(row.revisit_interval, False, start,
                                                         settings.refresh)
        row.status = UrlStatus.DONE
        row.reason = Reason.NOT_MODIFIED
        if result.record is not None:
            row.record = result.record
    elif outcome is FetchOutcome.REDIRECT:
        row.status = UrlStatus.DONE
        row.reason = Reason.REDIRECTED
        row.detail = result.location
        if result.location:
            if row.hops + 1 > settings.traps.max_redirect_hops:
                row.status = UrlStatus.REJECTED
                row.reason = Reason.REDIRECT_CAP
            else:
                effect.follow.append(Link(url=result.location, depth=row.depth,
                                          priority=row.priority, kind=LinkKind.REDIRECT,
                                          source=row.url, hops=row.hops + 1))
    elif outcome in FINAL_REASONS:
        row.status = UrlStatus.REJECTED
        row.reason = FINAL_REASONS[outcome]
        row.detail = result.error
    elif outcome in RETRYABLE_OUTCOMES:
        if (outcome is FetchOutcome.ROBOTS_UNAVAILABLE and not result.robots_fetched
                and previous_fetch is not None and result.fetched_at <= previous_fetch):
            # robots.txt was not asked again: its failure, remembered for a while
            # (fetcher.robots_cache), is one this URL already counted, so this try
            # counts for nothing; it comes again when that answer runs out (the
            # result's retry_after), with robots.txt asked again
            row.attempts = max(0, row.attempts - 1)
        if row.attempts >= pol.max_attempts:
            row.status = UrlStatus.DEAD
            row.reason = Reason.DEAD
            row.detail = f"{outcome.value}: {result.error or result.status}"
            effect.dead = True
        else:
            row.status = UrlStatus.QUEUED
            row.next_fetch_at = now + retry_delay(row.attempts, result.retry_after, pol)
            row.detail = f"{outcome.value}: {result.error or result.status}"
            effect.retry = True
            if outcome is FetchOutcome.THROTTLED or outcome is FetchOutcome.ROBOTS_UNAVAILABLE:
                # the whole host rests: a throttled or robots-less host gets no requests
                host.next_allowed_at = max(host.next_allowed_at, row.next_fetch_at)
    else:  # pragma: no cover - every outcome is handled above
        raise AssertionError(f"unhandled outcome {outcome}")
    if result.sitemaps:
        effect.follow += sitemap_links(result.sitemaps, result.task.url, settings)
    return effect


def sitemap_links(sitemaps: Sequence[str], url: str, settings: Settings) -> list[Link]:
    """Links to the sitemap files a robots.txt named (``url``: a URL of its origin):
    depth 1, the seed priority, and the robots.txt as their source, which vouches for
    the URLs of its host that they list."""
    try:
        source = robots_url(url)
    except UrlError:
        return []
    priority = min(settings.crawl.priority_levels - 1, settings.crawl.seed_priority)
    return [Link(url=s, depth=1, priority=priority, kind=LinkKind.SITEMAP, source=source)
            for s in sitemaps]


def discovered_row(link: Link, url: str, host: str, now: float,
                   settings: Settings) -> UrlState:
    """The queued row a discovered ``link`` makes (``url``: its canonical form, ``host``
    its host key), before it is admitted: a sitemap file is read as one, and a page its
    sitemap gave a changefreq starts with that revisit interval."""
    return UrlState(host=host, url=url, depth=link.depth, priority=link.priority,
                    hops=link.hops, source=link.source, discovered_at=now,
                    kind=TaskKind.SITEMAP if link.kind is LinkKind.SITEMAP else None,
                    lastmod=link.lastmod,
                    revisit_interval=first_revisit_interval(
                        link.changefreq, settings.crawl.recrawl_interval, settings.refresh))


def admission_reason(link: Link, url: str, host: str, settings: Settings, rules: TrapRules,
                     blocked_paths: Sequence[OperatorPattern] = ()) -> Reason | None:
    """Why a discovered URL may not enter the frontier, judged on the URL alone (a
    sitemap nested too deep, the trap rules, the operator's blocked path patterns), or
    None. The crawl scope (:func:`scope_applies`) and the host's row
    (:func:`host_refusal`) are judged after, only for a URL that passes."""
    return (sitemap_reason(link, settings)
            or trap_reason(url, host, link.depth, rules, blocked_paths))


def scope_applies(link: Link, scope: ScopeRules) -> bool:
    """Whether a discovered link is judged against the crawl scope: the scope limits
    anything, and the link is not a seed (a seed defines the scope)."""
    return link.kind is not LinkKind.SEED and limits(scope)


def host_refusal(state: HostState | None) -> Reason | None:
    """Why a URL of a host may not be queued, by the host's row (None: no row yet): the
    host reached its page cap, or the operator blocked it."""
    if state is not None and (state.capped or state.blocked):
        return Reason.HOST_CAP if state.capped else Reason.BLOCKED
    return None


def with_verdict(row: UrlState, msg: StatusUpdate) -> UrlState:
    """A stored page's row closed with a later stage's verdict (pure; the row is
    copied): its status and reason, and the duplicate, simhash and detail the verdict
    gives."""
    row = msgspec.structs.replace(row, status=msg.status, reason=msg.reason)
    if msg.duplicate_of is not None:
        row.duplicate_of = msg.duplicate_of
    if msg.simhash is not None:
        row.simhash = msg.simhash
    if msg.detail is not None:
        row.detail = msg.detail
    return row


def replay_result(row: UrlState) -> FetchResult:
    """A FetchResult rebuilt from a FETCHED row, to hand it to the parser again."""
    task = FetchTask(task_id="replay", url=row.url, host=row.host, depth=row.depth,
                     priority=row.priority, attempt=row.attempts, hops=row.hops,
                     kind=row.kind or TaskKind.PAGE,
                     source=row.source if row.kind is TaskKind.SITEMAP else None)
    return FetchResult(task=task, outcome=FetchOutcome.OK, status=row.http_status or 200,
                       fetched_at=row.last_fetch_at or 0.0, record=row.record,
                       content_hash=row.content_hash, duplicate_of=row.duplicate_of,
                       etag=row.etag, last_modified=row.last_modified)
