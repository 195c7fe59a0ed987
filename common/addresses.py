"""Pure parsers of the address-like values in settings: CIDR networks, DNS servers,
fixed DNS answers and host names. No I/O.

They live here rather than in ``fetcher`` so that :meth:`common.settings.Settings.validate`
checks every such value when a process starts (whatever its role), with the same rules
the fetcher applies when it uses them. Each raises ``ValueError`` naming the entry.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass
from typing import TypeAlias

IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_network(entry: str) -> IPNetwork:
    """A CIDR network, or a bare address meaning /32 or /128. Host bits are tolerated
    (``10.1.2.3/8`` means ``10.0.0.0/8``)."""
    try:
        return ipaddress.ip_network(entry.strip(), strict=False)
    except ValueError:
        raise ValueError(f"not an IP network: {entry!r} (expected a CIDR such as "
                         "127.0.0.1/32 or 10.0.0.0/8)") from None


def parse_nameserver(entry: str) -> str:
    """Normalise ``ip`` / ``ip:port`` / ``[ipv6]:port`` / bare ``ipv6`` to the form
    c-ares accepts. A malformed entry raises ``ValueError`` naming it."""
    text = entry.strip()
    host, port = text, ""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"bad DNS server {entry!r}")
        port = rest[1:]
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"bad DNS server {entry!r}: not an IP address (expected ip or "
                         "ip:port)") from None
    if port:
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad DNS server {entry!r}: bad port")
        return f"[{addr}]:{int(port)}" if addr.version == 6 else f"{addr}:{int(port)}"
    return str(addr)


@dataclass(frozen=True, slots=True)
class Override:
    host: str
    port: int | None  # None: any port
    address: str


def normalise_host(host: str) -> str:
    """Lower case, without IPv6 brackets or a trailing dot."""
    h = host.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    return h.rstrip(".")


def parse_override(entry: str) -> Override:
    """Parse ``host:port:address`` (address may be ``[ipv6]`` or bare IPv6; port may be
    ``*``). A malformed entry raises ``ValueError`` naming it."""
    host, sep1, rest = entry.strip().partition(":")
    port_text, sep2, address = rest.partition(":")
    if not (sep1 and sep2 and host and address):
        raise ValueError(f"bad resolve entry {entry!r}: expected host:port:address")
    if any(c.isspace() for c in host):
        raise ValueError(f"bad resolve entry {entry!r}: white space in the host name")
    if address.startswith("[") and address.endswith("]"):
        address = address[1:-1]
    try:
        addr = ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(f"bad resolve entry {entry!r}: {address!r} is not an IP "
                         "address") from None
    port: int | None
    if port_text == "*":
        port = None
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise ValueError(f"bad resolve entry {entry!r}: bad port {port_text!r}")
    return Override(normalise_host(host), port, str(addr))


_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?")


def host_or_address(text: str) -> bool:
    """A host name or an IP address (IPv6 with or without brackets)."""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ipaddress.ip_address(bare)
        return True
    except ValueError:
        return _HOST_NAME.fullmatch(text) is not None


def s3_endpoint_problem(text: str) -> str | None:
    """What is wrong with an S3 endpoint URL (None: nothing). Wanted: ``http://host`` or
    ``https://host`` with an optional port, no path; the S3 client aborts the process on
    a port or address it cannot parse, so those are refused here. A user name or password
    in it is refused without quoting the value: keys belong in the credentials file or
    the AWS_* variables, never in a setting that shows up in errors and logs."""
    if "@" in text:
        return ("must not carry a user name or password (user:password@); give the keys "
                "in CRAWLER_BLOB_S3_CREDENTIALS_FILE or AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY")
    expected = f"expected http://host[:port] or https://host[:port], got {text!r}"
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        return expected
    host = parts.hostname or ""
    if (parts.scheme not in ("http", "https") or not host or parts.path not in ("", "/")
            or parts.query or parts.fragment or "#" in text or "?" in text
            or port == 0 or not host_or_address(host)):
        return expected
    return None
