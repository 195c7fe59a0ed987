"""DNS for the fetcher: a TTL-respecting cache over aiodns, and an aiohttp resolver
that connects only to addresses the SSRF guard has checked.

- :class:`Resolver` answers ``host -> addresses`` (A then AAAA). Answers are cached for
  their TTL clamped to ``[dns_min_ttl, dns_max_ttl]``; a name that does not exist
  (NXDOMAIN, or no A and no AAAA records) is cached for :data:`NEGATIVE_TTL` seconds;
  temporary failures (timeout, SERVFAIL, refused) are not cached. Concurrent look-ups
  of one name share a single query, so a name is resolved once per TTL. IP-literal
  hosts are returned as they are (legacy numeric IPv4 forms such as ``127.1`` or
  ``0x7f.1`` are normalised first, so the guard sees the address a socket would use);
  ``fetcher.resolve`` entries (``host:port:address``, like curl ``--resolve``; port
  ``*`` matches any port) answer without DNS.
- An answer keeps at most ``max_addresses`` addresses (:func:`cap_addresses`: the
  lowest, in the order the ``ip`` politeness key reads them, so the key's address is
  always kept and a server that rotates its answer does not change what is kept); the
  cache is bounded by ``max_entries`` names and by ``max_bytes`` (an estimate of what
  its entries hold, :func:`entry_bytes`), the least recently used going first. A name
  with thousands of records thus costs what a name with ``max_addresses`` costs.
- :class:`CheckedResolver` is the aiohttp resolver: :meth:`CheckedResolver.resolve_checked`
  resolves a name and runs every address through the :class:`~fetcher.ssrf.Guard`
  (all must pass), and keeps the guard's verdict with the cached answer, so a cached
  look-up does not check again; :meth:`CheckedResolver.pin` makes the connector use
  exactly the addresses a fetch checked (or the one of them a fetch is pinned to), so
  the connection goes to a checked address while the Host header and TLS SNI stay the
  hostname.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import ipaddress
import logging
import re
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import aiodns
import pycares
from aiohttp.abc import AbstractResolver, ResolveResult

from common.addresses import Override as Override
from common.addresses import normalise_host, parse_nameserver, parse_override
from common.politeness import address_order
from common.settings import FetcherSettings
from fetcher.ssrf import Guard, SsrfBlockedError, Verdict

log = logging.getLogger(__name__)

NEGATIVE_TTL = 30.0
"""Seconds a name that does not exist stays cached as not existing."""

PARTIAL_TTL = 30.0
"""Seconds an answer stays cached when one of its two queries failed temporarily."""

MAX_ADDRESSES = 32
"""Addresses kept of one name's answer by default (``fetcher.dns_max_addresses``)."""

MAX_CACHE_BYTES = 64 * 1024 * 1024
"""Default bound of the cache's estimated size (``fetcher.dns_cache_max_bytes``)."""

ENTRY_BYTES = 400
"""Estimated bytes of one cache entry apart from its addresses: the entry object, its
name as the key, the ordered dict's link, the tuples and the guard's verdict slot.
Measured (tracemalloc) at about 310 bytes besides the name's characters; rounded up."""

ADDRESS_BYTES = 72
"""Estimated bytes of one kept address beyond its characters: a ``str`` object (49
bytes of header for ASCII text) and its slot in the tuple (8), rounded up; an IPv4
address in text is 7 to 15 characters more."""

Clock = Callable[[], float]


def cap_addresses(addresses: Sequence[str], limit: int) -> tuple[str, ...]:
    """At most ``limit`` distinct addresses of ``addresses``, in the answer's order.

    Pure. When there are more, the lowest are kept in the order the ``ip`` politeness
    key reads them (:func:`common.politeness.address_order`: IPv4 first, then by
    value), so the key's address (the lowest) is always among them and an answer whose
    order rotates keeps the same set. A name with thousands of records therefore costs
    no more to keep, check and connect to than one with ``limit``.
    """
    unique = tuple(dict.fromkeys(addresses))
    if len(unique) <= limit:
        return unique
    kept = set(heapq.nsmallest(limit, unique, key=address_order))
    return tuple(a for a in unique if a in kept)


VERDICT_BYTES = 240
"""Estimated bytes of one refused address's verdict kept with its entry (a
:class:`~fetcher.ssrf.Verdict` and its texts)."""


