"""SSRF guard: which IP addresses the fetcher may connect to. Pure; no I/O.

:func:`classify` names the special-purpose range an address belongs to (``None`` for
an ordinary, globally reachable unicast address); :func:`check` turns that into a
:class:`Verdict` under an explicit allow list (``fetcher.allow_networks``).

Refused: loopback, private (RFC 1918, fc00::/7, deprecated site-local fec0::/10),
shared address space (100.64.0.0/10, carrier-grade NAT), link-local, cloud metadata
endpoints, multicast, broadcast, unspecified and "this network" (0.0.0.0/8, ::),
documentation and benchmarking ranges, IETF protocol assignments (192.0.0.0/24,
2001::/23), reserved space (240.0.0.0/4, 192.88.99.0/24, IPv6 outside 2000::/3), and
every IPv6 form that carries an IPv4 address is judged by the address it carries:
IPv4-mapped (::ffff:a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d), IPv4-compatible
(::a.b.c.d, deprecated, refused even for public addresses), NAT64 (64:ff9b::/96; the
local-use prefix 64:ff9b:1::/48 is private) and 6to4 (2002::/16). Teredo (2001::/32) is
refused outright: it tunnels to an obfuscated client address and no web server needs it.

The tables are explicit rather than ``ipaddress.is_private`` / ``is_global``, whose
lists changed between Python patch releases; the stable properties (loopback,
multicast, link-local, unspecified) are used as they are.

Allow list: an address inside an allowed network passes (an IPv4-mapped address also
passes when the IPv4 address it carries is allowed). Cloud metadata addresses pass only
when the allow list names that very address (a /32 or /128): allowing 169.254.0.0/16
does not open the metadata service.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from common.addresses import parse_network

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network


class AddressClass(enum.StrEnum):
    """Why an address is not an ordinary public unicast address."""

    LOOPBACK = "loopback"
    PRIVATE = "private"  # RFC 1918, unique local fc00::/7, site-local fec0::/10
    SHARED = "shared"  # 100.64.0.0/10, carrier-grade NAT (RFC 6598)
    LINK_LOCAL = "link_local"
    METADATA = "metadata"  # cloud instance metadata and platform endpoints
    MULTICAST = "multicast"
    BROADCAST = "broadcast"
    UNSPECIFIED = "unspecified"  # 0.0.0.0/8 ("this network"), ::
    DOCUMENTATION = "documentation"
    BENCHMARKING = "benchmarking"
    PROTOCOL = "protocol"  # IETF protocol assignments: 192.0.0.0/24, 2001::/23
    TEREDO = "teredo"
    RESERVED = "reserved"


def _nets(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# Cloud metadata and platform endpoints. Most also fall in a range refused anyway;
# 168.63.129.16 (Azure wire server) is a public address, so this list matters.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle, Huawei
    "169.254.169.253",  # AWS DNS resolver
    "169.254.169.123",  # AWS time sync
    "169.254.170.2",  # AWS ECS task metadata
    "169.254.170.23",  # AWS EKS pod identity
    "169.254.0.23",  # Tencent Cloud
    "100.100.100.200",  # Alibaba Cloud
    "168.63.129.16",  # Azure wire server
    "192.0.0.192",  # Oracle Cloud
    "fd00:ec2::254",  # AWS IMDS over IPv6
    "fd00:ec2::23",  # AWS DNS over IPv6
    "fd00:ec2::123",  # AWS time sync over IPv6
    "fd20:ce::254",  # GCP metadata over IPv6
))

_V4_TABLE: tuple[tuple[AddressClass, tuple[IPNetwork, ...]], ...] = (
    (AddressClass.UNSPECIFIED, _nets("0.0.0.0/8")),
    (AddressClass.LOOPBACK, _nets("127.0.0.0/8")),
    (AddressClass.BROADCAST, _nets("255.255.255.255/32")),
    (AddressClass.MULTICAST, _nets("224.0.0.0/4")),
    (AddressClass.LINK_LOCAL, _nets("169.254.0.0/16")),
    (AddressClass.PRIVATE, _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")),
    (AddressClass.SHARED, _nets("100.64.0.0/10")),
    (AddressClass.DOCUMENTATION, _nets("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")),
    (AddressClass.BENCHMARKING, _nets("198.18.0.0/15")),
    (AddressClass.PROTOCOL, _nets("192.0.0.0/24")),
    (AddressClass.RESERVED, _nets("240.0.0.0/4", "192.88.99.0/24")),
)

_V6_TABLE: tuple[tuple[AddressClass, tuple[IPNetwork, ...]], ...] = (
    (AddressClass.MULTICAST, _nets("ff00::/8")),
    (AddressClass.LINK_LOCAL, _nets("fe80::/10")),
    (AddressClass.PRIVATE, _nets("fc00::/7", "fec0::/10", "64:ff9b:1::/48")),
    (AddressClass.DOCUMENTATION, _nets("2001:db8::/32", "3fff::/20")),
    (AddressClass.BENCHMARKING, _nets("2001:2::/48")),
    (AddressClass.TEREDO, _nets("2001::/32")),
    (AddressClass.PROTOCOL, _nets("2001::/23")),
    (AddressClass.RESERVED, _nets("100::/64")),
)

_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIXTOFOUR = ipaddress.IPv6Network("2002::/16")


def parse_address(ip: str | IPAddress) -> IPAddress:
    """Parse an address (brackets and an IPv6 zone id are accepted and dropped).

    Raises ``ValueError`` for anything that is not an IP address.
    """
    if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address):
        addr: IPAddress = ip
    else:
        text = ip.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        addr = ipaddress.ip_address(text.split("%", 1)[0])
    return addr


def embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, translated, compatible,
    NAT64, 6to4), or ``None``. Teredo is not included (it is refused outright)."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    packed = addr.packed
    if addr in _TRANSLATED or addr in _NAT64 or addr in _COMPATIBLE:
        return ipaddress.IPv4Address(packed[12:])
    if addr.sixtofour is not None:
        return addr.sixtofour
    return None


def classify(ip: str | IPAddress) -> AddressClass | None:
    """The special-purpose class of ``ip``, or ``None`` for an ordinary public address.

    Raises ``ValueError`` when ``ip`` is not an IP address.
    """
    addr = parse_address(ip)
    if addr in METADATA_ADDRESSES:
        return AddressClass.METADATA
    if isinstance(addr, ipaddress.IPv4Address):
        return _classify_v4(addr)
    return _classify_v6(addr)


def _lookup(addr: IPAddress,
            table: tuple[tuple[AddressClass, tuple[IPNetwork, ...]], ...]) -> AddressClass | None:
    for klass, nets in table:
        if any(addr in net for net in nets):
            return klass
    return None


def _classify_v4(addr: ipaddress.IPv4Address) -> AddressClass | None:
    found = _lookup(addr, _V4_TABLE)
    if found is not None:
        return found
    # Belt and braces: the stdlib's stable properties, in case a table misses one.
    if addr.is_loopback:
        return AddressClass.LOOPBACK
    if addr.is_multicast:
        return AddressClass.MULTICAST
    if addr.is_link_local:
        return AddressClass.LINK_LOCAL
    if addr.is_reserved:
        return AddressClass.RESERVED
    return None


def _classify_v6(addr: ipaddress.IPv6Address) -> AddressClass | None:
    if addr.is_unspecified:
        return AddressClass.UNSPECIFIED
    if addr.is_loopback:
        return AddressClass.LOOPBACK
    v4 = embedded_ipv4(addr)
    if v4 is not None:
        inner = classify(v4)
        if inner is not None:
            return inner
        if addr in _COMPATIBLE or addr in _TRANSLATED:
            # Deprecated forms (RFC 4291 2.5.5.1, RFC 6145): no public host uses them.
            return AddressClass.RESERVED
        return None  # mapped, NAT64 or 6to4 form of a public IPv4 address
    found = _lookup(addr, _V6_TABLE)
    if found is not None:
        return found
    if addr.is_multicast:
        return AddressClass.MULTICAST
    if addr.is_link_local:
        return AddressClass.LINK_LOCAL
    if addr.is_site_local:
        return AddressClass.PRIVATE
    if addr not in _GLOBAL_UNICAST_V6:
        return AddressClass.RESERVED
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The guard's answer for one address."""

    address: str  # the address as normalised text
    allowed: bool
    address_class: AddressClass | None  # None: an ordinary public address
    reason: str  # why: "public", "allow-listed", or the refused class

    def __bool__(self) -> bool:
        return self.allowed


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """Parse allow-list entries (CIDR, or a bare address meaning /32 or /128).

    Host bits are tolerated (``10.1.2.3/8`` means ``10.0.0.0/8``). A malformed entry
    raises ``ValueError`` naming it.
    """
    return tuple(parse_network(raw) for raw in cidrs if raw.strip())


