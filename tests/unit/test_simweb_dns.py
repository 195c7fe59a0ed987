"""The DNS responder's answers, checked on packets (no sockets)."""

from __future__ import annotations

import pytest
from dnslib import QTYPE, RCODE, DNSRecord

from simweb.dns import DnsResponder


@pytest.fixture
def responder() -> DnsResponder:
    return DnsResponder({"news.test": "127.0.0.1", "Internal.Test.": "127.0.0.2",
                         "v6.test": "::1"}, ttl=42)


def ask(responder: DnsResponder, name: str, qtype: str = "A") -> DNSRecord:
    query = DNSRecord.question(name, qtype)
    packet = responder.answer(query.pack())
    assert packet is not None
    reply = DNSRecord.parse(packet)
    assert reply.header.id == query.header.id
    assert reply.header.qr == 1
    return reply


def test_a_record_with_ttl(responder: DnsResponder) -> None:
    reply = ask(responder, "news.test")
    assert reply.header.rcode == RCODE.NOERROR
    assert [(str(rr.rdata), rr.ttl, rr.rtype) for rr in reply.rr] == \
        [("127.0.0.1", 42, QTYPE.A)]


def test_names_are_case_insensitive_and_configurable(responder: DnsResponder) -> None:
    assert [str(rr.rdata) for rr in ask(responder, "INTERNAL.test").rr] == ["127.0.0.2"]


def test_unknown_name_is_nxdomain(responder: DnsResponder) -> None:
    reply = ask(responder, "example.com")
    assert reply.header.rcode == RCODE.NXDOMAIN
    assert reply.rr == []


def test_other_types_of_known_names_are_empty_noerror(responder: DnsResponder) -> None:
    reply = ask(responder, "news.test", "AAAA")
    assert reply.header.rcode == RCODE.NOERROR
    assert reply.rr == []
    assert ask(responder, "news.test", "MX").rr == []


def test_ipv6_address_answers_aaaa(responder: DnsResponder) -> None:
    assert [str(rr.rdata) for rr in ask(responder, "v6.test", "AAAA").rr] == ["::1"]
    assert ask(responder, "v6.test", "A").rr == []


def test_queries_are_recorded(responder: DnsResponder) -> None:
    ask(responder, "news.test")
    ask(responder, "nope.test")
    assert [(q.name, q.qtype, q.rcode) for q in responder.queries()] == \
        [("news.test", "A", "NOERROR"), ("nope.test", "A", "NXDOMAIN")]
    assert responder.query_count("news.test") == 1


def test_garbage_and_responses_are_ignored(responder: DnsResponder) -> None:
    assert responder.answer(b"\x00\x01garbage") is None
    response = DNSRecord.question("news.test").reply().pack()
    assert responder.answer(response) is None


def test_binds_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        DnsResponder({}, host="0.0.0.0")


def test_port_before_start_is_an_error(responder: DnsResponder) -> None:
    with pytest.raises(RuntimeError):
        _ = responder.port
