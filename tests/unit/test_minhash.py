"""MinHash sketches and the second-stage verdict (common.minhash)."""

from __future__ import annotations

import random

import numpy as np

from common import minhash
from common.messages import MAX_SKETCH_BYTES
from common.simhash import block_keys, hamming, simhash64

WORDS = [f"w{i}" for i in range(3000)]


def prose(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def test_shingles_are_a_set_of_lowercased_word_five_grams() -> None:
    assert len(minhash.shingle_hashes("a b c d e f")) == 2
    assert len(minhash.shingle_hashes("a b c d e a b c d e a b c d e")) == 5  # once each
    assert np.array_equal(minhash.shingle_hashes("A, b. C d e!"),
                          minhash.shingle_hashes("a b c d e"))
    assert len(minhash.shingle_hashes("two words")) == 1  # a short text is one shingle
    assert len(minhash.shingle_hashes("  ... ")) == 0
    assert minhash.sketch("") == b""


def test_sketch_is_stable() -> None:
    """Sketches are stored: the same text must give the same bytes in every version."""
    text = "The quick brown fox jumps over the lazy dog near the river bank"
    sketch = minhash.sketch(text)
    assert len(sketch) == 4 * 9  # 9 shingles, all kept
    assert sketch.hex()[:24] == STABLE_PREFIX
    assert list(minhash.values(sketch)) == sorted(minhash.values(sketch))


STABLE_PREFIX = "021f3a115efac5316b05338a"


def test_sketch_size_is_bounded() -> None:
    assert len(minhash.sketch(prose(1, 5000))) == minhash.SKETCH_BYTES
    assert minhash.SKETCH_BYTES == MAX_SKETCH_BYTES  # what a ParsedPage may carry


def test_short_texts_are_compared_exactly() -> None:
    a = prose(2, 60)
    words = a.split()
    b = " ".join([*words[:30], "changed", *words[31:]])  # one word: 5 shingles of 56
    exact = minhash.jaccard(minhash.shingle_hashes(a), minhash.shingle_hashes(b))
    assert exact == 51 / 61
    assert minhash.similarity(minhash.sketch(a), minhash.sketch(b)) == exact


def test_estimate_of_long_texts_is_close() -> None:
    rng = random.Random(3)
    for seed in range(20):
        a = prose(100 + seed, 3000).split()
        rate = rng.uniform(0.0, 0.1)
        b = [rng.choice(WORDS) if rng.random() < rate else w for w in a]
        ha, hb = minhash.shingle_hashes(" ".join(a)), minhash.shingle_hashes(" ".join(b))
        exact = minhash.jaccard(ha, hb)
        estimate = minhash.similarity(minhash.sketch_of(ha), minhash.sketch_of(hb))
        assert abs(estimate - exact) < 0.15, (seed, exact, estimate)


def test_similarity_of_empty_or_unrelated_sketches() -> None:
    a = minhash.sketch(prose(4, 500))
    assert minhash.similarity(a, b"") == minhash.similarity(b"", b"") == 0.0
    assert minhash.similarity(a, a) == 1.0
    assert minhash.similarity(a, minhash.sketch(prose(5, 500))) < 0.05


def test_index_keys_are_apart_from_simhash_block_keys() -> None:
    sketch = minhash.sketch(prose(6, 800))
    keys = minhash.index_keys(sketch)
    assert len(keys) == minhash.KEY_VALUES
    assert all(k >> 46 == 1 and k < 2**63 for k in keys)
    assert all(k < 2**45 for k in block_keys(2**64 - 1, 31))
    assert minhash.index_keys(b"") == []


def test_repeated_phrase_does_not_make_unrelated_pages_near_duplicates() -> None:
    """A table full of the same cell steers a SimHash (it counts every occurrence);
    the sketch counts each shingle once."""
    cell = "status ok value not available see the notes below "
    a = prose(7, 120) + " " + cell * 200
    b = prose(8, 120) + " " + cell * 200
    assert hamming(simhash64(a), simhash64(b)) <= 3  # SimHash alone: a near duplicate
    sa, sb = minhash.sketch(a), minhash.sketch(b)
    assert minhash.similarity(sa, sb) < 0.2
    assert minhash.closest(simhash64(a), sa, [("http://b/", simhash64(b), sb)], k=3,
                           threshold=0.8) is None


def test_closest_uses_the_sketch_and_falls_back_to_simhash() -> None:
    a = prose(9, 400)
    words = a.split()
    near = " ".join(w if i % 60 else "edit" for i, w in enumerate(words))  # J ~ 0.85
    far = prose(10, 400)
    sa, sn, sf = (minhash.sketch(t) for t in (a, near, far))
    ha = simhash64(a)
    cands = [("http://far/", simhash64(far), sf), ("http://near/", simhash64(near), sn)]
    assert minhash.closest(ha, sa, cands, k=3, threshold=0.8) == (
        "http://near/", simhash64(near))
    assert minhash.closest(ha, sa, cands, k=3, threshold=0.8, exclude="http://near/") is None
    # a candidate indexed without a sketch: the SimHash rule (within k bits)
    assert minhash.closest(ha, sa, [("http://old/", ha ^ 0b111, None)], k=3,
                           threshold=0.8) == ("http://old/", ha ^ 0b111)
    assert minhash.closest(ha, sa, [("http://old/", ha ^ 0b1111, None)], k=3,
                           threshold=0.8) is None
    # ties go to the smallest URL whatever the order
    same = [("http://b/", ha, sa), ("http://a/", ha, sa)]
    assert minhash.closest(ha, sa, same, k=3, threshold=0.8) == ("http://a/", ha)
    assert minhash.closest(ha, sa, same[::-1], k=3, threshold=0.8) == ("http://a/", ha)


def test_sketch_keeps_the_smallest_distinct_top_bits() -> None:
    # two shingle hashes with the same top 32 bits give one value; the rest are the
    # smallest distinct ones, in order (written out with numpy's set functions)
    for seed in range(30):
        hashes = minhash.shingle_hashes(prose(seed, 40 + seed * 20))
        top = np.unique((hashes >> np.uint64(32)).astype(np.uint32))
        assert minhash.sketch_of(hashes) == top[:minhash.SKETCH_SIZE].astype(">u4").tobytes()
    base = np.array([5 << 32 | 1, 5 << 32 | 9, 7 << 32], dtype=np.uint64)
    assert list(minhash.values(minhash.sketch_of(base))) == [5, 7]


def test_parser_fingerprints_are_the_text_s_simhash_and_sketch() -> None:
    from parser.jobs import fingerprints

    for text in (prose(3, 300), "two words", "Ünïcode 東京 text here and there", "x"):
        assert fingerprints(text) == (simhash64(text), minhash.sketch(text))
    assert fingerprints("  \n ") == (None, None)
    assert fingerprints("... !!") == (0, None)  # no words: no sketch