def _allow_listed(addr: IPAddress, allow: Sequence[IPNetwork], *, exact: bool) -> bool:
    candidates: list[IPAddress] = [addr]
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        candidates.append(addr.ipv4_mapped)
    for net in allow:
        if exact and net.num_addresses != 1:
            continue
        if any(c.version == net.version and c in net for c in candidates):
            return True
    return False


def check(ip: str | IPAddress, allow: Sequence[IPNetwork] = ()) -> Verdict:
    """Decide whether the fetcher may connect to ``ip``.

    Text that is not an IP address is refused (never raises).
    """
    try:
        addr = parse_address(ip)
    except ValueError:
        return Verdict(str(ip), False, AddressClass.RESERVED, "not an IP address")
    klass = classify(addr)
    text = str(addr)
    if _allow_listed(addr, allow, exact=klass is AddressClass.METADATA):
        return Verdict(text, True, klass, "allow-listed")
    if klass is None:
        return Verdict(text, True, None, "public")
    return Verdict(text, False, klass, f"{klass.value} address")


class SsrfBlockedError(OSError):
    """A host resolved to at least one address the guard refuses.

    An ``OSError`` so that, raised inside an aiohttp resolver, it travels as the cause
    of aiohttp's connector error and no connection is attempted.
    """

    def __init__(self, host: str, verdicts: Sequence[Verdict]) -> None:
        self.host = host
        self.verdicts = tuple(verdicts)
        refused = ", ".join(f"{v.address} ({v.reason})" for v in self.verdicts if not v.allowed)
        super().__init__(f"{host}: refused address {refused}" if refused
                         else f"{host}: no address to check")


