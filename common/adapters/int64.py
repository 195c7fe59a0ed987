"""Unsigned 64-bit numbers (SimHash fingerprints) in signed 64-bit columns."""

from __future__ import annotations

from collections.abc import Iterable

_U64 = 1 << 64
_I63 = 1 << 63


def to_signed(value: int) -> int:
    """An unsigned 64-bit number as the signed integer a bigint column holds."""
    if not 0 <= value < _U64:
        raise ValueError(f"{value!r} is not an unsigned 64-bit number")
    return value - _U64 if value >= _I63 else value


def to_unsigned(value: int) -> int:
    """The inverse of :func:`to_signed`."""
    return value + _U64 if value < 0 else value


def index_entries(keys: Iterable[int], url: str, simhash: int | None
                  ) -> list[tuple[int, str, int]]:
    """The rows of a page's near-duplicate index entries: (key, url, simhash) with the
    key and the SimHash signed, each key once, in key order. A page needs its SimHash
    to be indexed."""
    if simhash is None:
        raise ValueError(f"near-duplicate index entries of {url!r} without a SimHash")
    value = to_signed(simhash)
    return [(k, url, value) for k in sorted({to_signed(k) for k in keys})]
