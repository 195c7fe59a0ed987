"""Language identification without py3langid's byte loop (parser.langid): the same
label and probability as py3langid itself, run side by side, on the benchmark's main
texts, on generated texts and on edge cases; and the derivation of the compact model,
which refuses an automaton it cannot reproduce."""

from __future__ import annotations

import mmap
from array import array
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from py3langid.langid import (  # type: ignore[import-untyped]
    MODEL_FILE,
    LanguageIdentifier,
)

from bench import text_quality
from parser import langid
from parser.signals import LANGUAGE_SAMPLE, identify_language
from parser.text import main_text
from tests.conftest import conformance_path

TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def reference() -> LanguageIdentifier:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("langid-cache")
    langid.load_compact(root)  # derived and written once for the module
    return root


@pytest.fixture(scope="module")
def fast(cache: Path) -> langid.Identifier:
    identifier = langid.load_identifier(cache)
    assert isinstance(identifier, langid.FastIdentifier)
    return identifier


@pytest.fixture(scope="module")
def main_texts() -> list[str]:
    pages = text_quality.load_pages(conformance_path("article-extraction"))
    return [main_text(page.html) for page in pages]


def _agree(reference: LanguageIdentifier, fast: langid.Identifier, text: str) -> None:
    expected_label, expected = reference.classify(text)
    label, probability = fast.classify(text)
    assert label == expected_label, repr(text[:80])
    assert probability == pytest.approx(float(expected), abs=TOLERANCE), repr(text[:80])


def test_agrees_on_the_benchmarks_main_texts(reference: LanguageIdentifier,
                                             fast: langid.Identifier,
                                             main_texts: list[str]) -> None:
    assert len(main_texts) == 181
    for text in main_texts:
        for sample in (text[:LANGUAGE_SAMPLE], text[:LANGUAGE_SAMPLE].upper(), text[:60],
                       text):
            _agree(reference, fast, sample)


def test_scores_of_every_class_are_py3langids(reference: LanguageIdentifier,
                                              fast: langid.Identifier,
                                              main_texts: list[str]) -> None:
    assert isinstance(fast, langid.FastIdentifier)
    for text in main_texts[:40]:
        sample = text[:LANGUAGE_SAMPLE]
        assert np.allclose(fast.scores(sample), reference._decide(sample), rtol=0,
                           atol=TOLERANCE)


WORDS = ["the", "Straße", "große", "ÉCOLE", "école", "e\u0301cole", "москва", "ΑΘΗΝΑ",
         "αθήνα", "القاهرة", "東京都", "日本語", "한국어", "हिन्दी", "ภาษาไทย", "ქართული",
         "😀", "\U0001f1e9\U0001f1ea", "𝔘𝔫𝔦", "12,5 %", "&amp;", "\u200d", "\x00", "\ufeff"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from([" ", "\n", ". "]),
                          st.integers(0, 0x10FFFF).map(chr)), max_size=120)
       .map("".join))
def test_agrees_on_mixed_scripts(reference: LanguageIdentifier, fast: langid.Identifier,
                                 text: str) -> None:
    _agree(reference, fast, text)


@pytest.mark.parametrize("text", [
    "", " ", "\n\t  ", "a", "A", "é", "e\u0301", "😀", "😀" * 30, "\ud800", chr(0xDFFF),
    "ab\udc00cd", "Grüße \ud83d aus Köln", "\x00" * 10, "ALL CAPS HEADLINE HERE",
    "日" * LANGUAGE_SAMPLE, "😀" * LANGUAGE_SAMPLE, "a" * (3 * LANGUAGE_SAMPLE),
])
def test_agrees_on_edge_cases(reference: LanguageIdentifier, fast: langid.Identifier,
                              text: str) -> None:
    _agree(reference, fast, text)


def test_agrees_at_the_sample_length(reference: LanguageIdentifier,
                                     fast: langid.Identifier, main_texts: list[str]) -> None:
    long = next(text for text in main_texts if len(text) > LANGUAGE_SAMPLE + 10)
    for size in (LANGUAGE_SAMPLE - 1, LANGUAGE_SAMPLE, LANGUAGE_SAMPLE + 1):
        _agree(reference, fast, long[:size])


def test_identify_language_keeps_its_answers() -> None:
    assert identify_language("Le conseil municipal a décidé mardi soir de reconstruire "
                             "le vieux pont sur la rivière avant l'hiver.")[0] == "fr"
    assert identify_language("\ud800" * 50) == (None, 0.0)  # no letters


