"""Metrics: one bundle per service, built against an explicit registry.

Names follow ``crawler_<service>_<what>_<unit>``; counters end in ``_total``. Label
values come from closed sets only (status classes, :class:`~common.messages.FetchOutcome`,
:class:`~common.messages.Reason`, :class:`~common.messages.Topic`, robots bases, store
operations): never a URL or a host, so the number of series stays bounded whatever is
crawled. The typed ``record_*`` / ``count_*`` helpers enforce that; the raw metric
objects stay public for the rare case the helpers do not cover.

A process builds one :class:`Metrics` for the roles it runs::

    metrics = Metrics.create(roles=("fetcher",))   # fetcher + bus + store bundles
    metrics.fetcher.record_fetch(200, FetchOutcome.OK, nbytes=5120, seconds=0.3)
    heartbeat = Heartbeat(max_silence=60)          # the service loop calls heartbeat.beat()
    server = await serve_health(settings.metrics, metrics.registry,
                                ready=lambda: bus_connected and store_connected,
                                alive=heartbeat)
    ...
    if server is not None:
        await server.stop()

Bundles of roles a process does not run still work but record into a detached registry
that is never served, so shared code can record unconditionally.

:class:`HealthServer` serves ``GET /metrics`` (Prometheus text, or OpenMetrics when the
scraper asks for it), ``GET /healthz`` (liveness) and ``GET /readyz`` (readiness).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder

from common.messages import FetchOutcome, Reason, Topic
from common.ports import BlobStore, StateStore
from common.robots import RobotsBasis
from common.settings import MetricsSettings

if TYPE_CHECKING:  # the web server is imported where one is built: a page worker
    from aiohttp import web  # imports this module and serves nothing

log = logging.getLogger(__name__)

ROLES: tuple[str, ...] = ("frontier", "fetcher", "parser", "dedup", "api")
"""Service roles; each runs as ``crawler <role>``. Embedded mode runs them all."""

STATUS_CLASSES: tuple[str, ...] = ("2xx", "3xx", "4xx", "5xx", "none")
"""Values of the ``status_class`` label; ``none`` when no HTTP status came back."""


def _public_methods(*protocols: type) -> frozenset[str]:
    return frozenset(name for proto in protocols for name, value in vars(proto).items()
                     if not name.startswith("_") and callable(value))


STORE_OPERATIONS: frozenset[str] = _public_methods(StateStore, BlobStore)
"""Values of the ``operation`` label: the method names of the store ports."""

STATEMENT_KINDS = ("read", "write", "batch", "lwt")
"""Values of the ``kind`` label of ``crawler_store_statements_sent_total``."""

# Bucket bounds, in seconds.
FETCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
PARSE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                 2.5)
UPLOAD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

UPLOAD_KINDS = ("file", "side")
"""Values of the ``kind`` label of the blob upload metrics: a finished WARC or text
file, or a snapshot of a side file (CDXJ index, page records, dead letters)."""


def status_class(status: int | None) -> str:
    """``2xx`` ... ``5xx`` for an HTTP status, ``none`` for no (or a nonsense) status."""
    if status is None or not 200 <= status <= 599:
        return "none"
    return f"{status // 100}xx"


def _member(enum_type: type[enum.StrEnum], value: str) -> str:
    """The label value for ``value``, which must belong to ``enum_type`` (a closed set)."""
    return enum_type(value).value


class FetcherMetrics:
    """Fetcher: pages, bytes, latency, robots.txt, DNS cache and SSRF guard."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pages_fetched = Counter(
            "crawler_fetcher_pages_fetched_total",
            "Page fetch attempts that ended, by HTTP status class and outcome.",
            ["status_class", "outcome"], registry=registry)
        self.downloaded_bytes = Counter(
            "crawler_fetcher_downloaded_bytes_total",
            "Body bytes downloaded (after decompression), robots.txt included.",
            registry=registry)
        self.fetch_duration = Histogram(
            "crawler_fetcher_fetch_duration_seconds",
            "Time from sending a page request to the end of its response.",
            buckets=FETCH_BUCKETS, registry=registry)
        self.in_flight = Gauge(
            "crawler_fetcher_in_flight_requests",
            "Requests in flight in this fetcher.", registry=registry)
        self.robots_blocked = Counter(
            "crawler_fetcher_robots_blocked_total",
            "URLs not fetched because robots.txt disallows them.", registry=registry)
        self.robots_fetches = Counter(
            "crawler_fetcher_robots_fetches_total",
            "robots.txt fetches, by what the answer rests on (file, no_file, unreachable).",
            ["result"], registry=registry)
        self.dns_cache_hits = Counter(
            "crawler_fetcher_dns_cache_hits_total",
            "Name look-ups answered from the DNS cache.", registry=registry)
        self.dns_cache_misses = Counter(
            "crawler_fetcher_dns_cache_misses_total",
            "Name look-ups that went to a DNS server.", registry=registry)
        self.ssrf_refusals = Counter(
            "crawler_fetcher_ssrf_refusals_total",
            "Connections refused by the SSRF guard (forbidden address).", registry=registry)
        for sc in STATUS_CLASSES:  # show every class at zero from the start
            self.pages_fetched.labels(sc, FetchOutcome.OK.value)
        for outcome in FetchOutcome:  # and every error outcome, so a fetcher that has
            if outcome is not FetchOutcome.OK:  # restarted still shows 0 errors
                self.pages_fetched.labels("none", outcome.value)
        for basis in RobotsBasis:
            self.robots_fetches.labels(basis.value)

    def record_fetch(self, status: int | None, outcome: FetchOutcome, *, nbytes: int = 0,
                     seconds: float | None = None) -> None:
        """One page fetch attempt ended (robots.txt fetches go to :meth:`record_robots`)."""
        self.pages_fetched.labels(status_class(status), _member(FetchOutcome, outcome)).inc()
        if nbytes > 0:
            self.downloaded_bytes.inc(nbytes)
        if seconds is not None and seconds >= 0:
            self.fetch_duration.observe(seconds)

    def record_robots(self, basis: RobotsBasis, *, nbytes: int = 0) -> None:
        """One robots.txt fetch ended with an answer resting on ``basis``."""
        self.robots_fetches.labels(_member(RobotsBasis, basis)).inc()
        if nbytes > 0:
            self.downloaded_bytes.inc(nbytes)


