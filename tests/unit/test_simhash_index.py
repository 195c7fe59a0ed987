"""Block keys and near-duplicate look-up (common.simhash)."""

from __future__ import annotations

import random
import statistics
from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.simhash import MAX_K, block_keys, block_spans, hamming, near_duplicate, to_signed

U64 = st.integers(min_value=0, max_value=2**64 - 1)
K = st.integers(min_value=0, max_value=8)


@st.composite
def close_pair(draw: st.DrawFn) -> tuple[int, int, int]:
    """(k, a, b) with hamming(a, b) <= k."""
    k = draw(K)
    a = draw(U64)
    bits = draw(st.sets(st.integers(0, 63), max_size=k))
    b = a
    for bit in bits:
        b ^= 1 << bit
    return k, a, b


@given(close_pair())
def test_close_fingerprints_share_a_key(pair: tuple[int, int, int]) -> None:
    k, a, b = pair
    assert hamming(a, b) <= k
    assert set(block_keys(a, k)) & set(block_keys(b, k))


@given(U64, st.integers(min_value=0, max_value=MAX_K))
def test_keys_fit_signed_bigint_and_are_distinct(value: int, k: int) -> None:
    keys = block_keys(value, k)
    assert len(keys) == max(k + 1, 2) == len(set(keys))
    assert all(0 <= key < 2**63 for key in keys)
    assert block_keys(to_signed(value), k) == keys


@given(U64, K, K)
def test_keys_of_different_thresholds_never_collide(value: int, k1: int, k2: int) -> None:
    if k1 != k2:
        assert not set(block_keys(value, k1)) & set(block_keys(value, k2))


@pytest.mark.parametrize("k", range(MAX_K + 1))
def test_blocks_cover_all_bits(k: int) -> None:
    covered = 0
    for shift, width in block_spans(k):
        mask = ((1 << width) - 1) << shift
        assert not covered & mask
        covered |= mask
    assert covered == 2**64 - 1
    widths = [width for _shift, width in block_spans(k)]
    assert max(widths) - min(widths) <= 1


@pytest.mark.parametrize("k", [-1, MAX_K + 1])
def test_bad_threshold(k: int) -> None:
    with pytest.raises(ValueError, match="threshold"):
        block_keys(0, k)


def test_far_pairs_rarely_share_a_key() -> None:
    rng = random.Random(3)
    shared = sum(bool(set(block_keys(rng.getrandbits(64))) & set(block_keys(rng.getrandbits(64))))
                 for _ in range(20_000))
    # 4 blocks of 16 bits: about 4 / 65,536 of random pairs, 1.2 in 20,000.
    assert shared <= 10


def test_near_duplicate_picks_closest_within_k() -> None:
    base = 0xDEADBEEF_0BADF00D
    candidates = [("far", base ^ 0xFFFF), ("two", base ^ 0b101), ("one", base ^ 0b1000),
                  ("three", base ^ 0b111 << 20)]
    assert near_duplicate(base, candidates, 3) == ("one", base ^ 0b1000)
    assert near_duplicate(base, candidates, 3, exclude="one") == ("two", base ^ 0b101)
    assert near_duplicate(base, [("far", base ^ 0xFFFF)], 3) is None
    assert near_duplicate(base, [], 3) is None
    assert near_duplicate(base, [("same", base)], 0) == ("same", base)


def test_ties_go_to_the_smallest_url() -> None:
    base = 12345
    candidates = [("b", base ^ 1), ("a", base ^ 2), ("c", base ^ 4)]
    for order in (candidates, candidates[::-1]):
        assert near_duplicate(base, order, 3) == ("a", base ^ 2)


def test_signed_candidates() -> None:
    value = 2**64 - 5
    assert near_duplicate(value, [("x", to_signed(value ^ 1))], 3) == ("x", to_signed(value ^ 1))


def test_lookup_candidates_on_100k_random_fingerprints() -> None:
    rng = random.Random(11)
    index: defaultdict[int, list[tuple[str, int]]] = defaultdict(list)
    prints = [rng.getrandbits(64) for _ in range(100_000)]
    for number, value in enumerate(prints):
        for key in block_keys(value):
            index[key].append((f"u{number}", value))
    sizes = []
    for _ in range(1000):
        query = rng.getrandbits(64)
        found = {c for key in block_keys(query) for c in index.get(key, ())}
        sizes.append(len(found))
    # Expected 100,000 x 4 / 2**16 = 6.1 unrelated candidates per look-up.
    assert 3 <= statistics.mean(sizes) <= 10
    assert max(sizes) <= 30
    # A page near an indexed one is found through the index.
    target = prints[123]
    query = target ^ (1 << 5) ^ (1 << 40)
    found = {c for key in block_keys(query) for c in index.get(key, ())}
    assert near_duplicate(query, found) == ("u123", target)
