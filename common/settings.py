"""Settings: one typed, frozen object built from the environment.

Every setting is named ``CRAWLER_<SECTION>_<KEY>`` (for example
``CRAWLER_FETCHER_CONNECT_TIMEOUT``). Defaults and documentation live here and only
here: each field's ``doc`` metadata is the documentation, and ``docs/settings.md`` is
generated from it (``crawler settings --markdown``).

Values are parsed by the field's type: ``int``, ``float``, ``bool`` (1/0, true/false,
yes/no, on/off), ``str`` and ``tuple[str, ...]`` (comma separated). An invalid value
raises :class:`SettingsError` naming the variable, the value and what was expected.
:meth:`Settings.validate` (run by ``from_env`` and ``replace``) also checks the
structured values (networks, DNS servers and answers, host maps, patterns, names that
end up in Cassandra, Kafka or file names), so every entry point refuses them at start
rather than failing later.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from common.addresses import (
    host_or_address,
    parse_nameserver,
    parse_network,
    parse_override,
    s3_endpoint_problem,
)
from common.hooks import load_hook
from common.patterns import compile_operator_pattern  # RE2: linear-time matching
from common.scope import rules_from_settings
from common.settingsbase import PREFIX as PREFIX  # re-exported: the names users know
from common.settingsbase import SettingsError as SettingsError
from common.settingsbase import env_name as env_name
from common.settingsbase import redact_userinfo as redact_userinfo
from common.urls import DEFAULT_TRACKING_PARAMS, TrackingRules

T = TypeVar("T")


def _f(default: Any, doc: str, *, minimum: float | None = None,
       maximum: float | None = None, choices: tuple[str, ...] | None = None) -> Any:
    """A setting: its default, its documentation and its bounds."""
    meta: dict[str, Any] = {"doc": doc}
    if minimum is not None:
        meta["minimum"] = minimum
    if maximum is not None:
        meta["maximum"] = maximum
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
    priority_levels: int = _f(4, "Number of priority front queues (seeds and the sitemap "
                              "files robots.txt names 0, links 1, sitemap-listed URLs 2, "
                              "refreshes and the sitemap files an index lists 3 by "
                              "default; a level past the last is capped at the last).",
                              minimum=1, maximum=100)
    recrawl_interval: float = _f(0.0, "Seconds after which a fetched page is due again for "
                                 "the first time; later intervals adapt to how often the "
                                 "page changes (see CRAWLER_REFRESH_*) (0: never refresh).",
                                 minimum=0)
    clock_offset_file: str = _f("", "For tests and simulations: a file holding a number of "
                                "seconds added to the wall clock of every time the crawler "
                                "reads (scheduling, fetch times, politeness, robots.txt "
                                "expiry), re-read when it changes, so a crawl can be moved "
                                "through days without waiting. Only ever move it forward. "
                                "Empty: the wall clock.")
    control_interval: float = _f(2.0, "Seconds between a cluster frontier's reads of the "
                                 "operator's switches (pause, blocked paths, scope).",
                                 minimum=0.1)
    stall_seconds: float = _f(120.0, "A frontier whose oldest due host has waited this "
                              "many seconds without being dispatched while it has fetch "
                              "capacity (or whose count of requests in flight exceeds "
                              "its hosts') logs its state and rebuilds its schedule "
                              "from the store; a host's dispatch is abandoned and tried "
                              "again after half of it (0: no watchdog).", minimum=0)
    frontier_concurrency: int = _f(64, "Messages a cluster frontier handles at once (of "
                                   "different hosts; embedded mode handles one at a time).",
                                   minimum=1, maximum=10_000)
    parser_concurrency: int = _f(16, "Pages a cluster parser handles at once (each "
                                 "waits for its parse in a worker process and for the "
                                 "broker to take its message).", minimum=1, maximum=10_000)
    dedup_concurrency: int = _f(64, "Pages a cluster dedup service handles at once (each "
                                "waits for a store look-up and for the broker to take its "
                                "messages).", minimum=1, maximum=10_000)
    page_processes: int = _f(1, "Embedded mode: worker processes that parse pages beside "
                             "the main process, so a crawl uses more than one core; WARC "
                             "records are written on threads of the main process (their "
                             "compression and digests run outside the interpreter's "
                             "lock), so a slow parse never delays them (0: parsing on "
                             "those threads too). Services in cluster mode use threads; "
                             "run more of them to use more cores.", minimum=0, maximum=64)
    parse_processes: int = _f(4, "Embedded mode with page processes: the most worker "
                              "processes that parse pages. The crawl starts with "
                              "page_processes of them; another starts while pages wait "
                              "for a parse (a backlog that lasted 2 s and holds at least "
                              "5 s of parsing) and the machine has at least half a core "
                              "idle, up to this many (0: "
                              "page_processes, none added). Parsing costs several times "
                              "what writing does, so on pages heavy to parse a second "
                              "parser keeps up with the fetching; where every core is "
                              "busy, none is added (docs/benchmarks.md). Idle CPU is the "
                              "machine's (/proc/stat): in a container whose CPU quota is "
                              "below the machine's cores, set this to page_processes.",
                              minimum=0, maximum=64)
    page_job_timeout: float = _f(30.0, "Embedded mode with page processes: a page job "
                                 "(parsing a page, reading a sitemap or a PDF) running longer "
                                 "than this many seconds is abandoned, its worker process "
                                 "killed and replaced, and the page recorded as a parse "
                                 "timeout (0: no limit). Threads cannot be stopped: there "
                                 "the parser's input bounds limit a page's cost. In "
                                 "cluster mode the limit of reading one sitemap file or "
                                 "PDF, which the fetcher and the parser do in a "
                                 "worker process of their own.",
                                 minimum=0)

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
    key: str = _f("host", "What a politeness queue (one gap, max_in_flight_per_host "
                  "requests in flight) is keyed on: host (each host name and port), domain "
                  "(the hosts under one registered domain, by the Public Suffix List, "
                  "private part included, share one queue; in cluster mode hosts are "
                  "partitioned by it), ip (the hosts whose names resolve to one address "
                  "share one queue; the frontier resolves each host, cached for the DNS "
                  "TTL; in cluster mode fetch tasks are partitioned by the address). "
                  "robots.txt and page caps stay per host "
                  "(docs/politeness.md).", choices=("host", "domain", "ip"))


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
    blocked_patterns: tuple[str, ...] = _f((), "Regular expressions (RE2 syntax: no "
                                           "backreferences or lookaround; matched in "
                                           "linear time); URLs whose path and query "
                                           "match one are never fetched.")
    max_redirect_hops: int = _f(5, "Redirect hops followed from one URL.", minimum=0)


@dataclass(frozen=True, slots=True)
class ScopeSettings:
    mode: str = _f("any", "Hosts that discovered links may lead to: any (all that robots.txt "
                   "and the trap rules allow), seed-hosts (the seeds' hosts, and hosts a "
                   "seed redirects to), seed-domains (hosts under the seeds' registered "
                   "domains, by the Public Suffix List: a seed on docs.example.co.uk "
                   "admits www.example.co.uk). Seeds are always crawled.",
                   choices=("any", "seed-hosts", "seed-domains"))
    allow_domains: tuple[str, ...] = _f((), "Domains links may lead to besides the mode's "
                                        "(each covers its subdomains, on any port); with "
                                        "mode any and a list, only these.")
    deny_domains: tuple[str, ...] = _f((), "Domains links never lead to (each covers its "
                                       "subdomains); wins over every allow rule.")
    path_prefixes: tuple[str, ...] = _f((), "Paths URLs must stay under, on every host "
                                        "('/docs' covers /docs and /docs/a, not /docsx); "
                                        "empty: any path.")
    no_parent: bool = _f(False, "Like wget --no-parent: URLs of a seed's host must stay "
                         "under the folder of one of its seeds (a seed "
                         "https://a.org/docs/guide/ keeps a.org to /docs/guide/).")


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    concurrency: int = _f(64, "Requests in flight across all hosts.", minimum=1,
                          maximum=10_000)
    connect_timeout: float = _f(5.0, "Connect timeout in seconds.", minimum=0.001)
    total_timeout: float = _f(30.0, "Whole-request timeout in seconds.", minimum=0.001)
    max_body_bytes: int = _f(5_000_000, "Body cap in bytes, applied after decompression.",
                             minimum=1)
    allowed_content_types: tuple[str, ...] = _f(
        ("text/html", "application/xhtml+xml", "text/plain"),
        "Media types that are downloaded; others end as 'bad content type'. Add "
        "application/pdf to store the text of PDFs (docs/pdf.md).")
    robots_cache_ttl: float = _f(86400.0, "Seconds a robots.txt answer is cached.", minimum=0)
    robots_error_retry: float = _f(600.0, "After a robots.txt 5xx or network error, the host "
                                   "is disallowed for the retry back-off of the URL that "
                                   "met it (politeness.backoff_base, doubled per try), "
                                   "at most this many seconds.", minimum=0)
    robots_max_bytes: int = _f(512_000, "robots.txt bytes parsed at most.", minimum=1)
    dns_servers: tuple[str, ...] = _f((), "DNS servers (ip or ip:port); empty: the system's.")
    dns_min_ttl: float = _f(60.0, "DNS answers are cached at least this long.", minimum=0)
    dns_max_ttl: float = _f(3600.0, "DNS answers are cached at most this long.", minimum=0)
    dns_max_addresses: int = _f(32, "Addresses kept of one name's DNS answer at most (the "
                                "lowest, IPv4 first: the ip politeness key's address is "
                                "always kept); a name answering thousands of records "
                                "costs no more to cache, check and connect to.", minimum=1,
                                maximum=10_000)
    dns_cache_max_bytes: int = _f(64 * 1024 * 1024, "Bytes the DNS cache holds at most "
                                  "(an estimate: about 500 bytes for a name with one "
                                  "address, 3 KiB with 32); the least recently used "
                                  "names go first. The cache also keeps at most 100,000 "
                                  "names.", minimum=4096)
    resolve: tuple[str, ...] = _f((), "Fixed answers host:port:address, like curl --resolve.")
    allow_networks: tuple[str, ...] = _f((), "CIDR ranges the SSRF guard lets through "
                                         "(for tests and demos, e.g. 127.0.0.1/32).")
    store_robots_in_warc: bool = _f(True, "Write robots.txt responses to the WARC too.")
    parse_inline: bool = _f(True, "Cluster mode: the fetcher parses each page it stored, "
                            "judges it for near-duplicates and publishes its outlinks "
                            "itself, and sends the verdict with the fetch result (no "
                            "parser or dedup service needed, two topics fewer per page); "
                            "false: separate parser and dedup services do it.")


@dataclass(frozen=True, slots=True)
class RefreshSettings:
    adaptive: bool = _f(True, "Adapt each stored page's revisit interval: halved after a "
                        "fetch that found the content changed (another content hash), "
                        "doubled after one that found it unchanged (same hash, or a 304), "
                        "within min_interval and max_interval; false: every page keeps "
                        "CRAWLER_CRAWL_RECRAWL_INTERVAL.")
    min_interval: float = _f(3600.0, "Least revisit interval in seconds (a starting "
                             "interval shorter than this is the least instead).", minimum=0)
    max_interval: float = _f(7_776_000.0, "Most revisit interval in seconds (90 days).",
                             minimum=0)
    share: float = _f(0.25, "Share of the fetches that refreshes of stored pages may take "
                      "while pages never fetched are also waiting for a free fetch slot; "
                      "when only one kind waits it takes every slot.", minimum=0.0,
                      maximum=0.9)
    priority: int = _f(3, "Priority level of refreshes (capped at the lowest level, "
                       "CRAWLER_CRAWL_PRIORITY_LEVELS - 1).", minimum=0, maximum=99)
    check_interval: float = _f(60.0, "Seconds of the crawl's clock between a running "
                               "frontier's looks for stored pages whose refresh is due "
                               "(they are also looked for at start and on taking over "
                               "hosts).", minimum=0.01)


@dataclass(frozen=True, slots=True)
class SitemapSettings:
    enabled: bool = _f(True, "Fetch the sitemaps robots.txt names (sitemaps.org protocol: "
                       "urlset, sitemap index, text, gzip) and queue the URLs they list.")
    probe: bool = _f(False, "Also try /sitemap.xml of a host whose robots.txt names no "
                     "sitemap (one more request per host; most answer 404).")
    priority: int = _f(2, "Priority level of the URLs a sitemap lists (seeds and the "
                       "sitemap files robots.txt names have the seed priority, links found "
                       "on pages 1); capped at the lowest level.", minimum=0, maximum=99)
    file_priority: int = _f(3, "Priority level of the sitemap files a sitemap index lists: "
                            "below the pages (links 1, URLs sitemaps list 2), so a host's "
                            "pages go first and a long index is read one file at a time "
                            "between them (those robots.txt names have the seed priority); "
                            "capped at the lowest level.", minimum=0, maximum=99)
    max_files_per_host: int = _f(1_000, "Sitemap files fetched per host at most (an index "
                                 "may list 50,000): the entries of an index past it are "
                                 "not queued, and a sitemap file whose turn comes after it "
                                 "is rejected as sitemap_files. 1,000 files of up to "
                                 "50,000 URLs each list far more than the pages-per-host "
                                 "cap; even at 100 URLs a file they reach its default.",
                                 minimum=1)
    max_urls: int = _f(50_000, "URLs read from one sitemap file at most (the protocol's "
                       "cap); the rest is left unread and the file recorded as "
                       "sitemap_capped.", minimum=1)
    max_bytes: int = _f(52_428_800, "Bytes of one sitemap file, after gzip decompression, "
                        "read at most (the protocol's 50 MB); also the download cap of a "
                        "sitemap.", minimum=1)
    max_index_depth: int = _f(1, "Sitemap indexes nested at most this deep: 1 lets an index "
                              "list sitemaps, whose own entries are then refused as "
                              "sitemap_depth (the protocol does not nest indexes).",
                              minimum=0, maximum=10)


@dataclass(frozen=True, slots=True)
class UrlSettings:
    tracking_params: tuple[str, ...] = _f(
        DEFAULT_TRACKING_PARAMS,
        "Query parameters removed in the canonical form ('*' matches any suffix).")
    extra_tracking_params: tuple[str, ...] = _f((), "More parameters to remove.")


@dataclass(frozen=True, slots=True)
class DedupSettings:
    simhash_threshold: int = _f(3, "SimHash bits: pages whose SimHash differs in at most this "
                                "many bits are near-duplicate candidates (block index), and "
                                "near duplicates of pages indexed without a sketch.",
                                minimum=0, maximum=31)
    jaccard_threshold: float = _f(0.8, "A candidate is a near duplicate when the estimated "
                                  "Jaccard similarity of the two pages' word 5-shingle sets "
                                  "(from their MinHash sketches) is at least this.",
                                  minimum=0.05, maximum=1.0)
    min_text_chars: int = _f(50, "Pages with less main text are neither checked for "
                             "near duplicates nor indexed: too little to say a page repeats "
                             "another (a 'Loading...' shell, an error line), and a near "
                             "duplicate's links are not followed. Longer short texts are "
                             "compared exactly (docs/text-quality.md).", minimum=0)
    link_linger: float = _f(0.05, "Cluster mode: seconds a dedup service gathers the "
                            "outlinks of many pages bound for one frontier partition into "
                            "one message (0: one message per page and partition).",
                            minimum=0.0, maximum=5.0)


@dataclass(frozen=True, slots=True)
class StoreSettings:
    backend: str = _f("sqlite", "State store: sqlite or cassandra.",
                      choices=("sqlite", "cassandra"))
    sqlite_path: str = _f("", "SQLite file; empty: <out_dir>/state.sqlite.")
    cassandra_hosts: tuple[str, ...] = _f(("127.0.0.1",), "Cassandra contact points.")
    cassandra_port: int = _f(9042, "Cassandra native port.", minimum=1, maximum=65535)
    keyspace: str = _f("crawl", "Cassandra keyspace (one per crawl): a lower-case letter, "
                       "then lower-case letters, digits or _ (at most 48).")
    replication_factor: int = _f(1, "Replication factor when the keyspace is created.",
                                 minimum=1)
    read_consistency: str = _f("LOCAL_ONE", "Consistency level of reads.")
    write_consistency: str = _f("LOCAL_QUORUM", "Consistency level of writes.")
    row_cache: int = _f(100_000, "URL rows a cluster frontier keeps in memory for the "
                        "hosts it owns, so that writing a row needs no read of it back "
                        "(about 1 KiB each; 0: none).", minimum=0)
    group_wait: float = _f(0.005, "Seconds a cluster store request (a page's content "
                           "look-up or record, its near-duplicate candidates) waits for "
                           "others of its kind to go out with it as one request (0: each "
                           "alone). Fewer, fuller requests cost Cassandra and the driver "
                           "less CPU per page; each page waits up to this long per step.",
                           minimum=0.0, maximum=1.0)


@dataclass(frozen=True, slots=True)
class BusSettings:
    backend: str = _f("memory", "Message bus: memory or kafka.", choices=("memory", "kafka"))
    kafka_bootstrap: str = _f("127.0.0.1:9092", "Kafka bootstrap servers.")
    partitions: int = _f(12, "Partitions of host-keyed topics.", minimum=1, maximum=1000)
    replication_factor: int = _f(1, "Replication factor when topics are created.", minimum=1)
    group_prefix: str = _f("crawler", "Prefix of consumer group names (letters, digits, "
                           "'.', '_', '-').")
    max_delivery_attempts: int = _f(5, "A message whose handler fails this many times goes "
                                    "to the dead-letter topic.", minimum=1)
    topic_prefix: str = _f("crawl", "Prefix of topic names (letters, digits, '.', '_', "
                           "'-').")


@dataclass(frozen=True, slots=True)
class BlobSettings:
    root: str = _f("", "Folder for WARC and text files; empty: <out_dir>/warc.")
    warc_max_bytes: int = _f(1_000_000_000, "WARC files roll over past this size.",
                             minimum=1024)
    prefix: str = _f("crawl", "File name prefix of WARC files.")
    backend: str = _f("local", "Where WARC, text and side files end up: local (the folder "
                      "CRAWLER_BLOB_ROOT) or s3 (an S3-compatible bucket; the folder is then "
                      "the local spool files are written to and uploaded from, and must "
                      "survive a restart for no record to be lost).", choices=("local", "s3"))
    s3_bucket: str = _f("", "Bucket of the s3 backend (it must exist).")
    s3_endpoint: str = _f("", "Endpoint URL of the S3-compatible server, e.g. "
                          "http://127.0.0.1:8333 (empty: AWS's endpoint for the region); "
                          "no user:password@ in it: the keys go in the credentials file "
                          "or the AWS_* variables.")
    s3_region: str = _f("us-east-1", "Region of the bucket (signing region).")
    s3_prefix: str = _f("", "Key prefix of the objects in the bucket: objects are named "
                        "<prefix>/<file> (empty: no prefix).")
    s3_path_style: bool = _f(False, "Path-style addressing (<endpoint>/<bucket>/<key>), "
                             "as most S3-compatible servers want; off: virtual-hosted "
                             "style (<bucket>.<endpoint>).")
    s3_credentials_file: str = _f("", "A file in the AWS shared-credentials format "
                                  "(aws_access_key_id, aws_secret_access_key, optional "
                                  "aws_session_token) to read the keys from, e.g. a mounted "
                                  "secret; empty: the AWS_ACCESS_KEY_ID, "
                                  "AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN variables.")
    s3_profile: str = _f("", "Section of the credentials file (empty: AWS_PROFILE, else "
                         "default).")
    s3_multipart_bytes: int = _f(64 * 1024 * 1024, "Files larger than this are uploaded "
                                 "in parts (multipart upload).", minimum=5 * 1024 * 1024)
    s3_part_bytes: int = _f(16 * 1024 * 1024, "Size of one part of a multipart upload.",
                            minimum=5 * 1024 * 1024, maximum=5 * 1024 * 1024 * 1024)
    s3_keep_uploaded: float = _f(60.0, "Seconds an uploaded file stays in the spool before "
                                 "it is deleted (at most until the process stops), so "
                                 "reading back a recent record stays local.", minimum=0)
    s3_upload_wait: float = _f(300.0, "Seconds a stopping process waits for its pending "
                               "uploads; what is left stays in the spool and is uploaded "
                               "by the next process that starts on it.", minimum=0)


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    port: int = _f(0, "Port of the /metrics endpoint (0: not served).", minimum=0,
                   maximum=65535)
    host: str = _f("127.0.0.1", "Address the metrics endpoint listens on.")


@dataclass(frozen=True, slots=True)
class RenderSettings:
    enabled: bool = _f(False, "Render chosen pages in headless Chromium and parse the DOM "
                       "their scripts built (docs/rendering.md): in embedded mode in the "
                       "crawler; in a cluster parsers hand them to the render service "
                       "(crawler render).")
    hosts: tuple[str, ...] = _f((), "Hosts whose pages are always rendered (a leading '.' "
                                "covers subdomains).")
    patterns: tuple[str, ...] = _f((), "Regular expressions (RE2) searched in the path and "
                                   "query; matching pages are always rendered.")
    auto: bool = _f(True, "Also render pages that look like an empty script-built shell "
                    "(the thresholds below).")
    shell_max_text_chars: int = _f(200, "Automatic rule: at most this many characters of "
                                   "main text...", minimum=0)
    shell_max_links: int = _f(2, "...and at most this many followable links...", minimum=0)
    shell_min_scripts: int = _f(1, "...and at least this many <script> elements.", minimum=0)
    browser: str = _f("", "Chromium executable; empty: chromium (or chromium-browser, "
                      "google-chrome) on the PATH.")
    sandbox: bool = _f(True, "Run Chromium in its own sandbox (off as root, where it "
                       "refuses to start). false: --no-sandbox, for containers without "
                       "user namespaces; the container's isolation then stands in for it.")
    page_timeout: float = _f(15.0, "Seconds a page may take to load and settle in the "
                             "browser; then it is abandoned (render_error).", minimum=0.1)
    settle_ms: int = _f(300, "Milliseconds without a new request of the page's scripts "
                        "(after the load event and their last answer, each of which waits "
                        "out the host's delay) for scripts to finish building the page.",
                        minimum=0, maximum=60_000)
    js_heap_mb: int = _f(256, "JavaScript heap cap of a page in MiB; a page over it "
                         "crashes its tab (render_error), not the crawl.", minimum=16)
    max_requests: int = _f(20, "Requests a page's scripts may make (after the rules); "
                           "more are blocked.", minimum=0)
    third_party: bool = _f(False, "Let scripts and XHR of other hosts through (each under "
                           "its host's robots.txt and politeness gate); default: blocked.")
    concurrency: int = _f(2, "Pages rendered at once.", minimum=1, maximum=64)


@dataclass(frozen=True, slots=True)
class ApiSettings:
    port: int = _f(0, "Port of the control API (0: not served).", minimum=0,
                   maximum=65535)
    host: str = _f("127.0.0.1", "Address the control API listens on.")
    token: str = _f("", "Bearer token the control API requires.")


@dataclass(frozen=True, slots=True)
class ParserSettings:
    markdown: bool = _f(True, "Also write each kept page's main content as Markdown: a "
                        "conversion record (text/markdown) in the text WARC files beside "
                        "its text record, named by markdownKey in the page record "
                        "(docs/markdown.md).")
    pdf_max_bytes: int = _f(5_000_000, "PDF bodies (application/pdf, downloaded only when "
                            "CRAWLER_FETCHER_ALLOWED_CONTENT_TYPES lists it) larger than "
                            "this are not read: recorded as parse_error. The download cap "
                            "CRAWLER_FETCHER_MAX_BODY_BYTES applies first (docs/pdf.md).",
                            minimum=1)
    pdf_max_pages: int = _f(500, "Pages of one PDF whose text is read at most (the page "
                            "count recorded is the whole file's).", minimum=1)
    hook: str = _f("", "An extraction hook: package.module:function, called with each "
                   "parsed page, whose dict is stored as the page record's extra "
                   "(docs/extraction-hook.md); empty: none.")
    hook_timeout: float = _f(5.0, "Seconds a hook call may take; a slower one loses its "
                             "page's extra fields, not the page.", minimum=0.01)
    hook_max_bytes: int = _f(16_384, "Bytes of JSON a hook's fields may take; more: the "
                             "page's extra is dropped.", minimum=2, maximum=262_144)


@dataclass(frozen=True, slots=True)
class Settings:
    crawl: CrawlSettings = field(default_factory=CrawlSettings)
    politeness: PolitenessSettings = field(default_factory=PolitenessSettings)
    traps: TrapSettings = field(default_factory=TrapSettings)
    scope: ScopeSettings = field(default_factory=ScopeSettings)
    fetcher: FetcherSettings = field(default_factory=FetcherSettings)
    sitemaps: SitemapSettings = field(default_factory=SitemapSettings)
    refresh: RefreshSettings = field(default_factory=RefreshSettings)
    urls: UrlSettings = field(default_factory=UrlSettings)
    dedup: DedupSettings = field(default_factory=DedupSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    bus: BusSettings = field(default_factory=BusSettings)
    blob: BlobSettings = field(default_factory=BlobSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    render: RenderSettings = field(default_factory=RenderSettings)
    parser: ParserSettings = field(default_factory=ParserSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, strict: bool = True) -> Settings:
        """Build settings from ``env`` (default: ``os.environ``).

        With ``strict``, a ``CRAWLER_*`` variable that names no setting is an error, so
        a typo does not silently fall back to a default. ``CRAWLER_TEST_*`` belongs to
        the test command (``CRAWLER_TEST_SERVERS``, ``CRAWLER_TEST_KUBECONFIG``, ...), not to
        the crawler, and is left alone.
        """
        env = os.environ if env is None else env
        known = set(variable_names())
        if strict:
            unknown = sorted(k for k in env if k.startswith(PREFIX + "_") and k not in known
                             and not k.startswith(PREFIX + "_TEST_"))
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
        if self.crawl.seed_priority >= self.crawl.priority_levels:
            raise SettingsError("CRAWLER_CRAWL_SEED_PRIORITY: must be below "
                                "CRAWLER_CRAWL_PRIORITY_LEVELS")
        if self.refresh.min_interval > self.refresh.max_interval:
            raise SettingsError("CRAWLER_REFRESH_MIN_INTERVAL: must not exceed "
                                "CRAWLER_REFRESH_MAX_INTERVAL")
        if self.fetcher.dns_min_ttl > self.fetcher.dns_max_ttl:
            raise SettingsError("CRAWLER_FETCHER_DNS_MIN_TTL: must not exceed "
                                "CRAWLER_FETCHER_DNS_MAX_TTL")
        if self.blob.backend == "s3" and not self.blob.s3_bucket:
            raise SettingsError("CRAWLER_BLOB_S3_BUCKET: needed when CRAWLER_BLOB_BACKEND=s3")
        if self.blob.s3_endpoint:
            problem = s3_endpoint_problem(self.blob.s3_endpoint)
            if problem:
                raise SettingsError(f"CRAWLER_BLOB_S3_ENDPOINT: {problem}")
        if self.blob.s3_part_bytes > self.blob.s3_multipart_bytes:
            raise SettingsError("CRAWLER_BLOB_S3_PART_BYTES: must not exceed "
                                "CRAWLER_BLOB_S3_MULTIPART_BYTES")
        _validate_structured(self)

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
    if isinstance(value, float) and not math.isfinite(value):
        raise SettingsError(f"{name}: expected a finite number, got {value!r}")
    minimum = f.metadata.get("minimum")
    if minimum is not None and isinstance(value, int | float) and value < minimum:
        raise SettingsError(f"{name}: must be at least {minimum:g}, got {value!r}")
    maximum = f.metadata.get("maximum", MAX_INT if isinstance(value, int) else None)
    if maximum is not None and isinstance(value, int | float) and value > maximum:
        raise SettingsError(f"{name}: must be at most {maximum:g}, got {value!r}")
    for text in value if isinstance(value, tuple) else (value,):
        if isinstance(text, str) and _CONTROL.search(text):
            raise SettingsError(f"{name}: must not contain control characters, "
                                f"got {value!r}")
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


MAX_INT = 2**53
"""Largest whole number any setting takes (stores keep 64-bit integers)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_KEYSPACE = re.compile(r"[a-z][a-z0-9_]{0,47}")
_KAFKA_NAME = re.compile(r"[A-Za-z0-9._-]+")
_KAFKA_TOPIC_MAX = 249
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # common.adapters.local_blobs
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")  # RFC 9309 2.2.1 (common.robots)
_HTTP_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 5.6.2
_MEDIA_TYPE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+/[!#$%&'*+.^_`|~0-9A-Za-z-]+")
CONSISTENCY_LEVELS = ("ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM",
                      "EACH_QUORUM", "SERIAL", "LOCAL_SERIAL", "LOCAL_ONE")
"""Cassandra's consistency level names (cassandra.ConsistencyLevel)."""
LONGEST_TOPIC = "discovered"
"""The longest topic name after the prefix (common.messages.Topic), for the length cap."""


def _validate_structured(s: Settings) -> None:
    """The checks of values with an inner structure; each error names its variable."""
    def each(section: str, key: str, items: tuple[str, ...],
             check: Any) -> None:
        for item in items:
            try:
                check(item)
            except ValueError as exc:
                raise SettingsError(f"{env_name(section, key)}: {exc}") from None

    c = s.crawl
    if not _PRODUCT_TOKEN.fullmatch(c.user_agent_product):
        raise SettingsError(f"CRAWLER_CRAWL_USER_AGENT_PRODUCT: expected letters, '_' and '-' "
                            f"only (a robots.txt product token), got {c.user_agent_product!r}")
    if not _HTTP_TOKEN.fullmatch(c.user_agent_version):
        raise SettingsError(f"CRAWLER_CRAWL_USER_AGENT_VERSION: expected a version without "
                            f"spaces or separators, got {c.user_agent_version!r}")
    if not re.fullmatch(r"[^\s()]+", c.contact_url):
        raise SettingsError(f"CRAWLER_CRAWL_CONTACT_URL: expected a URL without spaces or "
                            f"parentheses, got {c.contact_url!r}")
    if not c.out_dir:
        raise SettingsError("CRAWLER_CRAWL_OUT_DIR: must not be empty")

    f = s.fetcher
    each("fetcher", "allow_networks", f.allow_networks, parse_network)
    each("fetcher", "resolve", f.resolve, parse_override)
    each("fetcher", "dns_servers", f.dns_servers, parse_nameserver)

    def media_type(text: str) -> None:
        if not _MEDIA_TYPE.fullmatch(text):
            raise ValueError(f"expected type/subtype such as text/html, got {text!r}")

    each("fetcher", "allowed_content_types", f.allowed_content_types, media_type)

    for value in parse_host_map(s.politeness.host_delay_overrides,
                                "CRAWLER_POLITENESS_HOST_DELAY_OVERRIDES", float).values():
        if not math.isfinite(value) or value < 0:
            raise SettingsError("CRAWLER_POLITENESS_HOST_DELAY_OVERRIDES: expected "
                                f"host=seconds with seconds >= 0, got {value!r}")
    for cap in parse_host_map(s.traps.host_page_overrides,
                              "CRAWLER_TRAPS_HOST_PAGE_OVERRIDES", int).values():
        if cap < 1:
            raise SettingsError("CRAWLER_TRAPS_HOST_PAGE_OVERRIDES: expected host=N with "
                                f"N >= 1, got {cap!r}")

    each("traps", "blocked_patterns", s.traps.blocked_patterns, compile_operator_pattern)
    each("render", "patterns", s.render.patterns, compile_operator_pattern)
    rules_from_settings(s.scope)
    if s.parser.hook:
        each("parser", "hook", (s.parser.hook,), load_hook)

    def host(text: str) -> None:
        bare = text.removeprefix(".")
        name, sep, port = bare.rpartition(":")
        if not (host_or_address(bare) or (sep and port.isdigit()
                                           and host_or_address(name))):
            raise ValueError(f"not a host name (or host:port): {text!r}")

    each("traps", "blocked_hosts", s.traps.blocked_hosts, host)
    TrackingRules.from_settings(s.urls)

    st = s.store
    if not _KEYSPACE.fullmatch(st.keyspace):
        hint = (f"; use {st.keyspace.lower()!r} (Cassandra folds unquoted names to lower "
                "case)" if _KEYSPACE.fullmatch(st.keyspace.lower()) else "")
        raise SettingsError(f"CRAWLER_STORE_KEYSPACE: {st.keyspace!r} is not a valid keyspace "
                            f"name: a lower-case letter, then lower-case letters, digits or "
                            f"_ (at most 48){hint}")
    for key in ("read_consistency", "write_consistency"):
        level = getattr(st, key)
        if level.strip().upper() not in CONSISTENCY_LEVELS:
            raise SettingsError(f"{env_name('store', key)}: unknown consistency level "
                                f"{level!r} (one of {', '.join(CONSISTENCY_LEVELS)})")
    if not st.cassandra_hosts:
        raise SettingsError("CRAWLER_STORE_CASSANDRA_HOSTS: must name at least one host")

    def contact_point(text: str) -> None:
        if not host_or_address(text):
            raise ValueError(f"not a host name or address: {text!r}")

    each("store", "cassandra_hosts", st.cassandra_hosts, contact_point)

    b = s.bus
    for key in ("topic_prefix", "group_prefix"):
        value = getattr(b, key)
        if not _KAFKA_NAME.fullmatch(value):
            raise SettingsError(f"{env_name('bus', key)}: {value!r} is not a valid Kafka name "
                                "prefix: use letters, digits, '.', '_' and '-'")
    if len(b.topic_prefix) + 1 + len(LONGEST_TOPIC) > _KAFKA_TOPIC_MAX:
        raise SettingsError(f"CRAWLER_BUS_TOPIC_PREFIX: too long (topic names have at most "
                            f"{_KAFKA_TOPIC_MAX} characters)")
    for server in b.kafka_bootstrap.split(","):
        address = re.sub(r"^[A-Za-z_]+://", "", server.strip())
        name, sep, port = address.rpartition(":")
        if not (sep and port.isdigit() and 0 < int(port) < 65536 and host_or_address(name)):
            raise SettingsError(f"CRAWLER_BUS_KAFKA_BOOTSTRAP: expected host:port[,host:port"
                                f"...], got {b.kafka_bootstrap!r}")

    if not _FILE_NAME.fullmatch(s.blob.prefix):
        raise SettingsError(f"CRAWLER_BLOB_PREFIX: {s.blob.prefix!r} is not usable in file "
                            "names: use 1-64 letters, digits, '_', '.', '-' (not first)")
    for section, key in (("metrics", "host"), ("api", "host")):
        value = getattr(getattr(s, section), key)
        if not host_or_address(value):
            raise SettingsError(f"{env_name(section, key)}: expected an address to listen on, "
                                f"got {value!r}")
    if any(ch.isspace() for ch in s.api.token):
        raise SettingsError("CRAWLER_API_TOKEN: must not contain white space")


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
