"""64-bit SimHash fingerprints of page text (Charikar; as used by Manku et al., WWW 2007).

Features are lower-cased word shingles: :data:`SHINGLE` consecutive tokens joined by a
space. A token is a run of letters and digits (``\\w``), or a single CJK ideograph,
kana or hangul syllable, since those scripts do not separate words with spaces. Every
shingle counts once per occurrence. The fingerprint is the one the ``simhash`` package
computes with its default feature hash: each feature's hash is the last 8 bytes of its
MD5 (big-endian), and bit i of the fingerprint is set when more than half of the
features have bit i set. It is computed here in one vectorised pass (numpy), which
gives the same value several times faster. It is stable across processes, machines
and Python versions: fingerprints are stored, and changing the features or the hash
would make old and new ones incomparable.

Similar texts get fingerprints that differ in few bits, unrelated ones in about 32 of
64. SimHash is statistical: for a ~5 KB text whose date and ad lines changed, the median
distance is 3 bits and 60% of such pairs are within 3 bits (~80% at ~10 KB; a one-word
change: ~90% at 5 KB).

Near-duplicate look-up: block keys (Manku, Jain, Das Sarma 2007)
-----------------------------------------------------------------
Split the 64 bits into ``n = max(k + 1, 2)`` blocks. If two fingerprints differ in at
most ``k`` bits, those bits fall into at most ``k`` blocks, so at least one block is
identical in both (pigeonhole). So a page is indexed under one key per block, and a
look-up fetches the pages that share any key, then checks the real distance.

A key encodes (k, block index, block value) in 48 bits, so it fits a signed 64-bit
integer (an SQLite INTEGER or a Cassandra bigint) and keys made under different
thresholds never collide::

    key = k << 40 | block_index << 32 | block_value        (block_value < 2**32)

Cost: with N indexed pages, a look-up returns about ``N * n / 2**(64 / n)`` unrelated
candidates (k=3, 16-bit blocks: about 6 per 100,000 pages, 600 per 10 million).
Beyond tens of millions of pages, keys should span more bits (Manku's permuted tables:
more, smaller blocks and one key per combination of the blocks that must stay intact).

The dedup stage uses these keys as the first of two stages: candidates within k bits
(and those sharing a MinHash sketch key) are judged by their sketches
(common.minhash); :func:`near_duplicate` is the SimHash-only rule, which still judges
pages indexed without a sketch.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any

__all__ = [
    "BITS", "MAX_K", "SHINGLE", "block_keys", "block_spans", "encoded_tokens", "features",
    "hamming", "near_duplicate", "simhash64", "simhash_of", "to_signed", "to_unsigned",
    "tokens",
]

BITS = 64
SHINGLE = 3
#: Largest supported threshold k (32 blocks of 2 bits).
MAX_K = 31
_MASK = (1 << BITS) - 1


def _md5_constructor() -> Callable[[bytes], Any]:
    """CPython's built-in MD5 when there is one: for inputs as short as a shingle it
    costs a third of OpenSSL's (hashlib's) per call, and gives the same digest."""
    try:
        md5: Callable[[bytes], Any] = importlib.import_module("_md5").md5
    except (ImportError, AttributeError):
        return hashlib.md5
    return md5


_MD5 = _md5_constructor()

# CJK ideographs (with extension A and compatibility), hiragana, katakana, hangul.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")


def tokens(text: str) -> list[str]:
    """The lower-cased words of ``text`` (CJK characters one by one)."""
    return _TOKEN.findall(text.lower())


def features(text: str, shingle: int = SHINGLE) -> list[str]:
    """The shingles of ``text``; a text shorter than one shingle is one feature."""
    tokens = _TOKEN.findall(text.lower())
    if len(tokens) <= shingle:
        return [" ".join(tokens)] if tokens else []
    if shingle == 3:
        return [f"{a} {b} {c}"
                for a, b, c in zip(tokens, tokens[1:], tokens[2:], strict=False)]
    return [" ".join(tokens[i:i + shingle]) for i in range(len(tokens) - shingle + 1)]


def encoded_tokens(text: str) -> list[bytes]:
    """:func:`tokens` of ``text``, each UTF-8 encoded: the input of :func:`simhash_of`
    and :func:`common.minhash.shingle_hashes_of`, so a page is tokenised once for both."""
    return list(map(str.encode, _TOKEN.findall(text.lower())))  # UTF-8, strict


def simhash64(text: str) -> int:
    """Unsigned 64-bit SimHash of ``text``; 0 for a text without words."""
    return simhash_of(encoded_tokens(text))


def simhash_of(words: Sequence[bytes]) -> int:
    """:func:`simhash64` of a text from its :func:`encoded_tokens` (a shingle's bytes
    are its words joined by a space, as in :func:`features`)."""
    if not words:
        return 0
    md5 = _MD5
    if len(words) <= SHINGLE:
        digests, count = md5(b" ".join(words)).digest(), 1
    else:
        spaced = [word + b" " for word in words]  # a shingle is a + " " + b + " " + c
        digests = b"".join([md5(a + b + c).digest()
                            for a, b, c in zip(spaced, spaced[1:], words[2:], strict=False)])
        count = len(words) - SHINGLE + 1
    import numpy as np  # here: the dedup side's block keys need no numpy at start-up

    # one row of 64 bits per feature (the digest's last 8 bytes), most significant first
    rows = np.frombuffer(digests, dtype=np.uint8).reshape(-1, 16)[:, 8:]
    bits = np.unpackbits(rows, axis=1)
    majority = bits.sum(axis=0, dtype=np.int64) * 2 > count
    return int.from_bytes(np.packbits(majority).tobytes(), "big")


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints (signed or unsigned)."""
    return ((a ^ b) & _MASK).bit_count()


