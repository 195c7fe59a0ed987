"""Unsigned 64-bit numbers (SimHash fingerprints) in signed 64-bit columns."""

from __future__ import annotations

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
