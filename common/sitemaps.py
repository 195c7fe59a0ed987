"""Sitemaps (sitemaps.org protocol 0.9): pure reading, no I/O.

:func:`read_sitemap` turns the body of a sitemap file into the URLs it lists: a
``<urlset>`` (pages, each with its ``<lastmod>``), a ``<sitemapindex>`` (more sitemap
files) or a text sitemap (one URL a line), any of them gzip-compressed. Bounds hold
while reading, so memory follows the bounds and not the input:

- the body is decompressed in pieces of :data:`CHUNK` bytes and reading stops at
  ``max_bytes`` decompressed bytes (the protocol's 50 MB), so a gzip bomb inflates
  no further than that;
- entries past ``max_urls`` (the protocol's 50,000) are not read, whether their URLs
  are usable or not (so a file of empty entries or junk lines costs no more);
- XML is parsed by defusedxml on expat as a stream, each entry dropped once read; a
  document type declaration (so any entity, the billion laughs included) or an
  external reference ends the reading at once.

Bounds on its shape hold too, so CPU follows them and not the input: reading ends at
the first thing no sitemap has, before expat or the target spends more on it:

- an element nested deeper than :data:`MAX_DEPTH` (5: a news sitemap's
  urlset/url/news:news/news:publication/news:name), which ends elements nested millions
  deep in the first piece read;
- an element with more than :data:`MAX_ATTRIBUTES` attributes, or one longer than
  :data:`MAX_ATTRIBUTE_CHARS` characters;
- markup expat holds unfinished past :data:`MAX_MARKUP_BYTES` (a tag with its
  attributes, a comment, a processing instruction): expat passes a tag on whole and
  scans it again on every piece fed, so a 50 MB attribute or two million attributes
  in one tag would cost minutes; what it holds is measured after each piece from its
  byte index of the last event;
- anything but ``<url>`` or ``<sitemap>`` entries in the root, and text outside an
  entry's fields;
- more than ``max_elements`` elements in all (:data:`MAX_ELEMENTS`, about two seconds
  of callbacks), reason ``sitemap_capped``.

Extension elements inside an entry (image:, video:, news:, xhtml:link) are passed over.
Reading stopped by a shape bound ends as ``sitemap_invalid`` with what was wrong in
``problem``.

Only URLs of the sitemap's own host are taken, and those of the hosts in ``vouched``
(the cross-submit rule: a sitemap that host B's robots.txt names may list URLs of B).
Every problem ends as a :class:`SitemapRead` with ``reason`` set and the entries read
before it kept: never an exception.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import zlib
from dataclasses import dataclass, field
from typing import NoReturn
from urllib.parse import urljoin, urlsplit
from xml.etree.ElementTree import ParseError

from common import urls
from common.messages import Reason

PROTOCOL_MAX_URLS = 50_000
PROTOCOL_MAX_BYTES = 50 * 1024 * 1024
MAX_LOC_CHARS = 2_048  # the protocol: a URL of fewer than 2,048 characters
CHUNK = 64 * 1024
MAX_ROBOTS_SITEMAPS = 100  # sitemaps taken from one robots.txt: with URLs under 2 KB, a
# fetch result stays far under Kafka's 1 MB
FUTURE_SLACK = 86_400.0  # a lastmod later than a day from now is not believed
#: Elements nested at most this deep: urlset/url/loc is 3, an extension's fields 4
#: (image:image/image:loc, video:video/video:tag), and a news sitemap's publication
#: name 5 (url/news:news/news:publication/news:name)
MAX_DEPTH = 5
MAX_ATTRIBUTES = 32  # attributes of one element (xhtml:link has 3, a root a few)
MAX_ATTRIBUTE_CHARS = 8_192  # characters of one attribute value (a href is under 2,048)
#: Bytes of markup expat may hold unfinished: a tag (with its attributes), comment or
#: processing instruction is passed on whole, so a longer one is not waited for
MAX_MARKUP_BYTES = 32 * 1024
#: Elements of one file read at most (a 50 MB image sitemap has about a million): past
#: it the rest is not read, so flat junk costs no more than this many callbacks
MAX_ELEMENTS = 2_000_000

#: <changefreq> values as seconds between changes: "always" as an hour (the least
#: revisit interval clamps it anyway), "never" (an archived page) as ten years, which
#: the most revisit interval clamps to its bound
CHANGEFREQ_SECONDS: dict[str, float] = {
    "always": 3_600.0, "hourly": 3_600.0, "daily": 86_400.0, "weekly": 604_800.0,
    "monthly": 2_592_000.0, "yearly": 31_536_000.0, "never": 315_360_000.0}

SITEMAP_MEDIA_TYPES = ("application/xml", "text/xml", "application/gzip",
                       "application/x-gzip", "application/octet-stream", "text/plain")
"""Media types a sitemap is downloaded with (servers send .xml.gz as any of the gzip
ones or as octet-stream; a text sitemap is text/plain)."""

_GZIP_MAGIC = b"\x1f\x8b"
_W3C_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


class _TooLargeError(Exception):
    """The decompressed body passed ``max_bytes``."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One URL a sitemap lists: canonical, with its lastmod (Unix time) and its
    changefreq (seconds, :data:`CHANGEFREQ_SECONDS`) if usable."""

    url: str
    lastmod: float | None = None
    changefreq: float | None = None


@dataclass(slots=True)
class SitemapRead:
    """What a sitemap file held, and how reading it ended."""

    form: str = "unknown"  # urlset | index | text | unknown
    pages: list[Entry] = field(default_factory=list)  # from a urlset or text sitemap
    sitemaps: list[Entry] = field(default_factory=list)  # from a sitemap index
    off_host: int = 0  # URLs of hosts the sitemap may not speak for (cross-submit rule)
    sitemaps_over: int = 0  # sitemaps an index lists past ``max_sitemaps``: not taken
    invalid: int = 0  # entries without a usable http(s) URL
    reason: Reason = Reason.SITEMAP  # SITEMAP: read whole; else why reading stopped
    problem: str | None = None  # what went wrong, for the URL's detail
    bytes_read: int = 0  # of the body, uncompressed, when reading ended

    @property
    def entries(self) -> int:
        return len(self.pages) + len(self.sitemaps)

    def summary(self) -> str:
        """One line for the sitemap URL's detail column."""
        text = (f"{self.form}: {len(self.pages)} URLs, {len(self.sitemaps)} sitemaps, "
                f"{self.off_host} of other hosts refused, {self.invalid} invalid")
        if self.sitemaps_over:
            text += (f", {self.sitemaps_over} sitemaps past the per-host cap of sitemap "
                     "files not taken")
        return f"{text}; {self.problem}" if self.problem else text