def test_first_occurrences_are_counters_order() -> None:
    rows = np.array([5, 3, 5, 9, 3, 5, 0], dtype=np.intp)
    values, counts = langid.first_occurrences(rows)
    assert values.tolist() == [5, 3, 9, 0] and counts.tolist() == [3, 2, 1, 1]
    empty = langid.first_occurrences(np.empty(0, dtype=np.intp))
    assert empty[0].size == 0 and empty[1].size == 0


# -- the cache folder ----------------------------------------------------------------


def test_cache_is_read_back_and_mapped(cache: Path) -> None:
    (folder,) = [path for path in cache.iterdir() if path.is_dir()]
    assert folder.name.startswith(f"v{langid.CACHE_FORMAT}-py3langid-")
    model = langid.load_compact(cache)
    base: Any = model.ptc
    while getattr(base, "base", None) is not None:
        base = base.base
    assert isinstance(base, mmap.mmap)  # a view of the mapped file, not a copy
    # float16 as in the model file: half the pages of a float32 copy
    assert model.ptc.dtype == np.float16 and model.ptc.shape[1] == len(model.classes)


def test_a_damaged_cache_is_derived_again(cache: Path, tmp_path: Path,
                                          reference: LanguageIdentifier) -> None:
    (folder,) = [path for path in cache.iterdir() if path.is_dir()]
    copy = tmp_path / "cache"
    copy.mkdir()
    damaged = copy / folder.name
    damaged.mkdir()
    for part in folder.iterdir():
        damaged.joinpath(part.name).write_bytes(part.read_bytes())
    with open(damaged / "table.npy", "r+b") as file:
        file.truncate(1000)
    identifier = langid.load_identifier(copy)
    assert isinstance(identifier, langid.FastIdentifier)
    _agree(reference, identifier, "Der Gemeinderat hat am Dienstagabend beschlossen.")
    assert (damaged / "table.npy").stat().st_size > 1000  # written again


def test_an_unwritable_cache_derives_in_memory(tmp_path: Path,
                                               reference: LanguageIdentifier) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    identifier = langid.load_identifier(blocker / "cache")
    assert isinstance(identifier, langid.FastIdentifier)
    _agree(reference, identifier, "The council met on Tuesday evening.")


def test_a_model_it_cannot_reproduce_falls_back_to_py3langid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(model_file: Path) -> langid.CompactModel:
        raise langid.ModelLayoutError("a layout of a later py3langid")

    monkeypatch.setattr(langid, "_derive_from_file", refuse)
    identifier = langid.load_identifier(tmp_path)
    assert isinstance(identifier, LanguageIdentifier)
    assert identifier.classify("The council met on Tuesday evening to agree.")[0] == "en"


# -- deriving the compact model from an automaton -----------------------------------


def _automaton(grams: list[bytes]) -> tuple[array[int], array[int], list[int]]:
    """The Aho-Corasick automaton of ``grams`` in py3langid's layout (transition rows,
    each state's row, each state's output: its longest n-gram suffix)."""
    children: list[dict[int, int]] = [{}]
    names = [b""]
    for gram in grams:
        state = 0
        for byte in gram:
            if byte not in children[state]:
                children[state][byte] = len(names)
                children.append({})
                names.append(names[state] + bytes([byte]))
            state = children[state][byte]
    moves = [[0] * 256 for _ in names]
    fail = [0] * len(names)
    queue = deque([0])
    while queue:
        state = queue.popleft()
        for byte in range(256):
            child = children[state].get(byte)
            if child is None:
                moves[state][byte] = moves[fail[state]][byte] if state else 0
            else:
                moves[state][byte] = child
                fail[child] = moves[fail[state]][byte] if state else 0
                queue.append(child)
    index = {gram: row for row, gram in enumerate(grams)}
    output = []
    for name in names:
        suffixes = [index[name[at:]] for at in range(len(name)) if name[at:] in index]
        output.append(suffixes[0] if suffixes else -1)
    return (array("I", [target for row in moves for target in row]),
            array("H", range(len(names))), output)


GRAMS = [b"ab", b"abc", b"bc", b"bcd", b"cda", b"da", b"abcdab", b"\xc3\xa9", b"a\xc3\xa9",
         b"zz", b"xyz", b"yzx"]


