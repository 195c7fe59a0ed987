"""Typed, versioned messages: the only things that travel between stages.

One topic carries one message type (see :data:`TOPIC_TYPES`). Messages are frozen
msgspec structs encoded as JSON; every message has a schema version ``v``. Decoding a
malformed message, a message of the wrong shape or an unknown version raises
:class:`MessageError`, and nothing else, so a bus adapter can dead-letter it.

Queues carry pointers and small metadata, never page bodies: a fetched body lives in a
WARC record that :class:`RecordPointer` names.
"""

from __future__ import annotations

import enum
from typing import Any, TypeAlias, TypeVar

import msgspec

SCHEMA_VERSION = 1


class MessageError(ValueError):
    """A message that cannot be decoded: malformed, wrong shape or unknown version."""


class Topic(enum.StrEnum):
    """Logical topics; a bus adapter prefixes them (``crawl.discovered``)."""

    DISCOVERED = "discovered"  # Discovered, key=host: URLs entering the frontier
    FETCH = "fetch"  # FetchTask, key=host: frontier -> fetcher
    FETCHED = "fetched"  # FetchResult, key=host: fetcher -> frontier and parser
    PARSED = "parsed"  # ParsedPage, key=host: parser -> dedup
    STATUS = "status"  # StatusUpdate, key=host: verdicts of later stages -> frontier
    PAGES = "pages"  # PageRecord, key=host: one per stored page, for the indexer
    DEAD_LETTER = "deadletter"  # DeadLetter: messages that failed too often
    CONTROL = "control"  # HostControl, key=host: operator changes for the host's owner


class LinkKind(enum.StrEnum):
    SEED = "seed"
    LINK = "link"
    REDIRECT = "redirect"
    CANONICAL = "canonical"
    SITEMAP = "sitemap"


class FetchOutcome(enum.StrEnum):
    """How one fetch attempt ended (a closed set)."""

    OK = "ok"  # 2xx with a body stored
    NOT_MODIFIED = "not_modified"  # 304 to a conditional GET
    REDIRECT = "redirect"  # 3xx with a Location; the target goes back to the frontier
    HTTP_ERROR = "http_error"  # 4xx (not 429): final
    SERVER_ERROR = "server_error"  # 5xx (not 503 with Retry-After): retried
    THROTTLED = "throttled"  # 429, or 503 with Retry-After: retried after the wait
    TIMEOUT = "timeout"  # connect or total timeout: retried
    NETWORK_ERROR = "network_error"  # connection refused/reset, bad response: retried
    DNS_ERROR = "dns_error"  # name did not resolve: retried
    ROBOTS_BLOCKED = "robots_blocked"  # robots.txt disallows the URL: final
    ROBOTS_UNAVAILABLE = "robots_unavailable"  # robots.txt 5xx/timeout: retried later
    SSRF_BLOCKED = "ssrf_blocked"  # resolves to a forbidden address: final
    TOO_LARGE = "too_large"  # body over the cap (after decompression): final
    BAD_CONTENT_TYPE = "bad_content_type"  # media type not in the allowed list: final
    UNSUPPORTED = "unsupported"  # a scheme or URL the fetcher cannot fetch: final


RETRYABLE_OUTCOMES = frozenset({
    FetchOutcome.SERVER_ERROR, FetchOutcome.THROTTLED, FetchOutcome.TIMEOUT,
    FetchOutcome.NETWORK_ERROR, FetchOutcome.DNS_ERROR, FetchOutcome.ROBOTS_UNAVAILABLE,
})


class UrlStatus(enum.StrEnum):
    """Where a URL is in its life (url_state.status)."""

    QUEUED = "queued"  # waiting in its host's queue (next_fetch_at may be in the future)
    IN_FLIGHT = "in_flight"  # handed to a fetcher
    FETCHED = "fetched"  # fetched and stored; parse and dedup not yet confirmed
    DONE = "done"  # fetched, parsed and deduplicated (or a final non-page outcome)
    REJECTED = "rejected"  # never fetched, for a recorded reason
    DEAD = "dead"  # failed max_attempts times


class Reason(enum.StrEnum):
    """Why a URL was rejected or ended without a stored page."""

    ROBOTS = "robots"
    BLOCKED = "blocked"  # operator block by host or pattern
    HOST_CAP = "host_cap"  # pages-per-host cap reached
    DEPTH = "depth"
    TRAP_LENGTH = "trap_length"
    TRAP_SEGMENTS = "trap_segments"
    TRAP_REPEAT = "trap_repeat"
    TRAP_QUERY = "trap_query"
    REDIRECT_CAP = "redirect_cap"
    NOT_HTTP = "not_http"
    INVALID_URL = "invalid_url"
    SSRF = "ssrf"
    TOO_LARGE = "too_large"
    BAD_CONTENT_TYPE = "bad_content_type"
    HTTP_ERROR = "http_error"
    DEAD = "dead"
    DUPLICATE = "duplicate"  # exact duplicate body of another URL
    NEAR_DUPLICATE = "near_duplicate"
    REDIRECTED = "redirected"  # a redirect; its target was handed to the frontier
    NOT_MODIFIED = "not_modified"
    PARSE_ERROR = "parse_error"