class _Reader:
    """A file-like view of the body, gunzipped if it is gzip, that raises
    :class:`_TooLargeError` past ``limit`` bytes. Never holds more than a chunk of output."""

    def __init__(self, body: bytes, limit: int) -> None:
        self._body = body
        self._pos = 0
        self._limit = limit
        self.total = 0
        self._gzip = body.startswith(_GZIP_MAGIC)
        self._inflate = zlib.decompressobj(wbits=31) if self._gzip else None
        self._pending = b""  # compressed input not yet consumed

    def read(self, size: int = -1) -> bytes:
        want = CHUNK if size is None or size < 0 else max(1, min(size, CHUNK))
        if self.total >= self._limit and self._next(1):
            raise _TooLargeError  # there is more than the cap: reading ends here
        out = self._next(min(want, self._limit - self.total)) if self.total < self._limit else b""
        self.total += len(out)
        return out

    def _next(self, want: int) -> bytes:
        if self._inflate is None:
            out = self._body[self._pos:self._pos + want]
            self._pos += len(out)
            return out
        while True:
            if not self._pending and self._pos < len(self._body):
                self._pending = self._body[self._pos:self._pos + CHUNK]
                self._pos += len(self._pending)
            if not self._pending and not self._inflate.unconsumed_tail:
                return b""
            data = self._inflate.unconsumed_tail or self._pending
            from_pending = not self._inflate.unconsumed_tail
            out = self._inflate.decompress(data, want)
            if from_pending:
                self._pending = b""
            if self._inflate.eof:
                # a second gzip member (concatenated files) starts a new stream
                rest = self._inflate.unused_data + self._pending
                self._pending = b""
                if rest.startswith(_GZIP_MAGIC):
                    self._inflate = zlib.decompressobj(wbits=31)
                    self._pending = rest
                elif not out:
                    return b""
            if out:
                return out


