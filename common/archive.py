"""WARC/1.1 output through warcio: what the crawl stores, and how to read it back.

:class:`ArchiveWriter` writes into a :class:`~common.ports.BlobStore`:

- stream ``warc``: per fetch a ``response`` record, then a ``request`` and (when given)
  a ``metadata`` record, both with ``WARC-Concurrent-To`` naming the response; exact
  duplicates and 304 answers as ``revisit`` records (WARC 1.1 profiles
  ``identical-payload-digest`` and ``server-not-modified``) with HTTP headers and no
  body;
- stream ``warc`` also: the DOM a browser built from a response (:mod:`render`) as a
  ``conversion`` record (``text/html``) whose ``WARC-Refers-To`` names the response;
- stream ``text``: extracted text as ``conversion`` records (WET-style) whose
  ``WARC-Refers-To`` names the response they were made from;
- side file ``index.cdxj``: one CDXJ line per response or revisit record, written while
  crawling (unsorted; ``LC_ALL=C sort`` makes it an index pywb can use).

Every record is its own gzip member, so a :class:`~common.messages.RecordPointer`
(file, offset, length) is enough to read it alone. Every new file starts with a
``warcinfo`` record: the writer registers it as the store's file header.

Stored HTTP headers describe the stored bytes. The fetcher hands over the body after
the HTTP client has undone Content-Encoding and chunked Transfer-Encoding, so:

- ``Content-Encoding`` and ``Transfer-Encoding`` are removed; their original values
  are kept in ``X-Crawler-Original-Content-Encoding`` and
  ``X-Crawler-Original-Transfer-Encoding``;
- ``Content-Length`` is set to the stored body length; a different original value is
  kept in ``X-Crawler-Original-Content-Length``;
- those three ``X-Crawler-Original-*`` names sent by a server are dropped;
- header names that are not HTTP tokens are dropped; control characters in values
  (CR and LF included) become spaces, undecodable bytes become U+FFFD, and warcio
  percent-encodes non-ASCII values (RFC 8187 style);
- the target URI is stored in ASCII form (WHATWG serialisation with IDNA host and
  percent-encoded path and query, fragment removed).

A body the fetcher did not receive in full (cut at a size cap, a time-out, a dropped
connection) is stored as received, with ``WARC-Truncated`` on the response record
(WARC 1.1 section 5.13: ``length``, ``time``, ``disconnect`` or ``unspecified``); its
Content-Length is still that of the stored bytes, so readers see a consistent record.

Digests are warcio's: ``WARC-Block-Digest`` and ``WARC-Payload-Digest`` as
``sha1:<base32>``, the form other WARC tools expect. The crawl's own content hash is
:func:`content_hash`, ``sha256:<hex>`` of the body.

All methods are synchronous; call them through a thread from async code. The writer
holds no mutable state, so several threads may share it (the store serialises
appends).
"""

from __future__ import annotations

import base64
import hashlib
import http
import ipaddress
import json
import math
import re
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from io import BytesIO
from typing import Any, Literal, get_args
from urllib.parse import quote, urlsplit

import ada_url
import msgspec
from isal.isal_zlib import compress as _gzip
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.statusandheaders import StatusAndHeaders

from common.messages import RecordPointer
from common.ports import BlobStore

WARC_VERSION = "1.1"
# gzip level of every record, ISA-L's (isal): each record is one gzip member that any
# gzip reader (warcio, zlib) reads. Measured on the 181 real pages of the
# article-extraction benchmark (174 KB each): zlib's level 5, used before, spent 2.25 ms
# per page for 0.200 of the bytes; ISA-L's level 2 spends 0.27 ms for 0.228 (its level 3
# 0.59 ms for 0.220; zlib-ng's level 5 1.27 ms for 0.200). On 20 KB pages 0.26 against
# 0.05 ms. So the records are about 14% larger and cost an eighth of the CPU.
GZIP_LEVEL = 2
_GZIP_WBITS = 16 + 15  # a gzip member, a 32 KiB window
PROFILE_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
PROFILE_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
RevisitProfile = Literal["identical-payload-digest", "server-not-modified"]
Truncation = Literal["length", "time", "disconnect", "unspecified"]
"""Why a stored body is incomplete: the WARC-Truncated values of WARC 1.1 section 5.13."""
TRUNCATIONS: frozenset[str] = frozenset(get_args(Truncation))
_PROFILES: dict[str, str] = {
    "identical-payload-digest": PROFILE_IDENTICAL,
    "server-not-modified": PROFILE_NOT_MODIFIED,
}

