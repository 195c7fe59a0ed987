"""URL rules: link resolution, the canonical form, host keys and registered domains.

Everything a URL goes through on its way into the frontier lives here, as pure
functions:

- :func:`resolve` turns a link (``href``) found on a page into an absolute URL exactly
  as a browser would: parsing follows the WHATWG URL Standard (through ``ada-url``).
- :func:`canonicalize` gives the one spelling of a URL used for de-duplication and as
  the key in the state store (rules below).
- :func:`host_key` is what the frontier partitions by and what politeness counts per
  (unless ``CRAWLER_POLITENESS_KEY`` widens both: :mod:`common.politeness`);
  :func:`registered_domain` groups hosts under their public-suffix-aware domain.
- :func:`is_http_url`, :func:`origin`, :func:`robots_url` and :func:`path_and_query`
  are the small helpers the fetcher and the robots cache need.

Errors: anything that cannot be parsed, is not ``http``/``https`` or has no host raises
:class:`UrlError` (a :class:`ValueError`) naming the URL and the reason. :func:`resolve`
and :func:`is_http_url` never raise; they answer ``None`` / ``False``.

The canonical form
------------------
:func:`canonicalize` parses the URL with the WHATWG parser and then applies, in order:

1. Only ``http`` and ``https`` URLs with a non-empty host are accepted.
2. Scheme and host in lower case, internationalised names as punycode (UTS #46, as the
   URL Standard does), IPv4 hosts in dotted-decimal form, IPv6 hosts compressed, the
   default port (80 / 443) dropped. Trailing root dots of a host name are dropped
   (``example.com.`` is ``example.com``): both name the same server, so they must share
   one host key for politeness.
3. Dot segments resolved (``/a/./b/../c`` is ``/a/c``, also when the dots are written
   ``%2e``); an empty path becomes ``/``.
4. Percent-encoding normalised in the user info, the path and the query: escapes of
   unreserved characters (``A-Z a-z 0-9 - . _ ~``) are decoded, the hex digits of every
   other escape are upper case, and every character RFC 3986 does not allow there is
   encoded as UTF-8 (``|``, ``[``, ``]``, ``^``, a ``%`` not starting an escape, ...).
   Escapes of reserved characters are kept as escapes (RFC 3986 section 6.2.2.2):
   ``a%2Fb`` and ``a/b`` stay different.
5. The fragment is dropped.
6. The query is split on ``&``; empty parameters are dropped, tracking parameters are
   removed (see :class:`TrackingRules`; names are compared without regard to case), and
   the rest are sorted by name, stably, so repeated names keep their order. Each
   parameter keeps its spelling: ``a=`` and ``a`` stay different, and ``+`` and ``%20``
   are not unified (not every server decodes queries as form data).
7. An empty query is dropped (``http://a/b?`` is ``http://a/b``).

User info (``user:pass@``) is kept: it can select a different resource.

The canonical form is a fixed point: canonicalising it again, or parsing it with the
WHATWG parser, gives it back unchanged.

Recent answers are remembered
-----------------------------
A URL is usually read several times on its way in (the parser canonicalises a link,
the dedup stage and the frontier take its host key, the frontier canonicalises it
again), and the same links recur on page after page. So the split of a URL into parts
and its canonical form are kept in small bounded memos (:class:`_Memo`, a few thousand
recent URLs each); a canonical form is also remembered as its own canonical form and
with its parts, so the second reading of a link costs a dictionary look-up. The
functions stay pure: a memo only ever holds what the computation would give.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Generic, NamedTuple, Protocol, TypeVar

import ada_url

from common.settingsbase import SettingsError, env_name

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

#: Query parameters the canonical form drops by default (CRAWLER_URLS_TRACKING_PARAMS)
DEFAULT_TRACKING_PARAMS: Final = ("utm_*", "gclid", "fbclid", "msclkid", "dclid", "mc_cid",
                                  "mc_eid", "_ga", "yclid")


class TrackingSettings(Protocol):
    """The part of :class:`common.settings.UrlSettings` the tracking rules read."""

    @property
    def tracking_params(self) -> tuple[str, ...]: ...

    @property
    def extra_tracking_params(self) -> tuple[str, ...]: ...

__all__ = [
    "DEFAULT_TRACKING",
    "ParsedUrl",
    "TrackingRules",
    "UrlError",
    "canonicalize",
    "host_key",
    "host_name_problem",
    "is_http_url",
    "origin",
    "parse",
    "path_and_query",
    "registered_domain",
    "resolve",
    "robots_url",
]


class UrlError(ValueError):
    """A URL that cannot be parsed or canonicalised; the message names it and says why."""


def _shorten(url: object, limit: int = 200) -> str:
    text = repr(url)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error(url: object, reason: str) -> UrlError:
    return UrlError(f"{reason}: {_shorten(url)}")


# --------------------------------------------------------------------------------------
# Parsing and resolution (WHATWG URL Standard)

_HREF: Final = ("href",)
_PARSE_ATTRIBUTES: Final = ("href", "protocol", "username", "password", "hostname",
                            "port", "pathname")


def _to_usv(text: str) -> str:
    """Replace lone surrogates by U+FFFD, as the URL Standard's USVString input does."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _whatwg_href(url: str, base: str | None = None) -> str | None:
    """The WHATWG serialisation of ``url`` (against ``base``), or None if it fails."""
    try:
        if base is None:
            return ada_url.parse_url(url, _HREF)["href"]
        return ada_url.join_url(base, url)
    except ValueError:
        pass
    if not isinstance(url, str) or not (base is None or isinstance(base, str)):
        return None
    if _has_lone_surrogate(url) or (base is not None and _has_lone_surrogate(base)):
        return _whatwg_href(_to_usv(url), None if base is None else _to_usv(base))
    return None