class Guard:
    """The SSRF guard with its allow list; checks every address of a resolution."""

    def __init__(self, allow_networks: Iterable[str | IPNetwork] = ()) -> None:
        nets: list[IPNetwork] = []
        texts: list[str] = []
        for item in allow_networks:
            if isinstance(item, str):
                texts.append(item)
            else:
                nets.append(item)
        self.allow: tuple[IPNetwork, ...] = (*nets, *parse_networks(texts))

    def check(self, ip: str | IPAddress) -> Verdict:
        return check(ip, self.allow)

    def check_all(self, host: str, addresses: Sequence[str]) -> tuple[str, ...]:
        """Return ``addresses`` if every one passes; otherwise raise :class:`SsrfBlockedError`.

        All must pass: a name that resolves to any forbidden address is refused
        outright, rather than connecting to its other addresses, because a name that
        mixes public and internal answers is a rebinding or pivoting attempt.
        """
        if not addresses:
            raise SsrfBlockedError(host, ())
        verdicts = [self.check(a) for a in addresses]
        if not all(v.allowed for v in verdicts):
            raise SsrfBlockedError(host, verdicts)
        return tuple(v.address for v in verdicts)


ALLOW_SETTING = "CRAWLER_FETCHER_ALLOW_NETWORKS"
"""The setting that lets the guard through to otherwise refused networks."""

_CLASS_TEXT = {
    AddressClass.LOOPBACK: "a loopback address",
    AddressClass.PRIVATE: "a private address",
    AddressClass.SHARED: "a shared (carrier-grade NAT) address",
    AddressClass.LINK_LOCAL: "a link-local address",
    AddressClass.METADATA: "a cloud metadata address",
    AddressClass.MULTICAST: "a multicast address",
    AddressClass.BROADCAST: "the broadcast address",
    AddressClass.UNSPECIFIED: "an unspecified ('this network') address",
    AddressClass.DOCUMENTATION: "a documentation address",
    AddressClass.BENCHMARKING: "a benchmarking address",
    AddressClass.PROTOCOL: "an IETF protocol assignment address",
    AddressClass.TEREDO: "a Teredo address",
    AddressClass.RESERVED: "a reserved address",
}


def _class_text(verdict: Verdict) -> str:
    if verdict.address_class is None:
        return verdict.reason
    return _CLASS_TEXT.get(verdict.address_class, verdict.reason)


def refusal_advice(exc: SsrfBlockedError) -> str:
    """For an operator: what was refused, its address class, and the setting (and
    ``crawler crawl`` option) that would let it through."""
    refused = [v for v in exc.verdicts if not v.allowed]
    if not refused:
        return f"{exc.host} has no address to check"
    if len(refused) == 1 and refused[0].address == exc.host.strip("[]"):
        what = f"{refused[0].address} is {_class_text(refused[0])}"
    else:
        what = f"{exc.host} resolves to " + ", ".join(
            f"{v.address} ({_class_text(v)})" for v in refused)
    nets = [f"{v.address}/{128 if ':' in v.address else 32}" for v in refused
            if v.reason != "not an IP address"]
    if not nets:
        return f"{what}, which the SSRF guard refuses"
    options = " ".join(f"--allow-network {n}" for n in nets)
    return (f"{what}, which the SSRF guard refuses unless {ALLOW_SETTING} allows it; "
            f"to crawl it: {options} (or {ALLOW_SETTING}={','.join(nets)})")
