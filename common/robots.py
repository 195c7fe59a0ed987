"""robots.txt decisions (RFC 9309), built on ``protego``.

Two pure pieces:

- :class:`RobotsPolicy`: the rules of one robots.txt, parsed once and asked many times
  (it is cached per origin). ``allowed(url, product_token)``, ``crawl_delay(token)``,
  ``sitemaps()``.
- :func:`decide_from_status`: what the outcome of fetching robots.txt means
  (RFC 9309 section 2.3.1), as a :class:`RobotsAnswer`.

How a file is read
------------------
protego does the grouping of rules and the matching (longest match wins, ``allow``
wins a tie, ``*`` and a final ``$``). Before protego sees the file, it is read line by
line the way the reference parser (google/robotstxt, whose test suite the project's
conformance tests run) reads it, and handed to protego in a canonical form:

- At most ``max_bytes`` are read (RFC 9309 asks for at least 500 KiB), cut after the
  last complete line. A leading UTF-8 byte order mark (or a prefix of one) is skipped.
  Lines end at CR, LF or CRLF; a line keeps at most its first 16,663 bytes (the
  reference parser's 2083 x 8 = 16,664-byte line buffer, less its terminator).
- A line is ``key: value`` (or ``key value`` when there are exactly two words),
  ``#`` starts a comment. Keys are matched without regard to case and by prefix, with
  the common misspellings the reference parser accepts (``useragent``, ``disalow``...).
  Lines with other keys are dropped, so they never split a group.
- A ``User-agent`` value counts up to its first character that cannot be in a product
  token (letters, ``_``, ``-``), so ``FooBot/1.0`` and ``FooBot Bar`` both name
  ``foobot``; ``*`` (alone or followed by a space) names every crawler.
  Product tokens are compared for equality, without regard to case (protego alone
  matches substrings, so a group for ``Polite`` would also catch ``PoliteCrawler``).
- ``Allow``/``Disallow`` values are percent-escaped as the reference parser does:
  bytes outside ASCII become ``%XX``, the hex digits of existing escapes are upper
  case, nothing is decoded: ``/%62%61%7A`` does not match ``/baz``.
- ``Crawl-delay`` is not part of RFC 9309, and like any such line it does not split a
  group of rules (RFC 9309 2.2.4), so in ``User-agent: *`` / ``Crawl-delay: 10`` /
  ``User-agent: FooBot`` / ``Disallow: /x`` the rule binds both agents. The delay
  itself belongs to the ``User-agent`` lines directly above it (the reading of crawlers
  that honour it): there ``*`` has 10 s and FooBot none. A crawler named by some
  ``User-agent`` line gets its own delay (or none); otherwise the ``*`` delay. Several
  delays for one agent: the largest. ``Sitemap`` lines are collected wherever they are.

URLs are matched on their path, parameters and query as given (no decoding): pass the
URL as it is requested, which is the crawler's canonical form. Raw non-ASCII
characters in a URL do not match escaped rules (as in the reference parser); spaces
and control characters count as their escapes in rules and URLs alike.
``/robots.txt`` itself is always allowed.

Known differences from the reference parser, all in rare corners: protego measures
"longest match" on its own normalised spelling of a rule (``?``, ``;``, ``&``, ``:``
and ``%`` escapes count three characters), so a tie between rules of that kind and
wildcard rules can break differently; a rule ending in ``$`` also matches a URL with a
literal ``$`` at that point.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

from protego import Protego

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_LINE_BYTES",
    "MAX_REDIRECTS",
    "RobotsAnswer",
    "RobotsBasis",
    "RobotsPolicy",
    "RobotsStats",
    "decide_from_status",
    "escape_pattern",
    "is_valid_product_token",
    "path_params_query",
    "product_token",
]

DEFAULT_MAX_BYTES = 512_000
"""Bytes of a robots.txt parsed by default: RFC 9309 asks for at least 500 KiB."""

MAX_LINE_BYTES = 2083 * 8
"""The reference parser's line buffer; a line keeps ``MAX_LINE_BYTES - 1`` bytes."""