def to_signed(value: int) -> int:
    """An unsigned 64-bit fingerprint as a signed 64-bit integer (a bigint column)."""
    value &= _MASK
    return value - (1 << BITS) if value >> (BITS - 1) else value


def to_unsigned(value: int) -> int:
    """The inverse of :func:`to_signed`."""
    return value & _MASK



@cache
def block_spans(k: int) -> tuple[tuple[int, int], ...]:
    """(shift, width) of each block, most significant first; widths differ by <= 1."""
    if not 0 <= k <= MAX_K:
        raise ValueError(f"simhash threshold must be between 0 and {MAX_K}, got {k}")
    blocks = max(k + 1, 2)
    base, extra = divmod(BITS, blocks)
    spans = []
    top = BITS
    for index in range(blocks):
        width = base + (1 if index < extra else 0)
        top -= width
        spans.append((top, width))
    return tuple(spans)


def block_keys(simhash: int, k: int = 3) -> list[int]:
    """One index key per block of ``simhash`` (unsigned or signed 64-bit)."""
    value = simhash & _MASK
    return [k << 40 | index << 32 | (value >> shift) & ((1 << width) - 1)
            for index, (shift, width) in enumerate(block_spans(k))]


def near_duplicate(simhash: int, candidates: Iterable[tuple[str, int]], k: int = 3, *,
                   exclude: str | None = None) -> tuple[str, int] | None:
    """The candidate (url, simhash) closest to ``simhash`` within ``k`` bits, or None.

    Ties go to the smallest URL, so the answer does not depend on the order in which a
    store returns candidates. ``exclude`` skips one URL (the page itself, when an older
    fetch of it is indexed).
    """
    best: tuple[int, str, int] | None = None
    for url, other in candidates:
        if url == exclude:
            continue
        distance = hamming(simhash, other)
        if distance <= k and (best is None or (distance, url) < best[:2]):
            best = (distance, url, other)
    return None if best is None else (best[1], best[2])