DISPATCH_KINDS = ("new", "refresh")
# the buckets of frontier.policy.due_buckets, shown at 0 before the first look
REFRESH_DUE_BUCKETS = ("now", "next_hour", "next_day", "next_week", "later", "never")


class FrontierMetrics:
    """Frontier: queue depth, hosts, politeness waits, retries and URL verdicts."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.queued_urls = Gauge(
            "crawler_frontier_queued_urls",
            "URLs queued in the hosts this frontier owns.", registry=registry)
        self.in_flight_urls = Gauge(
            "crawler_frontier_in_flight_urls",
            "URLs handed to fetchers and not yet answered.", registry=registry)
        self.active_hosts = Gauge(
            "crawler_frontier_active_hosts",
            "Hosts with queued or in-flight URLs in this frontier.", registry=registry)
        self.owned_partitions = Gauge(
            "crawler_frontier_owned_partitions",
            "Host partitions this frontier instance owns.", registry=registry)
        self.oldest_due = Gauge(
            "crawler_frontier_oldest_due_seconds",
            "Age of the oldest due host not dispatched yet (ready, or its dispatch "
            "still in progress); 0 when none is waiting. Stays near 0 unless fetch "
            "capacity is short or the frontier is stalled.", registry=registry)
        self.stalls = Counter(
            "crawler_frontier_stall_recoveries_total",
            "Times the frontier saw its own stall and recovered its scheduling state.",
            registry=registry)
        self.key_waiting = Gauge(
            "crawler_frontier_politeness_key_waiting_hosts",
            "Due hosts waiting for a place of their politeness key (a registered "
            "domain or an address shared with other hosts; CRAWLER_POLITENESS_KEY).",
            registry=registry)
        self.key_moves = Counter(
            "crawler_frontier_politeness_key_moves_total",
            "Hosts that moved to another politeness key because their DNS answer "
            "changed (CRAWLER_POLITENESS_KEY=ip).", registry=registry)
        self.politeness_wait = Histogram(
            "crawler_frontier_politeness_wait_seconds",
            "Time a due URL waited for its host's politeness slot.",
            buckets=WAIT_BUCKETS, registry=registry)
        self.retries = Counter(
            "crawler_frontier_fetch_retries_total",
            "Fetch attempts scheduled again after a retryable outcome, by outcome.",
            ["outcome"], registry=registry)
        self.dead_urls = Counter(
            "crawler_frontier_dead_urls_total",
            "URLs marked dead after too many failed attempts.", registry=registry)
        self.urls_discovered = Counter(
            "crawler_frontier_urls_discovered_total",
            "URLs offered to the frontier (seeds, links, redirects).", registry=registry)
        self.urls_accepted = Counter(
            "crawler_frontier_urls_accepted_total",
            "Offered URLs that were new and queued.", registry=registry)
        self.urls_rejected = Counter(
            "crawler_frontier_urls_rejected_total",
            "URLs rejected or ended without a stored page, by reason.",
            ["reason"], registry=registry)
        self.seen_filter_skips = Counter(
            "crawler_frontier_seen_filter_skips_total",
            "Offered URLs dropped because the seen filter already knew them.",
            registry=registry)
        self.dispatched = Counter(
            "crawler_frontier_fetch_tasks_total",
            "Fetch tasks sent to the fetchers, by kind: new (a page never stored) or "
            "refresh (a stored page fetched again).", ["kind"], registry=registry)
        self.refreshes_queued = Counter(
            "crawler_frontier_refreshes_queued_total",
            "Stored pages queued again because their refresh time came (or their "
            "sitemap said they changed).", registry=registry)
        self.refresh_due = Gauge(
            "crawler_frontier_refresh_due_urls",
            "Stored pages of this frontier's hosts by when their next refresh is due "
            "(now, next_hour, next_day, next_week, later, never), as of the last look "
            "for due refreshes.", ["due"], registry=registry)
        for kind in DISPATCH_KINDS:
            self.dispatched.labels(kind)
        for due in REFRESH_DUE_BUCKETS:  # a dashboard shows 0, not "no data"
            self.refresh_due.labels(due).set(0)
        for outcome in FetchOutcome:  # a dashboard shows 0 retries, not "no data"
            self.retries.labels(outcome.value)
        for reason in Reason:  # and 0 rejections, even when a crawl ends within a scrape
            self.urls_rejected.labels(reason.value)

    def count_rejected(self, reason: Reason, n: int = 1) -> None:
        if n > 0:
            self.urls_rejected.labels(_member(Reason, reason)).inc(n)

    def count_retry(self, outcome: FetchOutcome) -> None:
        self.retries.labels(_member(FetchOutcome, outcome)).inc()


class ParserMetrics:
    """Parser: pages parsed, failures and time spent."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pages_parsed = Counter(
            "crawler_parser_pages_parsed_total", "Pages parsed.", registry=registry)
        self.parse_failures = Counter(
            "crawler_parser_parse_failures_total",
            "Pages whose parse failed (recorded as parse_error).", registry=registry)
        self.parse_duration = Histogram(
            "crawler_parser_parse_duration_seconds", "Time to parse one page.",
            buckets=PARSE_BUCKETS, registry=registry)
        self.links_extracted = Counter(
            "crawler_parser_links_extracted_total", "Outlinks found in parsed pages.",
            registry=registry)
        self.text_bytes = Counter(
            "crawler_parser_text_bytes_total", "Bytes of extracted text written.",
            registry=registry)
        self.hook_problems = Counter(
            "crawler_parser_hook_problems_total",
            "Pages whose extraction hook answer was dropped, by problem (raised, timeout, "
            "skipped, not_dict, not_json, too_big).", ["problem"], registry=registry)
        self.sitemaps_read = Counter(
            "crawler_parser_sitemaps_read_total",
            "Sitemap files read, by how reading ended (sitemap: whole; sitemap_invalid, "
            "sitemap_capped, or parse_error when the read itself failed).", ["outcome"],
            registry=registry)
        self.sitemap_urls = Counter(
            "crawler_parser_sitemap_urls_total",
            "URLs in sitemaps, by what became of them (offered: pages and sitemaps sent "
            "to the frontier; other_host: refused by the cross-submit rule; invalid).",
            ["result"], registry=registry)
        # rendering in headless Chromium (docs/rendering.md)
        self.rendered_pages = Counter(
            "crawler_parser_rendered_pages_total",
            "Pages the render rules chose, by outcome (rendered, or render_error: the "
            "plain parse was kept).", ["outcome"], registry=registry)
        self.render_duration = Histogram(
            "crawler_parser_render_duration_seconds",
            "Time to load, settle and read one page in the browser.",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60), registry=registry)
        self.render_requests = Counter(
            "crawler_parser_render_requests_total",
            "Requests rendered pages made, by verdict (page, fetch, failed, blocked_type, "
            "blocked_third_party, blocked_scheme, blocked_budget, blocked_ssrf, "
            "blocked_robots, ended).", ["verdict"], registry=registry)
        self.render_proxy_refused = Counter(
            "crawler_parser_render_proxy_refused_total",
            "Connections that reached the rendering browser's proxy port, past the "
            "request interception, each refused (docs/rendering.md), by source: "
            "browser_services (Chromium's own services at start) or other (should "
            "stay 0).", ["source"], registry=registry)
        self.browser_starts = Counter(
            "crawler_parser_browser_starts_total",
            "Headless browsers started (the first, and one after each that died).",
            registry=registry)

    @contextlib.contextmanager
    def time_parse(self) -> Iterator[None]:
        """Time one parse; an exception counts as a failure (and propagates)."""
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            self.parse_failures.inc()
            raise
        else:
            self.pages_parsed.inc()
        finally:
            self.parse_duration.observe(time.perf_counter() - start)


