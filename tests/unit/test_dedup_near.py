"""The dedup stage's near-duplicate verdicts, on an SQLite state store."""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from bench.neardup.quality import load
from common import minhash
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import ParsedPage, Reason, StatusUpdate
from common.settings import Settings
from common.simhash import block_keys, hamming, simhash64
from dedup.service import DedupStage
from tests.unit.test_dedup_links import RecordingBus


def parsed(url: str, text: str, *, sketch: bool = True) -> ParsedPage:
    return ParsedPage(url=url, host=url.split("/")[2], depth=1, priority=1, status=200,
                      fetched_at=1.0, content_hash=url, simhash=simhash64(text),
                      sketch=minhash.sketch(text) if sketch else None,
                      text_chars=len(text))


async def verdicts(tmp_path: Path, texts: list[tuple[str, str]], *,
                   old_index: Sequence[tuple[str, str]] = ()) -> list[StatusUpdate]:
    async with SqliteStateStore(tmp_path / "state.sqlite") as store:
        for url, text in old_index:  # indexed before sketches were kept
            h = simhash64(text)
            await store.add_simhash(block_keys(h, 3), url, h)
        stage = DedupStage(Settings(), RecordingBus(1), store)
        return [await stage.judge(parsed(url, text)) for url, text in texts]


@cache
def edited_pair() -> tuple[str, str]:
    """A real page and an edited copy with word 5-shingle Jaccard >= 0.85 whose
    SimHashes differ in more than 3 bits (the old rule missed such pairs)."""
    data = load()
    texts = [d["text"] for d in data["docs"]]
    for i, j, value in data["pairs"]:
        if value >= 0.85 and hamming(simhash64(texts[i]), simhash64(texts[j])) > 3:
            return texts[i], texts[j]
    raise AssertionError("no such pair in the set")


async def test_edited_copy_far_in_simhash_is_a_near_duplicate(tmp_path: Path) -> None:
    first, copy = edited_pair()
    a, b = await verdicts(tmp_path, [("http://a.test/", first), ("http://b.test/", copy)])
    assert a.reason is None
    assert (b.reason, b.duplicate_of) == (Reason.NEAR_DUPLICATE, "http://a.test/")


async def test_pages_sharing_a_repeated_table_are_not_near_duplicates(tmp_path: Path) -> None:
    rng = random.Random(1)
    words = [f"w{i}" for i in range(2000)]
    cell = "status ok value not available see the notes below "
    texts = [(f"http://t.test/{n}",
              " ".join(rng.choice(words) for _ in range(150)) + " " + cell * 200)
             for n in range(3)]
    assert hamming(simhash64(texts[0][1]), simhash64(texts[1][1])) <= 3
    assert [v.reason for v in await verdicts(tmp_path, texts)] == [None, None, None]


async def test_short_pages_are_compared_exactly(tmp_path: Path) -> None:
    short = "Page not found. The page you asked for has moved or never existed here."
    other = "Page not found. The file you asked for has moved or never existed here."
    tiny = "You need to enable JavaScript to run this app."  # under min_text_chars (50)
    found = await verdicts(tmp_path, [
        ("http://a.test/x", short), ("http://b.test/y", short), ("http://c.test/z", other),
        ("http://d.test/", tiny), ("http://e.test/", tiny)])
    assert [v.reason for v in found] == [None, Reason.NEAR_DUPLICATE, None, None, None]
    assert found[1].duplicate_of == "http://a.test/x"


async def test_pages_indexed_without_a_sketch_match_by_simhash(tmp_path: Path) -> None:
    first = edited_pair()[0]
    text = first + " one more line"
    assert hamming(simhash64(first), simhash64(text)) <= 3
    found = await verdicts(tmp_path, [("http://new.test/", text)],
                           old_index=[("http://old.test/", first)])
    assert (found[0].reason, found[0].duplicate_of) == (
        Reason.NEAR_DUPLICATE, "http://old.test/")


async def test_a_refetched_page_is_not_its_own_duplicate(tmp_path: Path) -> None:
    first, copy = edited_pair()
    found = await verdicts(tmp_path, [("http://a.test/", first), ("http://a.test/", copy)])
    assert [v.reason for v in found] == [None, None]
