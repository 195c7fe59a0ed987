"""Which pages are rendered in a browser, and what the browser may fetch: pure policy.

Rendering (:mod:`render`) loads a page in headless Chromium and parses the DOM its
scripts built instead of the bytes the server sent. It costs a browser's time and
memory, so only some pages are rendered:

- the operator's rule: hosts (``CRAWLER_RENDER_HOSTS``; a leading '.' covers
  subdomains) and regular expressions searched in the path and query
  (``CRAWLER_RENDER_PATTERNS``, RE2 like the blocked paths);
- the automatic signal (``CRAWLER_RENDER_AUTO``): a page that looks like an empty
  shell built by scripts, i.e. little visible text, few links and at least one
  script (:func:`looks_like_shell`; thresholds are settings, measured in
  docs/rendering.md).

Every request the browser makes is intercepted and judged by :func:`subresource_verdict`
before anything else: only the kinds of request that can change the DOM (scripts,
XHR/fetch, the document itself) of the page's own host (other hosts too with
``CRAWLER_RENDER_THIRD_PARTY``) are considered; images, fonts, media, style sheets,
frames and navigations away are blocked. A
request that passes this rule is then checked by the SSRF guard, robots.txt and the
host's politeness gate (the adapter's job), and fetched by the crawler's own HTTP client.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from common.patterns import OperatorPattern, compile_operator_pattern
from common.settings import RenderSettings

_SCRIPT_RE = re.compile(rb"<script\b", re.IGNORECASE)
SCAN_BYTES = 1_000_000  # script tags are counted in the first megabyte of a body


@dataclass(frozen=True, slots=True)
class ShellSignal:
    """What the automatic rule looks at, from a page's plain parse."""

    text_chars: int  # characters of extracted main text
    links: int  # followable links
    scripts: int  # <script> elements (inline or with src)


def count_scripts(body: bytes) -> int:
    """``<script`` start tags in the first :data:`SCAN_BYTES` of ``body``."""
    return len(_SCRIPT_RE.findall(body, 0, SCAN_BYTES))


@dataclass(frozen=True, slots=True)
class RenderRules:
    """The render settings a decision needs, compiled once."""

    hosts: tuple[str, ...] = ()
    patterns: tuple[OperatorPattern, ...] = ()
    auto: bool = True
    shell_max_text_chars: int = 200
    shell_max_links: int = 2
    shell_min_scripts: int = 1

    @classmethod
    def from_settings(cls, rs: RenderSettings, *, hosts: tuple[str, ...] = (),
                      patterns: tuple[str, ...] = ()) -> RenderRules:
        """The settings' rules, with the operator's ``hosts`` and ``patterns`` (from
        the control API) added; a pattern RE2 cannot run is left out."""
        compiled = [compile_operator_pattern(p) for p in rs.patterns]
        for p in patterns:
            try:
                compiled.append(compile_operator_pattern(p))
            except ValueError:
                continue
        return cls(hosts=tuple(h.lower().rstrip(".") for h in (*rs.hosts, *hosts)),
                   patterns=tuple(compiled),
                   auto=rs.auto, shell_max_text_chars=rs.shell_max_text_chars,
                   shell_max_links=rs.shell_max_links,
                   shell_min_scripts=rs.shell_min_scripts)


class RenderWhy(enum.StrEnum):
    """Why a page is (or is not) rendered."""

    HOST = "host"  # the operator's host rule
    PATTERN = "pattern"  # the operator's path pattern
    SHELL = "shell"  # the automatic signal
    HANDED = "handed"  # chosen by the parser that handed it to the render service
    NO = "no"


def host_listed(host: str, hosts: tuple[str, ...]) -> bool:
    """``host`` is one of ``hosts``, or under one written with a leading '.'."""
    host = host.lower().rstrip(".")
    for entry in hosts:
        if entry.startswith("."):
            if host == entry[1:] or host.endswith(entry):
                return True
        elif host == entry:
            return True
    return False


def operator_rule(url: str, rules: RenderRules) -> RenderWhy:
    """The operator's rule alone (known before the page is parsed)."""
    parts = urlsplit(url)
    if rules.hosts and host_listed(parts.hostname or "", rules.hosts):
        return RenderWhy.HOST
    if rules.patterns:
        target = parts.path + ("?" + parts.query if parts.query else "")
        if any(p.search(target) for p in rules.patterns):
            return RenderWhy.PATTERN
    return RenderWhy.NO


def looks_like_shell(signal: ShellSignal, rules: RenderRules) -> bool:
    """An empty shell that scripts fill: little text, few links, some script."""
    return (signal.text_chars <= rules.shell_max_text_chars
            and signal.links <= rules.shell_max_links
            and signal.scripts >= rules.shell_min_scripts)


def render_decision(url: str, signal: ShellSignal, rules: RenderRules) -> RenderWhy:
    """Whether to render the page at ``url`` whose plain parse gave ``signal``."""
    why = operator_rule(url, rules)
    if why is not RenderWhy.NO:
        return why
    if rules.auto and looks_like_shell(signal, rules):
        return RenderWhy.SHELL
    return RenderWhy.NO


# -- what the browser may fetch --------------------------------------------------------

#: Request kinds (Chromium's resource types) that can add text or links to the DOM.
DOM_TYPES = frozenset({"document", "script", "xhr", "fetch"})


class Verdict(enum.StrEnum):
    """What becomes of one request the browser makes."""

    PAGE = "page"  # the page itself: answered from the stored response, no request
    FETCH = "fetch"  # may be fetched (after the SSRF guard, robots.txt and the gate)
    BLOCKED_TYPE = "blocked_type"  # an image, font, style sheet, media, a frame...
    BLOCKED_THIRD_PARTY = "blocked_third_party"  # another host than the page's
    BLOCKED_SCHEME = "blocked_scheme"  # not http(s)
    BLOCKED_BUDGET = "blocked_budget"  # over the page's request budget
    # decided by the adapter after this rule:
    BLOCKED_SSRF = "blocked_ssrf"
    BLOCKED_ROBOTS = "blocked_robots"
    FAILED = "failed"  # fetched, but no usable answer (error status, time-out)
    ENDED = "ended"  # passed the rule, but the render ended first: never sent


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), (port or default)


def subresource_verdict(page_url: str, url: str, resource_type: str, *,
                        is_navigation: bool, sent: int, budget: int,
                        third_party: bool = False) -> Verdict:
    """The rule for one request of the browser rendering ``page_url``.

    ``sent``: requests of this page already let through; ``budget``: at most that many;
    ``third_party``: scripts and XHR of other hosts may be fetched too (each then under
    its own host's robots.txt and politeness gate).
    """
    scheme = urlsplit(url).scheme
    if is_navigation:
        if url.split("#", 1)[0] == page_url.split("#", 1)[0] and resource_type == "document":
            return Verdict.PAGE
        return Verdict.BLOCKED_TYPE  # frames, redirects by script, window.location
    if scheme not in ("http", "https"):
        return Verdict.BLOCKED_SCHEME
    if resource_type not in DOM_TYPES:
        return Verdict.BLOCKED_TYPE
    if not third_party and _origin(url) != _origin(page_url):
        return Verdict.BLOCKED_THIRD_PARTY
    if sent >= budget:
        return Verdict.BLOCKED_BUDGET
    return Verdict.FETCH
