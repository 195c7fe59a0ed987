"""Settings: one typed, frozen object built from the environment.

Every setting is named ``CRAWLER_<SECTION>_<KEY>`` (for example
``CRAWLER_FETCHER_CONNECT_TIMEOUT``). Defaults and documentation live here and only
here: each field's ``doc`` metadata is the documentation, and ``docs/settings.md`` is
generated from it (``crawler settings --markdown``).

Values are parsed by the field's type: ``int``, ``float``, ``bool`` (1/0, true/false,
yes/no, on/off), ``str`` and ``tuple[str, ...]`` (comma separated). An invalid value
raises :class:`SettingsError` naming the variable, the value and what was expected.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

PREFIX = "CRAWLER"


class SettingsError(ValueError):
    """An invalid or unknown setting; the message names the variable."""


def _f(default: Any, doc: str, *, minimum: float | None = None,
       choices: tuple[str, ...] | None = None) -> Any:
    """A setting: its default, its documentation and its bounds."""
    meta: dict[str, Any] = {"doc": doc}
    if minimum is not None:
        meta["minimum"] = minimum
    if choices is not None:
        meta["choices"] = choices
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class CrawlSettings:
    user_agent_product: str = _f("PoliteCrawler", "Product token of the User-Agent; robots.txt "
                                 "groups are matched against it.")
    user_agent_version: str = _f("0.1", "Version sent after the product token.")
    contact_url: str = _f("https://example.com/crawler-info",
                          "Contact page named in the User-Agent.")
    max_pages: int = _f(0, "Stop after this many page fetches (0: no limit).", minimum=0)
    out_dir: str = _f("crawl-out", "Folder for state, WARC files, text and page records "
                      "in embedded mode.")
    seed_priority: int = _f(0, "Priority level of seed URLs (0 is the highest).", minimum=0)
    priority_levels: int = _f(3, "Number of priority front queues.", minimum=1)
    recrawl_interval: float = _f(0.0, "Seconds after which a fetched page is due again "
                                 "(0: never refresh).", minimum=0)
    control_interval: float = _f(2.0, "Seconds between a cluster frontier's reads of the "
                                 "operator's switches (pause, blocked paths).", minimum=0.1)
    frontier_concurrency: int = _f(64, "Messages a cluster frontier handles at once (of "
                                   "different hosts; embedded mode handles one at a time).",
                                   minimum=1)
    page_processes: int = _f(1, "Embedded mode: worker processes that write WARC records "
                             "and parse pages beside the main process, so a crawl uses "
                             "more than one core (0: worker threads of the main "
                             "process). Services in cluster mode use threads; run more "
                             "of them to use more cores.", minimum=0)

    @property
    def user_agent(self) -> str:
        return f"{self.user_agent_product}/{self.user_agent_version} (+{self.contact_url})"


@dataclass(frozen=True, slots=True)
class PolitenessSettings:
    default_delay: float = _f(1.0, "Smallest gap in seconds between the end of one response "
                              "and the next request to the same host.", minimum=0)
    max_crawl_delay: float = _f(30.0, "robots.txt Crawl-delay values are capped at this.",
                                minimum=0)
    response_time_factor: float = _f(2.0, "The gap is also at least this many times the "
                                     "host's last response time.", minimum=0)
    max_in_flight_per_host: int = _f(1, "Requests in flight per host at once.", minimum=1)
    max_retry_after: float = _f(3600.0, "Retry-After values are capped at this (seconds).",
                                minimum=0)
    backoff_base: float = _f(30.0, "First retry waits this long (seconds); each further "
                             "retry doubles it.", minimum=0)
    backoff_max: float = _f(3600.0, "Longest retry back-off (seconds).", minimum=0)
    max_attempts: int = _f(5, "A URL that fails this many times is marked dead.", minimum=1)
    host_delay_overrides: tuple[str, ...] = _f((), "Per-host delay overrides, host=seconds.")


@dataclass(frozen=True, slots=True)
class TrapSettings:
    max_url_length: int = _f(2000, "Longer URLs are rejected as traps.", minimum=16)
    max_path_segments: int = _f(32, "URLs with more path segments are rejected.", minimum=1)
    max_depth: int = _f(16, "Largest link depth from a seed (seeds are depth 0).", minimum=0)
    max_pages_per_host: int = _f(100000, "Pages fetched per host at most.", minimum=1)
    host_page_overrides: tuple[str, ...] = _f((), "Per-host page caps, host=N.")
    max_repeated_segment: int = _f(3, "A path segment repeated more often than this is a "
                                   "trap (/a/b/a/b/a/b).", minimum=1)
    max_query_params: int = _f(16, "URLs with more query parameters are rejected.", minimum=1)
    blocked_hosts: tuple[str, ...] = _f((), "Hosts never fetched (a leading '.' blocks "
                                        "subdomains too).")
    blocked_patterns: tuple[str, ...] = _f((), "Regular expressions; URLs whose path and "
                                           "query match one are never fetched.")
    max_redirect_hops: int = _f(5, "Redirect hops followed from one URL.", minimum=0)


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    concurrency: int = _f(64, "Requests in flight across all hosts.", minimum=1)
    connect_timeout: float = _f(5.0, "Connect timeout in seconds.", minimum=0.001)
    total_timeout: float = _f(30.0, "Whole-request timeout in seconds.", minimum=0.001)
    max_body_bytes: int = _f(5_000_000, "Body cap in bytes, applied after decompression.",
                             minimum=1)
    allowed_content_types: tuple[str, ...] = _f(
        ("text/html", "application/xhtml+xml", "text/plain"),
        "Media types that are downloaded; others end as 'bad content type'.")
    robots_cache_ttl: float = _f(86400.0, "Seconds a robots.txt answer is cached.", minimum=0)
    robots_error_retry: float = _f(600.0, "After a robots.txt 5xx or network error, the host "
                                   "is disallowed for this many seconds.", minimum=0)
    robots_max_bytes: int = _f(512_000, "robots.txt bytes parsed at most.", minimum=1)
    dns_servers: tuple[str, ...] = _f((), "DNS servers (ip or ip:port); empty: the system's.")
    dns_min_ttl: float = _f(60.0, "DNS answers are cached at least this long.", minimum=0)
    dns_max_ttl: float = _f(3600.0, "DNS answers are cached at most this long.", minimum=0)
    resolve: tuple[str, ...] = _f((), "Fixed answers host:port:address, like curl --resolve.")
    allow_networks: tuple[str, ...] = _f((), "CIDR ranges the SSRF guard lets through "
                                         "(for tests and demos, e.g. 127.0.0.1/32).")
    store_robots_in_warc: bool = _f(True, "Write robots.txt responses to the WARC too.")


@dataclass(frozen=True, slots=True)
class UrlSettings:
    tracking_params: tuple[str, ...] = _f(
        ("utm_*", "gclid", "fbclid", "msclkid", "dclid", "mc_cid", "mc_eid", "_ga", "yclid"),
        "Query parameters removed in the canonical form ('*' matches any suffix).")
    extra_tracking_params: tuple[str, ...] = _f((), "More parameters to remove.")


@dataclass(frozen=True, slots=True)
class DedupSettings:
    simhash_threshold: int = _f(3, "Pages whose SimHash differs in at most this many bits are "
                                "near-duplicates.", minimum=0)
    min_text_chars: int = _f(200, "Pages with less extracted text are not checked for "
                             "near-duplicates.", minimum=0)


@dataclass(frozen=True, slots=True)
class StoreSettings:
    backend: str = _f("sqlite", "State store: sqlite or cassandra.",
                      choices=("sqlite", "cassandra"))
    sqlite_path: str = _f("", "SQLite file; empty: <out_dir>/state.sqlite.")
    cassandra_hosts: tuple[str, ...] = _f(("127.0.0.1",), "Cassandra contact points.")
    cassandra_port: int = _f(9042, "Cassandra native port.", minimum=1)
    keyspace: str = _f("crawl", "Cassandra keyspace (one per crawl).")
    replication_factor: int = _f(1, "Replication factor when the keyspace is created.",
                                 minimum=1)
    read_consistency: str = _f("LOCAL_ONE", "Consistency level of reads.")
    write_consistency: str = _f("LOCAL_QUORUM", "Consistency level of writes.")


@dataclass(frozen=True, slots=True)
class BusSettings:
    backend: str = _f("memory", "Message bus: memory or kafka.", choices=("memory", "kafka"))
    kafka_bootstrap: str = _f("127.0.0.1:9092", "Kafka bootstrap servers.")
    partitions: int = _f(12, "Partitions of host-keyed topics.", minimum=1)
    replication_factor: int = _f(1, "Replication factor when topics are created.", minimum=1)
    group_prefix: str = _f("crawler", "Prefix of consumer group names.")
    max_delivery_attempts: int = _f(5, "A message whose handler fails this many times goes "
                                    "to the dead-letter topic.", minimum=1)
    topic_prefix: str = _f("crawl", "Prefix of topic names.")


@dataclass(frozen=True, slots=True)
class BlobSettings:
    root: str = _f("", "Folder for WARC and text files; empty: <out_dir>/warc.")
    warc_max_bytes: int = _f(1_000_000_000, "WARC files roll over past this size.",
                             minimum=1024)
    prefix: str = _f("crawl", "File name prefix of WARC files.")


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    port: int = _f(0, "Port of the /metrics endpoint (0: not served).", minimum=0)
    host: str = _f("127.0.0.1", "Address the metrics endpoint listens on.")


@dataclass(frozen=True, slots=True)
class ApiSettings:
    port: int = _f(0, "Port of the control API (0: not served).", minimum=0)
    host: str = _f("127.0.0.1", "Address the control API listens on.")
    token: str = _f("", "Bearer token the control API requires.")


@dataclass(frozen=True, slots=True)
class Settings:
    crawl: CrawlSettings = field(default_factory=CrawlSettings)
    politeness: PolitenessSettings = field(default_factory=PolitenessSettings)
    traps: TrapSettings = field(default_factory=TrapSettings)
    fetcher: FetcherSettings = field(default_factory=FetcherSettings)
    urls: UrlSettings = field(default_factory=UrlSettings)
    dedup: DedupSettings = field(default_factory=DedupSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    bus: BusSettings = field(default_factory=BusSettings)
    blob: BlobSettings = field(default_factory=BlobSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    api: ApiSettings = field(default_factory=ApiSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, strict: bool = True) -> Settings:
        """Build settings from ``env`` (default: ``os.environ``).

        With ``strict``, a ``CRAWLER_*`` variable that names no setting is an error, so
        a typo does not silently fall back to a default.
        """
        env = os.environ if env is None else env
        known = set(variable_names())
        if strict:
            unknown = sorted(k for k in env if k.startswith(PREFIX + "_") and k not in known)
            if unknown:
                raise SettingsError(f"{unknown[0]}: no such setting")
        sections: dict[str, Any] = {}
        for sec in dataclasses.fields(cls):
            sec_cls = _section_type(sec)
            hints = typing.get_type_hints(sec_cls)
            values: dict[str, Any] = {}
            for f in dataclasses.fields(sec_cls):
                name = env_name(sec.name, f.name)
                if name in env:
                    values[f.name] = _parse(name, env[name], hints[f.name])
            sections[sec.name] = sec_cls(**values)
        settings = cls(**sections)
        settings.validate()
        return settings

    def replace(self, **sections: Mapping[str, Any]) -> Settings:
        """Return a copy with fields changed: ``s.replace(fetcher={"concurrency": 8})``."""
        changed: dict[str, Any] = {}
        for name, values in sections.items():
            current = getattr(self, name)
            changed[name] = dataclasses.replace(current, **values)
        new = dataclasses.replace(self, **changed)
        new.validate()
        return new

    def validate(self) -> None:
        for sec in dataclasses.fields(self):
            section = getattr(self, sec.name)
            for f in dataclasses.fields(section):
                _check(env_name(sec.name, f.name), getattr(section, f.name), f)
        if self.fetcher.connect_timeout > self.fetcher.total_timeout:
            raise SettingsError(
                "CRAWLER_FETCHER_CONNECT_TIMEOUT: must not exceed CRAWLER_FETCHER_TOTAL_TIMEOUT")
        if self.fetcher.dns_min_ttl > self.fetcher.dns_max_ttl:
            raise SettingsError("CRAWLER_FETCHER_DNS_MIN_TTL: must not exceed "
                                "CRAWLER_FETCHER_DNS_MAX_TTL")
        parse_host_map(self.politeness.host_delay_overrides,
                       "CRAWLER_POLITENESS_HOST_DELAY_OVERRIDES", float)
        parse_host_map(self.traps.host_page_overrides, "CRAWLER_TRAPS_HOST_PAGE_OVERRIDES", int)

    def to_env(self) -> dict[str, str]:
        """The settings as environment variables (what a Helm ConfigMap would carry)."""
        out: dict[str, str] = {}
        for sec in dataclasses.fields(self):
            section = getattr(self, sec.name)
            for f in dataclasses.fields(section):
                out[env_name(sec.name, f.name)] = _format(getattr(section, f.name))
        return out


def _section_type(sec: dataclasses.Field[Any]) -> type[Any]:
    hints = typing.get_type_hints(Settings)
    t = hints[sec.name]
    assert isinstance(t, type)
    return t


def env_name(section: str, key: str) -> str:
    return f"{PREFIX}_{section.upper()}_{key.upper()}"


def variable_names() -> list[str]:
    names = []
    for sec in dataclasses.fields(Settings):
        for f in dataclasses.fields(_section_type(sec)):
            names.append(env_name(sec.name, f.name))
    return names


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, doc) for every setting, in declaration order."""
    rows = []
    defaults = Settings()
    for sec in dataclasses.fields(Settings):
        section = getattr(defaults, sec.name)
        for f in dataclasses.fields(section):
            rows.append((env_name(sec.name, f.name), _format(getattr(section, f.name)),
                         str(f.metadata.get("doc", ""))))
    return rows


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _parse(name: str, raw: str, t: Any) -> Any:
    text = raw.strip()
    if t is bool:
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise SettingsError(f"{name}: expected true or false, got {raw!r}")
    if t is int:
        try:
            return int(text.replace("_", ""))
        except ValueError:
            raise SettingsError(f"{name}: expected a whole number, got {raw!r}") from None
    if t is float:
        try:
            value = float(text)
        except ValueError:
            raise SettingsError(f"{name}: expected a number, got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise SettingsError(f"{name}: expected a finite number, got {raw!r}")
        return value
    if t is str:
        return text
    origin = typing.get_origin(t)
    if origin is tuple or (isinstance(t, types.GenericAlias) and t.__origin__ is tuple):
        return tuple(part.strip() for part in text.split(",") if part.strip())
    raise SettingsError(f"{name}: unsupported setting type {t!r}")  # pragma: no cover


def _check(name: str, value: Any, f: dataclasses.Field[Any]) -> None:
    minimum = f.metadata.get("minimum")
    if minimum is not None and isinstance(value, int | float) and value < minimum:
        raise SettingsError(f"{name}: must be at least {minimum:g}, got {value!r}")
    choices = f.metadata.get("choices")
    if choices is not None and value not in choices:
        raise SettingsError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def parse_host_map(items: tuple[str, ...], name: str, conv: type[T]) -> dict[str, T]:
    """Parse ``host=value`` pairs; an invalid pair raises :class:`SettingsError`."""
    out: dict[str, T] = {}
    for item in items:
        host, sep, value = item.partition("=")
        if not sep or not host.strip():
            raise SettingsError(f"{name}: expected host=value, got {item!r}")
        try:
            out[host.strip().lower()] = conv(value.strip())  # type: ignore[call-arg]
        except ValueError:
            raise SettingsError(f"{name}: bad value in {item!r}") from None
    return out
