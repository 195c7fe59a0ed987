"""DNS cache logic with a fake backend and an injected clock (no packets)."""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import socket
import tracemalloc

import pytest

from common.politeness import politeness_key
from common.settings import Settings
from fetcher.dns import (
    ENTRY_BYTES,
    MAX_ADDRESSES,
    Answer,
    CheckedResolver,
    DnsError,
    Resolver,
    cap_addresses,
    entry_bytes,
    ip_literal,
    only_address,
    parse_nameserver,
    parse_override,
)
from fetcher.ssrf import Guard, SsrfBlockedError, Verdict


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeBackend:
    """Answers from a table: name -> {"A": Answer | DnsError, "AAAA": ...}."""

    def __init__(self, table: dict[str, dict[str, Answer | DnsError]],
                 delay: float = 0.0) -> None:
        self.table = table
        self.calls: list[tuple[str, str]] = []
        self.delay = delay
        self.closed = False

    async def query(self, host: str, qtype: str) -> Answer:
        self.calls.append((host, qtype))
        if self.delay:
            await asyncio.sleep(self.delay)
        entry = self.table.get(host)
        if entry is None:
            raise DnsError(host, "Domain name not found", not_found=True)
        result = entry.get(qtype, Answer((), 0.0))
        if isinstance(result, DnsError):
            raise result
        return result

    async def close(self) -> None:
        self.closed = True


def make(table: dict[str, dict[str, Answer | DnsError]], **kw: object) -> tuple[
        Resolver, FakeBackend, FakeClock]:
    backend = FakeBackend(table)
    clock = FakeClock()
    resolver = Resolver(backend=backend, clock=clock, min_ttl=10, max_ttl=100, **kw)  # type: ignore[arg-type]
    return resolver, backend, clock


async def test_answer_cached_for_its_ttl() -> None:
    resolver, backend, clock = make({"a.test": {"A": Answer(("93.184.216.34",), 50)}})
    assert await resolver.resolve("a.test") == ("93.184.216.34",)
    assert await resolver.resolve("A.TEST.") == ("93.184.216.34",)  # same name
    assert len(backend.calls) == 2  # one A and one AAAA query
    clock.now += 49.9
    await resolver.resolve("a.test")
    assert len(backend.calls) == 2
    clock.now += 0.2
    await resolver.resolve("a.test")
    assert len(backend.calls) == 4
    stats = resolver.stats
    assert (stats.hits, stats.misses) == (2, 2)


@pytest.mark.parametrize(("ttl", "expected_life"), [(1, 10), (50, 50), (10_000, 100)])
async def test_ttl_is_clamped(ttl: float, expected_life: float) -> None:
    resolver, _, clock = make({"a.test": {"A": Answer(("93.184.216.34",), ttl)}})
    await resolver.resolve("a.test")
    clock.now += expected_life - 0.01
    await resolver.resolve("a.test")
    assert resolver.stats.misses == 1
    clock.now += 0.02
    await resolver.resolve("a.test")
    assert resolver.stats.misses == 2


async def test_smallest_ttl_of_both_families_wins() -> None:
    resolver, _, clock = make({"a.test": {"A": Answer(("93.184.216.34",), 80),
                                          "AAAA": Answer(("2606:4700::1",), 20)}})
    assert await resolver.resolve("a.test") == ("93.184.216.34", "2606:4700::1")
    clock.now += 21
    await resolver.resolve("a.test")
    assert resolver.stats.misses == 2


async def test_nxdomain_is_cached_briefly() -> None:
    resolver, backend, clock = make({}, negative_ttl=5)
    for _ in range(3):
        with pytest.raises(DnsError) as info:
            await resolver.resolve("missing.test")
        assert info.value.not_found
    assert len(backend.calls) == 2
    assert resolver.stats.negative_hits == 2
    clock.now += 5.01
    with pytest.raises(DnsError):
        await resolver.resolve("missing.test")
    assert len(backend.calls) == 4


