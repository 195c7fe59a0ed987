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
- :class:`CheckedResolver` is the aiohttp resolver: :meth:`CheckedResolver.resolve_checked`
  resolves a name and runs every address through the :class:`~fetcher.ssrf.Guard`
  (all must pass); :meth:`CheckedResolver.pin` makes the connector use exactly the
  addresses a fetch checked, so the connection goes to a checked address while the
  Host header and TLS SNI stay the hostname.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
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
from common.settings import FetcherSettings
from fetcher.ssrf import Guard

log = logging.getLogger(__name__)

NEGATIVE_TTL = 30.0
"""Seconds a name that does not exist stays cached as not existing."""

PARTIAL_TTL = 30.0
"""Seconds an answer stays cached when one of its two queries failed temporarily."""

Clock = Callable[[], float]


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
    try:
        return str(ipaddress.ip_address(h.split("%", 1)[0]))
    except ValueError:
        pass
    if _NUMERIC_V4.fullmatch(h) and _NUMERIC_LAST.fullmatch(h.rsplit(".", 1)[-1]):
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


@dataclass(frozen=True, slots=True)
class DnsStats:
    hits: int  # answered from the cache (including negative answers and shared queries)
    misses: int  # needed a query
    negative_hits: int  # cached "does not exist" answers served
    overrides: int  # answered by a fetcher.resolve entry
    literals: int  # IP-literal hosts
    size: int  # names in the cache


class Resolver:
    """Cached name resolution. Not thread-safe; one per event loop."""

    def __init__(self, *, backend: DnsBackend | None = None,
                 nameservers: Sequence[str] = (), overrides: Sequence[str] = (),
                 min_ttl: float = 60.0, max_ttl: float = 3600.0,
                 negative_ttl: float = NEGATIVE_TTL, partial_ttl: float = PARTIAL_TTL,
                 max_entries: int = 100_000, clock: Clock = time.monotonic) -> None:
        if min_ttl > max_ttl:
            raise ValueError("min_ttl must not exceed max_ttl")
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
        self._clock = clock
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[_Entry]] = {}
        self._hits = self._misses = self._negative_hits = 0
        self._override_hits = self._literals = 0

    @classmethod
    def from_settings(cls, settings: FetcherSettings, *, clock: Clock = time.monotonic,
                      backend: DnsBackend | None = None) -> Resolver:
        if backend is None:
            backend = AiodnsBackend(settings.dns_servers,
                                    timeout=min(settings.connect_timeout, 5.0))
        return cls(backend=backend, overrides=settings.resolve,
                   min_ttl=settings.dns_min_ttl, max_ttl=settings.dns_max_ttl, clock=clock)

    @property
    def stats(self) -> DnsStats:
        return DnsStats(self._hits, self._misses, self._negative_hits, self._override_hits,
                        self._literals, len(self._cache))

    def clamp_ttl(self, ttl: float) -> float:
        return max(self._min_ttl, min(self._max_ttl, ttl))

    async def resolve(self, host: str, port: int | None = None) -> tuple[str, ...]:
        """All addresses of ``host`` (IPv4 first, then IPv6); :class:`DnsError` if none."""
        name = normalise_host(host)
        if not name:
            raise DnsError(host, "empty host name", not_found=True)
        fixed = self._overrides.get((name, port)) if port is not None else None
        if fixed is None:
            fixed = self._overrides.get((name, None))
        if fixed is not None:
            self._override_hits += 1
            return tuple(fixed)
        literal = ip_literal(name)
        if literal is not None:
            self._literals += 1
            return (literal,)
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
        return entry.addresses

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
        addresses = tuple(a for ans in answers for a in ans.addresses)
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
        self._cache[name] = entry
        self._cache.move_to_end(name)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)

    async def close(self) -> None:
        await self._backend.close()


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
        addresses = await self.resolver.resolve(host, port)
        return self.guard.check_all(host, addresses)

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
