"""Near-duplicate precision and recall on the committed labelled set of real pages.

The set (bench/neardup/data/set.json.xz) holds Debian documentation pages and edited
copies, every pair labelled by exact word 5-shingle Jaccard (>= 0.8: near duplicate);
``python -m bench.neardup`` prints the same figures.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from bench.neardup.quality import Figures, evaluate, load
from common.minhash import jaccard, shingle_hashes


@cache
def data() -> dict[str, Any]:
    return load()


@cache
def figures() -> Figures:
    return evaluate(data())


def test_set_is_real_pages_with_labelled_pairs() -> None:
    d = data()
    pages = [doc for doc in d["docs"] if "copy_of" not in doc]
    assert len(pages) >= 450 and len(d["docs"]) >= 900
    assert {doc["source"] for doc in pages} == {
        "postgresql-doc-15", "python-django-doc", "python3.11-doc"}
    assert sum(len(doc["text"]) < 200 for doc in pages) >= 20  # short pages included
    assert figures().near_duplicates >= 300
    # labels are exact Jaccard: spot-check some of them
    texts = [doc["text"] for doc in d["docs"]]
    for i, j, value in d["pairs"][::40]:
        assert abs(jaccard(shingle_hashes(texts[i]), shingle_hashes(texts[j])) - value) < 1e-4


def test_two_stage_rule_meets_precision_and_recall() -> None:
    f = figures()
    assert f.new_precision >= 0.97, f
    assert f.new_recall >= 0.95, f
    assert f.stage1_recall >= f.new_recall


def test_old_rule_is_measured_too() -> None:
    f = figures()
    assert f.old_recall < f.new_recall
    assert 0 < f.sketch_bytes <= 512