async def test_name_without_addresses_is_not_found() -> None:
    resolver, backend, _ = make({"empty.test": {}})
    with pytest.raises(DnsError, match="no A or AAAA") as info:
        await resolver.resolve("empty.test")
    assert info.value.not_found
    with pytest.raises(DnsError):
        await resolver.resolve("empty.test")
    assert len(backend.calls) == 2  # cached negatively


async def test_temporary_failure_is_not_cached() -> None:
    fail = DnsError("x", "Timeout while contacting DNS servers", not_found=False)
    resolver, backend, _ = make({"slow.test": {"A": fail, "AAAA": fail}})
    for _ in range(2):
        with pytest.raises(DnsError, match="Timeout") as info:
            await resolver.resolve("slow.test")
        assert not info.value.not_found
    assert len(backend.calls) == 4


async def test_partial_answer_is_kept_briefly() -> None:
    fail = DnsError("x", "Timeout", not_found=False)
    resolver, _, clock = make({"half.test": {"A": Answer(("93.184.216.34",), 90),
                                             "AAAA": fail}}, partial_ttl=15)
    assert await resolver.resolve("half.test") == ("93.184.216.34",)
    clock.now += 14
    await resolver.resolve("half.test")
    assert resolver.stats.misses == 1
    clock.now += 2
    await resolver.resolve("half.test")
    assert resolver.stats.misses == 2


async def test_concurrent_lookups_share_one_query() -> None:
    backend = FakeBackend({"a.test": {"A": Answer(("93.184.216.34",), 60)}}, delay=0.05)
    resolver = Resolver(backend=backend, clock=FakeClock())
    results = await asyncio.gather(*(resolver.resolve("a.test") for _ in range(10)))
    assert all(r == ("93.184.216.34",) for r in results)
    assert len(backend.calls) == 2
    assert (resolver.stats.misses, resolver.stats.hits) == (1, 9)


async def test_cancelled_caller_does_not_cancel_shared_query() -> None:
    backend = FakeBackend({"a.test": {"A": Answer(("93.184.216.34",), 60)}}, delay=0.05)
    resolver = Resolver(backend=backend, clock=FakeClock())
    first = asyncio.ensure_future(resolver.resolve("a.test"))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(resolver.resolve("a.test"))
    await asyncio.sleep(0)
    first.cancel()
    assert await second == ("93.184.216.34",)
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_literals_and_overrides_skip_dns() -> None:
    resolver, backend, _ = make({}, overrides=["site.test:80:127.0.0.1",
                                              "site.test:443:[::1]",
                                              "any.test:*:127.0.0.9"])
    assert await resolver.resolve("10.0.0.1") == ("10.0.0.1",)
    assert await resolver.resolve("[::1]") == ("::1",)
    assert await resolver.resolve("127.1") == ("127.0.0.1",)
    assert await resolver.resolve("2130706433") == ("127.0.0.1",)
    assert await resolver.resolve("site.test", 80) == ("127.0.0.1",)
    assert await resolver.resolve("SITE.test", 443) == ("::1",)
    assert await resolver.resolve("any.test", 8080) == ("127.0.0.9",)
    with pytest.raises(DnsError):  # site.test on another port goes to DNS
        await resolver.resolve("site.test", 8080)
    assert backend.calls == [("site.test", "A"), ("site.test", "AAAA")]
    assert resolver.stats.overrides == 3
    assert resolver.stats.literals == 4


async def test_cache_is_bounded() -> None:
    table: dict[str, dict[str, Answer | DnsError]] = {
        f"h{i}.test": {"A": Answer((f"93.184.216.{i}",), 60)} for i in range(5)}
    resolver, _, _ = make(table, max_entries=3)
    for i in range(5):
        await resolver.resolve(f"h{i}.test")
    assert resolver.stats.size == 3