def resolve(href: str, base: str | None = None) -> str | None:
    """Resolve a link against the URL of the page it was found on.

    Follows the WHATWG URL Standard (what browsers do): tabs and newlines are removed,
    surrounding spaces trimmed, backslashes read as slashes in http(s) URLs, dot
    segments resolved, the host IDNA-encoded and the rest percent-encoded as UTF-8.
    The fragment is kept (use :func:`canonicalize` to drop it).

    Returns the absolute URL, or ``None`` when no valid URL results (also when ``base``
    itself is not a valid URL). With ``base=None``, ``href`` must be absolute.

    >>> resolve("../g?x#y", "http://a/b/c/d;p?q")
    'http://a/b/g?x#y'
    >>> resolve("http://[::1", "http://a/") is None
    True
    """
    return _whatwg_href(href, base)


class ParsedUrl(NamedTuple):
    """The parts of a URL as the WHATWG parser reads them."""

    href: str
    """The whole URL, serialised."""
    scheme: str
    """Lower-case scheme, without the colon."""
    username: str
    """Percent-encoded user name, or ``''``."""
    password: str
    """Percent-encoded password, or ``''``."""
    host: str
    """ASCII host as serialised (IPv6 in brackets), or ``''`` when there is none."""
    port: int | None
    """The port, or ``None`` when absent or the scheme's default."""
    path: str
    """The path (for http(s) always starting with ``/``)."""
    query: str | None
    """The query without ``?``: ``None`` when absent, ``''`` when empty."""
    fragment: str | None
    """The fragment without ``#``: ``None`` when absent, ``''`` when empty."""


def parse(url: str, base: str | None = None) -> ParsedUrl:
    """Parse ``url`` (resolved against ``base`` when given) into its parts.

    Raises :class:`UrlError` when it is not a valid URL.
    """
    href = _whatwg_href(url, base)
    if href is None:
        raise _error(url, "not a valid URL")
    attrs = ada_url.parse_url(href, _PARSE_ATTRIBUTES)
    # The first '#' of a serialised URL starts the fragment and the first '?' before it
    # starts the query: both characters are percent-encoded everywhere else.
    before_hash, hash_sep, fragment = href.partition("#")
    _, query_sep, query = before_hash.partition("?")
    port = attrs["port"]
    return ParsedUrl(
        href=href,
        scheme=attrs["protocol"][:-1],
        username=attrs["username"],
        password=attrs["password"],
        host=attrs["hostname"],
        port=int(port) if port else None,
        path=attrs["pathname"],
        query=query if query_sep else None,
        fragment=fragment if hash_sep else None,
    )