def parse_lastmod(value: str | None, now: float) -> float | None:
    """A W3C Datetime (YYYY, YYYY-MM, YYYY-MM-DD, or a date and time with a zone) as
    a Unix time; None when missing, malformed, before 1970 or more than a day ahead
    of ``now`` (a clock or a sitemap that cannot be right)."""
    if not value:
        return None
    text = value.strip()
    try:
        if _W3C_DATE.match(text):
            parts = [int(p) for p in text.split("-")] + [1, 1]
            when = dt.datetime(parts[0], parts[1], parts[2], tzinfo=dt.UTC)
        else:
            when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=dt.UTC)
        stamp = when.timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    if stamp < 0 or stamp > now + FUTURE_SLACK:
        return None
    return stamp


def parse_changefreq(value: str | None) -> float | None:
    """A ``<changefreq>`` value as seconds between changes; None when missing or not one
    of the protocol's seven words (compared case-insensitively)."""
    if not value:
        return None
    return CHANGEFREQ_SECONDS.get(value.strip().lower())


def _local(tag: str) -> str:
    """An element's name without its namespace ('{ns}url' -> 'url')."""
    return tag[tag.rfind("}") + 1:]


class _Taker:
    """Checks each listed URL and files it, counting what it refuses."""

    def __init__(self, read: SitemapRead, sitemap_url: str, vouched: frozenset[str],
                 max_urls: int, now: float, max_sitemaps: int | None = None) -> None:
        self.read = read
        self.max_urls = max_urls
        self.max_sitemaps = max_sitemaps
        self.now = now
        self.hosts = set(vouched)
        self.seen = 0  # entries met, usable or not: the cap counts them all
        with contextlib.suppress(urls.UrlError):
            self.hosts.add(urls.host_key(urls.canonicalize(sitemap_url)))

    def full(self) -> bool:
        return self.seen >= self.max_urls

    def take(self, loc: str | None, lastmod: str | None, *, index: bool,
             changefreq: str | None = None) -> None:
        self.seen += 1
        if not loc or len(loc) >= MAX_LOC_CHARS:
            self.read.invalid += 1
            return
        try:
            url = urls.canonicalize(loc)
            host = urls.host_key(url)
        except urls.UrlError:
            self.read.invalid += 1
            return
        if host not in self.hosts:
            self.read.off_host += 1
            return
        if index and self.max_sitemaps is not None and (
                len(self.read.sitemaps) >= self.max_sitemaps):
            self.read.sitemaps_over += 1  # no more could be fetched for one host
            return
        entry = Entry(url, parse_lastmod(lastmod, self.now),
                      None if index else parse_changefreq(changefreq))
        (self.read.sitemaps if index else self.read.pages).append(entry)


def read_sitemap(body: bytes, sitemap_url: str, *, now: float,
                 vouched: frozenset[str] = frozenset(),
                 max_urls: int = PROTOCOL_MAX_URLS,
                 max_bytes: int = PROTOCOL_MAX_BYTES,
                 max_elements: int = MAX_ELEMENTS,
                 max_sitemaps: int | None = None) -> SitemapRead:
    """Read a sitemap file fetched from ``sitemap_url``. ``vouched``: host keys (see
    :func:`common.urls.host_key`) whose robots.txt named this sitemap; ``now`` bounds
    believable lastmod values; an index's entries past ``max_sitemaps`` (the per-host
    cap of sitemap files: no more could be fetched) are counted, not taken. Never
    raises."""
    read = SitemapRead()
    taker = _Taker(read, sitemap_url, vouched, max_urls, now, max_sitemaps)
    reader = _Reader(body, max_bytes)
    try:
        head = reader.read(CHUNK)
        first = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
        if first == b"<":
            _read_xml(head, reader, read, taker, max_elements)
        elif head.strip():
            _read_text(head, reader, read, taker)
        else:
            read.reason, read.problem = Reason.SITEMAP_INVALID, "empty body"
    except _TooLargeError:
        read.reason = Reason.SITEMAP_CAPPED
        read.problem = f"over {max_bytes} bytes uncompressed: read up to there"
    except zlib.error as exc:
        read.reason, read.problem = Reason.SITEMAP_INVALID, f"bad gzip data: {exc}"
    read.bytes_read = reader.total
    return read


