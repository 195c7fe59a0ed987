"""Static group membership of a process's Kafka consumers (pure: no broker needed)."""

from __future__ import annotations

from common.adapters.kafka import KafkaBus
from common.settings import BusSettings


def test_consumers_are_dynamic_members_by_default() -> None:
    bus = KafkaBus(BusSettings(backend="kafka"))
    assert "group.instance.id" not in bus._consumer_config("fetcher")


def test_each_consumer_of_a_process_has_its_own_stable_instance_id() -> None:
    bus = KafkaBus(BusSettings(backend="kafka"), instance_id="fetcher-node-41")
    first = bus._consumer_config("fetcher")
    assert first["group.instance.id"] == "fetcher-node-41-fetcher"
    assert first["group.id"] == bus.group_id("fetcher")
    assert bus._consumer_config("other")["group.instance.id"] == "fetcher-node-41-other"
    # a second consumer of the same group in this process may not share the id
    assert bus._consumer_config("fetcher")["group.instance.id"] == \
        "fetcher-node-41-fetcher-2"