def entry_bytes(name: str, addresses: Sequence[str]) -> int:
    """Pure: the estimated bytes one cache entry of ``name`` holds (an upper bound of
    what ``tracemalloc`` measures for it, see :data:`ENTRY_BYTES`); what the cache's
    byte bound counts."""
    return ENTRY_BYTES + len(name) + sum(ADDRESS_BYTES + len(a) for a in addresses)


def verdict_bytes(allowed: Sequence[str], refused: Sequence[Verdict]) -> int:
    """Pure: the estimated bytes a kept verdict adds to its entry: ``allowed``
    addresses held apart from the answer's own (none when the guard's text is the
    answer's, the usual case), and each refused address's verdict."""
    return (sum(ADDRESS_BYTES + len(a) for a in allowed)
            + sum(VERDICT_BYTES + len(v.address) for v in refused))


class DnsError(OSError):
    """A name did not resolve. ``not_found`` is True when the name does not exist (or
    has no addresses), False for a temporary failure worth retrying."""

    def __init__(self, host: str, reason: str, *, not_found: bool) -> None:
        super().__init__(f"{host}: {reason}")
        self.host = host
        self.reason = reason
        self.not_found = not_found


@dataclass(frozen=True, slots=True)
class Answer:
    """One query's answer: the addresses and the smallest TTL of the records."""

    addresses: tuple[str, ...]
    ttl: float


class DnsBackend(Protocol):
    """Where answers come from (aiodns in production, a fake in unit tests)."""

    async def query(self, host: str, qtype: str) -> Answer:
        """Addresses of type ``qtype`` ("A" or "AAAA"); an empty answer when the name
        exists without such records; :class:`DnsError` otherwise."""
        ...

    async def close(self) -> None: ...


_NUMERIC_V4 = re.compile(r"[0-9a-fx.]+")
_NUMERIC_LAST = re.compile(r"(0x[0-9a-f]*|[0-9]+)")


def ip_literal(host: str) -> str | None:
    """The address ``host`` denotes when it is an IP literal, else ``None``.

    Legacy IPv4 spellings (``127.1``, ``2130706433``, ``0x7f.0.0.1``) count as
    literals, normalised the way ``inet_aton`` reads them.
    """
    h = normalise_host(host)
    numeric_last = _NUMERIC_LAST.fullmatch(h.rsplit(".", 1)[-1]) is not None
    if not numeric_last and ":" not in h:
        # a name: an IPv4 address ends in a number and an IPv6 one has colons (the
        # usual case, decided without the exceptions of two failed parses)
        return None
    try:
        return str(ipaddress.ip_address(h.split("%", 1)[0]))
    except ValueError:
        pass
    if numeric_last and _NUMERIC_V4.fullmatch(h):
        with contextlib.suppress(OSError):
            return socket.inet_ntoa(socket.inet_aton(h))
    return None


class AiodnsBackend:
    """Queries through aiodns (c-ares). Created lazily inside the running loop."""

    def __init__(self, nameservers: Sequence[str] = (), *, timeout: float = 3.0,
                 tries: int = 2) -> None:
        self._nameservers = [parse_nameserver(n) for n in nameservers]
        self._timeout = timeout
        self._tries = tries
        self._resolver: aiodns.DNSResolver | None = None

    def _get(self) -> aiodns.DNSResolver:
        if self._resolver is None:
            self._resolver = aiodns.DNSResolver(
                nameservers=self._nameservers or None, loop=asyncio.get_running_loop(),
                timeout=self._timeout, tries=self._tries)
        return self._resolver

    async def query(self, host: str, qtype: str) -> Answer:
        try:
            result = await self._get().query_dns(host, qtype)
        except aiodns.error.DNSError as exc:
            code = exc.args[0] if exc.args else None
            if code == pycares.errno.ARES_ENODATA:
                return Answer((), 0.0)
            message = exc.args[1] if len(exc.args) > 1 else str(exc)
            not_found = code in (pycares.errno.ARES_ENOTFOUND, pycares.errno.ARES_EBADNAME)
            raise DnsError(host, f"{qtype}: {message}", not_found=not_found) from None
        wanted = pycares.QUERY_TYPE_A if qtype == "A" else pycares.QUERY_TYPE_AAAA
        addresses: list[str] = []
        ttls: list[int] = []
        for rr in result.answer:
            ttls.append(rr.ttl)  # CNAME links bound the answer's life as well
            if rr.type == wanted:
                addr = getattr(rr.data, "addr", None)
                if isinstance(addr, str):
                    addresses.append(addr)
        return Answer(tuple(addresses), float(min(ttls)) if ttls else 0.0)

    async def close(self) -> None:
        if self._resolver is not None:
            await self._resolver.close()
            self._resolver = None


