"""Every setting, fed junk: either accepted, and then usable by every part that reads
it, or refused at start with a :class:`SettingsError` naming the variable; never another
exception, now or later (issue 10, item 6 and 13)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.adapters.local_blobs import LocalBlobStore
from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.archive import ArchiveWriter
from common.settings import Settings, SettingsError, variable_names
from common.urls import TrackingRules
from fetcher.dns import Resolver
from fetcher.http import HttpFetcher
from fetcher.ssrf import Guard
from frontier.policy import TrapRules
from frontier.service import Frontier

JUNK = (
    "", " ", ",", ",,", "x", "-1", "0", "1e400", "nan", "inf", "1.5", "99999999999999999999",
    "a=b", "=", "a=", "=1", "a=-1", "a=nan", "*", "(", "[", "a b", "UPPER", "krunA",
    "127.0.0.1/33", "999.1.1.1", "::1", "127.0.0.1", "garbage", "x:y:z", "a.test:80:nope",
    "1.2.3.4:99999", "a\x00b", "line\nbreak", "tab\there", "/etc/passwd", "../..", "é",
    "\U0001f600", "x" * 300, "PLAINTEXT://", "host:", ":9092", "LOCAL_ONE", "sometimes",
    "text", "text/", "a/b/c",
)


def consume(s: Settings, folder: Path) -> None:
    """Build everything that parses or uses a setting at start, the way the processes
    do (no connection is made, nothing is sent)."""
    Guard(s.fetcher.allow_networks)
    Resolver.from_settings(s.fetcher)
    HttpFetcher(s)
    TrapRules.from_settings(s.traps)
    TrackingRules.from_settings(s.urls)
    bus = MemoryBus(s.bus, partitions=1)
    Frontier(s, bus, SqliteStateStore(folder / "state.sqlite"))
    blobs = LocalBlobStore(str(folder / "warc"), writer_id="test", prefix=s.blob.prefix,
                           max_bytes=s.blob.warc_max_bytes)
    ArchiveWriter(blobs, software=s.crawl.user_agent)
    blobs.close()
    from common.adapters.cassandra import CassandraStateStore
    from common.adapters.kafka import KafkaBus

    CassandraStateStore(s.store)
    KafkaBus(s.bus)
    asyncio.run(bus.stop())


def check(variable: str, value: str, folder: Path) -> None:
    try:
        s = Settings.from_env({variable: value})
    except SettingsError as exc:
        message = str(exc)
    else:
        consume(s, folder)
        return
    assert variable in message, (variable, value, message)


@pytest.mark.parametrize("variable", variable_names())
def test_junk_values_are_accepted_and_usable_or_refused_naming_the_variable(
        variable: str, tmp_path: Path) -> None:
    for value in JUNK:
        check(variable, value, tmp_path)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(variable=st.sampled_from(variable_names()), value=st.text(max_size=40))
def test_any_text_is_accepted_and_usable_or_refused(variable: str, value: str,
                                                   tmp_path: Path) -> None:
    check(variable, value, tmp_path)


@pytest.mark.parametrize(("env", "message"), [
    ({"CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.1/33"},
     "CRAWLER_FETCHER_ALLOW_NETWORKS: not an IP network: '127.0.0.1/33'"),
    ({"CRAWLER_FETCHER_RESOLVE": "garbage"}, "CRAWLER_FETCHER_RESOLVE: bad resolve entry"),
    ({"CRAWLER_FETCHER_DNS_SERVERS": "garbage"}, "CRAWLER_FETCHER_DNS_SERVERS: bad DNS"),
    ({"CRAWLER_POLITENESS_HOST_DELAY_OVERRIDES": "a.test=nan"},
     "CRAWLER_POLITENESS_HOST_DELAY_OVERRIDES"),
    ({"CRAWLER_TRAPS_HOST_PAGE_OVERRIDES": "a.test=0"}, "CRAWLER_TRAPS_HOST_PAGE_OVERRIDES"),
    ({"CRAWLER_TRAPS_BLOCKED_PATTERNS": "("}, "CRAWLER_TRAPS_BLOCKED_PATTERNS"),
    ({"CRAWLER_URLS_EXTRA_TRACKING_PARAMS": "*"}, "CRAWLER_URLS_EXTRA_TRACKING_PARAMS"),
    ({"CRAWLER_STORE_KEYSPACE": "krunA"}, r"CRAWLER_STORE_KEYSPACE: .*use 'kruna'"),
    ({"CRAWLER_STORE_KEYSPACE": "crawl-2024"}, "CRAWLER_STORE_KEYSPACE"),
    ({"CRAWLER_STORE_READ_CONSISTENCY": "SOMETIMES"}, "CRAWLER_STORE_READ_CONSISTENCY"),
    ({"CRAWLER_BUS_TOPIC_PREFIX": "crawl/1"}, "CRAWLER_BUS_TOPIC_PREFIX"),
    ({"CRAWLER_BUS_GROUP_PREFIX": "a b"}, "CRAWLER_BUS_GROUP_PREFIX"),
    ({"CRAWLER_BUS_KAFKA_BOOTSTRAP": "kafka"}, "CRAWLER_BUS_KAFKA_BOOTSTRAP"),
    ({"CRAWLER_BLOB_PREFIX": "a/b"}, "CRAWLER_BLOB_PREFIX"),
    ({"CRAWLER_METRICS_PORT": "70000"}, "CRAWLER_METRICS_PORT: must be at most 65535"),
    ({"CRAWLER_CRAWL_USER_AGENT_PRODUCT": "Polite Crawler"},
     "CRAWLER_CRAWL_USER_AGENT_PRODUCT"),
    ({"CRAWLER_CRAWL_OUT_DIR": "a\x00b"}, "CRAWLER_CRAWL_OUT_DIR: must not contain control"),
])
def test_structured_values_are_checked_at_start(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_replace_checks_structured_values_and_finite_numbers() -> None:
    with pytest.raises(SettingsError, match="CRAWLER_FETCHER_ALLOW_NETWORKS"):
        Settings().replace(fetcher={"allow_networks": ("10.0.0.0/8", "nope")})
    with pytest.raises(SettingsError, match="CRAWLER_POLITENESS_DEFAULT_DELAY: expected a "
                                            "finite"):
        Settings().replace(politeness={"default_delay": float("nan")})


def test_good_structured_values_pass() -> None:
    s = Settings.from_env({
        "CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.1/32, 10.1.2.3/8, ::1",
        "CRAWLER_FETCHER_RESOLVE": "a.test:*:127.0.0.1,b.test:443:[::1]",
        "CRAWLER_FETCHER_DNS_SERVERS": "127.0.0.1:5353,[::1]:53",
        "CRAWLER_TRAPS_BLOCKED_HOSTS": ".ads.test,a.test:8080",
        "CRAWLER_STORE_KEYSPACE": "crawl_2024",
        "CRAWLER_STORE_READ_CONSISTENCY": "one",
        "CRAWLER_BUS_TOPIC_PREFIX": "it-0a.b_c",
        "CRAWLER_BUS_KAFKA_BOOTSTRAP": "k1:9092,PLAINTEXT://[::1]:9093",
        "CRAWLER_METRICS_HOST": "0.0.0.0",
    })
    assert s.store.keyspace == "crawl_2024"


def test_the_test_commands_own_variables_are_not_settings() -> None:
    """CRAWLER_TEST_* tell the test command where its servers are (testcontainers or
    local, a kubeconfig): a crawler started by a test under them must not refuse to
    start."""
    Settings.from_env({"CRAWLER_TEST_SERVERS": "docker",
                       "CRAWLER_TEST_KUBECONFIG": "/tmp/admin.kubeconfig"})
    with pytest.raises(SettingsError, match="CRAWLER_TESTS_SERVERS: no such setting"):
        Settings.from_env({"CRAWLER_TESTS_SERVERS": "docker"})
