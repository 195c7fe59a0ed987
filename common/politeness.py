"""What a politeness queue is keyed on: pure functions, no I/O.

``CRAWLER_POLITENESS_KEY`` chooses it (see docs/politeness.md):

- ``host``: each host key (name and port) has its own gap and its own requests in
  flight, as before;
- ``domain``: the hosts under one registered domain share them (the Public Suffix List
  bundled with ``publicsuffixlist``, private part included, as the crawl scope reads it:
  ``a.example.co.uk`` and ``b.example.co.uk`` share ``example.co.uk``;
  ``alice.github.io`` and ``bob.github.io`` do not);
- ``ip``: the hosts whose names resolve to one address share them (StormCrawler's
  ``byIP``). The address is the lowest of the name's answer, so a DNS server that
  rotates the order of its answers does not move the host.

:func:`politeness_key` maps a host (and, for ``ip``, its resolved addresses) to its key;
:func:`partition_key` is what cluster mode partitions a host by, so that one frontier
owns every host of a domain and holds the domain's timer; :func:`task_route` is what a
fetch task is published under, so that with ``ip`` one fetcher holds each address's
gate. :func:`retry_backoff` is how long a failed request waits before the next try.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Literal

from common.urls import UrlError, registered_domain

KeyMode = Literal["host", "domain", "ip"]

KEY_MODES: tuple[KeyMode, ...] = ("host", "domain", "ip")


def key_mode(text: str) -> KeyMode:
    """The setting's text as a :data:`KeyMode`; :class:`ValueError` for anything else."""
    for mode in KEY_MODES:
        if text == mode:
            return mode
    raise ValueError(f"expected one of {', '.join(KEY_MODES)}, got {text!r}")


def address_order(address: str) -> tuple[int, int, str]:
    """Sort key of an address: IPv4 before IPv6, then by value (text that is no
    address last). The ``ip`` key is the first address in this order."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return (2, 0, address)
    return (0 if ip.version == 4 else 1, int(ip), address)


def politeness_key(host: str, mode: KeyMode, addresses: Sequence[str] = ()) -> str:
    """The politeness key of ``host`` (a host key such as ``news.test:8080``).

    ``host``: the host key itself. ``domain``: its registered domain, port dropped (a
    host that is no name, an IP literal, is its own domain). ``ip``: the lowest of
    ``addresses`` (IPv4 before IPv6), port dropped; with no addresses (the name did not
    resolve) the host key itself, so such a host keeps a queue of its own and its fetch
    records the DNS failure. Never raises: a host the domain rules cannot read keys as
    itself.
    """
    if mode == "domain":
        try:
            return registered_domain(host, private=True)
        except UrlError:
            return host
    if mode == "ip":
        if not addresses:
            return host
        best = min(addresses, key=address_order)
        return best.strip("[]").lower()
    return host


def key_address(key: str | None, mode: KeyMode) -> str | None:
    """The address a fetch task's politeness ``key`` names with ``ip`` keying (the one
    its connection must go to, so the request counts where the key says), else None:
    another mode, no key, or a key that is the host itself (a name that did not
    resolve when the task was dispatched)."""
    if mode != "ip" or not key:
        return None
    try:
        return str(ipaddress.ip_address(key.strip("[]")))
    except ValueError:
        return None


def split_host_key(host: str) -> tuple[str, int | None]:
    """``news.test:8080`` -> ``("news.test", 8080)``; ``[::1]:80`` -> ``("::1", 80)``;
    no port -> None. What a resolver takes."""
    if host.startswith("["):
        end = host.find("]")
        name, rest = (host[1:end], host[end + 1:]) if end > 0 else (host, "")
        port = rest[1:] if rest.startswith(":") else ""
    elif host.count(":") == 1:
        name, _, port = host.partition(":")
    else:
        name, port = host, ""
    return name, int(port) if port.isdigit() else None


def partition_key(host: str, mode: KeyMode) -> str:
    """What cluster mode hashes ``host`` by onto a partition: its politeness key when
    that key follows from the name alone (``domain``), else the host itself. With
    ``ip`` a host's messages go by its name (every producer can work that out without
    DNS) to the frontier that owns it, which resolves it; only its fetch tasks go by
    the address (:func:`task_route`)."""
    if mode == "domain":
        return politeness_key(host, mode)
    return host


def task_route(host: str, key: str | None, mode: KeyMode) -> str:
    """What a fetch task of ``host`` with politeness ``key`` is published under (its
    bus key, which the ring hashes onto a partition): with ``ip`` the key, the address,
    so every task to one address reaches the one fetcher that consumes the address's
    partition and waits in that fetcher's gate, whichever frontier sent it; otherwise
    the host (with ``domain`` the host's partition is already its domain's)."""
    if mode == "ip" and key:
        return key
    return host


def retry_backoff(attempt: int, base: float, longest: float) -> float:
    """The wait after the ``attempt``-th failed try (1 for the first): ``base`` seconds,
    doubled for each further try, at most ``longest``."""
    return min(longest, base * 2.0 ** max(0, attempt - 1))