MAX_REDIRECTS = 5
"""Redirect hops a robots.txt fetch follows (RFC 9309 section 2.3.1.2)."""

_BOM = b"\xef\xbb\xbf"
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_TWO_WORDS = re.compile(rb"([^ \t]+)[ \t]+([^ \t]+)")
_AGENT_PREFIX = re.compile(rb"[A-Za-z_-]*")
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")
_PATH_START = re.compile(r"[/?;]")
_DELAY = re.compile(rb"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
# What escape_pattern changes: an escape (hex made upper case) or a byte outside ASCII.
_TO_ESCAPE = re.compile(rb"%[0-9A-Fa-f]{2}|[\x80-\xff]")
# Spaces and control characters, in rules and in URLs, are compared as their escapes
# (a URL cannot carry them raw; protego would split lines on some of them).
_CONTROL_BYTES = re.compile(rb"[\x00-\x20\x7f]")
_CONTROL_CHARS = re.compile(r"[\x00-\x20\x7f]")
_URL_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")

_USER_AGENT_KEYS = (b"user-agent", b"useragent", b"user agent")
_ALLOW_KEYS = (b"allow",)
_DISALLOW_KEYS = (b"disallow", b"dissallow", b"dissalow", b"disalow", b"diasllow",
                  b"disallaw")
_SITEMAP_KEYS = (b"sitemap", b"site-map")
_CRAWL_DELAY_KEYS = frozenset({b"crawl-delay", b"crawl delay", b"crawldelay"})


# ---------------------------------------------------------------------------
# Helpers of the reference parser
# ---------------------------------------------------------------------------

def product_token(user_agent: str) -> str:
    """The product token of a User-Agent: ``PoliteCrawler/0.1 (+https://...)`` gives
    ``PoliteCrawler``. Raises :class:`ValueError` when the value starts with no token."""
    match = _PRODUCT_TOKEN.match(user_agent)
    if match is None:
        raise ValueError(f"no product token at the start of user agent {user_agent!r}")
    return match.group()


def is_valid_product_token(token: str) -> bool:
    """Whether ``token`` is a product token robots.txt groups can name (RFC 9309 2.2.1:
    letters, ``_`` and ``-`` only, not empty)."""
    return _PRODUCT_TOKEN.fullmatch(token) is not None


def path_params_query(url: str) -> str:
    """Path, parameters and query of ``url`` (no fragment), as rules are matched on.

    Accepts absolute URLs, URLs without a scheme (``example.com/a``) and paths. The
    result always starts with ``/``. Follows the reference parser's
    ``GetPathParamsQuery``.
    """
    start = 2 if url.startswith("//") else 0
    early_path = _find_path_start(url, start)
    protocol_end = url.find("://", start)
    if protocol_end == -1 or (early_path != -1 and early_path < protocol_end):
        protocol_end = start
    else:
        protocol_end += 3
    path_start = _find_path_start(url, protocol_end)
    if path_start == -1:
        return "/"
    hash_pos = url.find("#", start)
    if hash_pos != -1 and hash_pos < path_start:
        return "/"
    path = url[path_start:] if hash_pos == -1 else url[path_start:hash_pos]
    return path if path.startswith("/") else "/" + path


def _find_path_start(url: str, start: int) -> int:
    match = _PATH_START.search(url, start)
    return -1 if match is None else match.start()


def escape_pattern(pattern: str) -> str:
    """A rule value with its percent-encoding normalised as the reference parser does:
    characters outside ASCII are escaped as UTF-8 (``á`` -> ``%C3%A1``), existing escapes
    get upper-case hex (``%aa`` -> ``%AA``), nothing is decoded."""
    return _escape(pattern.encode("utf-8", "surrogatepass")).decode("ascii", "replace")


def _escape(value: bytes) -> bytes:
    if b"%" not in value and value.isascii():
        return value
    return _TO_ESCAPE.sub(_escape_one, value)


def _escape_one(match: re.Match[bytes]) -> bytes:
    text = match.group()
    if len(text) == 3:
        return text.upper()
    return b"%%%02X" % text[0]


# ---------------------------------------------------------------------------
# The canonical text protego parses, and the URL form it matches
# ---------------------------------------------------------------------------
#
# protego decodes every escape except %25 and %2F before it compares, which would make
# "/%62az" match "/baz". Every "%" of a rule and of a URL is therefore handed to it as
# "%25", which protego keeps as it is: escapes are compared as written (after their hex
# digits are made upper case), as RFC 9309 section 2.2.2 and the reference parser do.

def _rule_form(value: bytes) -> str:
    escaped = _escape(value)
    if _CONTROL_BYTES.search(escaped):
        escaped = _CONTROL_BYTES.sub(lambda m: b"%%%02X" % m.group()[0], escaped)
    return escaped.replace(b"%", b"%25").decode("ascii")


def _url_form(path: str) -> str:
    """The form of a path (from :func:`path_params_query`) handed to protego."""
    if _CONTROL_CHARS.search(path):
        path = _CONTROL_CHARS.sub(lambda m: f"%{ord(m.group()):02X}", path)
    if "%" in path:
        path = _URL_ESCAPE.sub(lambda m: m.group().upper(), path).replace("%", "%25")
    if not path.isascii():
        # Lone surrogates cannot be encoded; they match nothing anyway.
        path = path.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    # A fixed origin keeps protego from reading a path starting "//" as an authority.
    return "http://robots.invalid" + path


def _agent_key(token: str) -> str:
    """How a product token is named in the canonical text. The brackets make protego's
    substring test an equality test."""
    return f"<{token.lower()}>"


@dataclass(frozen=True, slots=True)
class RobotsStats:
    """What parsing one robots.txt saw (for logs and metrics)."""

    bytes_parsed: int  # bytes read, after the cap
    truncated: bool  # the body was longer than the cap
    directives: int  # user-agent, allow, disallow, sitemap and crawl-delay lines
    unknown_directives: int  # key: value lines with any other key
    last_directive_line: int  # 1-based line number of the last of those lines (0: none)


@dataclass(slots=True)
class _Canonical:
    text: str
    sitemaps: list[str]
    delays: dict[str, float]  # agent key ("*" or "<token>") -> Crawl-delay
    named: frozenset[str]  # agent keys named by some User-agent line
    stats: RobotsStats


def _cut(body: bytes, max_bytes: int) -> tuple[bytes, bool]:
    if len(body) <= max_bytes:
        return body, False
    head = body[:max_bytes]
    last_break = max(head.rfind(b"\n"), head.rfind(b"\r"))
    # A partial last line is dropped: cut short, "Allow: /abc" would allow more.
    # Without any line break the one line is kept, cut by the line cap.
    return (head[: last_break + 1] if last_break >= 0 else head), True


def _skip_bom(body: bytes) -> bytes:
    """Skip a UTF-8 byte order mark, or the part of one that starts the body."""
    skip = 0
    while skip < len(_BOM) and skip < len(body) and body[skip] == _BOM[skip]:
        skip += 1
    return body[skip:]


def _key_value(line: bytes) -> tuple[bytes, bytes] | None:
    hash_pos = line.find(b"#")
    if hash_pos != -1:
        line = line[:hash_pos]
    line = line.strip()
    if not line:
        return None
    sep = line.find(b":")
    if sep == -1:
        # Accepted in place of the colon: whitespace between exactly two words.
        two = _TWO_WORDS.fullmatch(line)
        return None if two is None else (two.group(1), two.group(2))
    key = line[:sep].strip()
    if not key:
        return None
    return key, line[sep + 1:].strip()


def _canonical(body: bytes, max_bytes: int) -> _Canonical:
    data, truncated = _cut(body, max_bytes)
    bytes_parsed = len(data)
    data = _skip_bom(data)
    out: list[str] = []
    sitemaps: list[str] = []
    delays: dict[str, float] = {}
    named: set[str] = set()
    delay_agents: list[str] = []  # the User-agent lines a Crawl-delay line refers to
    after_agents = False  # the last directive was a User-agent line
    directives = unknown = last_line = 0
    lines = _LINE_BREAK.split(data)
    if lines and not lines[-1]:
        lines.pop()  # the empty rest after a final line break is no line
    for number, raw in enumerate(lines, start=1):
        kv = _key_value(raw[: MAX_LINE_BYTES - 1])
        if kv is None:
            continue
        key, value = kv
        last_line = number
        lowered = key.lower()
        if lowered.startswith(_USER_AGENT_KEYS):
            if value[:1] == b"*" and (len(value) == 1 or value[1:2].isspace()):
                agent = "*"
            else:
                token = _AGENT_PREFIX.match(value)
                agent = _agent_key(token.group().decode("ascii") if token else "")
            out.append("user-agent: " + agent)
            if not after_agents:
                delay_agents = []
            delay_agents.append(agent)
            named.add(agent)
            after_agents = True
        elif lowered.startswith(_ALLOW_KEYS) or lowered.startswith(_DISALLOW_KEYS):
            field = "allow" if lowered.startswith(_ALLOW_KEYS) else "disallow"
            # An empty value still ends the group's lines, so it is written too.
            out.append(f"{field}: {_rule_form(value)}")
            after_agents = False
        elif lowered.startswith(_SITEMAP_KEYS):
            url = value.decode("utf-8", "replace")
            if url and url not in sitemaps:
                sitemaps.append(url)
        elif lowered in _CRAWL_DELAY_KEYS:
            delay = _parse_delay(value)
            if delay is not None:
                for agent in delay_agents:
                    delays[agent] = max(delay, delays.get(agent, 0.0))
            after_agents = False
        else:
            unknown += 1
            continue
        directives += 1
    stats = RobotsStats(bytes_parsed=bytes_parsed, truncated=truncated,
                        directives=directives, unknown_directives=unknown,
                        last_directive_line=last_line)
    return _Canonical("\n".join(out), sitemaps, delays, frozenset(named), stats)


def _parse_delay(value: bytes) -> float | None:
    if _DELAY.fullmatch(value) is None:
        return None
    delay = float(value)
    return delay if math.isfinite(delay) else None


# ---------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------

class RobotsPolicy:
    """The rules of one robots.txt. Build with :meth:`parse`, :meth:`allow_all` or
    :meth:`disallow_all`; ask :meth:`allowed`, :meth:`crawl_delay`, :meth:`sitemaps`.

    ``product_token`` arguments are the crawler's product token (``PoliteCrawler``,
    see :func:`product_token`), compared without regard to case. A value that is not a
    valid token (``PoliteCrawler/0.1``, ``Foo Bar``) can equal no group's name, so only
    the ``*`` group applies to it.
    """

    __slots__ = ("_delays", "_fixed", "_named", "_parser", "_sitemaps", "_stats")

    def __init__(self, parser: Protego | None, *, fixed: bool | None = None,
                 sitemaps: tuple[str, ...] = (), delays: dict[str, float] | None = None,
                 named: frozenset[str] = frozenset(),
                 stats: RobotsStats | None = None) -> None:
        """Use :meth:`parse`, :meth:`allow_all` or :meth:`disallow_all`."""
        self._parser = parser
        self._fixed = fixed
        self._sitemaps = sitemaps
        self._delays = delays or {}
        self._named = named
        self._stats = stats or RobotsStats(0, False, 0, 0, 0)

    @classmethod
    def parse(cls, body: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES) -> RobotsPolicy:
        """Parse a robots.txt body. Never raises on any content; reads at most
        ``max_bytes`` bytes (cut after the last complete line)."""
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        if isinstance(body, str):
            raise TypeError("a robots.txt body is bytes, not str")
        canonical = _canonical(bytes(body), max_bytes)
        return cls(Protego.parse(canonical.text), sitemaps=tuple(canonical.sitemaps),
                   delays=canonical.delays, named=canonical.named, stats=canonical.stats)

    @classmethod
    def allow_all(cls) -> RobotsPolicy:
        """No rules: every URL is allowed (robots.txt answered 4xx)."""
        return cls(None, fixed=True)

    @classmethod
    def disallow_all(cls) -> RobotsPolicy:
        """Every URL but /robots.txt is disallowed (robots.txt unreachable)."""
        return cls(None, fixed=False)

    def allowed(self, url: str, product_token: str) -> bool:
        """Whether the crawler named ``product_token`` may fetch ``url`` (absolute, or a
        path). Matching is on the URL's path and query as given. ``/robots.txt`` (with
        any query) is always allowed."""
        path = path_params_query(url)
        if path.partition("?")[0] == "/robots.txt":
            return True
        if self._parser is None:
            return bool(self._fixed)
        return self._parser.can_fetch(_url_form(path), self._query(product_token))

    def crawl_delay(self, product_token: str) -> float | None:
        """The Crawl-delay for ``product_token`` in seconds, uncapped: its own when some
        ``User-agent`` line names it (``None`` if those lines have none), else the
        ``*`` delay; ``None`` when there is none."""
        agent = self._query(product_token)
        if agent in self._named:
            return self._delays.get(agent)
        return self._delays.get("*")

    @property
    def stats(self) -> RobotsStats:
        """What parsing saw (all zero for the fixed policies)."""
        return self._stats

    def sitemaps(self) -> list[str]:
        """Sitemap URLs listed in the file, in order, without repeats, as written."""
        return list(self._sitemaps)

    @staticmethod
    def _query(product_token: str) -> str:
        # An invalid token equals no group name; "" makes protego pick only "*".
        return _agent_key(product_token) if is_valid_product_token(product_token) else ""

    def __repr__(self) -> str:
        if self._parser is None:
            return f"RobotsPolicy({'allow' if self._fixed else 'disallow'}_all)"
        return f"RobotsPolicy(directives={self.stats.directives})"


# ---------------------------------------------------------------------------
# Fetch outcomes of robots.txt itself
# ---------------------------------------------------------------------------

class RobotsBasis(enum.StrEnum):
    """What a robots answer rests on (RFC 9309 section 2.3.1)."""

    FILE = "file"  # 2xx: the file's rules
    NO_FILE = "no_file"  # 4xx, or redirects past the limit: no rules, all allowed (2.3.1.3)
    UNREACHABLE = "unreachable"  # 5xx, 429, timeout, network error: all disallowed (2.3.1.4)


@dataclass(frozen=True, slots=True)
class RobotsAnswer:
    """The policy to apply to an origin, and what it rests on."""

    policy: RobotsPolicy
    basis: RobotsBasis

    @property
    def available(self) -> bool:
        """False when robots.txt could not be read (5xx, 429, timeout, network error):
        the policy then disallows everything for now and robots.txt is fetched again
        after ``robots_error_retry`` (the fetch outcome ``robots_unavailable``)."""
        return self.basis is not RobotsBasis.UNREACHABLE


def decide_from_status(status: int | None, body: bytes | None, *,
                       max_bytes: int = DEFAULT_MAX_BYTES) -> RobotsAnswer:
    """Turn the outcome of fetching ``/robots.txt`` into an answer (RFC 9309 2.3.1).

    ``status`` is the final HTTP status, ``None`` (or 0) when no response came
    (timeout, connection or DNS error). Redirects are the caller's: it follows up to
    :data:`MAX_REDIRECTS` hops (each one checked like any fetch) and passes the last
    status; a 3xx here means the hops ran out, which RFC 9309 lets a crawler treat as
    "unavailable" (allow all).

    - 2xx: the body's rules (``None`` is an empty file).
    - 3xx, 4xx (401 and 403 too): no rules, everything allowed.
    - 429: treated like 5xx (the server asks us to slow down; fail closed).
    - 5xx, any other status, no response: everything disallowed for now; retry later.
      (RFC 9309 lets a crawler fall back to a cached copy, or after 30 days to allow
      all; both are the caller's choice.)
    """
    if status is not None and 200 <= status <= 299:
        return RobotsAnswer(RobotsPolicy.parse(body or b"", max_bytes=max_bytes),
                            RobotsBasis.FILE)
    if status is not None and 300 <= status <= 499 and status != 429:
        return RobotsAnswer(RobotsPolicy.allow_all(), RobotsBasis.NO_FILE)
    return RobotsAnswer(RobotsPolicy.disallow_all(), RobotsBasis.UNREACHABLE)
