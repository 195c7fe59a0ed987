"""Typed, versioned messages: the only things that travel between stages.

One topic carries one message type (see :data:`TOPIC_TYPES`). Messages are frozen
msgspec structs encoded as JSON; every message has a schema version ``v``. Decoding a
malformed message, a message of the wrong shape, a number out of its range (a negative
depth, a priority past :data:`MAX_PRIORITY`, ...) or an unknown version raises
:class:`MessageError`, and nothing else, so a bus adapter can dead-letter it. The
ranges are checked on decoding only: building a message checks nothing.

Queues carry pointers and small metadata, never page bodies: a fetched body lives in a
WARC record that :class:`RecordPointer` names.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from typing import Annotated, Any, TypeAlias, TypeVar

import msgspec

SCHEMA_VERSION = 1

# Ranges a decoded message must respect; anything else is a MessageError.
MAX_DEPTH = 1_000_000  # link depth from a seed
MAX_PRIORITY = 99  # 0 is the highest; CRAWLER_CRAWL_PRIORITY_LEVELS is at most 100
MAX_HOPS = 1_000  # redirect hops
MAX_ATTEMPTS = 1_000_000  # fetch or delivery attempts
MAX_SECONDS = 100_000_000.0  # delays and durations (over three years)
MAX_TIMESTAMP = 32_503_680_000.0  # wall-clock times: before 3000-01-01 (Unix seconds)
MAX_SIZE = 2**63 - 1  # byte offsets, lengths and counts
MAX_HTTP_STATUS = 999  # 0 when there was no response
# a MinHash sketch: common.minhash.SKETCH_BYTES (not imported here: it needs numpy)
MAX_SKETCH_BYTES = 512

Depth: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=MAX_DEPTH)]
Priority: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=MAX_PRIORITY)]
Hops: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=MAX_HOPS)]
Attempts: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=MAX_ATTEMPTS)]
Seconds: TypeAlias = Annotated[float, msgspec.Meta(ge=0, le=MAX_SECONDS)]
Timestamp: TypeAlias = Annotated[float, msgspec.Meta(ge=0, le=MAX_TIMESTAMP)]
Size: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=MAX_SIZE)]
HttpStatus: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=MAX_HTTP_STATUS)]
Ratio: TypeAlias = Annotated[float, msgspec.Meta(ge=0, le=1)]
# a language code (ISO 639-1 or the identifier's label); 35 is BCP 47's longest tag
Language: TypeAlias = Annotated[str, msgspec.Meta(min_length=1, max_length=35)]
# unsigned 64-bit: msgspec takes no bound past int64, so __post_init__ checks the top
SimHash: TypeAlias = Annotated[int, msgspec.Meta(ge=0)]
MAX_SIMHASH = 2**64 - 1


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
    RENDER = "render"  # FetchResult, key=host: pages to render -> render service


class LinkKind(enum.StrEnum):
    SEED = "seed"
    LINK = "link"
    REDIRECT = "redirect"
    CANONICAL = "canonical"
    SITEMAP = "sitemap"  # a sitemap file (named by robots.txt or a sitemap index)
    LISTED = "listed"  # a URL a sitemap lists


class TaskKind(enum.StrEnum):
    """What a fetched body is read as."""

    PAGE = "page"  # a page: parsed as HTML (or text), deduplicated, its links followed
    SITEMAP = "sitemap"  # a sitemap file (urlset, sitemap index or text): its URLs offered


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
    PARSE_TIMEOUT = "parse_timeout"  # parsing ran over the page job time limit
    OUT_OF_SCOPE = "out_of_scope"  # outside the crawl scope (hosts, domains, paths)
    SITEMAP = "sitemap"  # a sitemap file read whole; its URLs went to the frontier
    SITEMAP_INVALID = "sitemap_invalid"  # not a sitemap, malformed XML, a DTD or entities
    SITEMAP_CAPPED = "sitemap_capped"  # over 50,000 URLs or 50 MB: read up to the cap
    SITEMAP_DEPTH = "sitemap_depth"  # a sitemap nested deeper in indexes than allowed
    SITEMAP_FILES = "sitemap_files"  # the host's cap of sitemap files was reached
    RENDER_ERROR = "render_error"  # chosen for rendering, the browser failed; plain parse kept


def _check_simhash(value: int | None) -> None:
    # In __post_init__, which decoding runs too: the ValueError becomes a MessageError.
    if value is not None and value > MAX_SIMHASH:
        raise ValueError(f"simhash {value} does not fit in 64 bits")


class _Msg(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    v: int = SCHEMA_VERSION


class RecordPointer(msgspec.Struct, frozen=True):
    """Where a record lives in the blob store: a file, a byte offset and a length."""

    file: str
    offset: Size
    length: Size


class Link(msgspec.Struct, frozen=True, kw_only=True):
    """One URL offered to the frontier."""

    url: str
    depth: Depth = 0
    priority: Priority = 1
    kind: LinkKind = LinkKind.LINK
    source: str | None = None  # the page it was found on
    hops: Hops = 0  # redirect hops that led here
    # a URL a sitemap lists: its <lastmod>, as a Unix time (None: not given or unusable)
    lastmod: Timestamp | None = None
    # and its <changefreq> as seconds between changes (common.sitemaps.CHANGEFREQ_SECONDS)
    changefreq: Seconds | None = None


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
    depth: Depth = 0
    priority: Priority = 1
    attempt: Attempts = 1
    hops: Hops = 0
    etag: str | None = None
    last_modified: str | None = None
    # when the URL was last fetched: its stored copy (a refresh) or a failed attempt
    previous_fetch_at: Timestamp | None = None
    previous_record: RecordPointer | None = None  # the stored copy, for revisit records
    delay: Seconds = 1.0  # the host's politeness gap (seconds), also kept after robots.txt
    issued_at: Timestamp = 0.0
    kind: TaskKind = TaskKind.PAGE  # how the body is read
    # the URL's source: for a sitemap, the robots.txt that named it (or named the index
    # that lists it), whose host the sitemap may list URLs of
    source: str | None = None
    # the politeness key the host's gap and requests in flight are counted under
    # (common.politeness): None for the host itself; with ip keying the task is also
    # published under it, so one fetcher holds the address's gate
    politeness_key: str | None = None

    @property
    def gate_key(self) -> str:
        """What the fetcher's own gate keeps one request at a time and the gap for."""
        return self.politeness_key or self.host


