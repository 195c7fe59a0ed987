"""OffsetTracker: commit only up to the first message not yet fully handled."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.adapters.offset_tracker import OffsetTracker


def tracker_with(offsets: list[int]) -> OffsetTracker:
    tracker = OffsetTracker()
    for offset in offsets:
        tracker.add(offset)
    return tracker


def test_nothing_handed_out_means_nothing_to_commit() -> None:
    tracker = OffsetTracker()
    assert tracker.committable() is None
    assert tracker.due() is None
    assert tracker.outstanding == 0


def test_commit_stops_at_the_first_gap() -> None:
    tracker = tracker_with(list(range(34, 41)))
    for offset in (34, 35, 36, 40):
        tracker.ack(offset)
    assert tracker.committable() == 37
    assert tracker.outstanding == 4  # 37, 38, 39 pending and 40 behind them


def test_nothing_acknowledged_commits_the_first_offset() -> None:
    tracker = tracker_with([12, 13])
    assert tracker.committable() == 12


def test_filling_the_gap_moves_past_everything_acknowledged() -> None:
    tracker = tracker_with(list(range(34, 41)))
    for offset in (34, 35, 36, 40, 38, 37):
        tracker.ack(offset)
    assert tracker.committable() == 39
    tracker.ack(39)
    assert tracker.committable() == 41
    assert tracker.outstanding == 0


def test_offsets_need_not_be_contiguous() -> None:
    tracker = tracker_with([5, 8, 9, 20])
    tracker.ack(9)
    assert tracker.committable() == 5
    tracker.ack(5)
    assert tracker.committable() == 8
    tracker.ack(8)
    assert tracker.committable() == 20
    tracker.ack(20)
    assert tracker.committable() == 21


def test_due_is_only_progress_since_the_last_commit() -> None:
    tracker = tracker_with([0, 1, 2])
    tracker.ack(0)
    assert tracker.due() == 1
    tracker.mark_committed(1)
    assert tracker.due() is None
    assert tracker.committable() == 1
    tracker.ack(2)
    assert tracker.due() is None  # still stuck behind 1
    tracker.ack(1)
    assert tracker.due() == 3


def test_offsets_must_increase() -> None:
    tracker = tracker_with([7])
    with pytest.raises(ValueError, match="not after"):
        tracker.add(7)
    with pytest.raises(ValueError, match="not after"):
        tracker.add(3)
    tracker.ack(7)
    with pytest.raises(ValueError, match="not after"):
        tracker.add(7)  # even once everything before is committed
    with pytest.raises(ValueError, match="negative"):
        OffsetTracker().add(-1)


def test_only_outstanding_offsets_can_be_acknowledged() -> None:
    tracker = tracker_with([1, 2, 3])
    with pytest.raises(ValueError, match="not outstanding"):
        tracker.ack(4)
    with pytest.raises(ValueError, match="not outstanding"):
        tracker.ack(0)
    tracker.ack(2)
    with pytest.raises(ValueError, match="not outstanding"):
        tracker.ack(2)
    tracker.ack(1)
    with pytest.raises(ValueError, match="not outstanding"):
        tracker.ack(1)
    assert tracker.committable() == 3


@given(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=60),
       st.randoms(use_true_random=False), st.integers(min_value=0, max_value=1000))
def test_commit_point_matches_its_definition(steps: list[int], rnd: random.Random,
                                             start: int) -> None:
    """After any order of acknowledgements, the commit point is the smallest offset
    handed out and not acknowledged, or one past the last offset when all are done."""
    offsets = []
    offset = start
    for step in steps:
        offsets.append(offset)
        offset += step
    tracker = tracker_with(offsets)
    order = offsets[:]
    rnd.shuffle(order)
    acked: set[int] = set()
    for done in order:
        tracker.ack(done)
        acked.add(done)
        pending = [o for o in offsets if o not in acked]
        expected = min(pending) if pending else offsets[-1] + 1
        assert tracker.committable() == expected
    assert tracker.outstanding == 0