def test_ip_literal() -> None:
    assert ip_literal("127.0.0.1") == "127.0.0.1"
    assert ip_literal("0x7f.0.0.1") == "127.0.0.1"
    assert ip_literal("017700000001") == "127.0.0.1"
    assert ip_literal("[fe80::1]") == "fe80::1"
    assert ip_literal("fe80::1%eth0") == "fe80::1"
    assert ip_literal("example.com") is None
    assert ip_literal("deadbeef") is None
    assert ip_literal("1.2.3.com") is None
    assert ip_literal("host-12.test") is None
    assert ip_literal("1.2.3.4.") == "1.2.3.4"
    assert ip_literal("0x7f.1") == "127.0.0.1"
    assert ip_literal("a:b") is None
    # an IPv4-mapped IPv6 address, in the form the interpreter's ipaddress writes it
    assert ip_literal("::ffff:1.2.3.4") == str(ipaddress.ip_address("::ffff:1.2.3.4"))


def test_parse_nameserver() -> None:
    assert parse_nameserver("127.0.0.1") == "127.0.0.1"
    assert parse_nameserver("127.0.0.1:5353") == "127.0.0.1:5353"
    assert parse_nameserver("[::1]:5353") == "[::1]:5353"
    assert parse_nameserver("::1") == "::1"
    for bad in ("dns.example", "127.0.0.1:0", "127.0.0.1:x", "[::1", "1.2.3.4:99999"):
        with pytest.raises(ValueError, match="bad DNS server"):
            parse_nameserver(bad)


def test_parse_override() -> None:
    o = parse_override("Example.COM:443:[2606:4700::1]")
    assert (o.host, o.port, o.address) == ("example.com", 443, "2606:4700::1")
    assert parse_override("a.test:*:127.0.0.1").port is None
    for bad in ("a.test:80", "a.test:80:nothost", "a.test:http:1.2.3.4", ":80:1.2.3.4"):
        with pytest.raises(ValueError, match="bad resolve entry"):
            parse_override(bad)


def test_from_settings_reads_overrides_and_ttls() -> None:
    settings = Settings().replace(fetcher={"resolve": ("x.test:80:127.0.0.1",),
                                           "dns_min_ttl": 5.0, "dns_max_ttl": 7.0})
    resolver = Resolver.from_settings(settings.fetcher, backend=FakeBackend({}))
    assert resolver.clamp_ttl(1) == 5.0
    assert resolver.clamp_ttl(100) == 7.0


async def test_checked_resolver_refuses_if_any_address_is_forbidden() -> None:
    resolver, _, _ = make({"mixed.test": {"A": Answer(("93.184.216.34", "10.0.0.1"), 60)},
                           "ok.test": {"A": Answer(("93.184.216.34",), 60),
                                       "AAAA": Answer(("2606:4700::1",), 60)}})
    checked = CheckedResolver(resolver, Guard())
    with pytest.raises(SsrfBlockedError, match=r"10\.0\.0\.1"):
        await checked.resolve_checked("mixed.test")
    with pytest.raises(OSError, match=r"10\.0\.0\.1"):  # aiohttp sees an OSError
        await checked.resolve("mixed.test", 80, socket.AF_UNSPEC)
    results = await checked.resolve("ok.test", 80, socket.AF_UNSPEC)
    assert [(r["host"], r["family"], r["hostname"]) for r in results] == [
        ("93.184.216.34", socket.AF_INET, "ok.test"),
        ("2606:4700::1", socket.AF_INET6, "ok.test")]
    only_v4 = await checked.resolve("ok.test", 80, socket.AF_INET)
    assert [r["host"] for r in only_v4] == ["93.184.216.34"]


async def test_pin_returns_exactly_the_checked_addresses() -> None:
    resolver, backend, _ = make({})
    checked = CheckedResolver(resolver, Guard())
    with checked.pin("Pinned.Test.", ("93.184.216.34",)):
        results = await checked.resolve("pinned.test", 443, socket.AF_UNSPEC)
    assert [r["host"] for r in results] == ["93.184.216.34"]
    assert [r["port"] for r in results] == [443]
    assert backend.calls == []  # no second look-up
    with pytest.raises(DnsError):  # outside the pin it resolves (and here fails)
        await checked.resolve("pinned.test", 443, socket.AF_UNSPEC)


# --- answers with thousands of records --------------------------------------------------


def fat(prefix: int, count: int = 4000) -> tuple[str, ...]:
    """``count`` public IPv4 addresses, highest first (so the lowest come last)."""
    return tuple(f"{prefix}.{(j >> 8) & 255}.{j & 255}.1" for j in range(count))[::-1]


