"""What a single writer of a host's URL rows keeps of them in memory (the store's
``row_cache``), so that it need not read back what it wrote."""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from collections.abc import Iterable

import msgspec

from common.messages import UrlStatus
from common.ports import UrlState

_STATUSES = frozenset(str(s) for s in UrlStatus)


class RowCache:
    """What a single writer knows of its hosts' rows without reading them back.

    The url_state rows this process wrote (copies) and the count rows it read or wrote,
    per host, for at most ``limit`` rows in all (least recently used hosts go first).
    Valid only while this process is the hosts' one writer: the owner drops it when
    its hosts change (:meth:`CassandraStateStore.forget_cached
    <common.adapters.cassandra.store.CassandraStateStore.forget_cached>`), and a host's
    entries go whenever a write of it fails (it may or may not have been applied).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.rows: OrderedDict[str, dict[str, UrlState]] = OrderedDict()
        self.counts: dict[str, dict[str, Counter[str]]] = {}  # host -> status -> reason -> n
        self.size = 0

    def row(self, host: str, url: str) -> UrlState | None:
        rows = self.rows.get(host)
        return None if rows is None else rows.get(url)

    def split(self, host: str, urls: Iterable[str]) -> tuple[dict[str, UrlState], list[str]]:
        """The cached rows of ``urls`` (not copies) and the URLs not cached."""
        held = self.rows.get(host) or {}
        found: dict[str, UrlState] = {}
        missing: list[str] = []
        for url in urls:
            row = held.get(url)
            if row is None:
                missing.append(url)
            else:
                found[url] = row
        return found, missing

    def put(self, host: str, rows: Iterable[UrlState]) -> None:
        held = self.rows.get(host)
        if held is None:
            held = self.rows[host] = {}
        else:
            self.rows.move_to_end(host)
        before = len(held)
        for row in rows:
            held[row.url] = msgspec.structs.replace(row)
        self.size += len(held) - before
        while self.size > self.limit and self.rows:
            victim, dropped = next(iter(self.rows.items()))
            if victim == host and len(self.rows) == 1:  # one host alone: trim it
                for url in list(itertools.islice(dropped, len(dropped) - self.limit)):
                    del dropped[url]
                self.size = len(dropped)
                break
            self.forget(victim)

    def host_counts(self, host: str, statuses: Iterable[str]
                    ) -> tuple[Counter[tuple[str, str]], list[str]]:
        """The known counts of ``statuses`` and the statuses not known."""
        known = self.counts.get(host, {})
        counts: Counter[tuple[str, str]] = Counter()
        missing = []
        for status in statuses:
            by_reason = known.get(status)
            if by_reason is None:
                missing.append(status)
                continue
            for reason, n in by_reason.items():
                counts[(status, reason)] = n
        return counts, missing

    def set_counts(self, host: str, statuses: Iterable[str],
                   counts: Counter[tuple[str, str]]) -> None:
        if host not in self.rows:  # counts are kept for hosts whose rows are
            self.rows[host] = {}
        known = self.counts.setdefault(host, {})
        for status in statuses:
            known[status] = Counter({reason: n for (s, reason), n in counts.items()
                                     if s == status})

    def complete(self, host: str) -> bool:
        """Whether every stored row of ``host`` is held: its counts (exact while this
        process is the host's one writer) are known for every status and add up to
        the rows held. Then a URL not held has no row, and need not be read."""
        known = self.counts.get(host)
        if known is None or len(known) < len(_STATUSES):
            return False
        return sum(sum(c.values()) for c in known.values()) == len(self.rows.get(host, ()))

    def forget(self, host: str) -> None:
        dropped = self.rows.pop(host, None)
        if dropped is not None:
            self.size -= len(dropped)
        self.counts.pop(host, None)

    def clear(self) -> None:
        self.rows.clear()
        self.counts.clear()
        self.size = 0