MAX_INDEX_KEYS = 64  # near-duplicate index keys of one page (a handful in practice)


class NearIndex(msgspec.Struct, frozen=True, kw_only=True):
    """A unique page's near-duplicate index entries, left for its frontier owner to
    write with the page's result (a cluster fetcher that judges pages inline): the
    page's SimHash block keys and sketch keys, and its MinHash sketch. The URL and the
    SimHash are the verdict's."""

    keys: Annotated[list[Annotated[int, msgspec.Meta(ge=0)]],
                    msgspec.Meta(min_length=1, max_length=MAX_INDEX_KEYS)]
    sketch: Annotated[bytes, msgspec.Meta(max_length=MAX_SKETCH_BYTES)] | None = None

    def __post_init__(self) -> None:
        for key in self.keys:
            _check_simhash(key)


class StatusUpdate(_Msg, frozen=True, kw_only=True):
    """A later stage's verdict on a URL, for its frontier owner (topic status, key=host)."""

    url: str
    host: str
    status: UrlStatus
    reason: Reason | None = None
    duplicate_of: str | None = None
    simhash: SimHash | None = None
    content_hash: str | None = None
    detail: str | None = None  # what the verdict rests on (a sitemap: what it held)
    # the page's near-duplicate index entries, written by the frontier in the same
    # store write as the verdict (only with a SimHash; absent from older messages)
    index: NearIndex | None = None

    def __post_init__(self) -> None:
        _check_simhash(self.simhash)
        if self.index is not None and self.simhash is None:
            raise ValueError("near-duplicate index entries without a SimHash")


