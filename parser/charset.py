"""Decode an HTML body to text: which charset, and why.

The charset comes from, in this order (the HTML standard's encoding sniffing):

1. a byte order mark (it wins over everything, as in browsers);
2. the ``charset`` parameter of the HTTP Content-Type header;
3. a ``<meta charset>`` / ``<meta http-equiv="content-type">`` (or an XML declaration)
   in the first 4 KiB of the body;
4. detection: bytes that are valid UTF-8 are UTF-8; anything else goes to uchardet
   (resiliparse's ``detect_encoding``);
5. UTF-8, with replacement characters.

An unknown or unsupported declared label (``charset=bogus``, ``utf-7``) is ignored and
the next source is tried. Declarations are checked against the bytes, because many
pages lie:

- a page declared as a non-UTF-8 charset whose bytes contain non-ASCII and are valid
  UTF-8 is decoded as UTF-8 (random legacy text is almost never valid UTF-8);
- a page whose declared charset fails on more than a few bytes, and on at least
  :data:`LIE_RATIO` of its non-ASCII bytes, is re-detected; the detected charset is used
  when it decodes with fewer errors. A few bad bytes (a body cut mid-character, one
  stray byte) keep the declaration.

Label names and decoding follow w3lib (Scrapy's encoding helpers): WHATWG-style
supersets (``iso-8859-1`` decodes as cp1252, ``gb2312`` as gb18030, ``shift_jis`` as
cp932). :func:`decode_html` never raises on junk input.
"""

from __future__ import annotations

import codecs
import enum
from dataclasses import dataclass

from resiliparse.parse.encoding import detect_encoding
from w3lib.encoding import (
    html_body_declared_encoding,
    http_content_type_encoding,
    read_bom,
    resolve_encoding,
    to_unicode,
)

__all__ = ["LIE_RATIO", "CharsetSource", "DecodedHtml", "decode_html"]

#: A declared charset is doubted when at least this share of the non-ASCII bytes fail.
LIE_RATIO = 0.1
#: ... and more than this many bytes fail.
LIE_MIN_ERRORS = 3
#: Bytes handed to the detector (its own default; it samples both ends of the body).
DETECT_SAMPLE = 131072

_REPLACEMENT = "\ufffd"
_UTF8_REPLACEMENT = "\ufffd".encode()
_ASCII = bytes(range(128))
_MULTIBYTE_ONLY = ("utf-16", "utf-32")


class CharsetSource(enum.StrEnum):
    """Where the charset of a decoded page came from."""

    BOM = "bom"
    HEADER = "header"  # HTTP Content-Type charset
    META = "meta"  # <meta> or XML declaration in the body
    DETECTED = "detected"  # valid UTF-8, or the detector
    DEFAULT = "default"  # nothing usable: UTF-8 with replacement


@dataclass(frozen=True, slots=True)
class DecodedHtml:
    """A decoded body."""

    text: str
    #: Python codec name actually used (for example ``utf-8``, ``cp1252``).
    charset: str
    source: CharsetSource
    #: The declared charset that was overridden because the bytes disagreed.
    overridden: str | None = None
    #: Bytes that could not be decoded (each became U+FFFD).
    errors: int = 0


def decode_html(body: bytes, content_type_header: str | None = None) -> DecodedHtml:
    """Decode an HTML body; see the module docstring for the rules. Never raises."""
    charset, bom = read_bom(body)
    if charset is not None and bom is not None:
        text, errors = _decode(body[len(bom):], charset)
        return DecodedHtml(text, charset, CharsetSource.BOM, errors=errors)

    declared = _header_charset(content_type_header)
    source = CharsetSource.HEADER
    if declared is None:
        declared = _meta_charset(body)
        source = CharsetSource.META
    if declared is not None:
        return _decode_declared(body, declared, source)
    return _decode_undeclared(body)


def _header_charset(content_type_header: str | None) -> str | None:
    if not content_type_header:
        return None
    try:
        return http_content_type_encoding(content_type_header)
    except (LookupError, ValueError):  # pragma: no cover - w3lib returns None for unknowns
        return None


def _meta_charset(body: bytes) -> str | None:
    try:
        charset = html_body_declared_encoding(body)
    except (LookupError, ValueError):  # pragma: no cover - defensive, see above
        return None
    if charset is not None and charset.startswith(_MULTIBYTE_ONLY):
        # A declaration readable as ASCII cannot be UTF-16/32: the standard says UTF-8.
        return "utf-8"
    return charset


def _decode_declared(body: bytes, declared: str, source: CharsetSource) -> DecodedHtml:
    is_utf8 = codecs.lookup(declared).name == "utf-8"
    if not is_utf8 and not body.isascii() and _is_utf8(body):
        text, errors = _decode(body, "utf-8")
        return DecodedHtml(text, "utf-8", CharsetSource.DETECTED, overridden=declared,
                           errors=errors)
    text, errors = _decode(body, declared)
    if errors <= LIE_MIN_ERRORS or errors < LIE_RATIO * _non_ascii(body):
        return DecodedHtml(text, declared, source, errors=errors)
    detected = _detect(body)
    if detected is not None and detected != declared:
        other, other_errors = _decode(body, detected)
        if other_errors < errors:
            return DecodedHtml(other, detected, CharsetSource.DETECTED, overridden=declared,
                               errors=other_errors)
    return DecodedHtml(text, declared, source, errors=errors)


def _decode_undeclared(body: bytes) -> DecodedHtml:
    if body.isascii() or _is_utf8(body):
        text, errors = _decode(body, "utf-8")
        return DecodedHtml(text, "utf-8", CharsetSource.DETECTED, errors=errors)
    detected = _detect(body)
    if detected is not None:
        text, errors = _decode(body, detected)
        return DecodedHtml(text, detected, CharsetSource.DETECTED, errors=errors)
    text, errors = _decode(body, "utf-8")
    return DecodedHtml(text, "utf-8", CharsetSource.DEFAULT, errors=errors)


def _is_utf8(body: bytes) -> bool:
    """Valid UTF-8, allowing a character cut off at the end (a capped body)."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(body, final=False)
    except UnicodeDecodeError:
        return False
    return True


def _non_ascii(body: bytes) -> int:
    """Bytes of ``body`` outside ASCII (``translate`` deletes the ASCII ones)."""
    return len(body.translate(None, _ASCII))


def _detect(body: bytes) -> str | None:
    """The detector's guess as a Python codec name, or None."""
    try:
        label = detect_encoding(body, max_len=DETECT_SAMPLE)
    except (MemoryError, ValueError, LookupError):  # pragma: no cover - library failure
        return None
    return resolve_encoding(label) if label else None


def _decode(body: bytes, charset: str) -> tuple[str, int]:
    """Decode with replacement; return the text and the number of replaced sequences."""
    try:
        return body.decode(charset), 0
    except UnicodeDecodeError:
        pass
    except LookupError:  # pragma: no cover - callers pass resolved names
        charset = "utf-8"
    text = to_unicode(body, charset)
    literal = body.count(_UTF8_REPLACEMENT) if codecs.lookup(charset).name == "utf-8" else 0
    return text, max(text.count(_REPLACEMENT) - literal, 1)
