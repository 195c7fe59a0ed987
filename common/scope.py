"""Crawl scope: the rules as data, their entries checked and normalised, seed roots.

A crawl follows every link that robots.txt and the trap rules allow unless its scope
says otherwise (``CRAWLER_SCOPE_*``, ``crawler crawl --scope ...``, ``PUT /v1/scope``):

- ``mode``: ``any`` (the default), ``seed-hosts`` (only the seeds' hosts, like wget
  without ``-H``), or ``seed-domains`` (every host under a seed's registered domain:
  a seed on ``docs.example.co.uk`` admits ``www.example.co.uk``, by the Public Suffix
  List, private part included, so a seed on ``alice.github.io`` does not admit
  ``bob.github.io``);
- ``allow_domains``: more domains links may lead to (like Scrapy's
  ``allowed_domains`` and wget's ``-D``); with mode ``any`` and a non-empty list, only
  these;
- ``deny_domains``: domains never followed (wget's ``--exclude-domains``); a deny wins
  over every allow;
- ``path_prefixes``: on every host, URLs must stay under one of these paths;
- ``no_parent``: like wget's ``--no-parent``: on a seed's host, URLs must stay under
  the folder of one of its seeds.

A domain entry covers itself and its subdomains, on any port (``example.org`` covers
``docs.example.org:8080``, not ``badexample.org``). A path prefix covers itself and
what is below it at a segment boundary (``/docs`` covers ``/docs``, ``/docs/`` and
``/docs/a``, not ``/docsx``).

Seeds themselves are always in scope. A seed's redirect target (still depth 0) becomes
a seed root too, as in Heritrix: ``http://example.org/`` answering with a redirect to
``https://www.example.org/`` keeps the crawl on ``www.example.org``.

The stored records (:class:`~common.ports.ScopeRules`, :class:`~common.ports.SeedRoot`)
live in common.ports; the decision is :func:`frontier.scope.scope_verdict`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from typing import Protocol
from urllib.parse import urlsplit

import ada_url

from common import urls
from common.ports import ScopeRules, SeedRoot
from common.settingsbase import SettingsError, env_name


class ScopeSettings(Protocol):
    """The scope section of the settings (:class:`common.settings.ScopeSettings`)."""

    @property
    def mode(self) -> str: ...

    @property
    def allow_domains(self) -> tuple[str, ...]: ...

    @property
    def deny_domains(self) -> tuple[str, ...]: ...

    @property
    def path_prefixes(self) -> tuple[str, ...]: ...

    @property
    def no_parent(self) -> bool: ...

SCOPE_MODES = ("any", "seed-hosts", "seed-domains")
MAX_DOMAIN_CHARS = 253
MAX_PREFIX_CHARS = 1000

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def domain_entry(text: str) -> str:
    """A domain of an allow or deny list, normalised: lower case, ASCII (punycode),
    without a leading ``.`` or ``*.`` and a trailing dot. Raises ValueError."""
    raw = text
    name = text.strip().lower()
    if name.startswith("*."):
        name = name[2:]
    name = name.lstrip(".").rstrip(".")
    if not name:
        raise ValueError(f"not a domain: {raw!r}")
    if "://" in name or "/" in name:
        raise ValueError(f"expected a domain name, not a URL or path: {raw!r}")
    if name.startswith("[") and name.endswith("]"):
        try:
            return f"[{ipaddress.IPv6Address(name[1:-1]).compressed}]"
        except ValueError:
            raise ValueError(f"not an IPv6 address: {raw!r}") from None
    if ":" in name:
        raise ValueError(f"expected a domain without a port (a domain covers every "
                         f"port): {raw!r}")
    try:
        return str(ipaddress.IPv4Address(name))
    except ValueError:
        pass
    if not name.isascii():
        try:
            name = ada_url.idna_to_ascii(name).decode("ascii").lower()
        except (ValueError, UnicodeError):
            name = ""
        if not name:
            raise ValueError(f"not a valid internationalised domain name: {raw!r}")
    if len(name) > MAX_DOMAIN_CHARS or not all(_LABEL.fullmatch(label)
                                               for label in name.split(".")):
        raise ValueError(f"not a domain name: {raw!r}")
    return name


def path_prefix_entry(text: str) -> str:
    """A path prefix, normalised as the canonical form writes paths (percent-encoding,
    dot segments) and without a trailing '/'. Raises ValueError."""
    raw = text
    text = text.strip()
    if not text.startswith("/"):
        raise ValueError(f"a path prefix starts with '/': {raw!r}")
    if len(text) > MAX_PREFIX_CHARS:
        raise ValueError(f"a path prefix has at most {MAX_PREFIX_CHARS} characters")
    if "?" in text or "#" in text or any(ch.isspace() or ord(ch) < 32 for ch in text):
        raise ValueError(f"a path prefix has no query, fragment, space or control "
                         f"character: {raw!r}")
    try:
        path = urlsplit(urls.canonicalize("http://scope.invalid" + text)).path
    except urls.UrlError:
        raise ValueError(f"not a URL path: {raw!r}") from None
    return path.rstrip("/") or "/"


def checked_rules(*, mode: str = "any", allow_domains: Iterable[str] = (),
                  deny_domains: Iterable[str] = (), path_prefixes: Iterable[str] = (),
                  no_parent: bool = False) -> ScopeRules:
    """Rules with every entry normalised (duplicates dropped, order kept). Raises
    ValueError naming the field at fault (``allow_domains: ...``)."""
    if mode not in SCOPE_MODES:
        raise ValueError(f"mode: expected one of {', '.join(SCOPE_MODES)}, got {mode!r}")

    def each(field: str, items: Iterable[str], check: Callable[[str], str]
             ) -> tuple[str, ...]:
        out: list[str] = []
        for item in items:
            try:
                value = check(item)
            except ValueError as exc:
                raise ValueError(f"{field}: {exc}") from None
            if value not in out:
                out.append(value)
        return tuple(out)

    return ScopeRules(mode=mode,
                      allow_domains=each("allow_domains", allow_domains, domain_entry),
                      deny_domains=each("deny_domains", deny_domains, domain_entry),
                      path_prefixes=each("path_prefixes", path_prefixes, path_prefix_entry),
                      no_parent=bool(no_parent))


def rules_from_settings(settings: ScopeSettings) -> ScopeRules:
    """The settings' rules; an invalid entry is a :class:`SettingsError` naming its
    variable."""
    try:
        return checked_rules(mode=settings.mode, allow_domains=settings.allow_domains,
                             deny_domains=settings.deny_domains,
                             path_prefixes=settings.path_prefixes,
                             no_parent=settings.no_parent)
    except ValueError as exc:
        field, _, why = str(exc).partition(": ")
        raise SettingsError(f"{env_name('scope', field)}: {why}") from None


def limits(rules: ScopeRules) -> bool:
    """Whether the rules leave anything out (the default rules follow everything)."""
    return (rules.mode != "any" or bool(rules.allow_domains) or bool(rules.deny_domains)
            or bool(rules.path_prefixes) or rules.no_parent)


def needs_seeds(rules: ScopeRules) -> bool:
    """Whether a verdict under the rules depends on the seed roots."""
    return rules.mode != "any" or rules.no_parent


def host_name(host: str) -> str:
    """A host key without its port (``docs.example.org:8080`` -> ``docs.example.org``,
    ``[::1]:8080`` -> ``[::1]``)."""
    if host.startswith("["):
        return host[:host.index("]") + 1] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def site_of(host: str) -> str:
    """The registered domain seed roots are grouped under: Public Suffix List, private
    part too (``alice.github.io`` is its own, ``www.bbc.co.uk`` is ``bbc.co.uk``)."""
    return urls.registered_domain(host, private=True)


def seed_root(url: str) -> SeedRoot:
    """The seed root of a canonical http(s) URL: its domain, host name and folder."""
    host = host_name(urls.host_key(url))
    path = urlsplit(url).path or "/"
    return SeedRoot(domain=site_of(host), host=host, path=path[:path.rfind("/") + 1])