# --------------------------------------------------------------------------------------
# Bounded memos of recent answers


K = TypeVar("K")
V = TypeVar("V")


class _Memo(Generic[K, V]):
    """A bounded memo: two generations of dicts; when the young one is full it becomes
    the old one and the previous old one is dropped. A hit in the old generation moves
    the entry to the young one, so recently used entries stay (an LRU approximation at
    dict speed). Safe to share between threads: each step is a single dict operation,
    and a race at worst loses an entry."""

    __slots__ = ("_limit", "_old", "_young")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._young: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        value = self._young.get(key)
        if value is None:
            value = self._old.get(key)
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: K, value: V) -> None:
        young = self._young
        if len(young) >= self._limit:
            self._old = young
            self._young = young = {}
        young[key] = value

    def clear(self) -> None:
        self._young = {}
        self._old = {}


# --------------------------------------------------------------------------------------
# http(s) URLs split into parts, the shared fast path of the functions below


class _HttpParts(NamedTuple):
    scheme: str
    userinfo: str  # 'user:pass@' or ''
    host: str      # canonical host: trailing root dots removed
    port: str      # ':8080' or ''
    path: str
    query: str | None
    fragment: str | None


# A serialised http(s) URL: its path always starts with '/', the user info and the host
# hold no unencoded '/', '?', '#' or '@', the path no '?' or '#', the query no '#'.
_HTTP_HREF: Final = re.compile(
    r"(https?)://([^/@]*@)?(\[[^\]/]*\]|[^:/]*)(:[0-9]*)?(/[^?#]*)(?:\?([^#]*))?(?:#(.*))?",
    re.DOTALL)


def _http_parts(url: str) -> _HttpParts:
    """Parse an http(s) URL; raise :class:`UrlError` for anything else."""
    parts = _PARTS_MEMO.get(url) if isinstance(url, str) else None
    if parts is None:
        parts = _parse_http(url)
        _PARTS_MEMO.put(url, parts)
    return parts


def _parse_http(url: str) -> _HttpParts:
    if not isinstance(url, str):
        raise _error(url, "URL must be a string")
    href = _whatwg_href(url)
    if href is None:
        raise _error(url, "not a valid URL")
    return _split_href(url, href)


def _split_href(url: str, href: str) -> _HttpParts:
    """The parts of ``href``, the WHATWG serialisation of ``url``."""
    match = _HTTP_HREF.fullmatch(href)
    if match is None:
        raise _error(url, "not an http or https URL")
    scheme, userinfo, host, port, path, query, fragment = match.groups()
    if host.endswith("."):
        host = _without_root_dot(url, host)
    if not host:
        raise _error(url, "URL has no host")
    return _HttpParts(scheme, userinfo or "", host, port or "", path, query, fragment)


def _without_root_dot(url: str, host: str) -> str:
    """``host`` without trailing dots, re-read by the WHATWG host parser.

    Re-reading matters where the dots hid an IPv4 address: ``0x7f.1..`` is a domain
    name, ``0x7f.1`` is ``127.0.0.1``.
    """
    stripped = host.rstrip(".")
    if not stripped:
        raise _error(url, "URL has no host")
    href = _whatwg_href(f"http://{stripped}/")
    if href is None:
        raise _error(url, "host is not valid without its trailing dot")
    return href[7:-1]


# --------------------------------------------------------------------------------------
# Percent-encoding normalisation

