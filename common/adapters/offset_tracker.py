"""Which offset of one partition may be committed when messages finish out of order.

A consumer that handles several messages of a partition at once acknowledges them in
any order, but Kafka keeps one committed offset per partition: "everything before this
is done". :class:`OffsetTracker` commits only up to the first message that was handed
out and is not yet acknowledged: with 34..40 handed out and 34, 35, 36 and 40
acknowledged, the committable offset is 37 (37, 38 and 39 are redelivered after a
crash, 40 too; handlers are idempotent).

Offsets need not be contiguous (compacted topics, transaction markers leave gaps): only
offsets that were :meth:`~OffsetTracker.add`-ed count.
"""

from __future__ import annotations

from collections import deque

__all__ = ["OffsetTracker"]


class OffsetTracker:
    """Offsets of one partition handed out and acknowledged; says how far to commit.

    Not thread-safe: callers that share one across threads hold a lock.
    """

    __slots__ = ("_acked", "_last", "_next", "_order", "committed")

    def __init__(self) -> None:
        self._order: deque[int] = deque()  # handed out and not behind the commit point
        self._acked: set[int] = set()  # acknowledged, still in _order (after a gap)
        self._last: int | None = None  # the last offset added
        self._next: int | None = None  # one past the last offset before the first gap
        self.committed: int | None = None  # what was last committed (see mark_committed)

    def add(self, offset: int) -> None:
        """Record that ``offset`` was handed out; offsets must increase."""
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset}")
        if self._last is not None and offset <= self._last:
            raise ValueError(f"offset {offset} is not after the last one added ({self._last})")
        self._order.append(offset)
        self._last = offset

    def ack(self, offset: int) -> None:
        """Record that the message at ``offset`` is fully handled."""
        if not self._order or offset in self._acked:
            raise ValueError(f"offset {offset} is not outstanding")
        if offset == self._order[0]:
            self._order.popleft()
            self._next = offset + 1
            while self._order and self._order[0] in self._acked:
                done = self._order.popleft()
                self._acked.discard(done)
                self._next = done + 1
            return
        # Outstanding offsets are bounded by the consumer's prefetch; a linear scan is fine.
        if offset not in self._order:
            raise ValueError(f"offset {offset} is not outstanding")
        self._acked.add(offset)

    def committable(self) -> int | None:
        """The offset to commit (the next one to read), or None if nothing was added.

        This is the first offset handed out and not acknowledged, or, when all are
        acknowledged, one past the last.
        """
        return self._order[0] if self._order else self._next

    def due(self) -> int | None:
        """:meth:`committable` if it differs from what was last committed, else None."""
        offset = self.committable()
        return None if offset is None or offset == self.committed else offset

    def mark_committed(self, offset: int) -> None:
        self.committed = offset

    @property
    def outstanding(self) -> int:
        """Offsets handed out and not yet behind the commit point (acknowledged or not)."""
        return len(self._order)