class FetchResult(_Msg, frozen=True, kw_only=True):
    """How a fetch ended (topic fetched, key=host)."""

    task: FetchTask
    outcome: FetchOutcome
    status: HttpStatus = 0  # HTTP status, 0 when no response
    fetched_at: Timestamp = 0.0  # wall-clock time the response ended
    elapsed: Seconds = 0.0  # response time in seconds
    content_type: str | None = None
    charset: str | None = None
    location: str | None = None  # absolute redirect target
    # a server's Retry-After as it came (the frontier caps it), so no upper bound here
    retry_after: Annotated[float, msgspec.Meta(ge=0)] | None = None  # seconds
    etag: str | None = None
    last_modified: str | None = None
    x_robots_tag: str | None = None
    record: RecordPointer | None = None  # the WARC response or revisit record
    # with a revisit record of the URL's own copy on a first fetch (an earlier delivery
    # of this task stored the body, then its fetcher stopped before the page was
    # parsed): the record that holds the payload, which is parsed in its place
    payload_record: RecordPointer | None = None
    content_hash: str | None = None  # "sha256:<hex>" of the body as received (decoded)
    body_bytes: Size = 0
    duplicate_of: str | None = None  # URL whose identical body was stored first
    robots_crawl_delay: Seconds | None = None
    robots_fetched: bool = False  # this task also fetched robots.txt
    # with robots_fetched: the sitemaps it names (or /sitemap.xml when it names none and
    # CRAWLER_SITEMAPS_PROBE is on), for the frontier to queue
    sitemaps: list[str] = msgspec.field(default_factory=list)
    error: str | None = None
    # the page's verdict, when the fetcher parsed and judged it itself (cluster mode
    # with parse_inline): the frontier applies it with the result, in one write
    verdict: StatusUpdate | None = None


class ParsedPage(_Msg, frozen=True, kw_only=True):
    """A parsed page (topic parsed, key=host)."""

    url: str
    host: str
    depth: Depth
    priority: Priority
    status: HttpStatus
    fetched_at: Timestamp
    content_hash: str | None
    simhash: SimHash | None  # 64-bit SimHash of the extracted text
    # bottom-k MinHash sketch of the text (common.minhash); absent from older parsers'
    # messages
    sketch: Annotated[bytes, msgspec.Meta(max_length=MAX_SKETCH_BYTES)] | None = None
    text_chars: Size = 0
    title: str | None = None
    record: RecordPointer | None = None
    text_record: RecordPointer | None = None
    # text signals (docs/text-quality.md); absent from older parsers' messages
    text_words: Size = 0
    language: Language | None = None  # None: not identified
    language_confidence: Ratio | None = None
    boilerplate_ratio: Ratio | None = None  # visible text not in the main text
    links: list[str] = msgspec.field(default_factory=list)  # absolute, canonical, followable
    noindex: bool = False
    nofollow: bool = False
    duplicate_of: str | None = None  # set when the body was an exact duplicate
    error: str | None = None
    timed_out: bool = False  # the error is the page job time limit
    kind: TaskKind = TaskKind.PAGE  # a sitemap: its URLs are already on the bus
    reason: Reason | None = None  # a sitemap: how reading it ended (Reason.SITEMAP...)
    detail: str | None = None  # a sitemap: what it held
    rendered: RecordPointer | None = None  # the DOM a browser built (docs/rendering.md)
    render_error: str | None = None  # chosen for rendering, and the browser failed
    # the Markdown of the main content (docs/markdown.md); absent from older parsers'
    # messages and when CRAWLER_PARSER_MARKDOWN is off
    markdown_record: RecordPointer | None = None
    document_pages: Size | None = None  # a PDF: its page count (docs/pdf.md)
    # what the extraction hook returned (docs/extraction-hook.md); None: no hook, or
    # its answer was dropped
    extra: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _check_simhash(self.simhash)


class PageRecord(_Msg, frozen=True, kw_only=True, rename="camel"):
    """One stored page, for an indexer (topic pages). JSON names are camelCase."""

    url: str
    fetched_at: str  # ISO 8601, UTC
    status: HttpStatus
    content_hash: str | None
    simhash: str | None  # 16 hex digits
    storage_key: RecordPointer | None
    text_key: RecordPointer | None
    duplicate_of: str | None = None
    near_duplicate_of: str | None = None
    # text signals (docs/text-quality.md); None for a page without text or from an
    # older parser
    language: Language | None = None
    language_confidence: Ratio | None = None
    text_chars: Size | None = None
    text_words: Size | None = None
    boilerplate_ratio: Ratio | None = None
    # the page's Markdown record (docs/markdown.md); None without one
    markdown_key: RecordPointer | None = None
    document_pages: Size | None = None  # a PDF: its page count (docs/pdf.md)
    extra: dict[str, Any] | None = None  # the extraction hook's fields, if any
    # (docs/extraction-hook.md)