_UNRESERVED: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Characters RFC 3986 allows unencoded in user info, path and query (pchar, '/', '?').
_ALLOWED_CLASS: Final = r"A-Za-z0-9\-._~!$&'()*+,;=:@/?"
_NEEDS_WORK: Final = re.compile(f"[^{_ALLOWED_CLASS}]")
_ESCAPE_OR_DISALLOWED: Final = re.compile(f"%[0-9A-Fa-f]{{2}}|[^{_ALLOWED_CLASS}]")


def _escape_table() -> dict[str, str]:
    table: dict[str, str] = {}
    digits = "0123456789abcdefABCDEF"
    for hi in digits:
        for lo in digits:
            char = chr(int(hi + lo, 16))
            table[f"%{hi}{lo}"] = char if char in _UNRESERVED else f"%{hi}{lo}".upper()
    return table


_ESCAPES: Final = _escape_table()


def _fix_escape(match: re.Match[str]) -> str:
    token = match.group()
    fixed = _ESCAPES.get(token)
    if fixed is not None:
        return fixed
    return "".join(f"%{byte:02X}" for byte in token.encode("utf-8", "replace"))


def _normalize_escapes(text: str) -> str:
    """Decode unreserved escapes, upper-case the others, encode disallowed characters."""
    if _NEEDS_WORK.search(text) is None:
        return text
    return _ESCAPE_OR_DISALLOWED.sub(_fix_escape, text)


# --------------------------------------------------------------------------------------
# Tracking parameters


@dataclass(frozen=True, slots=True)
class TrackingRules:
    """Which query parameters :func:`canonicalize` removes.

    Patterns name a parameter exactly (``gclid``) or, with a trailing ``*``, every
    parameter starting with what precedes it (``utm_*``). Matching ignores case.
    Build it from settings with :meth:`from_settings`.
    """

    names: frozenset[str]
    prefixes: tuple[str, ...]

    @classmethod
    def from_patterns(cls, patterns: Iterable[str]) -> TrackingRules:
        """Rules from patterns such as ``("utm_*", "gclid")``.

        Raises :class:`ValueError` for an empty pattern, a ``*`` that is not at the end,
        or a lone ``*`` (which would remove every parameter).
        """
        names: set[str] = set()
        prefixes: list[str] = []
        for raw in patterns:
            pattern = raw.strip().lower()
            stem = pattern[:-1] if pattern.endswith("*") else pattern
            if not stem or "*" in stem:
                raise ValueError(f"bad tracking parameter pattern {raw!r}: expected a name "
                                 "or a prefix followed by '*'")
            if pattern.endswith("*"):
                if stem not in prefixes:
                    prefixes.append(stem)
            else:
                names.add(stem)
        return cls(frozenset(names), tuple(prefixes))

    @classmethod
    def from_settings(cls, settings: TrackingSettings) -> TrackingRules:
        """Rules from ``tracking_params`` plus ``extra_tracking_params``.

        Raises :class:`~common.settings.SettingsError` naming the variable of a bad
        pattern.
        """
        for field_name in ("tracking_params", "extra_tracking_params"):
            try:
                cls.from_patterns(getattr(settings, field_name))
            except ValueError as exc:
                raise SettingsError(f"{env_name('urls', field_name)}: {exc}") from None
        return cls.from_patterns((*settings.tracking_params,
                                  *settings.extra_tracking_params))

    def matches(self, name: str) -> bool:
        """Whether the query parameter ``name`` (as written in the URL) is tracking."""
        low = name.lower()
        return low in self.names or (bool(self.prefixes) and low.startswith(self.prefixes))


DEFAULT_TRACKING: Final = TrackingRules.from_patterns(DEFAULT_TRACKING_PARAMS)
"""The rules of the default settings: ``utm_*``, ``gclid``, ``fbclid`` and others."""

_MEMO_SIZE: Final = 8192  # entries per generation of each memo
_PARTS_MEMO: Final[_Memo[str, _HttpParts]] = _Memo(_MEMO_SIZE)
_CANONICAL_MEMO: Final[_Memo[tuple[str, TrackingRules], str]] = _Memo(_MEMO_SIZE)


