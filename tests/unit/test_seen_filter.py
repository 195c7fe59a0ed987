"""The seen filter: sizing by formula, measured false-positive rate, no false negatives."""

from __future__ import annotations

import math

import pytest

from frontier.seen import SeenFilter, optimal_bits, optimal_hashes


def test_formula_matches_textbook_sizing() -> None:
    m = optimal_bits(100_000, 0.01)
    assert m == pytest.approx(958_506, abs=1)
    assert optimal_hashes(m, 100_000) == 7


def test_hundred_thousand_urls_at_one_percent() -> None:
    n = 100_000
    f = SeenFilter(capacity=n, error_rate=0.01)
    urls = [f"http://host{i % 977}.example/page/{i}" for i in range(n)]
    for u in urls:
        f.add(u)
    false_negatives = sum(1 for u in urls if u not in f)
    probes = [f"http://other{i % 331}.example/x/{i}" for i in range(n)]
    fp_rate = sum(1 for u in probes if u in f) / len(probes)
    stats = f.stats()
    print(f"\nseen filter: n={n} bits/url={stats.bits_per_item:.2f} "
          f"false-positive rate={fp_rate:.4f} false negatives={false_negatives}")
    assert false_negatives == 0
    assert stats.stages == 1
    assert stats.bits_per_item == pytest.approx(-math.log(0.01) / math.log(2) ** 2, rel=0.02)
    assert 0.005 < fp_rate < 0.015


def test_grows_past_its_plan_and_keeps_the_rate_bounded() -> None:
    f = SeenFilter(capacity=1_000, error_rate=0.01)
    items = [f"u{i}" for i in range(10_000)]
    for item in items:
        f.add(item)
    assert f.stats().stages >= 4
    assert all(i in f for i in items)
    fp = sum(1 for i in range(20_000) if f"v{i}" in f) / 20_000
    assert fp < 0.02 * 1.5  # bound p / (1 - r) = 2%, with sampling slack


def test_add_reports_whether_seen() -> None:
    f = SeenFilter(capacity=10)
    assert f.add("a") is False
    assert f.add("a") is True
    assert len(f) == 1


@pytest.mark.parametrize(("cap", "rate"), [(0, 0.01), (10, 0.0), (10, 1.0)])
def test_rejects_bad_parameters(cap: int, rate: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        SeenFilter(capacity=cap, error_rate=rate)
