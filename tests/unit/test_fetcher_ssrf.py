"""The SSRF guard: address classes and verdicts. Pure; no packets are sent."""

from __future__ import annotations

import ipaddress

import pytest

from fetcher.ssrf import (
    METADATA_ADDRESSES,
    AddressClass,
    Guard,
    SsrfBlockedError,
    check,
    classify,
    embedded_ipv4,
    parse_networks,
)

C = AddressClass

REFUSED: list[tuple[str, AddressClass]] = [
    # IPv4
    ("127.0.0.1", C.LOOPBACK),
    ("127.0.0.2", C.LOOPBACK),
    ("127.255.255.254", C.LOOPBACK),
    ("10.0.0.1", C.PRIVATE),
    ("10.255.255.255", C.PRIVATE),
    ("172.16.0.1", C.PRIVATE),
    ("172.31.255.254", C.PRIVATE),
    ("192.168.1.1", C.PRIVATE),
    ("100.64.0.1", C.SHARED),
    ("100.127.255.254", C.SHARED),
    ("169.254.0.1", C.LINK_LOCAL),
    ("169.254.169.254", C.METADATA),
    ("169.254.170.2", C.METADATA),
    ("100.100.100.200", C.METADATA),
    ("168.63.129.16", C.METADATA),
    ("192.0.0.192", C.METADATA),
    ("224.0.0.1", C.MULTICAST),
    ("239.255.255.250", C.MULTICAST),
    ("255.255.255.255", C.BROADCAST),
    ("0.0.0.0", C.UNSPECIFIED),
    ("0.1.2.3", C.UNSPECIFIED),
    ("192.0.2.1", C.DOCUMENTATION),
    ("198.51.100.7", C.DOCUMENTATION),
    ("203.0.113.9", C.DOCUMENTATION),
    ("198.18.0.1", C.BENCHMARKING),
    ("198.19.255.254", C.BENCHMARKING),
    ("192.0.0.8", C.PROTOCOL),
    ("192.0.0.170", C.PROTOCOL),
    ("240.0.0.1", C.RESERVED),
    ("255.255.255.254", C.RESERVED),
    ("192.88.99.1", C.RESERVED),
    # IPv6
    ("::1", C.LOOPBACK),
    ("::", C.UNSPECIFIED),
    ("fe80::1", C.LINK_LOCAL),
    ("fe80::1%eth0", C.LINK_LOCAL),
    ("febf::1", C.LINK_LOCAL),
    ("fc00::1", C.PRIVATE),
    ("fd12:3456::1", C.PRIVATE),
    ("fec0::1", C.PRIVATE),
    ("fd00:ec2::254", C.METADATA),
    ("fd20:ce::254", C.METADATA),
    ("ff02::1", C.MULTICAST),
    ("ff05::1:3", C.MULTICAST),
    ("2001:db8::1", C.DOCUMENTATION),
    ("3fff::1", C.DOCUMENTATION),
    ("2001:2::1", C.BENCHMARKING),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", C.TEREDO),
    ("2001::1", C.TEREDO),
    ("2001:10::1", C.PROTOCOL),
    ("100::1", C.RESERVED),
    ("4000::1", C.RESERVED),
    ("::2:0:0:1", C.RESERVED),
    # IPv6 forms carrying an IPv4 address
    ("::ffff:127.0.0.1", C.LOOPBACK),
    ("::ffff:7f00:1", C.LOOPBACK),
    ("::ffff:10.1.2.3", C.PRIVATE),
    ("::ffff:169.254.169.254", C.METADATA),
    ("::ffff:0.0.0.0", C.UNSPECIFIED),
    ("::ffff:0:127.0.0.1", C.LOOPBACK),  # IPv4-translated
    ("::127.0.0.1", C.LOOPBACK),  # IPv4-compatible
    ("::10.0.0.1", C.PRIVATE),
    ("::8.8.8.8", C.RESERVED),  # deprecated form, refused even for a public address
    ("::ffff:0:8.8.8.8", C.RESERVED),
    ("64:ff9b::127.0.0.1", C.LOOPBACK),  # NAT64
    ("64:ff9b::a9fe:a9fe", C.METADATA),
    ("64:ff9b::192.168.0.1", C.PRIVATE),
    ("64:ff9b:1::1", C.PRIVATE),  # local-use NAT64
    ("2002:7f00:1::1", C.LOOPBACK),  # 6to4 of 127.0.0.1
    ("2002:c0a8:101::1", C.PRIVATE),  # 6to4 of 192.168.1.1
    ("2002:a9fe:a9fe::", C.METADATA),
    ("2002:6440:1::1", C.SHARED),
]