def _canonical_query(query: str, rules: TrackingRules) -> str:
    # Normalising first is safe: '&' and '=' are reserved, so their escapes stay escapes.
    params: list[tuple[str, str]] = []
    for param in _normalize_escapes(query).split("&"):
        if not param:
            continue
        name = param.partition("=")[0]
        if not rules.matches(name):
            params.append((name, param))
    params.sort(key=_by_name)
    return "&".join(param for _, param in params)


def _by_name(param: tuple[str, str]) -> str:
    return param[0]


# --------------------------------------------------------------------------------------
# Public URL rules


def canonicalize(url: str, *, tracking: TrackingRules | None = None) -> str:
    """The canonical form of an http(s) URL, for de-duplication and as a key.

    The rules are in this module's documentation. ``tracking`` chooses the parameters
    removed (default: :data:`DEFAULT_TRACKING`, the default settings' list).

    Raises :class:`UrlError` when ``url`` is not a valid absolute http or https URL with
    a host.

    >>> canonicalize("HTTP://Example.COM:80/a/./b/../%7euser?utm_source=x&b=2&a=#top")
    'http://example.com/a/~user?a=&b=2'
    """
    rules = DEFAULT_TRACKING if tracking is None else tracking
    key = (url, rules)
    canonical = _CANONICAL_MEMO.get(key)
    if canonical is not None:
        return canonical
    parts = _http_parts(url)
    userinfo = _normalize_escapes(parts.userinfo) if parts.userinfo else ""
    query = _canonical_query(parts.query, rules) if parts.query else ""
    result = "".join((parts.scheme, "://", userinfo, parts.host, parts.port,
                      _normalize_escapes(parts.path), "?" if query else "", query))
    _CANONICAL_MEMO.put(key, result)
    if result != url:
        # A fixed point: the canonical form is its own canonical form, and it is its
        # own WHATWG serialisation, so its parts come from splitting it.
        _CANONICAL_MEMO.put((result, rules), result)
        _PARTS_MEMO.put(result, _split_href(result, result))
    return result


def host_key(url: str) -> str:
    """The host an http(s) URL is fetched from: lower-case ASCII host, port if not default.

    ``http://News.Test:8080/x`` gives ``news.test:8080``; ``https://bücher.de/`` gives
    ``xn--bcher-kva.de``; IPv6 hosts keep their brackets (``[::1]:8080``). The frontier
    partitions by it and politeness is counted per host key (by default: see
    :mod:`common.politeness`). It is the same for a URL
    and its canonical form. Raises :class:`UrlError` like :func:`canonicalize`.
    """
    parts = _http_parts(url)
    return parts.host + parts.port


_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?")


def host_name_problem(key: str) -> str | None:
    """Why a host key (as :func:`host_key` gives it) names no host the crawler could
    reach, or None when it is fine. The URL Standard accepts host names DNS has no
    place for (``-x-``, ``x..test``, ``a*b.test``); seeds and the operator API refuse
    them with this one rule, so no row is made for a host that cannot exist.

    A name is dot-separated labels of 1 to 63 letters, digits, ``-`` and ``_`` (as
    found in real names), not starting or ending with ``-``, at most 253 characters,
    ``xn--`` labels being valid punycode. IP addresses pass; port 0 does not.
    """
    if key.startswith("["):  # [v6] or [v6]:port
        host, _, port = key[1:].partition("]")
        port = port.removeprefix(":")
        if not _is_ip(host):
            return "not an IPv6 address"
    else:
        host, _, port = key.partition(":")
    if port == "0":
        return "port 0"
    if key.startswith("[") or _is_ip(host):
        return None
    if len(host) > 253:
        return "longer than 253 characters"
    for label in host.split("."):
        if not label:
            return "an empty label (two dots in a row, or a leading dot)"
        if len(label) > 63:
            return "a label longer than 63 characters"
        if not _LABEL.fullmatch(label):
            return (f"label {label[:63]!r}: only letters, digits, '-' and '_', not "
                    "starting or ending with '-'")
        if label.startswith("xn--"):
            try:
                label[4:].encode("ascii").decode("punycode")
            except (UnicodeError, ValueError):
                return f"label {label!r}: not valid punycode"
    return None


