"""A tiny authoritative DNS responder on loopback (UDP) for the scenario's hosts.

A queries for a known name answer its IPv4 addresses, AAAA queries its IPv6 ones (a
name may have several, answered in the order given);
other types for a known name get an empty NOERROR answer (so resolvers do not treat
the name as missing), and unknown names get NXDOMAIN. Every query is recorded.

Clients point at it with the address and port, e.g. ``aiodns.DNSResolver(
nameservers=[f"127.0.0.1:{port}"])`` (pycares >= 4.2 takes "ip:port" server strings).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSError, DNSRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DnsQuery:
    """One question the responder answered."""

    name: str
    qtype: str
    rcode: str
    answers: tuple[str, ...]


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, responder: DnsResponder) -> None:
        self.responder = responder
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, int]) -> None:
        reply = self.responder.answer(data)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


class DnsResponder:
    """Answers DNS questions for ``answers`` (name -> IPv4 or IPv6 address, or a
    sequence of them)."""

    def __init__(self, answers: Mapping[str, str | Sequence[str]], *, ttl: int = 300,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"the DNS responder binds to loopback only, not {host!r}")
        self._answers = {k.lower().rstrip("."): tuple(
            ipaddress.ip_address(a) for a in ((v,) if isinstance(v, str) else v))
            for k, v in answers.items()}
        self.ttl = ttl
        self.host = host
        self._port = port
        self._transport: asyncio.DatagramTransport | None = None
        self._lock = threading.Lock()
        self._queries: list[DnsQuery] = []

    @property
    def port(self) -> int:
        """The bound UDP port (after start)."""
        if self._transport is None:
            raise RuntimeError("the DNS responder is not running")
        return int(self._transport.get_extra_info("sockname")[1])

    @property
    def server(self) -> str:
        """'ip:port' as resolvers take it."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Protocol(self), local_addr=(self.host, self._port))
        self._transport = transport

    async def stop(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def queries(self) -> list[DnsQuery]:
        with self._lock:
            return list(self._queries)

    def query_count(self, name: str | None = None) -> int:
        return sum(1 for q in self.queries() if name is None or q.name == name)

    def answer(self, data: bytes) -> bytes | None:
        """The reply packet for a query packet; None for packets that are no query."""
        try:
            request = DNSRecord.parse(data)
        except (DNSError, ValueError, IndexError) as exc:
            log.debug("ignoring malformed DNS packet: %s", exc)
            return None
        if request.header.qr:  # a response, not a question
            return None
        reply = request.reply()  # sets qr, aa, ra and copies id and questions
        rcode = RCODE.NOERROR
        for question in request.questions:
            answers: list[str] = []
            name = str(question.qname).lower().rstrip(".")
            addresses = self._answers.get(name)
            qtype = QTYPE.get(question.qtype, str(question.qtype))
            if addresses is None:
                rcode = RCODE.NXDOMAIN
            for address in addresses or ():
                if address.version == 4 and question.qtype == QTYPE.A:
                    reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(str(address)),
                                        ttl=self.ttl))
                    answers.append(str(address))
                elif address.version == 6 and question.qtype == QTYPE.AAAA:
                    reply.add_answer(RR(question.qname, QTYPE.AAAA,
                                        rdata=AAAA(str(address)), ttl=self.ttl))
                    answers.append(str(address))
            with self._lock:
                self._queries.append(DnsQuery(name, str(qtype),
                                              "NXDOMAIN" if addresses is None else "NOERROR",
                                              tuple(answers)))
        reply.header.rcode = rcode
        packed: bytes = reply.pack()
        return packed
