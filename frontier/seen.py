"""The seen filter: a scalable Bloom filter in front of the exact url_state.

A Bloom filter of m bits and k hash functions holding n items has a false-positive rate
near p when m = -n ln p / (ln 2)^2 and k = (m / n) ln 2 (about 9.6 bits per item at
p = 1%). The bits come from rbloom (a Rust implementation); this module adds the
scalable part (Almeida et al., "Scalable Bloom Filters", 2007): when a stage holds its
planned number of items, a new stage ``growth`` times as large is started with a
tighter rate. A look-up can be a false positive in any stage, so the stages' rates add
up; stage i is planned at p (1 - r) r^i (r the tightening ratio), and the sum over any
number of stages stays below p: p (1 - r) (1 + r + r^2 + ...) = p. (Planning the first
stage at p itself, as a plain filter would, lets the sum approach p / (1 - r): 2% for
a 1% target at r = 1/2.) Below its planned capacity the filter spends 1 / (1 - r) of
the bits of one stage of rate p and is well under its target (about p (1 - r)).

A "probably seen" answer skips the URL (a false positive loses that one URL, which is
usually found again from other pages); a "new" answer is always checked against the
exact url_state, so the filter never causes a URL to be fetched twice. The filter is a
cache: after a restart it starts empty and the exact state answers until it fills.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rbloom import Bloom


def optimal_bits(n: int, p: float) -> int:
    """m = -n ln p / (ln 2)^2."""
    return math.ceil(-n * math.log(p) / (math.log(2) ** 2))


def optimal_hashes(m: int, n: int) -> int:
    """k = (m / n) ln 2, at least 1."""
    return max(1, round(m / n * math.log(2)))


@dataclass(frozen=True, slots=True)
class FilterStats:
    stages: int
    items: int
    bits: int

    @property
    def bits_per_item(self) -> float:
        return self.bits / self.items if self.items else 0.0


class SeenFilter:
    """A scalable Bloom filter of strings whose false-positive rate stays under
    ``error_rate`` however many items it holds (see the module docstring)."""

    def __init__(self, capacity: int = 1_000_000, error_rate: float = 0.01, *,
                 growth: int = 2, tightening: float = 0.5) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if not 0 < error_rate < 1:
            raise ValueError("error_rate must be between 0 and 1")
        if growth < 1:
            raise ValueError("growth must be at least 1")
        if not 0 < tightening < 1:
            raise ValueError("tightening must be between 0 and 1")
        self.capacity = capacity
        self.error_rate = error_rate
        self.growth = growth
        self.tightening = tightening
        self._stages: list[Bloom] = []
        self._stage_capacity: list[int] = []
        self._stage_items = 0
        self._items = 0
        self._add_stage()

    def _add_stage(self) -> None:
        i = len(self._stages)
        cap = self.capacity * self.growth ** i
        rate = self.stage_rate(i)
        self._stages.append(Bloom(cap, rate))
        self._stage_capacity.append(cap)
        self._stage_items = 0

    def stage_rate(self, i: int) -> float:
        """The planned false-positive rate of stage ``i``: p (1 - r) r^i."""
        return self.error_rate * (1 - self.tightening) * self.tightening ** i

    def __contains__(self, item: str) -> bool:
        return any(item in stage for stage in self._stages)

    def add(self, item: str) -> bool:
        """Add ``item``; return True if it was (probably) already there."""
        if item in self:
            return True
        if self._stage_items >= self._stage_capacity[-1]:
            self._add_stage()
        self._stages[-1].add(item)
        self._stage_items += 1
        self._items += 1
        return False

    def __len__(self) -> int:
        return self._items

    def stats(self) -> FilterStats:
        return FilterStats(stages=len(self._stages), items=self._items,
                           bits=sum(s.size_in_bits for s in self._stages))
