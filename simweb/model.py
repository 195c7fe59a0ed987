"""The scenario model: a simulated web described as data.

A :class:`Scenario` is a tree of frozen dataclasses that loads from and dumps to JSON
(:func:`load_scenario`, :func:`dump_scenario`). Everything the server sends is a pure
function of the scenario, its ``seed``, the request and how often the same page was
asked for before (for pages that change between visits or recover after errors).

Links and redirect targets are written without a port (``/story/1``,
``http://shop.test/``); the server adds its own port to absolute URLs whose host is in
the scenario, so one scenario works on any port.
"""

from __future__ import annotations

import codecs
import dataclasses
import ipaddress
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

Change = Literal["none", "minor", "major"]
RobotsKind = Literal["rules", "missing", "error", "timeout", "oversize"]
TrapKind = Literal["calendar", "session", "repeat", "params"]
SitemapKind = Literal["urlset", "index", "text", "malformed", "entity_bomb"]

_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST_RE = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


class ScenarioError(ValueError):
    """A scenario that is malformed or inconsistent; the message says where."""


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ScenarioError(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sitemap:
    """The body of a page that is a sitemap file (sitemaps.org protocol).

    kinds: 'urlset' (``entries`` are pages), 'index' (``entries`` are sitemap files),
    'text' (one URL a line), and hostile ones: 'malformed' (a urlset cut off in the
    middle of its last entry), 'entity_bomb' (a urlset whose DOCTYPE declares nested
    entities, the "billion laughs"). Entries are root-relative paths or absolute URLs
    (the server adds its port to scenario hosts).
    """

    kind: SitemapKind = "urlset"
    entries: tuple[str, ...] = ()
    lastmod: tuple[str, ...] = ()
    """W3C datetimes, one per entry in order ('' or missing: no <lastmod>)."""
    changefreq: tuple[str, ...] = ()
    """<changefreq> values, one per entry in order ('' or missing: none)."""
    gzip: bool = False
    """Send the file gzip-compressed (a .xml.gz file, not a Content-Encoding)."""
    pad_bytes: int = 0
    """Whitespace added after the entries, inside the root element: with ``gzip`` a
    file past the protocol's 50 MB that is small on the wire."""

    def __post_init__(self) -> None:
        _check(len(self.lastmod) <= len(self.entries),
               "sitemap: more lastmod values than entries")
        _check(len(self.changefreq) <= len(self.entries),
               "sitemap: more changefreq values than entries")
        _check(self.pad_bytes >= 0, "sitemap: pad_bytes must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """One URL path of a host and how it answers.

    The body is a generated HTML document (title, ``words`` words of seeded text, the
    ``links``) unless ``body`` gives it verbatim. Behaviours combine: a page may be slow,
    carry an ETag and change on every visit.
    """

    path: str
    """Path the page answers, starting with '/'. With a '?query' only that exact query
    matches; without one any query string is ignored (so tracking copies hit the page)."""
    title: str = ""
    """Title and heading; empty: a generated headline."""
    links: tuple[str, ...] = ()
    """hrefs written in the page: root-relative paths, relative paths or absolute URLs."""
    words: int = 250
    """Words of generated text in the body."""
    status: int = 200
    """HTTP status. For 3xx pages ``redirect`` names the target."""
    content_type: str | None = "text/html; charset=utf-8"
    """Content-Type header; None sends none at all."""
    encoding: str = "utf-8"
    """Codec that turns the body text into bytes (whatever the header claims)."""
    meta_charset: str | None = None
    """Writes <meta charset=...> into the head when set."""
    extra_text: str = ""
    """A paragraph added after the generated text (e.g. non-ASCII words for charset tests)."""
    same_as: str | None = None
    """Path of a page of the same host whose body this page copies byte for byte."""
    near_duplicate_of: str | None = None
    """Path of a page of the same host whose body this page copies with one word changed."""
    redirect: str | None = None
    """Location of a 3xx answer."""
    retry_after: str | None = None
    """Retry-After header (seconds or an HTTP date), for 429 and 503 pages."""
    recover_after: int | None = None
    """For error statuses: the first N visits get ``status``, later ones a normal 200.
    None: always ``status``."""
    delay: float = 0.0
    """Seconds before the status line (on top of the host latency); bounded by the
    server's ``max_stall``. Longer than a client's timeout, it is a hang."""
    drip_seconds: float = 0.0
    """Spread the body over this many seconds (bounded by ``max_stall``)."""
    drip_chunks: int = 20
    """Pieces of a dripped body."""
    body_bytes: int = 0
    """Pad the generated body with more paragraphs to at least this many bytes."""
    gzip_bomb: int = 0
    """When > 0 the body is a gzip stream (Content-Encoding: gzip) that inflates to this
    many bytes; it is a few hundred times smaller on the wire."""
    etag: bool = True
    """Send a strong ETag and answer a matching If-None-Match with 304."""
    last_modified: bool = True
    """Send Last-Modified and answer If-Modified-Since with 304 when not newer."""
    changes: Change = "none"
    """'minor': a line naming the visit number changes (a near-duplicate of the last
    visit); 'major': the whole text is new on every visit."""
    change_every: float = 0.0
    """Seconds of the simulated web's clock (see simweb.clock) between changes: the
    whole text is new in each period (periods counted from the Unix epoch) and
    Last-Modified is the period's start, whoever asks and however often. 0: the text
    changes only as ``changes`` says."""
    body: str | None = None
    """Verbatim body text (encoded with ``encoding``) instead of a generated document."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers."""
    sitemap: Sitemap | None = None
    """The body is this sitemap file (set ``content_type`` to match, e.g. application/xml)."""

    def __post_init__(self) -> None:
        where = f"page {self.path!r}"
        _check(self.path.startswith("/"), f"{where}: path must start with '/'")
        _check(100 <= self.status <= 599, f"{where}: status {self.status} out of range")
        _check(self.redirect is None or 300 <= self.status < 400,
               f"{where}: a redirect needs a 3xx status")
        _check(not (300 <= self.status < 400 and self.status != 304) or bool(self.redirect),
               f"{where}: a 3xx status needs a redirect target")
        _check(self.change_every >= 0, f"{where}: change_every must be >= 0")
        _check(not self.change_every or self.changes == "none",
               f"{where}: change_every and changes exclude each other")
        _check(self.same_as is None or self.near_duplicate_of is None,
               f"{where}: same_as and near_duplicate_of exclude each other")
        _check(self.body is None or not self.links,
               f"{where}: a verbatim body carries its own links; leave links empty")
        _check(self.sitemap is None or (self.body is None and not self.links),
               f"{where}: a sitemap is the whole body; leave body and links empty")
        for name in ("words", "body_bytes", "gzip_bomb", "drip_chunks"):
            _check(getattr(self, name) >= 0, f"{where}: {name} must be >= 0")
        for name in ("delay", "drip_seconds"):
            _check(getattr(self, name) >= 0, f"{where}: {name} must be >= 0")
        _check(self.drip_chunks >= 1, f"{where}: drip_chunks must be >= 1")
        _check(self.recover_after is None or self.recover_after >= 0,
               f"{where}: recover_after must be >= 0")
        try:
            codecs.lookup(self.encoding)
        except LookupError as exc:
            raise ScenarioError(f"{where}: unknown encoding {self.encoding!r}") from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Robots:
    """A host's /robots.txt.

    kinds: 'rules' (generated from the fields, or ``body`` verbatim), 'missing' (404),
    'error' (``status``, 500 by default), 'timeout' (answers the rules only after
    ``delay`` seconds, bounded by the server's ``max_stall``), 'oversize' (the rules,
    then comment lines up to ``size`` bytes, then ``Disallow: /beyond-limit/`` that a
    parser reading at most 500 KiB never sees). With ``recover_after`` set, an 'error'
    or 'timeout' robots.txt fails only on its first N visits and then answers the rules
    at once (a server that comes back).
    """

    kind: RobotsKind = "rules"
    user_agent: str = "*"
    allow: tuple[str, ...] = ()
    disallow: tuple[str, ...] = ()
    crawl_delay: float | None = None
    sitemaps: tuple[str, ...] = ()
    body: str | None = None
    status: int = 500
    delay: float = 60.0
    size: int = 600_000
    recover_after: int | None = None

    def __post_init__(self) -> None:
        _check(self.recover_after is None or self.recover_after >= 0,
               "robots: recover_after must be >= 0")
        _check(500 <= self.status <= 599 or self.kind != "error",
               "robots: an 'error' robots.txt needs a 5xx status")
        _check(self.delay >= 0, "robots: delay must be >= 0")
        _check(self.size >= 0, "robots: size must be >= 0")
        _check(self.crawl_delay is None or self.crawl_delay >= 0,
               "robots: crawl_delay must be >= 0")

    def text(self, absolutize: Callable[[str], str] | None = None) -> str:
        """The rules as robots.txt text (without the oversize padding); ``absolutize``
        rewrites Sitemap URLs (the server gives them its port)."""
        if self.body is not None:
            return self.body
        lines = [f"User-agent: {self.user_agent}"]
        lines += [f"Allow: {p}" for p in self.allow]
        lines += [f"Disallow: {p}" for p in self.disallow]
        if not self.allow and not self.disallow:
            lines.append("Disallow:")
        if self.crawl_delay is not None:
            lines.append(f"Crawl-delay: {self.crawl_delay:g}")
        lines += [f"Sitemap: {absolutize(s) if absolutize else s}" for s in self.sitemaps]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Trap:
    """An endless family of pages under ``prefix``, generated when asked for.

    kinds:
    - 'calendar': ``prefix`` + YYYY-MM-DD, each day links the next one (from ``start``).
    - 'session': every page links ``fanout`` pages whose URLs carry a new ``sid``.
    - 'repeat': every page links the relative path 'more/', so paths repeat for ever
      (``prefix``more/more/more/...).
    - 'params': every page links ``fanout`` copies of itself with one more or one
      changed query parameter (faceted search).
    """

    kind: TrapKind
    prefix: str
    start: str = "2026-01-01"
    fanout: int = 3
    words: int = 150

    def __post_init__(self) -> None:
        _check(self.prefix.startswith("/"), f"trap {self.prefix!r}: prefix must start with '/'")
        _check(self.fanout >= 1, f"trap {self.prefix!r}: fanout must be >= 1")
        _check(self.words >= 0, f"trap {self.prefix!r}: words must be >= 0")
        if self.kind == "calendar":
            _check(re.fullmatch(r"\d{4}-\d{2}-\d{2}", self.start) is not None,
                   f"trap {self.prefix!r}: start must be YYYY-MM-DD")


@dataclass(frozen=True, slots=True, kw_only=True)
class Host:
    """One virtual host: its address in DNS, its latency, robots.txt, pages and traps."""

    name: str
    address: str = "127.0.0.1"
    """What the DNS responder answers for this name (IPv4 in A, IPv6 in AAAA answers)."""
    latency: float = 0.0
    """Seconds added before every answer of this host (bounded by ``max_stall``)."""
    robots: Robots = field(default_factory=Robots)
    pages: tuple[Page, ...] = ()
    traps: tuple[Trap, ...] = ()

    def __post_init__(self) -> None:
        _check(_HOST_RE.match(self.name) is not None,
               f"host {self.name!r}: not a lower-case host name")
        try:
            ipaddress.ip_address(self.address)
        except ValueError as exc:
            raise ScenarioError(f"host {self.name!r}: bad address {self.address!r}") from exc
        _check(self.latency >= 0, f"host {self.name!r}: latency must be >= 0")
        paths = [p.path for p in self.pages]
        dupes = sorted({p for p in paths if paths.count(p) > 1})
        _check(not dupes, f"host {self.name!r}: duplicate page paths {dupes}")
        known = set(paths)
        for page in self.pages:
            for ref in (page.same_as, page.near_duplicate_of):
                _check(ref is None or ref in known,
                       f"host {self.name!r}: page {page.path!r} copies unknown page {ref!r}")
        by_path = {p.path: p for p in self.pages}
        for page in self.pages:
            seen = {page.path}
            ref = page.same_as or page.near_duplicate_of
            while ref is not None:
                _check(ref not in seen, f"host {self.name!r}: copy cycle at {page.path!r}")
                seen.add(ref)
                target = by_path[ref]
                ref = target.same_as or target.near_duplicate_of

    def page_map(self) -> dict[str, Page]:
        return {p.path: p for p in self.pages}


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A whole simulated web: hosts, the crawl's seed URLs and the generator seed."""

    name: str
    seed: int = 0
    """Seed of every generated text, id and date: the same seed, the same bytes."""
    hosts: tuple[Host, ...] = ()
    seeds: tuple[str, ...] = ()
    """Start URLs without a port, e.g. 'http://news.test/'."""
    dns_ttl: int = 300
    """TTL of DNS answers in seconds."""
    description: str = ""

    def __post_init__(self) -> None:
        names = [h.name for h in self.hosts]
        dupes = sorted({n for n in names if names.count(n) > 1})
        _check(not dupes, f"scenario {self.name!r}: duplicate hosts {dupes}")
        _check(self.dns_ttl >= 0, f"scenario {self.name!r}: dns_ttl must be >= 0")
        for url in self.seeds:
            host = _url_host(url)
            _check(host in names, f"scenario {self.name!r}: seed {url!r} names no host of "
                   "the scenario")

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]


def _url_host(url: str) -> str:
    m = re.match(r"^https?://([^/:?#]+)", url)
    return m.group(1).lower() if m else ""


# --- JSON ---------------------------------------------------------------------------

def _dataclass_of(tp: Any) -> type[Any] | None:
    """The dataclass inside ``tp`` (itself, Optional[...], or tuple[X, ...])."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp
    origin = typing.get_origin(tp)
    if origin in (tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            found = _dataclass_of(arg)
            if found is not None:
                return found
    return None


def _check_unknown_fields(obj: Any, cls: type[Any], where: str) -> None:
    """Reject keys that no field of ``cls`` (recursively) knows: typos fail loudly."""
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            _check_unknown_fields(item, cls, f"{where}[{i}]")
        return
    if not isinstance(obj, dict):
        return
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(obj) - names)
    _check(not unknown, f"{where}: unknown field(s) {unknown} for {cls.__name__}")
    for key, value in obj.items():
        inner = _dataclass_of(hints[key])
        if inner is not None:
            _check_unknown_fields(value, inner, f"{where}.{key}")


def scenario_from_json(data: bytes | str) -> Scenario:
    """Decode and validate a scenario; errors name the offending field."""
    try:
        raw = msgspec.json.decode(data)
        _check(isinstance(raw, dict), "scenario: the JSON document must be an object")
        _check_unknown_fields(raw, Scenario, "$")
        return msgspec.json.decode(data, type=Scenario)
    except msgspec.ValidationError as exc:
        raise ScenarioError(f"invalid scenario: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ScenarioError(f"scenario is not valid JSON: {exc}") from exc


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario from a JSON file."""
    return scenario_from_json(Path(path).read_bytes())


def _to_data(obj: Any) -> Any:
    """Plain data for JSON, leaving out fields that hold their default."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.default is not dataclasses.MISSING:
                if value == f.default:
                    continue
            elif f.default_factory is not dataclasses.MISSING and value == f.default_factory():
                continue
            out[f.name] = _to_data(value)
        return out
    if isinstance(obj, (tuple, list)):
        return [_to_data(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _to_data(v) for k, v in obj.items()}
    return obj


def dump_scenario(scenario: Scenario) -> bytes:
    """The scenario as indented JSON without default values (round-trips through
    :func:`scenario_from_json`)."""
    return msgspec.json.format(msgspec.json.encode(_to_data(scenario)), indent=2) + b"\n"
