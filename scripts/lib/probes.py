"""Readiness checks of the servers the crawler uses, as their clients use them, not just
"the port answers": shared by scripts/servers (``start`` waits on them, ``status`` shows
them) and by the tests that start the same servers in containers.

Kafka (:func:`kafka_ready`): the broker answers metadata, a probe topic
(``servers-ready-probe``, kept) takes a message, a consumer group of its own joins, gets the
topic's partition assigned, reads the message and commits its offset, and the group
coordinator of every partition of ``__consumer_offsets`` answers an offset fetch (right
after a start, a coordinator answers "Coordinator load in progress" until it has loaded its
partition, and a group that hashes there cannot join meanwhile).

Cassandra (:func:`cassandra_release`): a CQL session reads ``system.local``.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from typing import Any


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a TCP connection to ``host:port`` is accepted within ``timeout``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


KAFKA_CHECK_SECONDS = 20.0  # longest one Kafka readiness check takes
KAFKA_PROBE_TOPIC = "servers-ready-probe"
KAFKA_OFFSETS_TOPIC = "__consumer_offsets"


class NotReadyError(Exception):
    """A readiness check found the server not ready yet; the text says where."""


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (a signed 32-bit integer) of ``text``."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition, so the coordinator, of consumer group
    ``group``: Kafka's ``Utils.abs(groupId.hashCode()) % partitions``."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def groups_covering(prefix: str, partitions: int) -> dict[int, str]:
    """One group id starting with ``prefix`` for each ``__consumer_offsets`` partition."""
    out: dict[int, str] = {}
    n = 0
    while len(out) < partitions:
        group = f"{prefix}{n}"
        out.setdefault(offsets_partition(group, partitions), group)
        n += 1
    return out


def kafka_ready(bootstrap: str, budget: float) -> str:
    """Check, within about ``budget`` seconds, that a Kafka client can do its work: see
    the module docstring. Returns a short description; raises :class:`NotReadyError`
    naming the step that failed."""
    from confluent_kafka import (
        Consumer,
        ConsumerGroupTopicPartitions,
        KafkaError,
        KafkaException,
        Producer,
    )
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    started = time.monotonic()
    deadline = started + budget

    def left(cap: float | None = None) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise NotReadyError(f"the check took more than {budget:.0f} s")
        return min(remaining, cap) if cap is not None else remaining

    quiet: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 0,
                             "error_cb": lambda _error: None}
    admin = AdminClient(quiet | {"socket.timeout.ms": 3000})
    try:
        meta = admin.list_topics(timeout=left(3))
    except KafkaException as exc:
        raise NotReadyError(f"no metadata from {bootstrap}: {exc}") from None
    if not meta.brokers:
        raise NotReadyError(f"no broker in the metadata of {bootstrap}")
    about = f"cluster {meta.cluster_id}, {len(meta.brokers)} broker(s)"

    # 1. a topic of its own, with a leader
    if KAFKA_PROBE_TOPIC not in meta.topics:
        probe = NewTopic(KAFKA_PROBE_TOPIC, num_partitions=1, replication_factor=1,
                         config={"retention.ms": str(3_600_000)})  # an hour of probes
        future = admin.create_topics([probe], request_timeout=left(10))[KAFKA_PROBE_TOPIC]
        try:
            future.result(timeout=left())
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError)
                    and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise NotReadyError(f"cannot create the probe topic: {exc}") from None
        except TimeoutError:
            raise NotReadyError("creating the probe topic did not finish") from None
    while True:
        topic = admin.list_topics(topic=KAFKA_PROBE_TOPIC, timeout=left(3)).topics.get(
            KAFKA_PROBE_TOPIC)
        if topic is not None and topic.error is None and topic.partitions and all(
                p.leader >= 0 for p in topic.partitions.values()):
            break
        left()
        time.sleep(0.1)

    # 2. a message in it
    value = uuid.uuid4().hex.encode()
    reports: list[object] = []
    producer = Producer(quiet | {"acks": "all", "message.timeout.ms": int(left() * 1000)})
    producer.produce(KAFKA_PROBE_TOPIC, value=value,
                     on_delivery=lambda error, msg: reports.append(error))
    producer.flush(left())
    if reports != [None]:
        raise NotReadyError(f"producing to the probe topic failed: "
                            f"{reports[0] if reports else 'no delivery report'}")

    # 3. a consumer group joins, gets the partition, reads the message, commits
    group = f"servers-ready-{uuid.uuid4().hex[:12]}"
    assigned: list[int] = []
    consumer = Consumer(quiet | {"group.id": group, "auto.offset.reset": "earliest",
                                 "enable.auto.commit": False,
                                 "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    try:
        consumer.subscribe([KAFKA_PROBE_TOPIC],
                           on_assign=lambda _c, parts: assigned.extend(
                               p.partition for p in parts))
        last_error = None
        while True:
            try:
                remaining = left()
            except NotReadyError:
                step = ("got no partition" if not assigned
                        else "got its partition but did not read the probe message")
                raise NotReadyError(f"consumer group {group} {step} within {budget:.0f} s"
                                    + (f" ({last_error})" if last_error else "")) from None
            msg = consumer.poll(min(0.5, remaining))
            if msg is None:
                continue
            if msg.error() is not None:
                last_error = msg.error()
                continue
            if msg.value() == value:
                break
        try:
            committed = consumer.commit(message=msg, asynchronous=False)
        except KafkaException as exc:
            raise NotReadyError(f"consumer group {group} could not commit: {exc}") from None
        failed = [tp for tp in committed or [] if tp.error is not None]
        if failed:
            raise NotReadyError(f"consumer group {group} could not commit: {failed[0].error}")
    finally:
        consumer.close()
    joined = time.monotonic() - started

    # 4. every group coordinator has loaded its partition of __consumer_offsets
    offsets = admin.list_topics(topic=KAFKA_OFFSETS_TOPIC, timeout=left(3)).topics.get(
        KAFKA_OFFSETS_TOPIC)
    count = len(offsets.partitions) if offsets is not None and offsets.error is None else 0
    if count:
        probes = groups_covering("servers-ready-coordinator-", count)
        futures = {partition: admin.list_consumer_group_offsets(
                       [ConsumerGroupTopicPartitions(name)],
                       request_timeout=left(10))[name]
                   for partition, name in probes.items()}
        for partition, future in sorted(futures.items()):
            try:
                future.result(timeout=left())
            except (KafkaException, TimeoutError) as exc:
                raise NotReadyError(f"the group coordinator of {KAFKA_OFFSETS_TOPIC} "
                                    f"partition {partition} is not ready: "
                                    f"{exc or 'no answer'}") from None
    with contextlib.suppress(Exception):  # the probe group is empty now; best effort
        admin.delete_consumer_groups([group], request_timeout=5)[group].result(timeout=5)
    return (f"{about}; a consumer group joined and committed in {joined:.1f} s, "
            f"{count} group coordinator(s) ready")


def cassandra_release(host: str, port: int) -> str | None:
    """Cassandra's release version, read by a CQL session from ``system.local``; None
    when no session can be had or the query fails."""
    import logging

    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy

    logging.getLogger("cassandra").setLevel(logging.CRITICAL)
    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=5)
    cluster = Cluster([host], port=port, connect_timeout=3, control_connection_timeout=3,
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    try:
        session = cluster.connect()
        row = session.execute("SELECT release_version FROM system.local").one()
    except Exception:
        return None
    finally:
        cluster.shutdown()
    return str(row[0]) if row is not None else None