class _Stop(Exception):  # noqa: N818 - not an error: reading ends early on purpose
    """Raised by the target to end reading (a cap reached, not a sitemap)."""


class _Target:
    """Parser target: keeps only the entry being read (its loc and lastmod, each cut
    at :data:`MAX_LOC_CHARS` + 1 characters), so no element or text is held longer
    than its entry, whatever the document holds. It also checks the shape of the
    document as it goes and ends reading at the first thing no sitemap has: an element
    deeper than :data:`MAX_DEPTH`, one with too many or too long attributes, anything
    but ``<url>`` or ``<sitemap>`` entries in the root, text outside an entry's fields,
    or more than ``max_elements`` elements in all. Extension elements inside an entry
    (image:, video:, news:, xhtml:link) are passed over."""

    def __init__(self, read: SitemapRead, taker: _Taker, max_elements: int) -> None:
        self.read = read
        self.taker = taker
        self.depth = 0
        self.elements = 0
        self.max_elements = max_elements
        self.root = ""
        self.field: str | None = None  # loc or lastmod, while inside one of an entry
        self.text: list[str] = []
        self.size = 0
        self.values: dict[str, str] = {}

    def _refuse(self, problem: str) -> NoReturn:
        self.read.reason, self.read.problem = Reason.SITEMAP_INVALID, problem
        raise _Stop

    def start(self, tag: str, attrib: list[str]) -> None:
        """An element begins: ``tag`` is 'namespace}name' or 'name', ``attrib`` its
        attributes' names and values in turn. Called for every element, so the common
        case (an element inside an entry, without attributes) does the least work."""
        self.depth += 1
        self.elements += 1
        if self.elements > self.max_elements:
            self.read.reason = Reason.SITEMAP_CAPPED
            self.read.problem = f"more than {self.max_elements} elements: the rest not read"
            raise _Stop
        if self.depth > MAX_DEPTH:
            self._refuse(f"elements nested deeper than {MAX_DEPTH} (<{_local(tag)[:40]}>)")
        if attrib:
            if len(attrib) > 2 * MAX_ATTRIBUTES:
                self._refuse(f"<{_local(tag)[:40]}> has more than {MAX_ATTRIBUTES} "
                             "attributes")
            if any(len(value) > MAX_ATTRIBUTE_CHARS for value in attrib[1::2]):
                self._refuse(f"<{_local(tag)[:40]}> has an attribute of more than "
                             f"{MAX_ATTRIBUTE_CHARS} characters")
        if self.depth > 3:
            return
        name = _local(tag)
        if self.depth == 3:
            if name in ("loc", "lastmod", "changefreq"):
                self.field, self.text, self.size = name, [], 0
        elif self.depth == 2:
            if name not in ("url", "sitemap"):
                self._refuse(f"<{name[:40]}> in <{self.root}>: only <url> and <sitemap> "
                             "entries belong there")
            self.values = {}
        elif name == "urlset":
            self.read.form, self.root = "urlset", name
        elif name == "sitemapindex":
            self.read.form, self.root = "index", name
        else:
            self._refuse(f"not a sitemap: the root element is <{name[:40]}>")

    def data(self, text: str) -> None:
        if self.field is not None:
            if self.size <= MAX_LOC_CHARS:
                self.text.append(text)
                self.size += len(text)
        elif self.depth <= 2 and not text.isspace():
            self._refuse(f"text outside an entry's fields: {text.strip()[:40]!r}")

    def end(self, tag: str) -> None:
        if self.depth == 3 and self.field is not None:
            self.values[self.field] = "".join(self.text)[:MAX_LOC_CHARS + 1].strip()
            self.field, self.text = None, []
        elif self.depth == 2:
            if self.taker.full():
                self.read.reason = Reason.SITEMAP_CAPPED
                self.read.problem = (f"more than {self.taker.max_urls} entries: "
                                     "the rest not read")
                raise _Stop
            index = self.read.form == "index"
            if (_local(tag) == "sitemap") == index:
                self.taker.take(self.values.get("loc"), self.values.get("lastmod"),
                                index=index, changefreq=self.values.get("changefreq"))
            else:  # an entry of the other form is passed over, but counts to the cap
                self.taker.seen += 1
        self.depth -= 1

    def close(self) -> None:
        return None