class CountingGuard(Guard):
    """The real guard, counting the addresses it is asked about."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.checked = 0

    def check(self, ip: object) -> Verdict:
        self.checked += 1
        return super().check(ip)  # type: ignore[arg-type]


def test_cap_keeps_the_lowest_addresses_in_answer_order() -> None:
    answer = ("9.9.9.9", "2001:4860::1", "8.8.8.8", "1.1.1.1", "8.8.8.8", "4.4.4.4")
    assert cap_addresses(answer, 3) == ("8.8.8.8", "1.1.1.1", "4.4.4.4")
    assert cap_addresses(answer, 10) == ("9.9.9.9", "2001:4860::1", "8.8.8.8", "1.1.1.1",
                                         "4.4.4.4")  # duplicates dropped
    assert cap_addresses(("2001:4860::2", "2001:4860::1"), 1) == ("2001:4860::1",)


def test_cap_keeps_the_ip_key_and_ignores_rotation() -> None:
    answer = fat(20)
    kept = cap_addresses(answer, MAX_ADDRESSES)
    assert len(kept) == MAX_ADDRESSES
    assert politeness_key("x.test", "ip", kept) == politeness_key("x.test", "ip", answer)
    rotated = answer[1234:] + answer[:1234]
    assert set(cap_addresses(rotated, MAX_ADDRESSES)) == set(kept)


def test_entry_bytes_grows_with_the_addresses() -> None:
    one = entry_bytes("a.test", ("93.184.216.34",))
    assert one > ENTRY_BYTES
    assert entry_bytes("a.test", ("93.184.216.34",) * 2) > one
    assert entry_bytes("a-longer-name.test", ("93.184.216.34",)) > one


async def test_an_answer_of_thousands_is_capped() -> None:
    resolver, _, _ = make({"fat.test": {"A": Answer(fat(20), 60)}}, max_addresses=32)
    addresses = await resolver.resolve("fat.test")
    assert addresses == cap_addresses(fat(20), 32)
    stats = resolver.stats
    assert stats.capped == 1
    assert stats.bytes == entry_bytes("fat.test", addresses)


async def test_a_cached_answer_is_not_checked_again() -> None:
    resolver, backend, _ = make({"fat.test": {"A": Answer(fat(20), 60)}},
                                max_addresses=10_000)
    guard = CountingGuard()
    checked = CheckedResolver(resolver, guard)
    first = await checked.resolve_checked("fat.test", 80)
    assert len(first) == 4000 and guard.checked == 4000
    for _ in range(20):
        assert await checked.resolve_checked("fat.test", 80) == first
    assert guard.checked == 4000  # the verdict came with the cached answer
    assert (resolver.stats.checks, resolver.stats.verdict_hits) == (1, 20)
    assert len(backend.calls) == 2  # one A and one AAAA query
    # another guard does not take this one's verdict
    other = CountingGuard(["20.0.0.0/8"])
    await CheckedResolver(resolver, other).resolve_checked("fat.test", 80)
    assert other.checked == 4000


async def test_a_cached_refusal_is_not_checked_again() -> None:
    resolver, _, clock = make({"mixed.test": {"A": Answer(("93.184.216.34", "10.0.0.1"),
                                                          60)}})
    guard = CountingGuard()
    checked = CheckedResolver(resolver, guard)
    for _ in range(3):
        with pytest.raises(SsrfBlockedError, match=r"10\.0\.0\.1 \(private address\)"):
            await checked.resolve_checked("Mixed.Test", 80)
    assert guard.checked == 2
    clock.now += 61  # expired: asked and checked again
    with pytest.raises(SsrfBlockedError):
        await checked.resolve_checked("mixed.test", 80)
    assert guard.checked == 4


async def test_cache_is_bounded_in_bytes_oldest_first() -> None:
    table: dict[str, dict[str, Answer | DnsError]] = {
        f"h{i}.test": {"A": Answer(fat(20 + i, 40), 60)} for i in range(6)}
    size = entry_bytes("h0.test", cap_addresses(fat(20, 40), 8))
    resolver, backend, _ = make(table, max_addresses=8, max_bytes=3 * size + 10)
    for i in range(4):
        await resolver.resolve(f"h{i}.test")
    await resolver.resolve("h1.test")  # used: h2 is now the least recently used
    await resolver.resolve("h4.test")
    stats = resolver.stats
    assert stats.size == 3 and stats.evictions == 2
    assert stats.bytes <= 3 * size + 10
    queried = len(backend.calls)
    for name in ("h1.test", "h3.test", "h4.test"):  # still cached
        await resolver.resolve(name)
    assert len(backend.calls) == queried
    await resolver.resolve("h2.test")  # evicted: asked again
    assert len(backend.calls) == queried + 2


async def test_byte_count_follows_expiry_and_verdicts() -> None:
    resolver, _, clock = make({"a.test": {"A": Answer(("93.184.216.34",), 10)},
                               "bad.test": {"A": Answer(("10.0.0.1",), 10)}})
    checked = CheckedResolver(resolver, Guard())
    await checked.resolve_checked("a.test", 80)
    assert resolver.stats.bytes == entry_bytes("a.test", ("93.184.216.34",))
    with pytest.raises(SsrfBlockedError):
        await checked.resolve_checked("bad.test", 80)
    grown = resolver.stats.bytes
    assert grown > entry_bytes("a.test", ("93.184.216.34",)) + entry_bytes(
        "bad.test", ("10.0.0.1",))  # the refused verdict is counted too
    clock.now += 11  # both expired: asked again, and stored without a verdict
    await resolver.resolve("a.test")
    await resolver.resolve("bad.test")
    assert resolver.stats.bytes == entry_bytes("a.test", ("93.184.216.34",)) + entry_bytes(
        "bad.test", ("10.0.0.1",))


class FreshBackend:
    """``count`` public addresses for any name, as new strings each time (as c-ares
    hands them over)."""

    def __init__(self, count: int) -> None:
        self.count = count

    async def query(self, host: str, qtype: str) -> Answer:
        if qtype != "A":
            return Answer((), 60)
        i = int(host.split("-")[1].split(".")[0])
        return Answer(tuple(f"{20 + i % 50}.{i % 250}.{j >> 8}.{j & 255}"
                            for j in range(self.count)), 60)

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("count", [1, 32, 4000])
async def test_entry_bytes_is_not_below_what_entries_hold(count: int) -> None:
    """The estimate the byte bound counts is at least what the entries take in memory
    (tracemalloc), verdicts included: for one address, and for answers capped at 32."""
    resolver = Resolver(backend=FreshBackend(count), max_addresses=32)
    checked = CheckedResolver(resolver, Guard())
    names = [f"name-{i:05d}.example.test" for i in range(300 if count < 100 else 40)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for name in names:
            await checked.resolve_checked(name, 80)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= resolver.stats.bytes, (held, resolver.stats.bytes)
    assert resolver.stats.bytes <= 2 * held  # an estimate, not a guess


def test_only_address_picks_the_key_address() -> None:
    checked = ("127.0.0.5", "127.0.0.6", "2001:db8::1")
    assert only_address("a.test", checked, "127.0.0.6") == ("127.0.0.6",)
    assert only_address("a.test", checked, "[2001:DB8::1]") == ("2001:db8::1",)
    with pytest.raises(DnsError, match=r"no longer resolves to 127\.0\.0\.7") as moved:
        only_address("a.test", checked, "127.0.0.7")
    assert not moved.value.not_found  # temporary: retried, keyed again
    with pytest.raises(DnsError, match="did not when its fetch was dispatched"):
        only_address("a.test", checked, None)


def test_from_settings_reads_the_dns_bounds() -> None:
    settings = Settings().replace(fetcher={"dns_max_addresses": 4,
                                           "dns_cache_max_bytes": 10_000})
    resolver = Resolver.from_settings(settings.fetcher, backend=FakeBackend({}))
    assert (resolver._max_addresses, resolver._max_bytes) == (4, 10_000)