class DedupMetrics:
    """Dedup: exact and near duplicates, unique pages."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.exact_duplicates = Counter(
            "crawler_dedup_exact_duplicates_total",
            "Pages whose body is byte-identical to a stored page.", registry=registry)
        self.near_duplicates = Counter(
            "crawler_dedup_near_duplicates_total",
            "Pages whose SimHash is within the threshold of a stored page.",
            registry=registry)
        self.unique_pages = Counter(
            "crawler_dedup_unique_pages_total", "Pages kept as new content.",
            registry=registry)


class BusMetrics:
    """Message bus: traffic, handler errors, dead letters and consumer lag, by topic."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.consumed = Counter(
            "crawler_bus_messages_consumed_total", "Messages handed to a handler.",
            ["topic"], registry=registry)
        self.published = Counter(
            "crawler_bus_messages_published_total", "Messages published.",
            ["topic"], registry=registry)
        self.handler_errors = Counter(
            "crawler_bus_handler_errors_total",
            "Handler calls that raised (the message is redelivered).",
            ["topic"], registry=registry)
        self.dead_lettered = Counter(
            "crawler_bus_dead_lettered_messages_total",
            "Messages moved to the dead-letter topic, by their original topic.",
            ["topic"], registry=registry)
        self.dead_letters_dropped = Counter(
            "crawler_bus_dead_letters_dropped_total",
            "Dead letters the broker refused for good (too large, invalid), so dropped "
            "after logging, by the original message's topic.",
            ["topic"], registry=registry)
        self.consumer_lag = Gauge(
            "crawler_bus_consumer_lag_messages",
            "Messages not yet consumed by this process's group, summed over the "
            "partitions it owns.", ["topic"], registry=registry)
        for topic in Topic:  # a dashboard shows 0 errors, not "no data"
            self.handler_errors.labels(topic.value)
            self.dead_lettered.labels(topic.value)
        # each topic's series of the per-message counters, looked up once rather than
        # per message (a label look-up takes a lock and checks the values)
        self._consumed = {t.value: self.consumed.labels(t.value) for t in Topic}
        self._published = {t.value: self.published.labels(t.value) for t in Topic}

    def count_consumed(self, topic: Topic, n: int = 1) -> None:
        self._consumed[_member(Topic, topic)].inc(n)

    def count_published(self, topic: Topic, n: int = 1) -> None:
        self._published[_member(Topic, topic)].inc(n)

    def count_handler_error(self, topic: Topic) -> None:
        self.handler_errors.labels(_member(Topic, topic)).inc()

    def count_dead_lettered(self, topic: Topic) -> None:
        self.dead_lettered.labels(_member(Topic, topic)).inc()

    def count_dead_letter_dropped(self, topic: Topic) -> None:
        self.dead_letters_dropped.labels(_member(Topic, topic)).inc()

    def set_lag(self, topic: Topic, lag: int) -> None:
        self.consumer_lag.labels(_member(Topic, topic)).set(max(0, lag))