def _read_xml(head: bytes, reader: _Reader, read: SitemapRead, taker: _Taker,
              max_elements: int) -> None:
    # imported here, not with the module: the fetcher imports this module for robots.txt's
    # sitemap lines, and a crawl's start-up should not wait for an XML parser
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import DefusedXMLParser

    target = _Target(read, taker, max_elements)
    # defusedxml's parser refuses a document type declaration, entities and external
    # references (handlers it sets on expat)
    parser = DefusedXMLParser(target=target, forbid_dtd=True, forbid_entities=True,
                              forbid_external=True)
    expat = parser.parser
    # the target's element handlers on expat itself: ElementTree's would add a call per
    # element that builds a dict of the attributes and a name with its namespace
    expat.ordered_attributes = True
    expat.StartElementHandler = target.start
    expat.EndElementHandler = target.end
    expat.CharacterDataHandler = target.data
    # text comes in pieces of up to 8 KiB, not a call per line or character reference
    expat.buffer_text = True
    fed = 0
    try:
        chunk = head
        while chunk:
            parser.feed(chunk)
            fed += len(chunk)
            # expat keeps a tag, comment or processing instruction until its end is
            # fed, scanning it again on every feed: what it holds unfinished is what
            # follows its last event
            if fed - max(0, expat.CurrentByteIndex) > MAX_MARKUP_BYTES:
                read.reason = Reason.SITEMAP_INVALID
                read.problem = (f"markup (a tag, comment or processing instruction) "
                                f"longer than {MAX_MARKUP_BYTES} bytes")
                return
            chunk = reader.read(CHUNK)
        parser.close()
    except _Stop:
        return
    except DefusedXmlException as exc:
        read.reason = Reason.SITEMAP_INVALID
        read.problem = f"refused XML: {type(exc).__name__}"
    except ParseError as exc:
        read.reason = Reason.SITEMAP_INVALID
        read.problem = f"malformed XML: {exc}"[:300]


def _read_text(head: bytes, reader: _Reader, read: SitemapRead, taker: _Taker) -> None:
    read.form = "text"
    buffer = head
    while True:
        lines = buffer.split(b"\n")
        buffer = lines.pop()
        if len(buffer) > 4 * MAX_LOC_CHARS:  # a line no URL can fill
            buffer = b""
            read.invalid += 1
        for line in lines:
            if not _take_line(line, read, taker):
                return
        more = reader.read(CHUNK)
        if not more:
            break
        buffer += more
    _take_line(buffer, read, taker)


def _take_line(line: bytes, read: SitemapRead, taker: _Taker) -> bool:
    text = line.decode("utf-8", "replace").strip()
    if not text:
        return True
    if taker.full():
        read.reason = Reason.SITEMAP_CAPPED
        read.problem = f"more than {taker.max_urls} entries: the rest not read"
        return False
    taker.take(text, None, index=False)
    return True


def vouched_hosts(source: str | None) -> frozenset[str]:
    """The host whose robots.txt named a sitemap (its ``source``), whose URLs the
    sitemap may list wherever it is served; empty when the source is no robots.txt."""
    if not source:
        return frozenset()
    try:
        url = urls.canonicalize(source)
        if urlsplit(url).path != "/robots.txt":
            return frozenset()
        return frozenset({urls.host_key(url)})
    except urls.UrlError:
        return frozenset()


def robots_sitemaps(named: list[str], robots_url: str, *, probe: bool,
                    limit: int = MAX_ROBOTS_SITEMAPS) -> list[str]:
    """The sitemap URLs to queue after reading a robots.txt: those it names (relative
    ones resolved against it, none of 2,048 characters or more), at most ``limit``;
    with none named and ``probe``, /sitemap.xml of the same origin."""
    found: list[str] = []
    for raw in named:
        if len(raw) >= MAX_LOC_CHARS:
            continue
        url = urljoin(robots_url, raw.strip())
        if url.startswith(("http://", "https://")) and url not in found:
            found.append(url)
        if len(found) >= limit:
            break
    if not found and probe:
        found.append(urljoin(robots_url, "/sitemap.xml"))
    return found
