"""py3langid's language identification, computed with numpy instead of its byte loop.

py3langid 0.4 scores a text with naive Bayes over byte n-grams. It finds the n-grams
by walking a deterministic automaton over the text's UTF-8 bytes one byte at a time in
Python, and that walk costs most of its time; the automaton also takes most of its
memory (about 77 MB per process) and of its load time (about half a second).

The automaton is an Aho-Corasick automaton of the model's n-grams: after each byte it
is in the state of the longest suffix of the text read so far that starts some
n-gram, and each state outputs at most one n-gram, the longest n-gram that is a suffix
of that state's string. So the n-gram counted at each byte position is simply the
longest model n-gram that ends there (n-grams of this model are 2 to 6 bytes long).
That can be found for all positions at once: every window of n bytes becomes one
integer (its bytes and its length) and is looked up in a hash table of the n-grams
(see :class:`CompactModel`), and the longest hit per end position wins. The scoring
after that is py3langid's own, step by step and in the same order (counts in order of
first occurrence, ``log1p(counts) @ ptc[rows] + pc``, a softmax at temperature
sqrt(bytes), aliased labels folded), so labels and probabilities are the same, to the
bit on the texts tested. On the article-extraction benchmark's 2,000-character samples
a text costs about 0.3 ms of CPU (py3langid: 0.7-0.85 ms).

:func:`derive` recovers the n-grams from the automaton and checks that it really is
the automaton described above (every transition and output); a model for which that
does not hold is refused, and :func:`load_identifier` then falls back to py3langid's
own identifier. The derived model (n-gram keys, the probability table with its rows in
key order, float16 as in the model file, class priors and labels, the hash tables:
30 MB) is kept in a cache folder
(``$XDG_CACHE_HOME/polite-crawler/langid``, else ``~/.cache/...``), keyed by
py3langid's version and a hash of its model file, so a process reads it with ``mmap``
in about 0.05 s: processes on one machine share its pages, and only the rows texts
touch become resident. The first process derives it (about 1.2 s of CPU, 220 MB at the
peak, under a lock so that workers starting together derive it once); where the folder
cannot be written, each process derives it in memory at its start.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import shutil
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "CompactModel",
    "FastIdentifier",
    "Identifier",
    "ModelLayoutError",
    "cache_root",
    "compact",
    "derive",
    "encode",
    "load_identifier",
    "ngram_rows",
]

log = logging.getLogger(__name__)

#: Bit where a key's n-gram length starts; the n-gram's bytes are below it.
LENGTH_SHIFT = 56
#: Longest n-gram a key holds (7 bytes fill the 56 bits under the length).
MAX_NGRAM = 7
#: Format of the cached files; a new format gets a new folder.
CACHE_FORMAT = 2
#: States handled at once while deriving (bounds its temporary arrays to a few MB).
_CHUNK = 4096
#: Seeds tried for the hash table's multipliers before giving up.
_SEEDS = 64
_MASK64 = (1 << 64) - 1
#: Added to a negative normal float16's bits shifted left by 13 to give its float32
#: bits: the exponent's bias (127 - 15) << 23, plus the sign bit moved from bit 28 to 31.
_HALF_TO_SINGLE = np.uint32(((127 - 15) << 23) - (1 << 28) + (1 << 31))


class ModelLayoutError(ValueError):
    """The model's automaton is not the one this module's method reproduces."""


class Identifier(Protocol):
    def classify(self, text: str) -> tuple[str, float]: ...


@dataclass(frozen=True, slots=True)
class CompactModel:
    """The model without its automaton.

    Rows are the model's n-grams sorted by key: the n-gram's length shifted by
    :data:`LENGTH_SHIFT`, or-ed with its bytes read as a big-endian number; so a
    longer n-gram always has a higher row. ``ptc`` holds one row of per-class
    log-probabilities per n-gram, float16 as in the model file (float32 only for a
    table float16 cannot hold exactly); :meth:`rows` widens the rows a text touches
    to float32 before scoring, exactly, so the half-width table changes no score and
    halves the pages texts make resident. ``negative_normal`` records (from the
    derivation, which reads every value) that every float16 value is a negative
    normal number, which :meth:`rows` widens with two integer operations instead of
    numpy's slower float16 cast. ``pc`` the class priors, ``classes`` each column's
    label (a label may appear more than once, as py3langid's script aliases do).

    The n-grams are found through ``pairs``, a direct table of every 2-byte value
    (row + 1 of that 2-gram, 0: none), and ``table``, a two-choice (cuckoo) hash
    table of the other n-grams' keys: ``table[side, h >> (64 - bits)]`` with
    ``h = key * multipliers[side] mod 2**64``; a slot holds the rest of ``h`` above
    ``bits`` bits and row + 1 below them, so a key is found exactly with one read
    per side. ``lengths`` lists the lengths of the hashed n-grams, ``pad`` is a byte
    no n-gram contains (it stands before the text, so no window reaching past its
    start matches)."""

    ptc: NDArray[np.float16] | NDArray[np.float32]
    pc: NDArray[np.float32]
    classes: tuple[str, ...]
    pairs: NDArray[np.uint32]
    table: NDArray[np.uint64]
    multipliers: NDArray[np.uint64]
    lengths: tuple[int, ...]
    pad: int
    negative_normal: bool = False

    @property
    def bits(self) -> int:
        return int(self.table.shape[1]).bit_length() - 1

    def rows(self, idx: NDArray[np.intp]) -> NDArray[np.float32]:
        """Rows ``idx`` of the table as float32 (exactly the float16 values)."""
        if self.ptc.dtype == np.float32:
            return self.ptc[idx].astype(np.float32, copy=False)
        if not self.negative_normal:
            return self.ptc[idx].astype(np.float32)
        # a negative normal float16 s|e|m (1, 5, 10 bits) is the float32 1|e+112|m<<13:
        # shifted left 13, the sign lands on bit 28, so one constant fixes both fields
        bits = self.ptc.view(np.uint16)[idx].astype(np.uint32)
        bits <<= 13
        bits += _HALF_TO_SINGLE
        return bits.view(np.float32)

    def check(self) -> None:
        """Raise :class:`ModelLayoutError` unless the arrays fit together."""
        rows, columns = self.ptc.shape if self.ptc.ndim == 2 else (0, 0)
        if columns != len(self.pc) or len(self.classes) != columns or not columns:
            raise ModelLayoutError(f"table shape {self.ptc.shape} does not fit "
                                   f"{len(self.pc)} priors and {len(self.classes)} labels")
        size = self.table.shape[1] if self.table.ndim == 2 else 0
        if (self.table.shape[0] != 2 or size < 2 or size & (size - 1)
                or rows >= size or self.multipliers.shape != (2,)):
            raise ModelLayoutError("hash table of the wrong shape")
        if self.pairs.shape != (1 << 16,) or int(self.pairs.max()) > rows:
            raise ModelLayoutError("2-gram table of the wrong shape")
        if (not 0 <= self.pad < 256
                or any(not 1 <= n <= MAX_NGRAM or n == 2 for n in self.lengths)):
            raise ModelLayoutError("bad n-gram lengths or padding byte")


def encode(text: str) -> bytes:
    """The bytes py3langid scores for ``text``: lower-cased when it is all upper
    case, NFC-normalised, UTF-8 with lone surrogates kept (``surrogatepass``)."""
    if text.isupper():
        text = text.lower()
    return unicodedata.normalize("NFC", text).encode("utf-8", errors="surrogatepass")


def ngram_rows(data: bytes, model: CompactModel) -> NDArray[np.intp]:
    """For each byte position of ``data`` where some n-gram of ``model`` ends, the
    row of the longest such n-gram, in position order."""
    size = len(data)
    lead = MAX_NGRAM - 1
    padded = np.full(size + lead, model.pad, dtype=np.uint64)
    padded[lead:] = np.frombuffer(data, dtype=np.uint8)
    window = padded[lead:]  # the n bytes ending at each position, as one number
    # each candidate as top - (row + 1), so that the longest n-gram (the highest row:
    # rows grow with length) is the least, and no n-gram (0) is top
    top = np.uint64((1 << model.bits) - 1)
    least = top - model.pairs[((padded[lead - 1:-1] << np.uint64(8)) | window)
                              .astype(np.intp)]
    if model.lengths:
        windows = np.empty((len(model.lengths), size), dtype=np.uint64)
        at = 0
        for n in range(1, model.lengths[-1] + 1):
            if n > 1:
                window = window | (padded[lead - n + 1:lead - n + 1 + size]
                                   << np.uint64(8 * (n - 1)))
            if n in model.lengths:
                windows[at] = window | np.uint64(n << LENGTH_SHIFT)
                at += 1
        bits = np.uint64(model.bits)
        hashes = windows[None] * model.multipliers[:, None, None]
        slots = (hashes >> (np.uint64(64) - bits)).astype(np.intp)
        slots[1] += 1 << model.bits
        # a slot's word xor the hash's low part is row + 1 (below top) on a match and
        # more otherwise (or 0: an empty slot); top minus more wraps round to a huge
        # number, which never is the least
        found = top - (model.table.ravel()[slots] ^ (hashes << bits))
        np.minimum(least, found.reshape(2 * len(model.lengths), size).min(axis=0),
                   out=least)
    return (top - 1 - least[least < top]).astype(np.intp)


def first_occurrences(rows: NDArray[np.intp]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """The distinct values of ``rows`` (not negative) in order of first occurrence,
    and how often each occurs: as ``collections.Counter`` lists them."""
    size = len(rows)
    if not size:
        return rows[:0], rows[:0]
    places = size.bit_length()  # a position, or a count, fits in this many bits
    width = int(rows.max()).bit_length()
    if 2 * places + width > 62:
        values, first, counts = np.unique(rows, return_index=True, return_counts=True)
        order = np.argsort(first)
        return values[order], counts[order]
    # sorted by value, then position: each value's first element is its first place
    ordered = np.sort((rows.astype(np.int64) << places) | np.arange(size))
    values = ordered >> places
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    counts = np.diff(np.r_[starts, size])
    first = ordered[starts] & ((1 << places) - 1)
    # sorted by first place, each with its count and value
    keyed = np.sort((first << (places + width)) | (counts << width) | values[starts])
    return ((keyed & ((1 << width) - 1)).astype(np.intp),
            ((keyed >> width) & ((1 << places) - 1)).astype(np.intp))


class FastIdentifier:
    """``classify(text)`` as py3langid's ``LanguageIdentifier(norm_probs=True)``
    answers it, from a :class:`CompactModel`."""

    __slots__ = ("_aliases", "classes", "model")

    def __init__(self, model: CompactModel) -> None:
        model.check()
        self.model = model
        self.classes = model.classes
        first: dict[str, int] = {}
        aliases: list[tuple[int, int]] = []
        for column, label in enumerate(model.classes):
            if label in first:
                aliases.append((first[label], column))
            else:
                first[label] = column
        self._aliases = tuple(aliases)

    def scores(self, text: str) -> NDArray[np.float32]:
        """The probability of each class (column) for ``text``."""
        data = encode(text)
        rows = ngram_rows(data, self.model)
        if rows.size:
            idx, counts = first_occurrences(rows)
            scores: NDArray[np.float32] = (np.log1p(counts.astype(np.float32))
                                           @ self.model.rows(idx) + self.model.pc)
        else:  # no n-gram at all: every class alike
            scores = np.zeros(len(self.classes), dtype=np.float32)
        scores *= 1.0 / math.sqrt(len(data) or 1)
        np.exp(scores - scores.max(), out=scores)
        scores /= scores.sum()
        for keep, fold in self._aliases:
            scores[keep] += scores[fold]
            scores[fold] = 0.0
        return scores

    def classify(self, text: str) -> tuple[str, float]:
        """(label, probability) of the most likely class of ``text``."""
        scores = self.scores(text)
        best = int(scores.argmax())
        return self.classes[best], float(scores[best])


def compact(keys: NDArray[np.uint64], ptc: NDArray[Any], pc: NDArray[Any],
            classes: list[str] | tuple[str, ...]) -> CompactModel:
    """The :class:`CompactModel` of n-grams with sorted, distinct ``keys`` and the
    rows ``ptc`` of the same order."""
    keys = np.asarray(keys, dtype=np.uint64)
    if len(keys) > 1 and not bool(np.all(keys[1:] > keys[:-1])):
        raise ModelLayoutError("n-gram keys are not sorted and distinct")
    lengths = (keys >> np.uint64(LENGTH_SHIFT)).astype(np.int64)
    if len(keys) and not (int(lengths.min()) >= 1 and int(lengths.max()) <= MAX_NGRAM):
        raise ModelLayoutError("n-grams of 1 to 7 bytes expected")
    grams = keys & np.uint64((1 << LENGTH_SHIFT) - 1)
    used = np.zeros(256, dtype=bool)
    for n in np.unique(lengths):
        of_length = grams[lengths == n]
        for at in range(int(n)):
            used[((of_length >> np.uint64(8 * at)) & np.uint64(255)).astype(np.intp)] = True
    unused = np.flatnonzero(~used)
    if not unused.size:
        raise ModelLayoutError("every byte value occurs in some n-gram")
    pairs = np.zeros(1 << 16, dtype=np.uint32)
    two = np.flatnonzero(lengths == 2)
    pairs[grams[two].astype(np.intp)] = two + 1
    hashed = np.flatnonzero(lengths != 2)
    table, multipliers = _hash_table(keys[hashed].tolist(), (hashed + 1).tolist(),
                                     len(keys))
    probabilities = _narrowest(ptc)
    return CompactModel(ptc=probabilities, negative_normal=_negative_normal(probabilities),
                        pc=np.asarray(pc, dtype=np.float32),
                        classes=tuple(str(label) for label in classes), pairs=pairs,
                        table=table, multipliers=multipliers,
                        lengths=tuple(sorted({int(n) for n in lengths[hashed]})),
                        pad=int(unused[-1]))


def _narrowest(ptc: NDArray[Any]) -> NDArray[np.float16] | NDArray[np.float32]:
    """``ptc`` as float16 when every value is one exactly (py3langid's model file is
    float16), else as float32."""
    table = np.asarray(ptc)
    if table.dtype == np.float16:
        return np.ascontiguousarray(table)
    wide = np.ascontiguousarray(table, dtype=np.float32)
    narrow = wide.astype(np.float16)
    if np.array_equal(narrow.astype(np.float32), wide):
        return narrow
    return wide


def _negative_normal(table: NDArray[Any]) -> bool:
    """Whether every value of a float16 ``table`` is a negative normal number."""
    if table.dtype != np.float16:
        return False
    bits = table.view(np.uint16)
    exponent = bits & np.uint16(0x7C00)
    return bool(np.all(bits & np.uint16(0x8000)) and np.all(exponent != 0)
                and np.all(exponent != 0x7C00))


def _hash_table(keys: list[int], values: list[int], rows: int
                ) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """A two-choice hash table of ``keys`` (see :class:`CompactModel`) holding
    ``values`` (row + 1, all below ``rows`` + 1), two fifths full at most."""
    bits = max(2, rows.bit_length(), math.ceil(math.log2(max(1.25 * len(keys), 2))))
    size = 1 << bits
    for seed in range(_SEEDS):
        found = np.random.default_rng(seed).integers(1, 1 << 63, size=2, dtype=np.uint64)
        multipliers = [int(m) * 2 + 1 for m in found]  # odd: key -> hash is one-to-one
        slots: list[int] = [0] * (2 * size)
        if _place(keys, values, multipliers, bits, slots):
            table = np.array(slots, dtype=np.uint64).reshape(2, size)
            return table, np.array(multipliers, dtype=np.uint64)
    raise ModelLayoutError("no hash table found for the n-grams")


def _place(keys: list[int], values: list[int], multipliers: list[int], bits: int,
           slots: list[int]) -> bool:
    """Cuckoo insertion of every key into ``slots``; False when one does not fit."""
    size = 1 << bits
    low = (1 << bits) - 1
    owner: list[int] = [0] * (2 * size)  # the key in each slot, to move it on
    for key, value in zip(keys, values, strict=True):
        side = 0
        for _ in range(500):
            hashed = (key * multipliers[side]) & _MASK64
            slot = side * size + (hashed >> (64 - bits))
            word = ((hashed << bits) & _MASK64) | value
            moved, moved_value = owner[slot], slots[slot] & low
            slots[slot], owner[slot] = word, key
            if not moved_value:
                break
            key, value, side = moved, moved_value, 1 - side
        else:
            return False
    return True


def _as_uint(buffer: Any) -> NDArray[Any]:
    """A stdlib ``array`` of unsigned integers (as py3langid holds its automaton) as
    a numpy view."""
    return np.frombuffer(buffer, dtype=np.dtype(f"u{buffer.itemsize}"))


def derive(ptc: NDArray[Any], pc: NDArray[Any], classes: list[str], nextmove: Any,
           row_index: Any, output: list[int]) -> CompactModel:
    """The compact model of py3langid's model as ``py3langid.modelio.load_model``
    returns it: ``nextmove`` the distinct 256-entry transition rows, ``row_index``
    each state's row, ``output`` each state's n-gram (-1: none).

    The states' strings come from a breadth-first walk from state 0 (a state's string
    is its parent's plus the byte that first reaches it). The automaton is accepted
    only if it is the Aho-Corasick automaton of that trie -- each transition goes to
    the child when there is one and otherwise where the state's failure state goes --
    and each state's output is the longest n-gram that is a suffix of its string;
    otherwise :class:`ModelLayoutError`."""
    rows = _as_uint(nextmove).reshape(-1, 256)
    index = _as_uint(row_index).astype(np.intp)
    out = np.asarray(output, dtype=np.int64)
    states = len(index)
    if len(out) != states or states == 0:
        raise ModelLayoutError("one output per automaton state needed")
    if int(rows.max()) >= states:
        raise ModelLayoutError("a transition leads to no state")
    depth = np.full(states, -1, dtype=np.int64)
    value = np.zeros(states, dtype=np.uint64)
    fail = np.zeros(states, dtype=np.intp)
    depth[0] = 0
    frontier = np.zeros(1, dtype=np.intp)
    level = 0
    while frontier.size:
        found = [_children(rows, index, depth, part)
                 for part in np.array_split(frontier, max(1, len(frontier) // _CHUNK))]
        new = np.concatenate([kids for kids, _, _ in found])
        parents = np.concatenate([mothers for _, mothers, _ in found])
        byte = np.concatenate([edge for _, _, edge in found])
        if len(np.unique(new)) != len(new):
            raise ModelLayoutError("a state has two parents")
        if new.size and level >= MAX_NGRAM:
            raise ModelLayoutError(f"n-grams longer than {MAX_NGRAM} bytes")
        depth[new] = level + 1
        value[new] = (value[parents] << np.uint64(8)) | byte.astype(np.uint64)
        # the failure state of parent+byte: where parent's failure state goes on byte
        fail[new] = 0 if level == 0 else rows[index[fail[parents]], byte]
        frontier = new
        level += 1
    if bool(np.any(depth < 0)):
        raise ModelLayoutError("states unreachable from the start")
    _check_transitions(rows, index, depth, fail)
    keys_of_state = (depth.astype(np.uint64) << np.uint64(LENGTH_SHIFT)) | value
    features = len(ptc)
    if out.max(initial=-1) >= features or len(np.unique(out[out >= 0])) != features:
        raise ModelLayoutError("n-gram outputs do not match the table's rows")
    # an n-gram's own state: the shallowest state that outputs it
    with_output = np.flatnonzero(out >= 0)
    by_feature = with_output[np.lexsort((depth[with_output], out[with_output]))]
    own = by_feature[np.r_[True, out[by_feature][1:] != out[by_feature][:-1]]]
    feature_keys = np.empty(features, dtype=np.uint64)
    feature_keys[out[own]] = keys_of_state[own]
    if int(depth[own].min()) < 1:
        raise ModelLayoutError("an empty n-gram")
    order = np.argsort(feature_keys)
    keys = feature_keys[order]
    _check_outputs(depth, value, out, keys, order)
    return compact(keys, np.asarray(ptc)[order], pc, classes)


def _children(rows: NDArray[Any], index: NDArray[np.intp], depth: NDArray[np.int64],
              frontier: NDArray[np.intp]) -> tuple[NDArray[np.intp], NDArray[np.intp],
                                                   NDArray[np.intp]]:
    """The states first reached from ``frontier`` (not yet given a depth), with the
    parent and byte that reach each."""
    targets = rows[index[frontier]].astype(np.intp)
    parent_at, byte = np.nonzero(depth[targets] < 0)
    return targets[parent_at, byte], frontier[parent_at], byte


def _check_transitions(rows: NDArray[Any], index: NDArray[np.intp],
                       depth: NDArray[np.int64], fail: NDArray[np.intp]) -> None:
    """Every transition of every state goes to its trie child on that byte (a state
    one deeper: :func:`derive` made sure no other state leads there), or where the
    state's failure state goes (from the start state: back to itself)."""
    states = len(index)
    for start in range(0, states, _CHUNK):
        part = np.arange(start, min(start + _CHUNK, states))
        goes = rows[index[part]].astype(np.intp)
        is_child = depth[goes] == (depth[part] + 1)[:, None]
        expected = np.where(is_child, goes, rows[index[fail[part]]].astype(np.intp))
        if start == 0:
            expected[0] = np.where(is_child[0], goes[0], 0)
        if not np.array_equal(goes, expected):
            raise ModelLayoutError("not an Aho-Corasick automaton of its trie")


def _check_outputs(depth: NDArray[np.int64], value: NDArray[np.uint64],
                   out: NDArray[np.int64], keys: NDArray[np.uint64],
                   order: NDArray[np.intp]) -> None:
    """Every state outputs the longest n-gram that is a suffix of its string."""
    expected = np.full(len(depth), -1, dtype=np.int64)
    for n in range(1, MAX_NGRAM + 1):  # longer suffixes later, so they win
        long_enough = depth >= n
        suffix = value & np.uint64((1 << (8 * n)) - 1)
        needles = suffix | np.uint64(n << LENGTH_SHIFT)
        at = np.minimum(np.searchsorted(keys, needles), len(keys) - 1)
        hit = long_enough & (keys[at] == needles)
        expected[hit] = order[at[hit]]
    if not np.array_equal(expected, out):
        raise ModelLayoutError("a state's output is not its longest n-gram suffix")


# -- I/O: py3langid's model file, and the cache folder --------------------------------


def cache_root() -> Path:
    """Where derived models are kept: ``$XDG_CACHE_HOME/polite-crawler/langid``
    (``~/.cache`` when that is not set)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "polite-crawler" / "langid"


def _model_file() -> Path:
    from py3langid.langid import MODEL_DIR, MODEL_FILE  # type: ignore[import-untyped]

    path = Path(MODEL_FILE)
    return path if path.is_absolute() else Path(MODEL_DIR) / path


def _cache_name(model_file: Path) -> str:
    digest = hashlib.sha256(model_file.read_bytes()).hexdigest()[:16]
    version = importlib.metadata.version("py3langid")
    return f"v{CACHE_FORMAT}-py3langid-{version}-{digest}"


def _derive_from_file(model_file: Path) -> CompactModel:
    from py3langid.modelio import load_model  # type: ignore[import-untyped]

    ptc, pc, classes, nextmove, row_index, output = load_model(model_file)
    return derive(np.asarray(ptc), np.asarray(pc), classes, nextmove, row_index, output)


def _read(folder: Path) -> CompactModel:
    """The cached model in ``folder``, its tables mapped from the files."""
    def array(name: str, *dtypes: type[np.generic]) -> NDArray[Any]:
        found = np.asarray(np.load(folder / f"{name}.npy", mmap_mode="r",
                                   allow_pickle=False))
        if found.dtype not in dtypes:
            raise ModelLayoutError(f"{folder / name}.npy: {found.dtype}, not "
                                   + " or ".join(np.dtype(d).name for d in dtypes))
        return found

    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    model = CompactModel(ptc=array("ptc", np.float16, np.float32),
                         negative_normal=meta.get("negative_normal") is True,
                         pc=np.array(array("pc", np.float32)),
                         classes=tuple(str(label) for label in meta["classes"]),
                         pairs=array("pairs", np.uint32), table=array("table", np.uint64),
                         multipliers=np.array(array("multipliers", np.uint64)),
                         lengths=tuple(int(n) for n in meta["lengths"]), pad=int(meta["pad"]))
    model.check()
    return model


def _write(model: CompactModel, folder: Path) -> None:
    """Write ``model`` to ``folder`` whole or not at all (a temporary folder beside it,
    renamed)."""
    temporary = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    try:
        for name in ("ptc", "pc", "pairs", "table", "multipliers"):
            np.save(temporary / f"{name}.npy", getattr(model, name))
        meta = {"classes": list(model.classes), "lengths": list(model.lengths),
                "pad": model.pad, "negative_normal": model.negative_normal}
        (temporary / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        temporary.chmod(0o755)  # readable by whoever shares the cache folder
        os.replace(temporary, folder)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def load_compact(root: Path | None = None) -> CompactModel:
    """The compact model of the installed py3langid model: from the cache folder
    under ``root`` (default :func:`cache_root`), derived and written there first if
    it is missing or unreadable; derived in memory if the folder cannot be written.
    One process derives at a time (a lock file), so workers starting together derive
    it once."""
    model_file = _model_file()
    root = root or cache_root()
    folder = root / _cache_name(model_file)
    try:
        return _read(folder)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if folder.exists():
            log.warning("language model cache %s unreadable (%s); deriving it again",
                        folder, exc)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with open(root / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return _read(folder)  # another process wrote it while we waited
            except (OSError, ValueError, KeyError, TypeError):
                pass
            model = _derive_from_file(model_file)
            shutil.rmtree(folder, ignore_errors=True)
            _write(model, folder)
        return _read(folder)
    except OSError as exc:
        log.warning("language model cache %s not writable (%s); deriving it in memory",
                    folder, exc)
        return _derive_from_file(model_file)


def load_identifier(root: Path | None = None) -> Identifier:
    """The fast identifier for the installed py3langid model; py3langid's own
    identifier when its model's automaton is not one this module can reproduce."""
    try:
        return FastIdentifier(load_compact(root))
    except ModelLayoutError as exc:
        log.warning("language model not reproducible without its automaton (%s); "
                    "using py3langid's own identifier", exc)
        from py3langid.langid import LanguageIdentifier

        identifier: Identifier = LanguageIdentifier.from_model_file(
            _model_file(), norm_probs=True)
        return identifier