def origin(url: str) -> str:
    """``scheme://host[:port]`` of an http(s) URL: the key of the robots.txt cache.

    The host is the one of :func:`host_key`. Raises :class:`UrlError` like
    :func:`canonicalize`.
    """
    parts = _http_parts(url)
    return f"{parts.scheme}://{parts.host}{parts.port}"


def robots_url(url: str) -> str:
    """The robots.txt URL that governs an http(s) URL (RFC 9309 section 2.3)."""
    return origin(url) + "/robots.txt"


def path_and_query(url: str) -> str:
    """Path and query of an http(s) URL as sent on the request line (no fragment).

    The URL is read as the WHATWG parser reads it, not canonicalised: ``/b?x=1``. An
    empty query keeps its ``?``. Raises :class:`UrlError` like :func:`canonicalize`.
    """
    parts = _http_parts(url)
    return parts.path if parts.query is None else f"{parts.path}?{parts.query}"


def is_http_url(url: str) -> bool:
    """Whether ``url`` is a valid absolute http or https URL with a host. Never raises."""
    try:
        _http_parts(url)
    except UrlError:
        return False
    return True


# --------------------------------------------------------------------------------------
# Registered domains (Public Suffix List)

@functools.cache
def _suffix_list(private: bool) -> PublicSuffixList:
    """The Public Suffix List bundled with ``publicsuffixlist``, read once per process
    and per section (ICANN alone, or with the private part), on first use. It is read
    from the package's own file: nothing is fetched, and nothing else is imported (the
    list and its reader take about 50 ms to load, so a process that never asks for a
    registered domain, such as a page worker, does not load them)."""
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList(only_icann=not private)


@functools.lru_cache(maxsize=65536)
def registered_domain(host: str, *, private: bool = False) -> str:
    """The registered domain of a host: the public suffix plus one label.

    ``www.bbc.co.uk`` gives ``bbc.co.uk``. ``host`` may be a host key: a port is
    ignored. Upper case, trailing dots and non-ASCII names are normalised first. Uses
    the ICANN section of the Public Suffix List bundled with ``publicsuffixlist``, offline;
    with ``private``, its private section too, where a company hands out names to
    others (``alice.github.io`` is then its own domain, not part of ``github.io``).

    Hosts without a public suffix get a sensible stand-in:

    - IP addresses (``127.0.0.1``, ``[::1]``) are their own domain;
    - a single label (``localhost``) is its own domain;
    - a name whose suffix is not public (``news.test``, ``a.b.corp.internal``) gives
      its last two labels (``news.test``, ``corp.internal``);
    - a host that is itself a public suffix (``co.uk``) is its own domain.
    """
    name = _bare_host(host)
    if not name:
        raise UrlError(f"not a host: {_shorten(host)}")
    if name.startswith("[") or _is_ip(name):
        return name
    if "." not in name:
        return name
    # an unknown top-level label counts as a public suffix (the list's implicit "*"
    # rule): news.test gives news.test; None: the name is a public suffix itself
    return _suffix_list(private).privatesuffix(name) or name


def _bare_host(host: str) -> str:
    """Lower-case ASCII host without port and trailing dots."""
    if not isinstance(host, str):
        raise UrlError(f"host must be a string: {_shorten(host)}")
    text = host.strip()
    if text.startswith("["):
        end = text.find("]")
        return text[: end + 1].lower() if end > 0 else ""
    name = text.rpartition(":")[0] if text.count(":") == 1 else text
    if not name.isascii():
        try:
            name = ada_url.idna_to_ascii(name).decode("ascii")
        except (ValueError, UnicodeError):
            return ""
    return name.lower().rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