class StoreMetrics:
    """State and blob stores: request latency and errors, by operation."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.request_duration = Histogram(
            "crawler_store_request_duration_seconds",
            "Time of one store call, by operation.", ["operation"],
            buckets=STORE_BUCKETS, registry=registry)
        self.errors = Counter(
            "crawler_store_request_errors_total", "Store calls that raised, by operation.",
            ["operation"], registry=registry)
        self.statements = Counter(
            "crawler_store_statements_sent_total",
            "Statements sent to the database, by kind: read, write, batch (one statement "
            "however many rows) and lwt (a lightweight transaction: a Paxos round).",
            ["kind"], registry=registry)
        self.batch_rows = Counter(
            "crawler_store_batch_rows_total",
            "Rows (inserts, updates, deletes) carried by batch statements.",
            registry=registry)
        for operation in STORE_OPERATIONS:  # a dashboard shows 0 errors, not "no data"
            self.errors.labels(operation)
        # the series each call and statement updates, looked up once rather than per
        # call (a label look-up takes a lock and checks the values)
        self._durations = {op: self.request_duration.labels(op) for op in STORE_OPERATIONS}
        self._statements = {kind: self.statements.labels(kind) for kind in STATEMENT_KINDS}

    def count_statement(self, kind: str, rows: int = 1) -> None:
        """One statement sent to the database (``rows``: the rows of a batch)."""
        series = self._statements.get(kind)
        if series is None:
            raise ValueError(f"unknown statement kind {kind!r}")
        series.inc()
        if kind == "batch":
            self.batch_rows.inc(rows)

    @contextlib.contextmanager
    def time(self, operation: str) -> Iterator[None]:
        """Time one store call; an exception counts as an error (and propagates)."""
        duration = self._durations.get(operation)
        if duration is None:
            raise ValueError(f"unknown store operation {operation!r}")
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            self.errors.labels(operation).inc()
            raise
        finally:
            duration.observe(time.perf_counter() - start)


class BlobMetrics:
    """Uploads of the blob store to a bucket (``CRAWLER_BLOB_BACKEND=s3``,
    docs/object-storage.md): what went up, what failed, what waits in the spool."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.uploaded_files = Counter(
            "crawler_blob_uploaded_files_total",
            "Files the bucket acknowledged, by kind: file (a finished WARC or text file) "
            "or side (a snapshot of a side file).", ["kind"], registry=registry)
        self.uploaded_bytes = Counter(
            "crawler_blob_uploaded_bytes_total",
            "Bytes of the files the bucket acknowledged, by kind.", ["kind"],
            registry=registry)
        self.upload_failures = Counter(
            "crawler_blob_upload_failures_total",
            "Upload attempts that failed, by kind (each is retried).", ["kind"],
            registry=registry)
        self.upload_duration = Histogram(
            "crawler_blob_upload_duration_seconds",
            "Time of one acknowledged upload (one PUT, or a whole multipart upload), by kind.",
            ["kind"], buckets=UPLOAD_BUCKETS, registry=registry)
        self.backlog_files = Gauge(
            "crawler_blob_upload_backlog_files",
            "Uploads waiting (finished files and side-file snapshots, the one under way "
            "included).", registry=registry)
        self.backlog_bytes = Gauge(
            "crawler_blob_upload_backlog_bytes",
            "Bytes of the finished files in the spool waiting for their upload.",
            registry=registry)
        for kind in UPLOAD_KINDS:  # a dashboard shows 0, not "no data"
            self.uploaded_files.labels(kind)
            self.uploaded_bytes.labels(kind)
            self.upload_failures.labels(kind)

    @staticmethod
    def _kind(kind: str) -> str:
        if kind not in UPLOAD_KINDS:
            raise ValueError(f"unknown upload kind {kind!r}")
        return kind

    def record_upload(self, kind: str, nbytes: int, seconds: float) -> None:
        """One upload the bucket acknowledged."""
        k = self._kind(kind)
        self.uploaded_files.labels(k).inc()
        self.uploaded_bytes.labels(k).inc(nbytes)
        self.upload_duration.labels(k).observe(seconds)

    def count_failure(self, kind: str) -> None:
        """One upload attempt that failed (it is retried)."""
        self.upload_failures.labels(self._kind(kind)).inc()

    def watch_backlog(self, files: Callable[[], int], nbytes: Callable[[], int]) -> None:
        """Read the backlog from ``files`` and ``nbytes`` at each scrape."""
        self.backlog_files.set_function(files)
        self.backlog_bytes.set_function(nbytes)