PUBLIC = [
    "8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255", "100.128.0.0",
    "172.15.255.255", "172.32.0.0", "192.167.255.255", "192.169.0.0", "169.253.255.255",
    "198.17.255.255", "198.20.0.0", "223.255.255.255",
    "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "2001:4860:4860::8888",
    "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
]


@pytest.mark.parametrize(("ip", "expected"), REFUSED)
def test_refused_classes(ip: str, expected: AddressClass) -> None:
    assert classify(ip) is expected
    verdict = check(ip)
    assert not verdict.allowed
    assert not verdict
    assert verdict.address_class is expected
    assert expected.value in verdict.reason


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_addresses_pass(ip: str) -> None:
    assert classify(ip) is None
    verdict = check(ip)
    assert verdict.allowed
    assert verdict.reason == "public"


def test_every_metadata_address_is_refused() -> None:
    for addr in METADATA_ADDRESSES:
        assert classify(addr) is C.METADATA
        assert not check(str(addr)).allowed


def test_brackets_and_whitespace_are_accepted() -> None:
    assert classify("[::1]") is C.LOOPBACK
    assert classify(" 127.0.0.1 ") is C.LOOPBACK


@pytest.mark.parametrize("bad", ["", "localhost", "1.2.3", "256.1.1.1", "::g", "[::1"])
def test_not_an_address(bad: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        classify(bad)
    verdict = check(bad)
    assert not verdict.allowed
    assert verdict.reason == "not an IP address"


def test_embedded_ipv4_forms() -> None:
    v4 = ipaddress.IPv4Address("192.0.2.33")
    for form in ("::ffff:192.0.2.33", "::ffff:0:192.0.2.33", "::192.0.2.33",
                 "64:ff9b::192.0.2.33", "2002:c000:221::1"):
        assert embedded_ipv4(ipaddress.IPv6Address(form)) == v4, form
    assert embedded_ipv4(ipaddress.IPv6Address("2606:4700::1")) is None


def test_exhaustive_ipv4_first_octets() -> None:
    """Every /8 has a class consistent with the tables and the stdlib's stable
    properties (loopback, multicast, link-local, reserved are always refused)."""
    for first in range(256):
        for rest in ("0.0.1", "128.0.1", "254.255.254"):
            addr = ipaddress.IPv4Address(f"{first}.{rest}")
            klass = classify(addr)
            if addr.is_loopback or addr.is_multicast or addr.is_link_local \
                    or addr.is_reserved or addr.is_unspecified:
                assert klass is not None, addr
            if first in (0, 10, 127) or first >= 224:
                assert klass is not None, addr
            if klass is None:
                assert addr.is_global, addr  # nothing we let through is non-global


def test_allow_list_lets_only_the_listed_range_through() -> None:
    allow = parse_networks(["127.0.0.1/32"])
    ok = check("127.0.0.1", allow)
    assert ok.allowed
    assert ok.reason == "allow-listed"
    assert ok.address_class is C.LOOPBACK
    assert not check("127.0.0.2", allow).allowed
    assert not check("::1", allow).allowed
    # The mapped form of an allowed IPv4 address is allowed too.
    assert check("::ffff:127.0.0.1", allow).allowed
    # But not the 6to4 or NAT64 form.
    assert not check("2002:7f00:1::", allow).allowed


def test_metadata_needs_an_exact_allow_entry() -> None:
    wide = parse_networks(["169.254.0.0/16"])
    assert check("169.254.1.1", wide).allowed
    assert not check("169.254.169.254", wide).allowed
    exact = parse_networks(["169.254.169.254/32"])
    assert check("169.254.169.254", exact).allowed


def test_parse_networks() -> None:
    nets = parse_networks(["127.0.0.1/32", " 10.1.2.3/8 ", "::1", ""])
    assert [str(n) for n in nets] == ["127.0.0.1/32", "10.0.0.0/8", "::1/128"]
    with pytest.raises(ValueError, match="not an IP network: 'nope'"):
        parse_networks(["nope"])


def test_guard_requires_every_address_to_pass() -> None:
    guard = Guard(["127.0.0.1/32"])
    assert guard.check_all("h", ["127.0.0.1", "8.8.8.8"]) == ("127.0.0.1", "8.8.8.8")
    with pytest.raises(SsrfBlockedError, match=r"10\.0\.0\.1 \(private address\)") as info:
        guard.check_all("h", ["8.8.8.8", "10.0.0.1"])
    assert info.value.host == "h"
    assert [v.allowed for v in info.value.verdicts] == [True, False]
    with pytest.raises(SsrfBlockedError, match="no address"):
        guard.check_all("h", [])


def test_default_guard_allows_no_special_address() -> None:
    guard = Guard()
    assert guard.allow == ()
    for ip, _ in REFUSED:
        assert not guard.check(ip).allowed, ip