@dataclass(slots=True)
class _Entry:
    addresses: tuple[str, ...]
    expires_at: float
    error: DnsError | None = None
    size: int = 0  # estimated bytes (entry_bytes), counted in the cache's total
    # the guard's verdict on ``addresses``, kept so that a cached look-up does not check
    # again: the guard that gave it, and the allowed addresses or the refused verdicts
    checked_by: Guard | None = None
    allowed: tuple[str, ...] = ()
    refused: tuple[Verdict, ...] = ()


@dataclass(frozen=True, slots=True)
class DnsStats:
    hits: int  # answered from the cache (including negative answers and shared queries)
    misses: int  # needed a query
    negative_hits: int  # cached "does not exist" answers served
    overrides: int  # answered by a fetcher.resolve entry
    literals: int  # IP-literal hosts
    size: int  # names in the cache
    bytes: int = 0  # the cache's estimated size (entry_bytes of every entry)
    checks: int = 0  # answers the SSRF guard checked (a cached verdict is not counted)
    verdict_hits: int = 0  # checked look-ups answered with the cached verdict
    evictions: int = 0  # entries dropped to keep within max_entries or max_bytes
    capped: int = 0  # answers that had more than max_addresses addresses


class Resolver:
    """Cached name resolution. Not thread-safe; one per event loop."""

    def __init__(self, *, backend: DnsBackend | None = None,
                 nameservers: Sequence[str] = (), overrides: Sequence[str] = (),
                 min_ttl: float = 60.0, max_ttl: float = 3600.0,
                 negative_ttl: float = NEGATIVE_TTL, partial_ttl: float = PARTIAL_TTL,
                 max_entries: int = 100_000, max_bytes: int = MAX_CACHE_BYTES,
                 max_addresses: int = MAX_ADDRESSES, clock: Clock = time.monotonic) -> None:
        if min_ttl > max_ttl:
            raise ValueError("min_ttl must not exceed max_ttl")
        if max_addresses < 1:
            raise ValueError("max_addresses must be at least 1")
        self._backend: DnsBackend = backend or AiodnsBackend(nameservers)
        self._overrides: dict[tuple[str, int | None], list[str]] = {}
        for entry in overrides:
            o = parse_override(entry)
            self._overrides.setdefault((o.host, o.port), []).append(o.address)
        self._min_ttl = min_ttl
        self._max_ttl = max_ttl
        self._negative_ttl = min(negative_ttl, max_ttl)
        self._partial_ttl = min(partial_ttl, max_ttl)
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._max_addresses = max_addresses
        self._clock = clock
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[str, asyncio.Future[_Entry]] = {}
        self._hits = self._misses = self._negative_hits = 0
        self._override_hits = self._literals = 0
        self._checks = self._verdict_hits = self._evictions = self._capped = 0

    @classmethod
    def from_settings(cls, settings: FetcherSettings, *, clock: Clock = time.monotonic,
                      backend: DnsBackend | None = None) -> Resolver:
        if backend is None:
            backend = AiodnsBackend(settings.dns_servers,
                                    timeout=min(settings.connect_timeout, 5.0))
        return cls(backend=backend, overrides=settings.resolve,
                   min_ttl=settings.dns_min_ttl, max_ttl=settings.dns_max_ttl,
                   max_bytes=settings.dns_cache_max_bytes,
                   max_addresses=settings.dns_max_addresses, clock=clock)

    @property
    def stats(self) -> DnsStats:
        return DnsStats(self._hits, self._misses, self._negative_hits, self._override_hits,
                        self._literals, len(self._cache), self._bytes, self._checks,
                        self._verdict_hits, self._evictions, self._capped)

    def clamp_ttl(self, ttl: float) -> float:
        return max(self._min_ttl, min(self._max_ttl, ttl))

    async def resolve(self, host: str, port: int | None = None) -> tuple[str, ...]:
        """All addresses of ``host`` (IPv4 first, then IPv6), at most ``max_addresses``;
        :class:`DnsError` if none."""
        addresses, _, _ = await self._lookup(host, port)
        return addresses

    async def resolve_checked(self, host: str, port: int | None, guard: Guard
                              ) -> tuple[str, ...]:
        """:meth:`resolve`, every address allowed by ``guard`` (else
        :class:`~fetcher.ssrf.SsrfBlockedError`). The verdict is kept with the cached
        answer, so until the answer expires a look-up by the same guard does not check
        the addresses again."""
        addresses, name, entry = await self._lookup(host, port)
        if entry is not None and entry.checked_by is guard:
            self._verdict_hits += 1
            if entry.refused:
                raise SsrfBlockedError(host, entry.refused)
            return entry.allowed
        self._checks += 1
        try:
            allowed = guard.check_all(host, addresses)
        except SsrfBlockedError as exc:
            if entry is not None:
                self._keep_verdict(name, entry, guard, (), exc.verdicts)
            raise
        if entry is not None:
            # the guard's text of an address is the answer's in practice: shared
            self._keep_verdict(name, entry, guard,
                               addresses if allowed == addresses else allowed, ())
        return allowed

    def _keep_verdict(self, name: str, entry: _Entry, guard: Guard,
                      allowed: tuple[str, ...], refused: tuple[Verdict, ...]) -> None:
        entry.checked_by, entry.allowed, entry.refused = guard, allowed, refused
        extra = verdict_bytes(allowed if allowed is not entry.addresses else (), refused)
        if extra and self._cache.get(name) is entry:
            entry.size += extra
            self._bytes += extra
            self._shrink()

    async def _lookup(self, host: str, port: int | None
                      ) -> tuple[tuple[str, ...], str, _Entry | None]:
        """The addresses of ``host``, its normalised name and the cache entry they came
        from (None for a fixed answer or an IP literal)."""
        name = normalise_host(host)
        if not name:
            raise DnsError(host, "empty host name", not_found=True)
        fixed = self._overrides.get((name, port)) if port is not None else None
        if fixed is None:
            fixed = self._overrides.get((name, None))
        if fixed is not None:
            self._override_hits += 1
            return tuple(fixed), name, None
        literal = ip_literal(name)
        if literal is not None:
            self._literals += 1
            return (literal,), name, None
        entry = self._cached(name)
        if entry is not None:
            self._hits += 1
        else:
            task = self._inflight.get(name)
            if task is not None:
                self._hits += 1
            else:
                self._misses += 1
                task = asyncio.ensure_future(self._query(name))
                self._inflight[name] = task
                task.add_done_callback(lambda t: self._query_done(name, t))
            # A cancelled caller does not cancel the query others are waiting for.
            entry = await asyncio.shield(task)
        if entry.error is not None:
            raise DnsError(host, entry.error.reason, not_found=entry.error.not_found)
        return entry.addresses, name, entry

    def _query_done(self, name: str, task: asyncio.Future[_Entry]) -> None:
        if self._inflight.get(name) is task:
            del self._inflight[name]
        if not task.cancelled():
            task.exception()  # retrieved here; the waiters re-raise it

    def _cached(self, name: str) -> _Entry | None:
        entry = self._cache.get(name)
        if entry is None:
            return None
        if entry.expires_at <= self._clock():
            del self._cache[name]
            self._bytes -= entry.size
            return None
        self._cache.move_to_end(name)
        if entry.error is not None:
            self._negative_hits += 1
        return entry

    async def _query(self, name: str) -> _Entry:
        results = await asyncio.gather(self._backend.query(name, "A"),
                                       self._backend.query(name, "AAAA"),
                                       return_exceptions=True)
        answers = [r for r in results if isinstance(r, Answer)]
        errors = [r for r in results if isinstance(r, BaseException)]
        for err in errors:
            if not isinstance(err, DnsError):
                raise err
        dns_errors = [e for e in errors if isinstance(e, DnsError)]
        found = [a for ans in answers for a in ans.addresses]
        addresses = cap_addresses(found, self._max_addresses)
        if len(addresses) < len(found):
            self._capped += 1
        now = self._clock()
        if addresses:
            ttl = self.clamp_ttl(min(ans.ttl for ans in answers if ans.addresses))
            if dns_errors:
                ttl = min(ttl, self._partial_ttl)
            entry = _Entry(addresses, now + ttl)
        elif dns_errors and not all(e.not_found for e in dns_errors):
            temporary = next(e for e in dns_errors if not e.not_found)
            raise DnsError(name, temporary.reason, not_found=False)
        else:
            reason = dns_errors[0] if dns_errors else DnsError(name, "no A or AAAA records",
                                                               not_found=True)
            entry = _Entry((), now + self._negative_ttl, reason)
        self._store(name, entry)
        return entry

    def _store(self, name: str, entry: _Entry) -> None:
        if entry.expires_at <= self._clock():
            return
        old = self._cache.pop(name, None)
        if old is not None:
            self._bytes -= old.size
        entry.size = entry_bytes(name, entry.addresses)
        self._cache[name] = entry
        self._bytes += entry.size
        self._shrink()

    def _shrink(self) -> None:
        """Drop the least recently used entries until the cache is within
        ``max_entries`` and ``max_bytes`` (the newest entry stays even when it alone is
        over the bytes: an answer is capped, so it is never large)."""
        while self._cache and (len(self._cache) > self._max_entries or (
                self._bytes > self._max_bytes and len(self._cache) > 1)):
            _, dropped = self._cache.popitem(last=False)
            self._bytes -= dropped.size
            self._evictions += 1

    async def close(self) -> None:
        await self._backend.close()


