"""The seen-filter table: bits per URL and false-positive rate, measured beside the formula.

For each size n, n distinct URL strings go into a :class:`frontier.seen.SeenFilter`;
then ``probes`` URLs that were never added are looked up, and the share answered
"probably seen" is the measured false-positive rate. Two filters per size:

- *as the frontier builds it*: planned for 1,000,000 URLs at 1% (``Frontier``'s
  ``seen_capacity`` and ``error_rate``), growing by stages when the plan is passed;
- *planned for n*: one stage sized for exactly n URLs at 1%.

The formula: a Bloom filter planned for n items at rate p has m = -n ln p / (ln 2)^2
bits (9.59 bits per item at p = 1%) and k = (m / n) ln 2 hash functions; holding n'
items its rate is (1 - e^(-k n' / m))^k. For the staged filter the rates of the stages
combine as 1 - prod(1 - p_i).
"""

from __future__ import annotations

import math
import time
from typing import Any

from frontier.seen import SeenFilter, optimal_bits, optimal_hashes

FRONTIER_CAPACITY = 1_000_000
TARGET = 0.01


def _url(i: int) -> str:
    return f"http://site{i % 1000}.test/p/{i}/story-{i * 7919 % 100_003}.html"


def _probe(i: int) -> str:
    return f"http://other{i % 997}.test/q/{i}/item-{i * 104_729 % 99_991}"


def predicted_rate(capacity: int, rate: float, items: int, growth: int = 2,
                   tightening: float = 0.5) -> tuple[float, int]:
    """(false-positive rate, bits) the formula gives for a SeenFilter holding ``items``."""
    left = items
    keep = 1.0
    bits = 0
    i = 0
    while True:
        cap = capacity * growth ** i
        p = rate * (1 - tightening) * tightening ** i  # as SeenFilter.stage_rate
        m = optimal_bits(cap, p)
        k = optimal_hashes(m, cap)
        held = min(left, cap)
        bits += m
        keep *= 1 - (1 - math.exp(-k * held / m)) ** k
        left -= held
        i += 1
        if left <= 0:
            break
    return 1 - keep, bits


def measure(n: int, capacity: int, probes: int) -> dict[str, Any]:
    f = SeenFilter(capacity=capacity, error_rate=TARGET)
    started = time.perf_counter()
    lost = 0
    for i in range(n):
        if f.add(_url(i)):
            lost += 1  # a new URL the filter called "seen": a false positive on insert
    insert_seconds = time.perf_counter() - started
    hits = sum(1 for i in range(probes) if _probe(i) in f)
    stats = f.stats()
    formula_rate, formula_bits = predicted_rate(capacity, TARGET, n)
    return {
        "urls": n, "capacity": capacity, "stages": stats.stages, "bits": stats.bits,
        "bits_per_url": stats.bits / n, "bytes": stats.bits / 8,
        "measured_fp_rate": hits / probes, "probes": probes,
        "lost_on_insert": lost, "lost_on_insert_rate": lost / n,
        "formula_fp_rate": formula_rate, "formula_bits_per_url": formula_bits / n,
        "insert_ns_per_url": 1e9 * insert_seconds / n,
    }


def table(sizes: list[int], probes: int = 200_000) -> dict[str, Any]:
    rows = []
    for n in sizes:
        rows.append({"plan": "frontier (1M at 1%, staged)",
                     **measure(n, FRONTIER_CAPACITY, probes)})
        rows.append({"plan": "planned for n at 1%", **measure(n, n, probes)})
    return {"target": TARGET,
            "formula_bits_per_url": -math.log(TARGET) / math.log(2) ** 2,
            "formula_hashes": optimal_hashes(optimal_bits(1000, TARGET), 1000),
            "rows": rows}
