"""Host -> partition by consistent hashing, identical in every process.

The ring is built with uhashring over the partition numbers of a topic (md5-based, so
it does not depend on Python's per-process hash seed). Growing from N to N+1
partitions moves about 1/(N+1) of the hosts; hash-mod-N would move most of them.

With ``key`` the ring hashes what it gives for a host instead of the host itself:
:func:`common.politeness.partition_key` with ``CRAWLER_POLITENESS_KEY=domain`` puts
every host of a registered domain on one partition, so one frontier holds the domain's
politeness timer.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from uhashring import HashRing


class HostRing:
    """Maps a host key to one of ``partitions`` partitions."""

    def __init__(self, partitions: int, *, vnodes: int = 160,
                 key: Callable[[str], str] | None = None) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {partitions}")
        self.partitions = partitions
        self._key = key
        self._ring = HashRing(nodes=[str(p) for p in range(partitions)], vnodes=vnodes)
        self.partition = lru_cache(maxsize=65536)(self._partition)

    def _partition(self, host: str) -> int:
        if self.partitions == 1:
            return 0
        return int(self._ring.get_node(host if self._key is None else self._key(host)))

    def __call__(self, host: str) -> int:
        return self.partition(host)