def only_address(host: str, checked: Sequence[str], address: str | None
                 ) -> tuple[str, ...]:
    """Pure: of ``host``'s ``checked`` addresses, the one a fetch is pinned to.

    With ``ip`` politeness keying a fetch connects to its key's ``address`` alone, so
    that its request counts where the key says (falling back to another address would
    let many names that share one server, each keyed on a different address, reach it
    at once). :class:`DnsError` (temporary: the frontier keys the host again on its
    retry) when the address is not among ``checked`` any more, or when ``address`` is
    None: the task was keyed on its host because the name did not resolve then.
    """
    if address is None:
        raise DnsError(host, "the name resolves now but did not when its fetch was "
                       "dispatched (its politeness key is no address)", not_found=False)
    wanted = ipaddress.ip_address(address.strip("[]"))
    for each in checked:
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(each.split("%", 1)[0]) == wanted:
                return (each,)
    raise DnsError(host, f"no longer resolves to {wanted}, the address its politeness "
                   "key was made from", not_found=False)


_PIN: contextvars.ContextVar[tuple[str, tuple[str, ...]] | None] = contextvars.ContextVar(
    "fetcher_dns_pin", default=None)


class CheckedResolver(AbstractResolver):
    """The aiohttp resolver: hands the connector only guard-checked addresses.

    Inside :meth:`pin`, a request for the pinned host connects to exactly the
    addresses checked for that fetch (no second look-up, so a short TTL cannot swap
    the answer between check and connect). Outside a pin, it resolves through the
    cache and checks again. IP-literal URLs never reach an aiohttp resolver, which is
    why :meth:`resolve_checked` also handles them and the fetcher calls it first.
    """

    def __init__(self, resolver: Resolver, guard: Guard) -> None:
        self.resolver = resolver
        self.guard = guard

    async def resolve_checked(self, host: str, port: int | None = None) -> tuple[str, ...]:
        """Addresses of ``host``, all allowed by the guard; raises :class:`DnsError` or
        :class:`~fetcher.ssrf.SsrfBlockedError` (no connection is attempted either way)."""
        return await self.resolver.resolve_checked(host, port, self.guard)

    @contextlib.contextmanager
    def pin(self, host: str, addresses: tuple[str, ...]) -> Iterator[None]:
        token = _PIN.set((normalise_host(host), addresses))
        try:
            yield
        finally:
            _PIN.reset(token)

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        pinned = _PIN.get()
        if pinned is not None and pinned[0] == normalise_host(host):
            addresses = pinned[1]
        else:
            addresses = await self.resolve_checked(host, port)
        out: list[ResolveResult] = []
        for addr in addresses:
            fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
            if family not in (socket.AF_UNSPEC, fam):
                continue
            out.append(ResolveResult(hostname=host, host=addr, port=port, family=fam,
                                     proto=0, flags=socket.AI_NUMERICHOST))
        if not out:
            raise DnsError(host, "no address of the wanted family", not_found=True)
        return out

    async def close(self) -> None:
        """The wrapped :class:`Resolver` belongs to its creator, who closes it."""
