"""Near-duplicate precision and recall on the labelled set, old rule and new.

    .venv/bin/python -m bench.neardup            # figures of both rules, cost per page
    .venv/bin/python -m bench.neardup --json     # the same as JSON

The set (``bench/neardup/data/set.json.xz``, made by ``python -m bench.neardup.build``,
whose docstring says how) holds real documentation pages and edited copies of them;
a pair is a near duplicate when the exact Jaccard similarity of its word 5-shingle
sets is at least 0.8. Every pair of texts is judged by each rule:

- **old**: SimHash (common.simhash) within ``--k`` bits (3, the default setting),
  both texts at least 200 characters (``min_text_chars`` before sketches);
- **new**: a candidate when the SimHashes are within ``--k`` bits or the texts share a
  look-up key of their sketches (``common.minhash.index_keys``) and are within
  ``CANDIDATE_BITS`` (20) bits, then a near duplicate when the sketches' estimated
  Jaccard similarity is at least ``--threshold``; both texts at least
  ``min_text_chars`` (50, the default setting) characters.

Pairwise judgement is what the dedup stage does for each page against the pages
indexed before it. Also printed: CPU per page of the SimHash and of the sketch
(median, ``time.process_time``), candidates per page of each look-up, and bytes per
stored fingerprint.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import lzma
import statistics
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common import minhash
from common.settings import DedupSettings
from common.simhash import block_keys, hamming, simhash64

DATA = Path(__file__).resolve().parent / "data" / "set.json.xz"
OLD_MIN_TEXT_CHARS = 200  # the setting's default before sketches
MIN_TEXT_CHARS = DedupSettings().min_text_chars


@dataclass(frozen=True, slots=True)
class Figures:
    texts: int
    pairs: int
    near_duplicates: int
    old_precision: float
    old_recall: float
    new_precision: float
    new_recall: float
    stage1_recall: float  # share of near duplicates the new look-up finds as candidates
    simhash_ms: float  # median CPU per page
    sketch_ms: float
    sketch_bytes: float  # mean sketch size
    simhash_candidates: float  # mean candidate pairs per text, SimHash block keys
    key_candidates: float  # mean candidate pairs per text, sketch keys
    compared: float  # mean candidates per text whose sketches are compared
    index_rows: int  # rows in the block table per page (SimHash blocks + sketch keys)


def load(path: Path = DATA) -> dict[str, Any]:
    with lzma.open(path, "rt", encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def _ratio(a: int, b: int) -> float:
    return round(a / b, 4) if b else 0.0


def evaluate(data: dict[str, Any], *, k: int = 3, threshold: float = 0.8) -> Figures:
    docs = data["docs"]
    texts = [d["text"] for d in docs]
    n = len(texts)
    truth = {(int(i), int(j)) for i, j, value in data["pairs"]
             if value >= data["meta"]["threshold"]}
    simhashes: list[int] = []
    sketches: list[bytes] = []
    simhash_cpu: list[float] = []
    sketch_cpu: list[float] = []
    for text in texts:
        started = time.process_time()
        simhashes.append(simhash64(text))
        middle = time.process_time()
        sketches.append(minhash.sketch(text))
        sketch_cpu.append(time.process_time() - middle)
        simhash_cpu.append(middle - started)
    # SimHash pairs within k bits (all pairs, vectorised)
    values = np.array(simhashes, dtype=np.uint64)
    first, second = np.triu_indices(n, 1)
    diff = values[first] ^ values[second]
    bits = np.unpackbits(diff.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)
    close = {(int(i), int(j)) for i, j in zip(first[bits <= k], second[bits <= k],
                                              strict=True)}
    chars = [len(t) for t in texts]
    old = {(i, j) for i, j in close
           if chars[i] >= OLD_MIN_TEXT_CHARS and chars[j] >= OLD_MIN_TEXT_CHARS}
    checked = [c >= MIN_TEXT_CHARS for c in chars]
    # pairs sharing a sketch key, and pairs sharing a SimHash block key (candidates)
    by_key: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(sketches):
        for key in minhash.index_keys(s):
            by_key[key].append(i)
    keyed = {(a, b) for members in by_key.values()
             for x, a in enumerate(members) for b in members[x + 1:]}
    by_block: dict[int, list[int]] = defaultdict(list)
    for i, h in enumerate(simhashes):
        for key in block_keys(h, k):
            by_block[key].append(i)
    blocked = {(a, b) for members in by_block.values()
               for x, a in enumerate(members) for b in members[x + 1:]}
    limit = max(k, minhash.CANDIDATE_BITS)
    candidates = {(i, j) for i, j in close | keyed
                  if checked[i] and checked[j] and hamming(simhashes[i], simhashes[j]) <= limit}
    new = {(i, j) for i, j in candidates
           if minhash.similarity(sketches[i], sketches[j]) >= threshold}
    return Figures(
        texts=n, pairs=n * (n - 1) // 2, near_duplicates=len(truth),
        old_precision=_ratio(len(old & truth), len(old)),
        old_recall=_ratio(len(old & truth), len(truth)),
        new_precision=_ratio(len(new & truth), len(new)),
        new_recall=_ratio(len(new & truth), len(truth)),
        stage1_recall=_ratio(len(candidates & truth), len(truth)),
        simhash_ms=round(statistics.median(simhash_cpu) * 1000, 3),
        sketch_ms=round(statistics.median(sketch_cpu) * 1000, 3),
        sketch_bytes=round(statistics.fmean(len(s) for s in sketches), 1),
        simhash_candidates=round(2 * len(blocked) / n, 2),
        key_candidates=round(2 * len(keyed) / n, 2),
        compared=round(2 * len(candidates) / n, 2),
        index_rows=len(block_keys(0, k)) + minhash.KEY_VALUES,
    )


@dataclass(frozen=True, slots=True)
class Pipeline:
    pages: int
    should_be_flagged: int  # pages with an earlier indexed page at Jaccard >= 0.8
    flagged: int
    correct: int  # flagged, and the page named is at Jaccard >= 0.8
    precision: float
    recall: float


async def pipeline(data: dict[str, Any], *, seed: int = 1) -> Pipeline:
    """The texts through the dedup stage one after another (shuffled with ``seed``), on
    an SQLite state store in a temporary folder, with the default settings: what a crawl
    that meets these pages in that order records."""
    import random
    import tempfile

    from common.adapters.sqlite_store import SqliteStateStore
    from common.messages import ParsedPage, Reason, Topic
    from common.settings import Settings
    from dedup.service import DedupStage

    class NoBus:
        def partition_of(self, topic: Topic, key: str) -> int:
            return 0

        async def publish(self, topic: Topic, key: str, message: object) -> None:
            return None

    docs = data["docs"]
    near = defaultdict(set)
    for i, j, value in data["pairs"]:
        if value >= data["meta"]["threshold"]:
            near[int(i)].add(int(j))
            near[int(j)].add(int(i))
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    indexed: set[int] = set()
    should = flagged = correct = 0
    with tempfile.TemporaryDirectory() as tmp:
        async with SqliteStateStore(Path(tmp) / "state.sqlite") as store:
            stage = DedupStage(Settings(), NoBus(), store)  # type: ignore[arg-type]
            for i in order:
                text = docs[i]["text"]
                page = ParsedPage(url=f"http://set.test/{i}", host="set.test", depth=1,
                                  priority=1, status=200, fetched_at=1.0, content_hash=None,
                                  simhash=simhash64(text), sketch=minhash.sketch(text),
                                  text_chars=len(text), noindex=True, nofollow=True)
                verdict = await stage.judge(page)
                should += bool(near[i] & indexed)
                if verdict.reason is Reason.NEAR_DUPLICATE:
                    flagged += 1
                    other = int((verdict.duplicate_of or "/-1").rsplit("/", 1)[1])
                    correct += other in near[i]
                elif len(text) >= MIN_TEXT_CHARS:
                    indexed.add(i)
    return Pipeline(pages=len(docs), should_be_flagged=should, flagged=flagged,
                    correct=correct, precision=_ratio(correct, flagged),
                    recall=_ratio(correct, should))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--k", type=int, default=3, help="SimHash bits (default 3)")
    ap.add_argument("--threshold", type=float, default=0.8,
                    help="estimated Jaccard for a near duplicate (default 0.8)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--pipeline", action="store_true",
                    help="also run the texts through the dedup stage on an SQLite store "
                         "(default settings)")
    args = ap.parse_args(argv)
    data = load(args.data)
    figures = evaluate(data, k=args.k, threshold=args.threshold)
    flow = asyncio.run(pipeline(data)) if args.pipeline else None
    if args.json:
        print(json.dumps({**asdict(figures),
                          "pipeline": asdict(flow) if flow else None}, indent=2))
        return 0
    f = figures
    print(f"{f.texts} texts, {f.pairs} pairs, {f.near_duplicates} near duplicates "
          "(word 5-shingle Jaccard >= 0.8)")
    print(f"old rule (SimHash <= {args.k} bits, texts >= {OLD_MIN_TEXT_CHARS} chars): "
          f"precision {f.old_precision:.3f} recall {f.old_recall:.3f}")
    print(f"new rule (candidates: SimHash <= {args.k} bits or a shared sketch key; "
          f"estimated Jaccard >= {args.threshold}; texts >= {MIN_TEXT_CHARS} chars): "
          f"precision {f.new_precision:.3f} "
          f"recall {f.new_recall:.3f} (candidates found {f.stage1_recall:.3f})")
    print(f"CPU per page (median): SimHash {f.simhash_ms:.2f} ms, sketch "
          f"{f.sketch_ms:.2f} ms")
    print(f"per stored fingerprint: SimHash 8 bytes + sketch {f.sketch_bytes:.0f} bytes "
          f"(at most {minhash.SKETCH_BYTES}); {f.index_rows} index rows "
          f"({len(block_keys(0, args.k))} SimHash blocks + {minhash.KEY_VALUES} sketch keys)")
    print(f"candidates per text, all others indexed: SimHash blocks "
          f"{f.simhash_candidates:.2f}, sketch keys {f.key_candidates:.2f}; sketches "
          f"compared (within {max(args.k, minhash.CANDIDATE_BITS)} bits) {f.compared:.2f}")
    if flow is not None:
        print(f"dedup stage on SQLite, {flow.pages} texts in a shuffled order: "
              f"{flow.flagged} near duplicates recorded, {flow.correct} of them of a page "
              f"at Jaccard >= 0.8, {flow.should_be_flagged} had such a page indexed "
              f"before them: precision {flow.precision:.3f} recall {flow.recall:.3f}")
    return 0