class _Msg(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    v: int = SCHEMA_VERSION


class RecordPointer(msgspec.Struct, frozen=True):
    """Where a record lives in the blob store: a file, a byte offset and a length."""

    file: str
    offset: int
    length: int


class Link(msgspec.Struct, frozen=True, kw_only=True):
    """One URL offered to the frontier."""

    url: str
    depth: int = 0
    priority: int = 1
    kind: LinkKind = LinkKind.LINK
    source: str | None = None  # the page it was found on
    hops: int = 0  # redirect hops that led here


class Discovered(_Msg, frozen=True, kw_only=True):
    """URLs entering the frontier (topic discovered, key=host): links of ``host``, or
    also of other hosts in the same bus partition (one frontier owner takes them all)."""

    host: str
    links: list[Link]


class FetchTask(_Msg, frozen=True, kw_only=True):
    """One URL to fetch (topic fetch, key=host)."""

    task_id: str
    url: str
    host: str
    depth: int = 0
    priority: int = 1
    attempt: int = 1
    hops: int = 0
    etag: str | None = None
    last_modified: str | None = None
    previous_fetch_at: float | None = None  # when the stored copy was fetched (refresh)
    previous_record: RecordPointer | None = None  # the stored copy, for revisit records
    delay: float = 1.0  # the host's politeness gap (seconds), also kept after robots.txt
    issued_at: float = 0.0


class FetchResult(_Msg, frozen=True, kw_only=True):
    """How a fetch ended (topic fetched, key=host)."""

    task: FetchTask
    outcome: FetchOutcome
    status: int = 0  # HTTP status, 0 when no response
    fetched_at: float = 0.0  # wall-clock time the response ended
    elapsed: float = 0.0  # response time in seconds
    content_type: str | None = None
    charset: str | None = None
    location: str | None = None  # absolute redirect target
    retry_after: float | None = None  # seconds
    etag: str | None = None
    last_modified: str | None = None
    x_robots_tag: str | None = None
    record: RecordPointer | None = None  # the WARC response or revisit record
    content_hash: str | None = None  # "sha256:<hex>" of the body as received (decoded)
    body_bytes: int = 0
    duplicate_of: str | None = None  # URL whose identical body was stored first
    robots_crawl_delay: float | None = None
    robots_fetched: bool = False  # this task also fetched robots.txt
    error: str | None = None


class ParsedPage(_Msg, frozen=True, kw_only=True):
    """A parsed page (topic parsed, key=host)."""

    url: str
    host: str
    depth: int
    priority: int
    status: int
    fetched_at: float
    content_hash: str | None
    simhash: int | None  # 64-bit SimHash of the extracted text
    text_chars: int = 0
    title: str | None = None
    record: RecordPointer | None = None
    text_record: RecordPointer | None = None
    links: list[str] = msgspec.field(default_factory=list)  # absolute, canonical, followable
    noindex: bool = False
    nofollow: bool = False
    duplicate_of: str | None = None  # set when the body was an exact duplicate
    error: str | None = None


class StatusUpdate(_Msg, frozen=True, kw_only=True):
    """A later stage's verdict on a URL, for its frontier owner (topic status, key=host)."""

    url: str
    host: str
    status: UrlStatus
    reason: Reason | None = None
    duplicate_of: str | None = None
    simhash: int | None = None
    content_hash: str | None = None


class PageRecord(_Msg, frozen=True, kw_only=True, rename="camel"):
    """One stored page, for an indexer (topic pages). JSON names are camelCase."""

    url: str
    fetched_at: str  # ISO 8601, UTC
    status: int
    content_hash: str | None
    simhash: str | None  # 16 hex digits
    storage_key: RecordPointer | None
    text_key: RecordPointer | None
    duplicate_of: str | None = None
    near_duplicate_of: str | None = None


class DeadLetter(_Msg, frozen=True, kw_only=True):
    """A message that could not be handled, with the error."""

    topic: str
    key: str
    payload: str  # the original bytes, decoded as UTF-8 with replacement
    error: str
    attempts: int


class HostControl(_Msg, frozen=True, kw_only=True):
    """An operator's change to one host, for the frontier that owns it (topic control,
    key=host). Fields left as None leave that setting as it is."""

    host: str
    delay: float | None = None  # per-host delay override, seconds
    clear_delay: bool = False  # drop the delay override
    blocked: bool | None = None
    max_pages: int | None = None
    issued_at: float = 0.0


Message: TypeAlias = (Discovered | FetchTask | FetchResult | ParsedPage | StatusUpdate
                      | PageRecord | DeadLetter | HostControl)

TOPIC_TYPES: dict[Topic, type[Any]] = {
    Topic.DISCOVERED: Discovered,
    Topic.FETCH: FetchTask,
    Topic.FETCHED: FetchResult,
    Topic.PARSED: ParsedPage,
    Topic.STATUS: StatusUpdate,
    Topic.PAGES: PageRecord,
    Topic.DEAD_LETTER: DeadLetter,
    Topic.CONTROL: HostControl,
}

M = TypeVar("M")

_encoder = msgspec.json.Encoder()
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {
    t: msgspec.json.Decoder(t) for t in TOPIC_TYPES.values()
}


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def decode(kind: type[M], data: bytes) -> M:
    """Decode ``data`` as a ``kind`` message; any problem raises :class:`MessageError`."""
    decoder = _decoders.get(kind)
    if decoder is None:
        raise MessageError(f"{kind!r} is not a message type")
    try:
        msg = decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MessageError(f"malformed {kind.__name__}: {exc}") from None
    version = getattr(msg, "v", None)
    if version != SCHEMA_VERSION:
        raise MessageError(f"{kind.__name__}: unknown schema version {version!r}")
    return msg  # type: ignore[no-any-return]


def decode_topic(topic: Topic, data: bytes) -> Message:
    return decode(TOPIC_TYPES[topic], data)  # type: ignore[no-any-return]
