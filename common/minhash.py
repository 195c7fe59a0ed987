"""MinHash (bottom-k) sketches of page text: the second stage of near-duplicate detection.

SimHash with its block index (common.simhash) finds *candidates* cheaply; the verdict
on a candidate is taken here, from an estimate of the Jaccard similarity of the two
pages' sets of word shingles, which is what "near duplicate" means (Broder 1997).

Features are lower-cased word 5-shingles (tokens as in common.simhash: runs of
letters and digits, CJK characters one by one). Each distinct shingle counts once
(a set, not a multiset), so a phrase repeated many times weighs no more than any
other. A text of fewer than five words is one feature (its whole word sequence), so
two short texts match only when their words are the same.

Sketch: bottom-k (Broder 1997; Cohen and Kaplan 2007). A shingle is hashed from the
MD5 of its words (combined polynomially, then mixed with SplitMix64's finaliser); the
sketch keeps the :data:`SKETCH_SIZE` smallest distinct values of the top
:data:`VALUE_BITS` bits of those hashes, big-endian, :data:`SKETCH_BYTES` bytes at
most. Among the k smallest values of two sketches together, the share found in both
estimates the Jaccard similarity with a standard error of about
``sqrt(J (1 - J) / k)`` (0.035 at J = 0.8); a text of at most k shingles (about 130
words) keeps all of them, so for short pages the figure is exact. Only one hash per
shingle is computed, so a sketch costs little more than reading the words.

Sketches are stored next to the fingerprint, so all of this is fixed: changing the
shingle, the hashes or the sizes makes stored sketches incomparable with new ones.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from common.simhash import _MD5, encoded_tokens, hamming

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["CANDIDATE_BITS", "KEY_SPACE", "KEY_VALUES", "SHINGLE", "SKETCH_BYTES",
           "SKETCH_SIZE", "VALUE_BITS", "closest", "index_keys", "jaccard", "plausible",
           "shingle_hashes", "similarity", "sketch", "sketch_of", "values"]

SHINGLE = 5
SKETCH_SIZE = 128  # values kept: the k of bottom-k
VALUE_BITS = 32  # the top bits of each shingle hash kept
SKETCH_BYTES = SKETCH_SIZE * VALUE_BITS // 8
KEY_VALUES = 4  # smallest values also used as look-up keys (see index_keys)
KEY_SPACE = 1 << 46
#: Candidates further apart than this in SimHash bits are not compared: unrelated
#: pages are about 32 bits apart, near duplicates of the labelled set at most 14.
CANDIDATE_BITS = 20
_POLY = 0x100000001B3  # the FNV-64 prime: an odd multiplier per word position
_DIGEST = type(_MD5(b"")).digest  # the digest method of an MD5 object


@cache
def _np() -> Any:
    """numpy, imported where sketches are made (the page workers): comparing them, the
    dedup side's whole use of this module, needs none."""
    import numpy

    return numpy


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser, element-wise (uint64 arithmetic wraps)."""
    u64 = _np().uint64
    x = (x ^ (x >> u64(30))) * u64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> u64(27))) * u64(0x94D049BB133111EB)
    result: npt.NDArray[np.uint64] = x ^ (x >> u64(31))
    return result


def shingle_hashes(text: str) -> npt.NDArray[np.uint64]:
    """The distinct 64-bit hashes of the word 5-shingles of ``text``, sorted; one hash
    for a text of one to four words, none for a text without words."""
    return shingle_hashes_of(encoded_tokens(text))


def shingle_hashes_of(words: Sequence[bytes]) -> npt.NDArray[np.uint64]:
    """:func:`shingle_hashes` of a text from its :func:`common.simhash.encoded_tokens`."""
    np_ = _np()
    if not words:
        empty: npt.NDArray[np.uint64] = np_.empty(0, dtype=np_.uint64)
        return empty
    # each distinct word's hash: the first 8 bytes of its MD5, little-endian (1 for 0)
    distinct = dict.fromkeys(words)
    digests = b"".join(map(_DIGEST, map(_MD5, distinct)))
    hashed = np_.frombuffer(digests, dtype="<u8")[::2].astype(np_.uint64)
    hashed[hashed == 0] = 1
    known = dict(zip(distinct, hashed.tolist(), strict=True))
    word = np_.fromiter(map(known.__getitem__, words), dtype=np_.uint64, count=len(words))
    count = max(len(word) - SHINGLE + 1, 1)
    poly = np_.uint64(_POLY)
    with np_.errstate(over="ignore"):
        h = word[:count].copy()
        for j in range(1, min(SHINGLE, len(word))):
            h = h * poly + word[j:j + count]
        hashes: npt.NDArray[np.uint64] = _distinct(np_.sort(_mix(h)))
    return hashes


def _distinct(ordered: Any) -> Any:
    """The distinct values of a sorted array, in order: the same as ``np.unique`` of
    it, which costs several times more (it sorts again)."""
    if len(ordered) < 2:
        return ordered
    return ordered[_np().concatenate(([True], ordered[1:] != ordered[:-1]))]


def sketch(text: str) -> bytes:
    """The text's bottom-k sketch (at most :data:`SKETCH_BYTES` bytes); empty for a
    text without words."""
    return sketch_of(shingle_hashes(text))


def sketch_of(hashes: npt.NDArray[np.uint64]) -> bytes:
    """The bottom-k sketch of a set of shingle hashes (sorted and distinct, as
    :func:`shingle_hashes` gives them: their top bits are then sorted too, so equal
    values are neighbours)."""
    np_ = _np()
    top = (hashes >> np_.uint64(64 - VALUE_BITS)).astype(np_.uint32)
    return bytes(_distinct(top)[:SKETCH_SIZE].astype(">u4").tobytes())


def values(sketch_bytes: bytes) -> tuple[int, ...]:
    """The sorted 32-bit values of a sketch."""
    n = len(sketch_bytes) // 4
    return struct.unpack(f">{n}I", sketch_bytes[:n * 4])


def similarity(a: bytes, b: bytes) -> float:
    """Estimated Jaccard similarity of the texts two sketches were made from: among
    the ``k`` smallest values of both sketches together, the share found in both
    (exact when both texts have at most :data:`SKETCH_SIZE` shingles). 0.0 when
    either sketch is empty."""
    x, y = values(a), values(b)
    if not x or not y:
        return 0.0
    union = sorted(set(x).union(y))
    if len(x) >= SKETCH_SIZE or len(y) >= SKETCH_SIZE:  # else both hold their whole set
        union = union[:SKETCH_SIZE]
    both = set(x).intersection(y)
    return sum(1 for v in union if v in both) / len(union)


def index_keys(sketch_bytes: bytes) -> list[int]:
    """Look-up keys from a sketch: its :data:`KEY_VALUES` smallest values, each in a
    key space apart from SimHash block keys (bit 46 set; those use bits 0-44).

    Two texts whose shingle sets have Jaccard similarity J share one of these keys
    with probability at least ``1 - (1 - J) ** KEY_VALUES``: a shingle of both texts
    among the smallest of their union is among the smallest of each.
    """
    return [KEY_SPACE | int(v) for v in values(sketch_bytes)[:KEY_VALUES]]


def jaccard(a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64]) -> float:
    """Exact Jaccard similarity of two sets of shingle hashes (sorted, distinct)."""
    if not len(a) and not len(b):
        return 1.0
    inter = len(_np().intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def plausible(simhash: int, candidates: Iterable[tuple[str, int]], k: int
              ) -> list[tuple[str, int]]:
    """The candidates (url, simhash) worth a sketch comparison: within
    ``max(k, CANDIDATE_BITS)`` bits. A look-up key shared by chance (a common phrase
    among a page's smallest shingle hashes) brings unrelated pages; this drops them
    before their sketches are read."""
    limit = max(k, CANDIDATE_BITS)
    return [(url, other) for url, other in candidates if hamming(simhash, other) <= limit]


def closest(simhash: int, sketch_bytes: bytes,
            candidates: Iterable[tuple[str, int, bytes | None]], *, k: int,
            threshold: float, exclude: str | None = None) -> tuple[str, int] | None:
    """The candidate (url, simhash) most similar to a page, or None: the second stage.

    A candidate with a sketch (and within ``max(k, CANDIDATE_BITS)`` SimHash bits, see
    :func:`plausible`) is a near duplicate when :func:`similarity` of the two sketches
    is at least ``threshold``; one without (indexed before sketches were
    stored), or a page without one, when the SimHashes differ in at most ``k`` bits,
    the first stage's rule. The most similar wins (estimated Jaccard, then the fewest
    differing bits), ties to the smallest URL, so the answer does not depend on the
    order in which a store returns candidates. ``exclude`` skips one URL.
    """
    best: tuple[float, int, str, int] | None = None
    limit = max(k, CANDIDATE_BITS)
    for url, other, other_sketch in candidates:
        if url == exclude:
            continue
        distance = hamming(simhash, other)
        if distance > limit:
            continue
        if sketch_bytes and other_sketch:
            score = similarity(sketch_bytes, other_sketch)
            if score < threshold:
                continue
        elif distance <= k:
            score = 1.0
        else:
            continue
        key = (-score, distance, url, other)
        if best is None or key < best:
            best = key
    return None if best is None else (best[2], best[3])
