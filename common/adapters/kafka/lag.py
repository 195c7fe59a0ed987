"""Consumer lag from librdkafka's statistics (pure: no client needed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def _offset(info: Mapping[str, Any], name: str) -> int | None:
    value = info.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _partition_lag(info: Mapping[str, Any], *, read_committed: bool,
                   from_start: bool) -> int | None:
    """The lag of one partition's statistics, or None when it is not known yet."""
    lag = _offset(info, "consumer_lag")  # end of the log - committed offset; -1: unknown
    if lag is not None and lag >= 0:
        return lag
    if not from_start or info.get("fetch_state") != "active":
        return None
    # Never committed by the group: consuming started at the low watermark.
    committed = _offset(info, "committed_offset")
    low = _offset(info, "lo_offset")
    end = _offset(info, "ls_offset" if read_committed else "hi_offset")
    if committed is None or committed >= 0 or low is None or end is None:
        return None
    return end - low if 0 <= low <= end else None


def consumer_lag(stats: Mapping[str, Any], owned: Iterable[tuple[str, int]], *,
                 read_committed: bool = True, from_start: bool = True) -> dict[str, int]:
    """Messages not yet committed, per Kafka topic, summed over the ``owned``
    (topic, partition) pairs, from one librdkafka statistics object (its
    ``topics.<name>.partitions.<p>`` entries). A partition whose lag is not known yet
    counts 0. ``read_committed`` says which end of the log librdkafka measures from
    (``isolation.level``); ``from_start`` that a group without a committed offset
    starts at the low watermark (``auto.offset.reset=earliest``).
    """
    topics = stats.get("topics")
    out: dict[str, int] = {}
    for name, partition in owned:
        out.setdefault(name, 0)
        if partition < 0 or not isinstance(topics, Mapping):
            continue
        topic = topics.get(name)
        partitions = topic.get("partitions") if isinstance(topic, Mapping) else None
        info = partitions.get(str(partition)) if isinstance(partitions, Mapping) else None
        if isinstance(info, Mapping):
            out[name] += _partition_lag(info, read_committed=read_committed,
                                        from_start=from_start) or 0
    return out