class PayloadEncoding(enum.StrEnum):
    """How :attr:`DeadLetter.payload` holds the original bytes."""

    UTF8 = "utf-8"  # the bytes were UTF-8 text: the text itself
    BASE64 = "base64"  # anything else: standard base64


# Longest payload a dead letter carries, in bytes of its JSON form. With the error
# and the key (both cut to MAX_DEAD_LETTER_TEXT), a letter stays well under Kafka's
# default message limit (1,000,000 bytes in the producer, 1 MiB in the broker).
MAX_DEAD_LETTER_PAYLOAD = 512 * 1024
MAX_DEAD_LETTER_TEXT = 4096


class DeadLetter(_Msg, frozen=True, kw_only=True):
    """A message that could not be handled, with the error.

    ``payload`` carries the original bytes compactly (build letters with
    :func:`dead_letter`; :func:`dead_letter_payload` gives the bytes back): as text when
    they are UTF-8 whose JSON form fits in :data:`MAX_DEAD_LETTER_PAYLOAD` bytes, else
    as base64 of at most the first 3/4 of that many bytes (``truncated`` then
    says that bytes were left out). ``size`` and ``digest`` describe the whole
    original, so a cut payload can still be matched against its source.
    """

    topic: str
    key: str
    payload: str
    error: str
    attempts: Attempts
    encoding: PayloadEncoding = PayloadEncoding.UTF8
    size: Size | None = None  # bytes of the original message
    digest: str | None = None  # "sha256:<hex>" of the original message
    truncated: bool = False  # payload holds only the first bytes of the original


class HostControl(_Msg, frozen=True, kw_only=True):
    """An operator's change to one host, for the frontier that owns it (topic control,
    key=host). Fields left as None leave that setting as it is."""

    host: str
    delay: Seconds | None = None  # per-host delay override, seconds
    clear_delay: bool = False  # drop the delay override
    blocked: bool | None = None
    max_pages: Size | None = None
    issued_at: Timestamp = 0.0


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
    Topic.RENDER: FetchResult,
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


def _clip(text: str) -> str:
    # A key decoded with surrogatepass may hold lone surrogates, which JSON cannot carry.
    text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if len(text) <= MAX_DEAD_LETTER_TEXT:
        return text
    return text[:MAX_DEAD_LETTER_TEXT - 3] + "..."


def dead_letter(topic: str, key: str, payload: bytes, error: str, attempts: int, *,
                limit: int = MAX_DEAD_LETTER_PAYLOAD) -> DeadLetter:
    """The dead letter of ``payload``, the original message's bytes (see :class:`DeadLetter`).

    UTF-8 text is kept as it is while its JSON form (a control character takes six
    bytes there) fits in ``limit`` bytes; anything else goes as base64, cut
    to its first ``limit // 4 * 3`` bytes (``limit=0``: no payload, only its size and
    digest). ``key`` and ``error`` are cut to :data:`MAX_DEAD_LETTER_TEXT` characters.
    """
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    size = len(payload)
    digest = "sha256:" + hashlib.sha256(payload).hexdigest()
    common: dict[str, Any] = {"topic": _clip(topic), "key": _clip(key),
                              "error": _clip(error), "attempts": attempts,
                              "size": size, "digest": digest}
    if size <= limit:  # JSON text is never shorter than the bytes it holds
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            if len(_encoder.encode(text)) - 2 <= limit:  # without the quotes
                return DeadLetter(payload=text, **common)
    keep = min(size, limit // 4 * 3)
    return DeadLetter(payload=base64.b64encode(payload[:keep]).decode("ascii"),
                      encoding=PayloadEncoding.BASE64, truncated=keep < size, **common)


def dead_letter_payload(letter: DeadLetter) -> bytes:
    """The original bytes a dead letter carries (only the first ones when ``truncated``)."""
    if letter.encoding is PayloadEncoding.BASE64:
        return base64.b64decode(letter.payload)
    return letter.payload.encode("utf-8", "surrogatepass")
