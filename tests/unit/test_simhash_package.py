"""common.simhash gives the fingerprints the simhash package gives for the same features.

Fingerprints stored until now were made by the simhash package (1e0n) from
:func:`common.simhash.features`; common.simhash now computes them itself (vectorised),
and must give the very same values, or stored fingerprints would stop matching.
"""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st
from simhash import Simhash

from common.simhash import features, simhash64
from tests.unit.test_simhash import WORDS, article


def package_simhash(text: str) -> int:
    """The fingerprint as the simhash package computes it (the definition until now)."""
    feats = features(text)
    return int(Simhash(feats, f=64).value) if feats else 0


def varied_texts() -> list[str]:
    rng = random.Random(7)
    texts = ["", "word", "two words", "three little words", "a a a a a a a a",
             "東京都 hello 世界", "Ünïcödé wörds ärë wörds", "x " * 2, "x y " * 50,
             "Mixed 123 numbers 4.5 and-dashes_under scores", "\n\t  spaced \n out  "]
    for seed in range(60):
        texts.append(article(seed, rng.randint(1, 150)))
    for size in (1, 2, 3, 4, 5, 6, 7, 8, 16, 64):  # few features: many ties in the votes
        texts.append(" ".join(rng.choice(WORDS) for _ in range(size + 2)))
    texts.append(" ".join(rng.choice(WORDS) for _ in range(5000)))
    texts.append("".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(300)))
    return texts


def test_same_fingerprints_as_the_simhash_package() -> None:
    texts = varied_texts()
    ours = [simhash64(t) for t in texts]
    assert ours == [package_simhash(t) for t in texts]
    assert len(set(ours)) > len(texts) * 0.9  # the corpus is varied


@given(st.text(max_size=300))
def test_same_fingerprints_as_the_simhash_package_for_any_text(text: str) -> None:
    assert simhash64(text) == package_simhash(text)