def _tiny() -> tuple[np.ndarray, np.ndarray, list[str]]:
    rng = np.random.default_rng(7)
    ptc = rng.normal(-3, 1, size=(len(GRAMS), 4)).astype(np.float16)
    pc = rng.normal(-1, 0.3, size=4).astype(np.float32)
    return ptc, pc, ["aa", "bb", "cc", "aa"]  # "aa" twice: an aliased label


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdxyzé AB", max_size=60))
def test_derived_tiny_model_agrees_with_its_automaton(text: str) -> None:
    ptc, pc, classes = _tiny()
    moves, rows, output = _automaton(GRAMS)
    fast = langid.FastIdentifier(langid.derive(ptc, pc, classes, moves, rows, output))
    walker = LanguageIdentifier(ptc, pc, classes, moves, output, norm_probs=True,
                                tk_row=rows)
    assert np.array_equal(fast.scores(text), walker._decide(text))
    assert fast.classify(text) == walker.classify(text)


def test_derive_refuses_an_automaton_it_cannot_reproduce() -> None:
    ptc, pc, classes = _tiny()
    moves, rows, output = _automaton(GRAMS)
    langid.derive(ptc, pc, classes, moves, rows, output)  # the true one is accepted
    state_ab = 2  # "a" is state 1, "ab" state 2
    wrong_move = array("I", moves)
    wrong_move[state_ab * 256 + ord("x")] = state_ab  # stays on "ab" after an "x"
    with pytest.raises(langid.ModelLayoutError):
        langid.derive(ptc, pc, classes, wrong_move, rows, output)
    state_abc = 3
    wrong_output = list(output)
    wrong_output[state_abc] = GRAMS.index(b"bc")  # a shorter suffix, not the longest
    with pytest.raises(langid.ModelLayoutError):
        langid.derive(ptc, pc, classes, moves, rows, wrong_output)


# -- the half-width table --------------------------------------------------------------


def _tiny_model(ptc: np.ndarray) -> langid.CompactModel:
    _, pc, classes = _tiny()
    moves, rows, output = _automaton(GRAMS)
    return langid.derive(ptc, pc, classes, moves, rows, output)


def test_the_real_table_stays_half_width_and_widens_exactly(cache: Path) -> None:
    model = langid.load_compact(cache)
    assert model.ptc.dtype == np.float16 and model.negative_normal
    idx = np.random.default_rng(3).choice(model.ptc.shape[0], 500, replace=False)
    assert np.array_equal(model.rows(idx), model.ptc[idx].astype(np.float32))


@pytest.mark.parametrize("value", [-6.104e-05, -65504.0, -1.0, -0.5, -14.984375, -2.0009765])
def test_negative_normal_values_widen_exactly(value: float) -> None:
    table = np.full((len(GRAMS), 4), value, dtype=np.float16)
    table[0, 0] = np.float16(-3.0)
    model = _tiny_model(table)
    assert model.negative_normal
    every = np.arange(len(GRAMS), dtype=np.intp)
    widened = model.rows(every)  # rows in key order: the same values, sorted rows
    assert widened.dtype == np.float32
    assert np.array_equal(widened, model.ptc.astype(np.float32))
    assert np.float32(np.float16(value)) in widened


@pytest.mark.parametrize("value", [0.0, -0.0, 0.5, -1e-6, float("-inf"), float("nan")])
def test_other_values_take_numpys_cast(value: float) -> None:
    table = np.full((len(GRAMS), 4), -3.0, dtype=np.float16)
    table[5, 2] = np.float16(value)  # zero, positive, subnormal, infinite or not a number
    model = _tiny_model(table)
    assert not model.negative_normal
    every = np.arange(len(GRAMS), dtype=np.intp)
    widened = model.rows(every)
    assert np.array_equal(widened, model.ptc.astype(np.float32), equal_nan=True)
    assert np.array_equal(np.sort(widened.ravel()), np.sort(table.astype(np.float32).ravel()),
                          equal_nan=True)


def test_a_table_float16_cannot_hold_stays_float32() -> None:
    ptc, pc, classes = _tiny()
    wide = ptc.astype(np.float32)
    wide[3, 1] = np.float32(-3.0001)  # between two float16 values
    model = _tiny_model(wide)
    assert model.ptc.dtype == np.float32 and not model.negative_normal
    moves, rows, output = _automaton(GRAMS)
    walker = LanguageIdentifier(wide, pc, classes, moves, output, norm_probs=True,
                                tk_row=rows)
    fast = langid.FastIdentifier(model)
    for text in ("abcdab da", "bcd xyz zz", "a\u00e9 abc"):
        assert np.array_equal(fast.scores(text), walker._decide(text))
    exact = _tiny_model(ptc.astype(np.float32))  # float32 holding float16 values only
    assert exact.ptc.dtype == np.float16 and np.array_equal(exact.ptc, _tiny_model(ptc).ptc)