@dataclass(frozen=True, slots=True)
class Metrics:
    """Every bundle of one process, and the registry that is served."""

    registry: CollectorRegistry
    roles: frozenset[str]
    frontier: FrontierMetrics
    fetcher: FetcherMetrics
    parser: ParserMetrics
    dedup: DedupMetrics
    bus: BusMetrics
    store: StoreMetrics
    blob: BlobMetrics

    @classmethod
    def create(cls, roles: Iterable[str] = ROLES, *,
               registry: CollectorRegistry | None = None,
               process: bool = True) -> Metrics:
        """Bundles for ``roles`` (default: all, as in embedded mode) in ``registry``.

        Bus, store and blob bundles are always served. ``process`` adds the standard
        ``process_*`` collector (CPU, memory, open files).
        """
        wanted = frozenset(roles)
        unknown = wanted - set(ROLES)
        if unknown:
            raise ValueError(f"unknown role(s): {', '.join(sorted(unknown))}")
        reg = registry if registry is not None else CollectorRegistry()
        detached = CollectorRegistry()

        def pick(role: str) -> CollectorRegistry:
            return reg if role in wanted else detached

        if process:
            ProcessCollector(registry=reg)
        return cls(registry=reg, roles=wanted,
                   frontier=FrontierMetrics(pick("frontier")),
                   fetcher=FetcherMetrics(pick("fetcher")),
                   parser=ParserMetrics(pick("parser")),
                   dedup=DedupMetrics(pick("dedup")),
                   bus=BusMetrics(reg), store=StoreMetrics(reg), blob=BlobMetrics(reg))


