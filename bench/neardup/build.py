"""Build the labelled near-duplicate set from Debian's documentation packages.

    scripts/apt-install postgresql-doc-15 python-django-doc python3.11-doc
    .venv/bin/python -m bench.neardup.build            # writes bench/neardup/data/set.json.xz

1. **Pages.** From each documentation tree (:data:`TREES`), the HTML files are listed,
   sorted, shuffled with a fixed seed and read in that order; each page's main text is
   what the parser keeps (``parser.charset.decode_html`` then
   ``parser.text.main_text``). The first :data:`PER_TREE` pages with any text are kept,
   plus the first :data:`SHORT_PER_TREE` further ones under :data:`SHORT_CHARS`
   characters, so short pages (which SimHash handles worst) are well represented.
2. **Edited copies** at known rates, each from a base page drawn with the same seed
   (:func:`edit`): word substitutions, insertions, deletions or all three (rate drawn
   log-uniformly from 0.2% to 8% of the words, which puts copies on both sides of the
   0.8 Jaccard line), paragraphs moved, boilerplate lines added or replaced at the top
   and bottom (5 to 80 words), and truncation (60% to 98% of the words kept). The
   recipe of every copy is stored with it.
3. **Labels.** Every pair of texts (pages and copies alike, so real pages that are
   near duplicates of each other count too) is labelled by the exact Jaccard
   similarity of their sets of lower-cased word 5-shingles (``common.minhash``: 64-bit
   shingle hashes, each shingle once; a text under five words is one shingle). A pair
   at 0.8 or more is a near duplicate. The set keeps every pair at
   :data:`KEEP_JACCARD` or more; all other pairs are below it.

The texts are from PostgreSQL 15's documentation (PostgreSQL Licence), Django 3.2's
(BSD-3-Clause) and Python 3.11's (PSF Licence Agreement, the documentation is
distributed under it), as Debian bookworm packages them; the versions used are in the
set's ``meta``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from common.minhash import jaccard, shingle_hashes
from parser.charset import decode_html
from parser.text import main_text

DATA = Path(__file__).resolve().parent / "data" / "set.json.xz"
TREES = {
    "postgresql-doc-15": Path("/usr/share/doc/postgresql-doc-15/html"),
    "python-django-doc": Path("/usr/share/doc/python-django-doc/html"),
    "python3.11-doc": Path("/usr/share/doc/python3.11/html"),
}
PER_TREE = 150
SHORT_PER_TREE = 15
SHORT_CHARS = 400
COPIES = 420  # edited copies in all
SEED = 16
THRESHOLD = 0.8
KEEP_JACCARD = 0.3
KINDS = ("substitute", "insert", "delete", "mixed", "reorder", "boilerplate", "truncate")
BOILERPLATE = (
    "Last updated on {d}.", "Copyright {y} the authors. All rights reserved.",
    "Previous topic | Next topic | Index | Modules", "Report a bug or suggest a change",
    "This page is available in other languages and versions",
    "Was this page helpful? Yes No", "Skip to main content Search the documentation",
    "Sign up for our newsletter and get the latest release notes by mail every month",
    "You are reading the documentation for an old release; see the current version",
    "Cookies help us deliver our services. By using our services you agree.",
)


def package_version(package: str) -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.strip()


def read_pages(rng: random.Random) -> list[dict[str, Any]]:
    pages: list[dict[str, Any]] = []
    for package, tree in TREES.items():
        if not tree.is_dir():
            raise SystemExit(f"{tree} is missing: scripts/apt-install {package}")
        files = sorted(tree.rglob("*.html"))
        rng.shuffle(files)
        kept = short = 0
        for path in files:
            text = main_text(decode_html(path.read_bytes(), "text/html").text).strip()
            if not text:
                continue
            if kept < PER_TREE:
                kept += 1
            elif short < SHORT_PER_TREE and len(text) < SHORT_CHARS:
                short += 1
            else:
                if kept >= PER_TREE and short >= SHORT_PER_TREE:
                    break
                continue
            pages.append({"source": package, "path": str(path.relative_to(tree)),
                          "text": text})
    return pages


def _words(paragraph: str) -> list[str]:
    return paragraph.split()


def edit(text: str, kind: str, rng: random.Random, vocabulary: list[str]
         ) -> tuple[str, dict[str, Any]]:
    """An edited copy of ``text`` and its recipe."""
    paragraphs = [p for p in text.split("\n") if p.strip()]
    recipe: dict[str, Any] = {"kind": kind}
    if kind in ("substitute", "insert", "delete", "mixed"):
        rate = math.exp(rng.uniform(math.log(0.002), math.log(0.08)))
        recipe["rate"] = round(rate, 5)
        ops = ("substitute", "insert", "delete") if kind == "mixed" else (kind,)
        each = rate / len(ops)
        out = []
        for paragraph in paragraphs:
            words: list[str] = []
            for word in _words(paragraph):
                op = next((o for o in ops if rng.random() < each), None)
                if op == "substitute":
                    words.append(rng.choice(vocabulary))
                elif op == "insert":
                    words += [word, rng.choice(vocabulary)]
                elif op != "delete":
                    words.append(word)
            out.append(" ".join(words))
        return "\n".join(out), recipe
    if kind == "reorder":
        moves = rng.randint(1, 4)
        recipe["moves"] = moves
        for _ in range(moves):
            if len(paragraphs) < 2:
                break
            moved = paragraphs.pop(rng.randrange(len(paragraphs)))
            paragraphs.insert(rng.randrange(len(paragraphs) + 1), moved)
        return "\n".join(paragraphs), recipe
    if kind == "boilerplate":
        size = rng.randint(5, 80)
        replace = rng.random() < 0.5
        recipe |= {"words": size, "replace_ends": replace}
        lines: list[str] = []
        while sum(len(line.split()) for line in lines) < size:
            lines.append(rng.choice(BOILERPLATE).format(
                d=f"{rng.randint(1, 28)} May {rng.randint(2015, 2026)}",
                y=rng.randint(2000, 2026)))
        head = lines[:len(lines) // 2]
        tail = lines[len(lines) // 2:]
        body = paragraphs[1:-1] if replace and len(paragraphs) > 2 else paragraphs
        return "\n".join(head + body + tail), recipe
    if kind == "truncate":
        keep = rng.uniform(0.6, 0.98)
        recipe["keep"] = round(keep, 4)
        words = text.split(" ")
        return " ".join(words[:max(1, round(len(words) * keep))]), recipe
    raise ValueError(kind)


def label(hashes: list[np.ndarray], keep: float) -> list[list[float]]:
    """[i, j, jaccard] for every pair i < j at ``keep`` or more."""
    sizes = np.array([len(h) for h in hashes])
    found: list[list[float]] = []
    for i in range(len(hashes)):
        for j in range(i + 1, len(hashes)):
            small, large = sorted((sizes[i], sizes[j]))
            if large == 0 or small / large < keep:  # J <= |small| / |large|
                continue
            value = jaccard(hashes[i], hashes[j])
            if value >= keep:
                found.append([i, j, round(value, 4)])
    return found


def build() -> dict[str, Any]:
    rng = random.Random(SEED)
    started = time.time()
    pages = read_pages(rng)
    vocabulary = sorted({w for p in pages for w in re.findall(r"[A-Za-z]{3,}", p["text"])})
    docs: list[dict[str, Any]] = [{"id": i, **p} for i, p in enumerate(pages)]
    for n in range(COPIES):
        base = docs[rng.randrange(len(pages))]
        kind = KINDS[n % len(KINDS)]
        text, recipe = edit(base["text"], kind, rng, vocabulary)
        docs.append({"id": len(docs), "source": base["source"], "path": base["path"],
                     "copy_of": base["id"], "edit": recipe, "text": text})
    hashes = [shingle_hashes(d["text"]) for d in docs]
    pairs = label(hashes, KEEP_JACCARD)
    return {
        "meta": {
            "built_by": "python -m bench.neardup.build",
            "threshold": THRESHOLD, "pairs_kept_from": KEEP_JACCARD,
            "shingle": "lower-cased word 5-shingles, each once (common.minhash)",
            "seed": SEED, "per_tree": PER_TREE, "short_per_tree": SHORT_PER_TREE,
            "short_chars": SHORT_CHARS, "copies": COPIES,
            "packages": {p: package_version(p) for p in TREES},
            "licences": {"postgresql-doc-15": "PostgreSQL Licence",
                         "python-django-doc": "BSD-3-Clause",
                         "python3.11-doc": "PSF Licence Agreement"},
            "seconds": round(time.time() - started, 1),
        },
        "docs": docs,
        "pairs": pairs,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DATA)
    args = ap.parse_args(argv)
    built = build()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(args.out, "wt", encoding="utf-8", preset=9) as out:
        json.dump(built, out, ensure_ascii=False, separators=(",", ":"))
    docs = built["docs"]
    positives = sum(1 for p in built["pairs"] if p[2] >= THRESHOLD)
    print(f"{len(docs)} texts ({sum('copy_of' not in d for d in docs)} pages), "
          f"{len(docs) * (len(docs) - 1) // 2} pairs, {positives} near duplicates; "
          f"{args.out} {args.out.stat().st_size} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