ORIGINAL_CONTENT_ENCODING = "X-Crawler-Original-Content-Encoding"
ORIGINAL_TRANSFER_ENCODING = "X-Crawler-Original-Transfer-Encoding"
ORIGINAL_CONTENT_LENGTH = "X-Crawler-Original-Content-Length"
_REWRITTEN = frozenset(h.lower() for h in (
    "Content-Encoding", "Transfer-Encoding", "Content-Length", ORIGINAL_CONTENT_ENCODING,
    ORIGINAL_TRANSFER_ENCODING, ORIGINAL_CONTENT_LENGTH))

_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_WARC_DATE_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z")
_RECORD_ID_RE = re.compile(r"<[^\s<>]+>")
_DIGEST_RE = re.compile(r"[A-Za-z0-9-]+:[A-Za-z0-9+/=]+")
_HTTP_VERSION_RE = re.compile(r"\d(?:\.\d)?")
# Characters RFC 3986 allows in a URI, plus '%' of the escapes already there.
_URI_SAFE = "!#$%&'()*+,-./:;=?@[]_~"


class ArchiveError(ValueError):
    """A record that cannot be written (bad arguments) or read back (bad bytes)."""


class Written(msgspec.Struct, frozen=True, kw_only=True):
    """Where a record went and what later records need to refer to it."""

    pointer: RecordPointer  # the response / revisit / conversion record alone
    record_id: str  # WARC-Record-ID, "<urn:uuid:...>"
    warc_date: str  # WARC-Date, e.g. "2024-05-01T12:00:00.123456Z"
    payload_digest: str | None = None  # WARC-Payload-Digest "sha1:<base32>"; None for text


# Header fields of a conversion (text) record: the identified language as Common
# Crawl's text records carry it, and this crawler's own fields (docs/text-quality.md).
LANGUAGE_FIELD = "WARC-Identified-Content-Language"
LANGUAGE_CONFIDENCE_FIELD = "Crawler-Language-Confidence"
TEXT_CHARS_FIELD = "Crawler-Text-Chars"
TEXT_WORDS_FIELD = "Crawler-Text-Words"
BOILERPLATE_RATIO_FIELD = "Crawler-Boilerplate-Ratio"
# The WARC-Payload-Digest of the record a conversion record refers to (docs/markdown.md).
REFERS_TO_DIGEST_FIELD = "WARC-Refers-To-Payload-Digest"
_LANGUAGE_RE = re.compile(r"[A-Za-z]{2,8}(?:-[A-Za-z0-9]{1,8})*")


class TextFields(msgspec.Struct, frozen=True, kw_only=True):
    """Signals of a text written as a conversion record: ``language`` (None: not
    identified, and no language field is written), its ``language_confidence``, the
    text's ``chars`` and ``words``, and the ``boilerplate_ratio`` of its page."""

    language: str | None
    language_confidence: float | None
    chars: int
    words: int
    boilerplate_ratio: float | None

    def header_fields(self) -> dict[str, str]:
        fields = {TEXT_CHARS_FIELD: str(self.chars), TEXT_WORDS_FIELD: str(self.words)}
        if self.language is not None:
            fields[LANGUAGE_FIELD] = _check(_LANGUAGE_RE, "language", self.language)
            if self.language_confidence is not None:
                fields[LANGUAGE_CONFIDENCE_FIELD] = f"{self.language_confidence:.4f}"
        if self.boilerplate_ratio is not None:
            fields[BOILERPLATE_RATIO_FIELD] = f"{self.boilerplate_ratio:.4f}"
        return fields


class StoredResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A response or revisit record read back by pointer."""

    url: str  # WARC-Target-URI
    record_type: str  # "response" or "revisit"
    status: int
    reason: str
    headers: list[tuple[str, str]]  # as stored (see the module docstring)
    body: bytes  # the stored payload; empty for a revisit
    record_id: str
    warc_date: str
    payload_digest: str | None  # for a revisit: the digest of the payload it refers to
    profile: str | None = None  # WARC-Profile of a revisit
    refers_to_url: str | None = None
    refers_to_date: str | None = None
    refers_to_record_id: str | None = None
    truncated: str | None = None  # WARC-Truncated: why the stored body is incomplete


# -- pure helpers ----------------------------------------------------------------------


def content_hash(body: bytes) -> str:
    """The crawl's content hash of a (decoded) body: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