def exposed_names(registry: CollectorRegistry) -> set[str]:
    """Every series name ``registry`` can expose, with the suffixes of its type
    (``_total``, ``_bucket``/``_sum``/``_count``), labelled series included even
    before their first sample."""
    names: set[str] = set()
    for family in registry.collect():
        base = family.name
        names.update(s.name for s in family.samples)
        if family.type == "counter":
            names.add(base + "_total")
        elif family.type == "histogram":
            names.update({base + "_bucket", base + "_sum", base + "_count"})
        elif family.type == "summary":
            names.update({base, base + "_sum", base + "_count"})
        elif family.type == "info":
            names.add(base + "_info")
        else:
            names.add(base)
    return names


def all_metric_names() -> set[str]:
    """Every series name any crawler process can expose (for dashboards and alerts)."""
    return exposed_names(Metrics.create(ROLES).registry)


# --------------------------------------------------------------------------- HTTP

Probe = Callable[[], bool]

HEALTH_PATHS: tuple[str, ...] = ("/metrics", "/healthz", "/readyz")


class Heartbeat:
    """A liveness check for a service loop: the loop calls :meth:`beat` each turn, and
    the heartbeat counts as alive while the last beat is at most ``max_silence``
    seconds old (pass the instance as ``alive``)."""

    def __init__(self, max_silence: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_silence <= 0:
            raise ValueError("max_silence must be positive")
        self.max_silence = max_silence
        self._clock = clock
        self._last = clock()

    def beat(self) -> None:
        self._last = self._clock()

    @property
    def silence(self) -> float:
        """Seconds since the last beat."""
        return self._clock() - self._last

    def __call__(self) -> bool:
        return self.silence <= self.max_silence


def _probe(check: Probe, name: str) -> tuple[bool, str]:
    try:
        ok = bool(check())
    except Exception as exc:  # a failing check means "not ok", never a crash
        log.warning("%s check raised: %r", name, exc)
        return False, f"{name} check failed: {type(exc).__name__}"
    return ok, "ok" if ok else f"not {name}"


def health_routes(registry: CollectorRegistry, *, ready: Probe,
                  alive: Probe | None = None) -> list[web.RouteDef]:
    """``GET /metrics``, ``/healthz`` and ``/readyz``, to add to any aiohttp app.

    ``/healthz`` answers 200 while ``alive()`` is true (default: always, so it answers
    as long as the event loop serves requests); ``/readyz`` answers 200 while
    ``ready()`` is true (connected to the bus and the store), else 503.
    """
    from aiohttp import web

    live_check: Probe = alive if alive is not None else (lambda: True)

    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(registry), headers={"Content-Type": content_type})

    async def healthz(request: web.Request) -> web.Response:
        ok, text = _probe(live_check, "alive")
        return web.Response(status=200 if ok else 503, text=text + "\n")

    async def readyz(request: web.Request) -> web.Response:
        ok, text = _probe(ready, "ready")
        return web.Response(status=200 if ok else 503, text=text + "\n")

    return [web.get("/metrics", metrics), web.get("/healthz", healthz),
            web.get("/readyz", readyz)]


