"""What a politeness queue is keyed on (common.politeness)."""

from __future__ import annotations

import pytest

from common.politeness import (
    key_address,
    key_mode,
    partition_key,
    politeness_key,
    split_host_key,
    task_route,
)
from common.ring import HostRing
from common.settings import Settings, SettingsError


def test_host_keying_is_the_host_key() -> None:
    assert politeness_key("news.test:8080", "host") == "news.test:8080"
    assert politeness_key("news.test:8080", "host", ["10.0.0.1"]) == "news.test:8080"


def test_domain_keying_is_the_registered_domain() -> None:
    assert politeness_key("www.bbc.co.uk", "domain") == "bbc.co.uk"
    assert politeness_key("news.bbc.co.uk:8080", "domain") == "bbc.co.uk"
    assert politeness_key("a.shared.test:4000", "domain") == "shared.test"
    # the private part of the list: separate sites of one hosting company
    assert politeness_key("alice.github.io", "domain") == "alice.github.io"
    assert politeness_key("bob.github.io", "domain") != politeness_key("alice.github.io",
                                                                       "domain")
    # an address is its own domain, port dropped
    assert politeness_key("127.0.0.1:8080", "domain") == "127.0.0.1"
    assert politeness_key("[::1]:8080", "domain") == "[::1]"
    # a host the rules cannot read keys as itself rather than failing
    assert politeness_key("", "domain") == ""


def test_ip_keying_is_the_lowest_address() -> None:
    assert politeness_key("a.test:8080", "ip", ["127.0.0.1"]) == "127.0.0.1"
    assert politeness_key("b.test", "ip", ["127.0.0.1"]) == "127.0.0.1"
    # the order of the answer does not matter; IPv4 before IPv6
    assert politeness_key("c.test", "ip", ["10.0.0.9", "10.0.0.10", "::1"]) == "10.0.0.9"
    assert politeness_key("c.test", "ip", ["::1", "10.0.0.10", "10.0.0.9"]) == "10.0.0.9"
    assert politeness_key("d.test", "ip", ["2001:db8::2", "2001:db8::1"]) == "2001:db8::1"
    # no answer: the host keeps a queue of its own
    assert politeness_key("gone.test:81", "ip", []) == "gone.test:81"


def test_split_host_key() -> None:
    assert split_host_key("news.test:8080") == ("news.test", 8080)
    assert split_host_key("news.test") == ("news.test", None)
    assert split_host_key("[::1]:80") == ("::1", 80)
    assert split_host_key("[::1]") == ("::1", None)


def test_key_mode_and_setting() -> None:
    assert key_mode("ip") == "ip"
    with pytest.raises(ValueError, match="host, domain, ip"):
        key_mode("url")
    assert Settings().politeness.key == "host"
    with pytest.raises(SettingsError, match="CRAWLER_POLITENESS_KEY"):
        Settings.from_env({"CRAWLER_POLITENESS_KEY": "url"})
    # a cluster routes fetch tasks by address (task_route): ip keying is offered there
    assert Settings.from_env({"CRAWLER_POLITENESS_KEY": "ip",
                              "CRAWLER_BUS_BACKEND": "kafka"}).politeness.key == "ip"
    assert Settings.from_env({"CRAWLER_POLITENESS_KEY": "domain",
                              "CRAWLER_BUS_BACKEND": "kafka"}).politeness.key == "domain"


def test_domain_partitioning_puts_a_domain_on_one_partition() -> None:
    assert partition_key("a.example.co.uk:8080", "domain") == "example.co.uk"
    assert partition_key("a.example.co.uk:8080", "host") == "a.example.co.uk:8080"
    assert partition_key("a.example.co.uk:8080", "ip") == "a.example.co.uk:8080"
    plain = HostRing(16)
    ring = HostRing(16, key=lambda h: partition_key(h, "domain"))
    hosts = [f"h{i}.example.org:8080" for i in range(40)]
    assert {ring(h) for h in hosts} == {plain("example.org")}
    assert len({plain(h) for h in hosts}) > 1  # by host they spread


def test_fetch_tasks_go_by_address_only_with_ip_keying() -> None:
    # ip: the address, so every task to it reaches the one consumer of its partition
    assert task_route("a.test:8080", "127.0.0.1", "ip") == "127.0.0.1"
    assert task_route("b.test", "127.0.0.1", "ip") == "127.0.0.1"
    # a name that did not resolve is its own key; no key at all: the host
    assert task_route("gone.test", "gone.test", "ip") == "gone.test"
    assert task_route("gone.test", None, "ip") == "gone.test"
    # host and domain keying: the host, whose partition is already the right one
    assert task_route("a.example.org", "example.org", "domain") == "a.example.org"
    assert task_route("a.example.org", None, "host") == "a.example.org"
    ring = HostRing(16)
    hosts = [f"h{i}.test" for i in range(40)]
    assert len({ring(task_route(h, "127.0.0.1", "ip")) for h in hosts}) == 1
    assert len({ring(task_route(h, None, "host")) for h in hosts}) > 1


def test_key_address_is_the_address_an_ip_key_names() -> None:
    assert key_address("93.184.216.34", "ip") == "93.184.216.34"
    assert key_address("2001:DB8::1", "ip") == "2001:db8::1"
    assert key_address("[::1]", "ip") == "::1"
    # the host's own key (its name did not resolve), no key, other modes: no address
    assert key_address("news.test:8080", "ip") is None
    assert key_address(None, "ip") is None
    assert key_address("93.184.216.34", "domain") is None
    assert key_address("93.184.216.34", "host") is None
