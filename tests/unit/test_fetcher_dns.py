"""DNS cache logic with a fake backend and an injected clock (no packets)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from common.settings import Settings
from fetcher.dns import (
    Answer,
    CheckedResolver,
    DnsError,
    Resolver,
    ip_literal,
    parse_nameserver,
    parse_override,
)
from fetcher.ssrf import Guard, SsrfBlockedError


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
