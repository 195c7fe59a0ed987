"""The local servers of scripts/servers work with real clients.

Kafka: create a topic, produce a message and consume it back. Cassandra: create a keyspace
and a table, write a row and read it back. Each test is skipped unless its server answers:
``KAFKA_BOOTSTRAP`` / ``CASSANDRA_HOSTS`` name existing servers, otherwise the defaults of
scripts/servers (127.0.0.1, ports ``KAFKA_PORT`` / ``CASSANDRA_PORT``) are tried. Only
loopback addresses are used.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from scripts.lib import probes
from tests.conftest import unavailable

pytestmark = pytest.mark.integration


def _loopback_or_skip(host: str) -> None:
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError as exc:
        pytest.skip(f"cannot resolve {host}: {exc}")
    for info in infos:
        if not ipaddress.ip_address(info[4][0]).is_loopback:
            pytest.skip(f"{host} is not a loopback address; tests only talk to loopback")


def _answering_or_skip(host: str, port: int, what: str) -> None:
    _loopback_or_skip(host)
    try:
        with socket.create_connection((host, port), timeout=2):
            pass
    except OSError:
        unavailable(f"{what} is not answering on {host}:{port} (scripts/servers start)")


@pytest.fixture
def kafka_bootstrap() -> str:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "").strip() or (
        f"127.0.0.1:{os.environ.get('KAFKA_PORT', '').strip() or 9092}")
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        _answering_or_skip(host.strip("[]"), int(port), "Kafka")
    return bootstrap


@pytest.fixture
def cassandra_session() -> Iterator[object]:
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy

    hosts = [h.strip() for h in
             (os.environ.get("CASSANDRA_HOSTS", "").strip() or "127.0.0.1").split(",")]
    port = int(os.environ.get("CASSANDRA_PORT", "").strip() or 9042)
    for host in hosts:
        _answering_or_skip(host, port, "Cassandra")
    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=30)
    cluster = Cluster(hosts, port=port, connect_timeout=10,
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


def test_kafka_topic_produce_consume(kafka_bootstrap: str) -> None:
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"servers-test-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=30)
    try:
        deadline = time.monotonic() + 10  # metadata may lag the creation a moment
        while (topic not in admin.list_topics(timeout=10).topics
               and time.monotonic() < deadline):
            time.sleep(0.1)
        assert topic in admin.list_topics(timeout=10).topics

        key, value = b"host.example", f"hello {uuid.uuid4()}".encode()
        delivered: list[object] = []
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, msg: delivered.append(err or msg))
        assert producer.flush(30) == 0
        assert len(delivered) == 1
        assert not isinstance(delivered[0], KafkaError), delivered[0]

        consumer = Consumer({"bootstrap.servers": kafka_bootstrap,
                             "group.id": f"{topic}-group", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        try:
            consumer.subscribe([topic])
            received = None
            deadline = time.monotonic() + 60
            while received is None and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                received = msg
        finally:
            consumer.close()
        assert received is not None, "no message consumed within 60 s"
        assert (received.topic(), received.key(), received.value()) == (topic, key, value)
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)


def test_kafka_ready_means_a_consumer_group_can_join_at_once(kafka_bootstrap: str) -> None:
    """What scripts/servers calls ready (scripts/lib/probes.py): a group joined, got its
    partition and committed, and every group coordinator answers, so the next group joins
    at once (a first test on a fresh broker failed with "Coordinator load in progress"
    when ready meant only "metadata answers")."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    bootstrap = kafka_bootstrap.split(",")[0].strip()
    info = probes.kafka_ready(bootstrap, 60.0)
    assert "a consumer group joined and committed" in info, info
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    offsets = admin.list_topics(topic="__consumer_offsets", timeout=10).topics[
        "__consumer_offsets"]
    assert f"{len(offsets.partitions)} group coordinator(s) ready" in info, info

    # a group of another name (another coordinator, most likely) joins within 5 s
    group = f"servers-test-{uuid.uuid4().hex[:12]}"
    assigned: list[int] = []
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        consumer.subscribe([probes.KAFKA_PROBE_TOPIC],
                           on_assign=lambda _c, parts: assigned.extend(
                               p.partition for p in parts))
        deadline = time.monotonic() + 5.0
        while not assigned and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert assigned == [0], "the group got no partition within 5 s"
    finally:
        consumer.close()
        admin.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=10)


def test_cassandra_keyspace_table_row(cassandra_session: object) -> None:
    from cassandra.cluster import Session

    assert isinstance(cassandra_session, Session)
    session = cassandra_session
    version = session.execute("SELECT release_version FROM system.local").one()[0]
    assert version.startswith("5.0"), version

    keyspace = f"servers_test_{uuid.uuid4().hex[:12]}"
    session.execute(f"CREATE KEYSPACE {keyspace} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    try:
        session.execute(f"CREATE TABLE {keyspace}.url_state (host text, url text, "
                        "status text, attempts int, PRIMARY KEY ((host), url))")
        url = f"http://host.example/{uuid.uuid4().hex}"
        session.execute(f"INSERT INTO {keyspace}.url_state (host, url, status, attempts) "
                        "VALUES (%s, %s, %s, %s)", ("host.example", url, "fetched", 2))
        rows = list(session.execute(
            f"SELECT url, status, attempts FROM {keyspace}.url_state WHERE host = %s",
            ("host.example",)))
        assert [(r.url, r.status, r.attempts) for r in rows] == [(url, "fetched", 2)]
    finally:
        session.execute(f"DROP KEYSPACE {keyspace}")
