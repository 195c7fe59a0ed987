"""Topic setup of the Kafka bus: wait for the brokers, create the bus's topics, wait
until every partition has a leader; and deleting topics and consumer groups (tests,
tools). Blocking calls of the admin client: the bus runs them in a worker thread."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from common.adapters.kafka.client import KafkaBusError, kafka_text, quiet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicAdmin:
    """The admin side of one bus: ``config`` is its clients' base configuration,
    ``partitions`` and ``replication_factor`` what its topics get, ``timeout`` (the
    bus's ``start_timeout``) how long each step may take."""

    bootstrap: str
    config: Mapping[str, Any]
    partitions: int
    replication_factor: int
    timeout: float

    def _client(self) -> AdminClient:
        # Its failures are reported by the caller's exception; librdkafka's own log
        # lines would repeat every reconnect attempt.
        return AdminClient(dict(self.config) | {"error_cb": quiet, "log_level": 0})

    def prepare_topics(self, names: Sequence[str]) -> None:
        """Blocking: wait for the brokers, create missing topics, wait until they serve."""
        admin = self._client()
        try:
            deadline = time.monotonic() + self.timeout
            try:
                metadata = admin.list_topics(timeout=self.timeout)
            except KafkaException as exc:
                raise KafkaBusError(
                    f"Kafka did not answer at {self.bootstrap} within "
                    f"{self.timeout:g} s ({kafka_text(exc)}); "
                    f"check CRAWLER_BUS_KAFKA_BOOTSTRAP") from None
            missing = [name for name in names if name not in metadata.topics]
            if missing:
                new = [NewTopic(name, num_partitions=self.partitions,
                                replication_factor=self.replication_factor)
                       for name in missing]
                futures = admin.create_topics(new, request_timeout=self.timeout)
                for name, future in futures.items():
                    try:
                        future.result(timeout=max(0.1, deadline - time.monotonic()))
                    except KafkaException as exc:
                        error = exc.args[0] if exc.args else None
                        if (isinstance(error, KafkaError)
                                and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                            continue
                        raise KafkaBusError(f"cannot create topic {name} on "
                                            f"{self.bootstrap}: {kafka_text(exc)}") from None
                    except TimeoutError:
                        raise KafkaBusError(f"creating topic {name} on {self.bootstrap} took "
                                            f"more than {self.timeout:g} s") from None
                    log.info("created topic", extra={"topic": name,
                                                     "partitions": self.partitions})
            self._wait_topics_ready(admin, names, deadline)
        finally:
            admin.poll(0)  # hand queued client log lines to logging

    def _wait_topics_ready(self, admin: AdminClient, names: Sequence[str],
                           deadline: float) -> None:
        """Until every topic has its partitions with a leader (metadata lags creation)."""
        while True:
            problem = None
            try:
                metadata = admin.list_topics(timeout=max(0.1, deadline - time.monotonic()))
            except KafkaException as exc:
                problem = str(exc)
            else:
                for name in names:
                    info = metadata.topics.get(name)
                    if info is None or info.error is not None:
                        problem = f"topic {name} is not ready"
                        break
                    count = len(info.partitions)
                    if count < self.partitions:
                        raise KafkaBusError(
                            f"topic {name} on {self.bootstrap} has {count} partitions; the "
                            f"bus is configured for {self.partitions} "
                            f"(CRAWLER_BUS_PARTITIONS)")
                    if any(p.leader < 0 for p in info.partitions.values()):
                        problem = f"topic {name} has partitions without a leader"
                        break
            if problem is None:
                for name in names:
                    count = len(metadata.topics[name].partitions)
                    if count > self.partitions:
                        log.warning("topic has more partitions than the bus uses",
                                    extra={"topic": name, "partitions": count,
                                           "used": self.partitions})
                return
            if time.monotonic() >= deadline:
                raise KafkaBusError(f"Kafka at {self.bootstrap}: {problem} after "
                                    f"{self.timeout:g} s")
            time.sleep(0.05)

    def delete(self, topics: list[str], groups: list[str]) -> None:
        """Blocking: delete ``topics`` and consumer ``groups``; missing ones are skipped."""
        admin = self._client()
        try:
            waits = list(admin.delete_topics(topics, operation_timeout=self.timeout,
                                              request_timeout=self.timeout).items())
            if groups:
                waits += list(admin.delete_consumer_groups(
                    groups, request_timeout=self.timeout).items())
            for name, future in waits:
                try:
                    future.result(timeout=self.timeout)
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    if isinstance(error, KafkaError) and error.code() in (
                            KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.GROUP_ID_NOT_FOUND):
                        continue
                    raise KafkaBusError(f"cannot delete {name} on {self.bootstrap}: "
                                        f"{kafka_text(exc)}") from None
        finally:
            admin.poll(0)