def payload_digest(body: bytes) -> str:
    """``WARC-Payload-Digest`` of a stored body: ``sha1:<base32>``, as warcio writes it."""
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode("ascii")


def warc_date(timestamp: float) -> str:
    """WARC 1.1 date of a Unix time, with microseconds: ``2024-05-01T12:00:00.123456Z``."""
    if not math.isfinite(timestamp):
        raise ArchiveError(f"not a time: {timestamp!r}")
    try:
        when = datetime.fromtimestamp(timestamp, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ArchiveError(f"not a time: {timestamp!r}") from exc
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def cdx_timestamp(date: str) -> str:
    """The 14-digit CDX timestamp of a WARC date."""
    return re.sub(r"\D", "", date)[:14]


def target_uri(url: str) -> str:
    """``url`` as an ASCII URI for WARC-Target-URI (see the module docstring)."""
    try:
        parsed = ada_url.URL(url)
        parsed.hash = ""
        text: str = parsed.href
    except ValueError:
        text = url.split("#", 1)[0]
    uri = quote(text.encode("utf-8", "replace"), safe=_URI_SAFE)
    if not uri:
        raise ArchiveError("empty URL")
    return uri


def warm_up() -> None:
    """Import the SURT library that every record's index line needs (about 0.3 s of CPU:
    it brings tldextract and an HTTP library). Imported on first use otherwise, so a
    process that writes records calls this before its first one (a page worker at its
    start, a service before it reports ready): a crawl's first pages then do not wait
    for it."""
    import surt  # type: ignore[import-untyped]  # noqa: F401  # loaded now, used in surt_key


def surt_key(url: str) -> str:
    """SURT sort key of ``url``, as pywb computes it (``com,example)/path?query``)."""
    import surt  # here (see warm_up): it imports tldextract and an HTTP library

    try:
        key: str = surt.surt(url)
    except Exception:  # the reference implementation raises many kinds on odd URLs
        key = url.lower()
    # the key is the first space-separated field of a CDXJ line
    return quote(key, safe=_URI_SAFE + ")")


def _clean_text(value: str) -> str:
    """A header value with undecodable bytes replaced and control characters as spaces."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. from surrogateescape decoding
        value = value.encode("utf-8", "surrogateescape" if _escaped_only(value)
                             else "replace").decode("utf-8", "replace")
    return _CONTROL_RE.sub(" ", value).strip()


#: a parameter's value in a header value (``; name="value"``), as warcio encodes it
_PARAM_VALUE_RE = re.compile(r'[=]["\']?([^;"]+)["\']?(?=[;]?)')


def _ascii_value(value: str) -> str:
    """A header value in ASCII: each non-ASCII parameter value as RFC 8187 (``*=UTF-8''``
    and percent-encoded), or the whole value percent-encoded when that is not enough (a
    non-ASCII character outside a parameter's value), as warcio would serialise it, so
    the record read back has the header as written."""
    if value.isascii():
        return value
    if ";" in value:
        encoded = _PARAM_VALUE_RE.sub(lambda m: "*=UTF-8''" + quote(m.group(1)), value)
        if encoded != value and encoded.isascii():
            return encoded
    return quote(value)


def _escaped_only(value: str) -> bool:
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in value)


def clean_headers(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers that serialise to a valid HTTP header block (see the module docstring)."""
    out = []
    for name, value in headers:
        name = str(name).strip()
        if _TOKEN_RE.fullmatch(name):
            out.append((name, _ascii_value(_clean_text(str(value)))))
    return out


def stored_response_headers(headers: Sequence[tuple[str, str]],
                            body_length: int | None) -> list[tuple[str, str]]:
    """Response headers that describe a decoded body of ``body_length`` bytes.

    With ``body_length`` None (a revisit without its body), Content-Length is kept
    unless Content-Encoding was removed, since it then counted encoded bytes.
    """
    out: list[tuple[str, str]] = []
    encodings: list[str] = []
    transfer: list[str] = []
    lengths: list[str] = []
    for name, value in clean_headers(headers):
        low = name.lower()
        if low == "content-encoding":
            encodings.append(value)
        elif low == "transfer-encoding":
            transfer.append(value)
        elif low == "content-length":
            lengths.append(value)
        elif low not in _REWRITTEN:
            out.append((name, value))
    original_ce = ", ".join(v for v in encodings if v)
    if original_ce:
        out.append((ORIGINAL_CONTENT_ENCODING, original_ce))
    original_te = ", ".join(v for v in transfer if v)
    if original_te:
        out.append((ORIGINAL_TRANSFER_ENCODING, original_te))
    original_cl = ", ".join(lengths)
    if body_length is not None:
        out.append(("Content-Length", str(body_length)))
        if lengths and original_cl != str(body_length):
            out.append((ORIGINAL_CONTENT_LENGTH, original_cl))
    elif lengths:
        out.append((ORIGINAL_CONTENT_LENGTH if original_ce else "Content-Length",
                    original_cl))
    return out


def _status_line(status: int, reason: str) -> str:
    if not isinstance(status, int) or not 100 <= status <= 999:
        raise ArchiveError(f"invalid HTTP status {status!r}")
    reason = _clean_text(reason).encode("ascii", "replace").decode("ascii")
    if not reason:
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = ""
    return f"{status} {reason}".rstrip()


def _protocol(http_version: str) -> str:
    return "HTTP/" + (http_version if _HTTP_VERSION_RE.fullmatch(http_version) else "1.1")


def _check(regex: re.Pattern[str], what: str, value: str) -> str:
    if not regex.fullmatch(value):
        raise ArchiveError(f"invalid {what}: {value!r}")
    return value


def _record_id() -> str:
    return f"<urn:uuid:{uuid.uuid4()}>"


def _fields(items: Mapping[str, object]) -> bytes:
    """An application/warc-fields block."""
    lines = []
    for key, value in items.items():
        if value is None or value == "":
            continue
        _check(_TOKEN_RE, "field name", key)
        lines.append(f"{key}: {_clean_text(str(value))}\r\n")
    return "".join(lines).encode("utf-8")


def _mime(headers: Sequence[tuple[str, str]]) -> str:
    for name, value in headers:
        if name.lower() == "content-type":
            mime = value.split(";", 1)[0].strip().lower()
            return mime or "unk"
    return "unk"


def cdxj_line(*, url: str, date: str, mime: str, status: int | None,
              digest: str | None, pointer: RecordPointer) -> str:
    """One CDXJ line: ``<SURT> <timestamp14> {json}``, fields as pywb writes them."""
    block: dict[str, str] = {"url": url, "mime": mime}
    if status is not None:
        block["status"] = str(status)
    if digest:
        block["digest"] = digest[5:] if digest.startswith("sha1:") else digest
    block["length"] = str(pointer.length)
    block["offset"] = str(pointer.offset)
    block["filename"] = pointer.file
    return f"{surt_key(url)} {cdx_timestamp(date)} {json.dumps(block)}"


#: Content-Type of a record's block where the caller names none (warcio's defaults).
_BLOCK_TYPES = {"response": "application/http; msgtype=response",
                "revisit": "application/http; msgtype=response",
                "request": "application/http; msgtype=request",
                "warcinfo": "application/warc-fields",
                "metadata": "application/warc-fields"}
#: Records with a WARC-Payload-Digest: those whose block has an HTTP payload. A digest
#: on a warc-fields or text block has no agreed meaning, and a revisit carries the
#: digest of the payload it refers to (set by the caller).
_PAYLOAD_DIGEST_TYPES = frozenset(("response", "request"))


def _http_head(statusline: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """An HTTP status (or request) line and header block, as warcio serialises it: in
    ASCII, non-ASCII values percent-encoded (the headers given are clean already, see
    :func:`clean_headers`; the percent-encoding is warcio's own, for the odd rest)."""
    text = statusline + "\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers) + "\r\n"
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        status = StatusAndHeaders(statusline, list(headers))
        data: bytes = status.to_ascii_bytes()
        return data


def _record(record_type: str, fields: Mapping[str, str], *, head: bytes | None = None,
            payload: bytes = b"", content_type: str | None = None) -> bytes:
    """One WARC/1.1 record, compressed as one gzip member (see :func:`_serialise`).

    ``fields`` are the WARC header fields in order, from WARC-Type on; the digests,
    Content-Type and Content-Length follow them, as warcio writes them: a
    WARC-Payload-Digest (SHA-1 of ``payload``) on response and request records, a
    WARC-Block-Digest of the block (``head``, the HTTP status line and headers, then
    ``payload``). A revisit's block is its ``head`` alone.
    """
    lines = [f"WARC/{WARC_VERSION}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in fields.items()]
    if record_type in _PAYLOAD_DIGEST_TYPES:
        lines.append(f"WARC-Payload-Digest: {payload_digest(payload)}\r\n")
    block = hashlib.sha1(head or b"")
    if payload:
        block.update(payload)
    lines.append("WARC-Block-Digest: sha1:"
                 + base64.b32encode(block.digest()).decode("ascii") + "\r\n")
    kind = content_type or _BLOCK_TYPES.get(record_type, "application/warc-record")
    lines.append(f"Content-Type: {kind}\r\n")
    lines.append(f"Content-Length: {len(head or b'') + len(payload)}\r\n\r\n")
    return _serialise("".join(lines).encode("utf-8"), head or b"", payload, b"\r\n\r\n")


def _serialise(*parts: bytes) -> bytes:
    """The bytes of one record compressed as one gzip member, at ISA-L's
    :data:`GZIP_LEVEL` (warcio would compress at zlib's level 9), so each record can be
    read alone. One call on the joined parts: ISA-L's streaming compressor writes a
    record of a few hundred bytes (a request, a metadata record) nearly three times as
    large."""
    return _gzip(b"".join(parts), GZIP_LEVEL, _GZIP_WBITS)


# -- the writer ------------------------------------------------------------------------


class ArchiveWriter:
    """Writes WARC records into a blob store; see the module docstring."""

    def __init__(self, blobs: BlobStore, *, software: str, operator: str | None = None,
                 warc_stream: str = "warc", text_stream: str = "text",
                 cdx_name: str = "index.cdxj", is_part_of: str | None = None) -> None:
        self.blobs = blobs
        self.software = software
        self.operator = operator
        self.is_part_of = is_part_of
        self.warc_stream = warc_stream
        self.text_stream = text_stream
        self.cdx_name = cdx_name
        blobs.set_file_header(warc_stream, self.warcinfo_record)
        blobs.set_file_header(text_stream, self._text_warcinfo)

    def warcinfo_record(self, file: str, description: str | None = None) -> bytes:
        """The warcinfo record that begins the file ``file`` (a blob key)."""
        info = {
            "software": f"{self.software} (warcio/{version('warcio')})",
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
                          "warc-format/warc-1.1/",
            "hostname": socket.gethostname(),
            "operator": self.operator,
            "isPartOf": self.is_part_of,
            "robots": "obey",
            "description": description,
        }
        block = _fields(info)
        name = file.rsplit("/", 1)[-1]

        return _record("warcinfo", {"WARC-Type": "warcinfo", "WARC-Record-ID": _record_id(),
                                    "WARC-Date": warc_date(datetime.now(UTC).timestamp()),
                                    "WARC-Filename": name},
                       payload=block, content_type="application/warc-fields")

    def _text_warcinfo(self, file: str) -> bytes:
        return self.warcinfo_record(file, "Extracted text as conversion records; each "
                                          "WARC-Refers-To names its response record.")

    def write_exchange(self, *, url: str, method: str,
                       request_headers: Sequence[tuple[str, str]], status: int,
                       reason: str, response_headers: Sequence[tuple[str, str]],
                       body: bytes, fetched_at: float, ip: str | None,
                       http_version: str = "1.1",
                       metadata: Mapping[str, object] | None = None,
                       remember: Callable[[RecordPointer, StoredResponse], None] | None = None,
                       truncated: Truncation | None = None) -> Written:
        """Write response, request and (optional) metadata records of one fetch.

        ``body`` is the decoded body. The three records are appended together, so they
        share a file; the returned pointer covers the response record alone.
        ``truncated``, when the body is not all the server meant to send, becomes the
        response record's ``WARC-Truncated`` field.
        ``remember``, when given, gets the pointer and the response as
        :func:`read_response` would read it back, so a reader in the same process can
        skip reading, decompressing and checking the record it has just written.
        """
        uri = target_uri(url)
        date = warc_date(fetched_at)
        protocol = _protocol(http_version)
        statusline = _status_line(status, reason)
        method = _check(_TOKEN_RE, "method", method).upper()
        if truncated is not None and truncated not in TRUNCATIONS:
            raise ArchiveError(f"invalid WARC-Truncated value {truncated!r}")
        resp_headers = stored_response_headers(response_headers, len(body))
        resp_id = _record_id()
        common = {"WARC-Date": date, "WARC-Target-URI": uri}
        address = _ip(ip)
        if address:
            common["WARC-IP-Address"] = address

        resp_fields = {"WARC-Type": "response", "WARC-Record-ID": resp_id, **common}
        if truncated is not None:
            resp_fields["WARC-Truncated"] = truncated

        digest = payload_digest(body)
        response = _record("response", resp_fields,
                           head=_http_head(f"{protocol} {statusline}", resp_headers),
                           payload=body)

        parts = urlsplit(uri)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        req_headers = clean_headers(request_headers)
        if not any(n.lower() == "host" for n, _ in req_headers):
            req_headers.insert(0, ("Host", parts.netloc.rsplit("@", 1)[-1]))

        request = _record("request", {"WARC-Type": "request", "WARC-Record-ID": _record_id(),
                                      **common, "WARC-Concurrent-To": resp_id},
                          head=_http_head(f"{method} {target} {protocol}", req_headers))
        meta = b""
        if metadata:
            meta = _record("metadata", {"WARC-Type": "metadata", "WARC-Record-ID": _record_id(),
                                        **common, "WARC-Concurrent-To": resp_id},
                           payload=_fields(metadata), content_type="application/warc-fields")

        group = self.blobs.append(self.warc_stream, response + request + meta)
        pointer = RecordPointer(group.file, group.offset, len(response))
        self.blobs.append_line(self.cdx_name, cdxj_line(
            url=uri, date=date, mime=_mime(resp_headers), status=status, digest=digest,
            pointer=pointer))
        if remember is not None:
            code, _, reason_text = statusline.partition(" ")
            remember(pointer, StoredResponse(
                url=uri, record_type="response", status=int(code), reason=reason_text,
                headers=resp_headers, body=body, record_id=resp_id, warc_date=date,
                payload_digest=digest, truncated=truncated))
        return Written(pointer=pointer, record_id=resp_id, warc_date=date,
                       payload_digest=digest)

    def write_revisit(self, *, url: str, fetched_at: float, status: int, reason: str,
                      response_headers: Sequence[tuple[str, str]], refers_to_url: str,
                      refers_to_date: str, refers_to_record_id: str | None,
                      profile: RevisitProfile, payload_digest: str | None,
                      ip: str | None = None, http_version: str = "1.1",
                      body_length: int | None = None) -> Written:
        """Write a revisit record: HTTP headers, no body, pointing at the original.

        ``identical-payload-digest`` needs ``payload_digest`` (the original's
        WARC-Payload-Digest, or :func:`payload_digest` of the body). ``body_length``,
        when known, becomes the stored Content-Length.
        """
        if profile not in _PROFILES:
            raise ArchiveError(f"unknown revisit profile {profile!r}")
        if profile == "identical-payload-digest" and not payload_digest:
            raise ArchiveError("an identical-payload-digest revisit needs its digest")
        uri = target_uri(url)
        date = warc_date(fetched_at)
        headers = stored_response_headers(response_headers, body_length)
        statusline = _status_line(status, reason)
        fields = {"WARC-Type": "revisit", "WARC-Record-ID": _record_id(),
                  "WARC-Date": date, "WARC-Target-URI": uri}
        address = _ip(ip)
        if address:
            fields["WARC-IP-Address"] = address
        fields["WARC-Profile"] = _PROFILES[profile]
        fields["WARC-Refers-To-Target-URI"] = target_uri(refers_to_url)
        fields["WARC-Refers-To-Date"] = _check(_WARC_DATE_RE, "WARC date", refers_to_date)
        if refers_to_record_id:
            fields["WARC-Refers-To"] = _check(_RECORD_ID_RE, "record id",
                                              refers_to_record_id)
        if payload_digest:
            fields["WARC-Payload-Digest"] = _check(_DIGEST_RE, "digest", payload_digest)

        data = _record("revisit", fields,
                       head=_http_head(f"{_protocol(http_version)} {statusline}", headers))
        pointer = self.blobs.append(self.warc_stream, data)
        self.blobs.append_line(self.cdx_name, cdxj_line(
            url=uri, date=date, mime="warc/revisit", status=status, digest=payload_digest,
            pointer=pointer))
        return Written(pointer=pointer, record_id=fields["WARC-Record-ID"],
                       warc_date=date, payload_digest=payload_digest)

    def write_rendered(self, *, url: str, html: str, rendered_at: float,
                       refers_to_record_id: str, fields: Mapping[str, str] | None = None
                       ) -> Written:
        """Write the DOM a browser built from a response as a ``conversion`` record in
        the WARC stream (``text/html``), whose ``WARC-Refers-To`` names that response;
        ``fields`` are more header fields (how the rendering went)."""
        uri = target_uri(url)
        date = warc_date(rendered_at)
        block = html.encode("utf-8", "replace")
        record_id = _record_id()
        headers = {"WARC-Type": "conversion", "WARC-Record-ID": record_id,
                   "WARC-Date": date, "WARC-Target-URI": uri,
                   "WARC-Refers-To": _check(_RECORD_ID_RE, "record id", refers_to_record_id)}
        for name, value in (fields or {}).items():
            headers[name] = _clean_text(value) or ""

        data = _record("conversion", headers, payload=block,
                       content_type="text/html; charset=utf-8")
        pointer = self.blobs.append(self.warc_stream, data)
        return Written(pointer=pointer, record_id=record_id, warc_date=date)

    def write_text(self, *, url: str, text: str, fetched_at: float,
                   refers_to_record_id: str | None,
                   content_type: str = "text/plain; charset=utf-8",
                   signals: TextFields | None = None,
                   refers_to_digest: str | None = None) -> Written:
        """Write extracted text as a conversion record into the text stream, with the
        text's signals as header fields (:class:`TextFields`). ``refers_to_digest``,
        the payload digest of the record it refers to, becomes
        ``WARC-Refers-To-Payload-Digest``."""
        uri = target_uri(url)
        date = warc_date(fetched_at)
        block = text.encode("utf-8", "replace")
        record_id = _record_id()
        fields = {"WARC-Type": "conversion", "WARC-Record-ID": record_id,
                  "WARC-Date": date, "WARC-Target-URI": uri}
        if refers_to_record_id:
            fields["WARC-Refers-To"] = _check(_RECORD_ID_RE, "record id",
                                              refers_to_record_id)
        if refers_to_digest:
            fields[REFERS_TO_DIGEST_FIELD] = _check(_DIGEST_RE, "digest", refers_to_digest)
        if signals is not None:
            fields.update(signals.header_fields())
        mime = _clean_text(content_type) or "text/plain"

        data = _record("conversion", fields, payload=block, content_type=mime)
        pointer = self.blobs.append(self.text_stream, data)
        return Written(pointer=pointer, record_id=record_id, warc_date=date)


def _ip(ip: str | None) -> str | None:
    if not ip:
        return None
    try:
        return str(ipaddress.ip_address(ip.strip("[]")))
    except ValueError:
        return None


# -- reading back ----------------------------------------------------------------------


def _stored(record: Any, body: bytes) -> StoredResponse:
    """A warcio response or revisit record (read, or just built) as a StoredResponse."""
    h = record.rec_headers
    http_headers = record.http_headers
    code, _, reason = http_headers.statusline.partition(" ")
    return StoredResponse(
        url=h.get_header("WARC-Target-URI"), record_type=record.rec_type, status=int(code),
        reason=reason, headers=list(http_headers.headers), body=body,
        record_id=h.get_header("WARC-Record-ID"), warc_date=h.get_header("WARC-Date"),
        payload_digest=h.get_header("WARC-Payload-Digest"),
        profile=h.get_header("WARC-Profile"),
        refers_to_url=h.get_header("WARC-Refers-To-Target-URI"),
        refers_to_date=h.get_header("WARC-Refers-To-Date"),
        refers_to_record_id=h.get_header("WARC-Refers-To"),
        truncated=h.get_header("WARC-Truncated"))


def read_response(blobs: BlobStore, pointer: RecordPointer) -> StoredResponse:
    """Read the response or revisit record at ``pointer``; digests are checked."""
    data = blobs.read(pointer)
    try:
        records = ArchiveIterator(BytesIO(data), check_digests="raise")
        record = next(iter(records), None)
        if record is None:
            raise ArchiveError(f"no WARC record at {pointer!r}")
        kind = record.rec_type
        if kind not in ("response", "revisit") or record.http_headers is None:
            raise ArchiveError(f"record at {pointer!r} is a {kind} record, not a response")
        return _stored(record, record.raw_stream.read() if kind == "response" else b"")
    except ArchiveError:
        raise
    except (ArchiveLoadFailed, ValueError, EOFError, OSError) as exc:
        raise ArchiveError(f"unreadable record at {pointer!r}: {exc}") from exc