class HealthServer:
    """A small aiohttp server for ``/metrics``, ``/healthz`` and ``/readyz``."""

    def __init__(self, registry: CollectorRegistry, *, ready: Probe,
                 alive: Probe | None = None) -> None:
        from aiohttp import web

        from common.httplog import server_logger

        app = web.Application()
        app.add_routes(health_routes(registry, ready=ready, alive=alive))
        # a malformed request is one rate-limited line, not a traceback (common.httplog)
        self._runner = web.AppRunner(app, access_log=None,
                                     logger=server_logger(__name__ + ".http"))
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The bound port (useful after starting on port 0)."""
        if self._port is None:
            raise RuntimeError("health server not started")
        return self._port

    async def start(self, host: str, port: int) -> None:
        from aiohttp import web

        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        bound = self._runner.addresses
        self._port = int(bound[0][1]) if bound else port

    async def stop(self) -> None:
        await self._runner.cleanup()
        self._port = None

    async def __aenter__(self) -> HealthServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve_health(settings: MetricsSettings, registry: CollectorRegistry, *,
                       ready: Probe, alive: Probe | None = None) -> HealthServer | None:
    """Start :class:`HealthServer` on ``settings.host:settings.port``.

    Returns None when ``settings.port`` is 0 (metrics not served). Call ``stop()`` on
    the result when the process shuts down.
    """
    if settings.port == 0:
        return None
    server = HealthServer(registry, ready=ready, alive=alive)
    await server.start(settings.host, settings.port)
    log.info("metrics and health on %s:%d", settings.host, server.port)
    return server


FORBIDDEN_LABELS: frozenset[str] = frozenset({"url", "uri", "host", "hostname", "domain",
                                              "origin", "path", "target"})
"""Label names that would carry a URL or a host: never used."""

SERVICES: frozenset[str] = frozenset(ROLES) | {"bus", "store", "blob"}

_Metric = Counter | Gauge | Histogram


def metric_objects(metrics: Metrics) -> list[_Metric]:
    """Every metric of every bundle of ``metrics`` (served or detached)."""
    bundles = (metrics.frontier, metrics.fetcher, metrics.parser, metrics.dedup,
               metrics.bus, metrics.store, metrics.blob)
    return [value for bundle in bundles for value in vars(bundle).values()
            if isinstance(value, Counter | Gauge | Histogram)]


def check_conventions(metrics: Metrics) -> list[str]:
    """Problems with the names and labels of ``metrics`` (empty when all is well).

    ``crawler_<service>_<what>_<unit>`` with a known service; counters are exposed
    with ``_total``, so nothing else may end in ``_total``; histograms measure
    ``_seconds`` or ``_bytes``; no label may carry a URL or a host.
    """
    problems: list[str] = []
    for metric in metric_objects(metrics):
        desc = next(iter(metric.describe()))
        name, kind = desc.name, desc.type
        parts = name.split("_")
        if len(parts) < 4 or parts[0] != "crawler" or parts[1] not in SERVICES:
            problems.append(f"{name}: not crawler_<service>_<what>_<unit>")
        if kind != "counter" and name.endswith("_total"):
            problems.append(f"{name}: only counters end in _total")
        if kind == "histogram" and not name.endswith(("_seconds", "_bytes")):
            problems.append(f"{name}: histograms measure _seconds or _bytes")
        labels = set(metric._labelnames)
        for bad in sorted(labels & FORBIDDEN_LABELS):
            problems.append(f"{name}: label {bad!r} would carry a URL or a host")
    return problems
