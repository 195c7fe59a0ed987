"""Struct <-> table row, shared by the SQLite and Cassandra stores.

A :class:`RowCodec` turns a msgspec struct into a list of column values in field order
and back. A :class:`~common.messages.RecordPointer` field ``f`` becomes three columns
``f_file``, ``f_offset`` and ``f_length``; ``unsigned`` fields are 64-bit numbers stored
two's-complement (both databases have signed 64-bit integers only); enum values are
stored as their text; bool fields read back as 0/1 (SQLite) become bools again. Rows read
back are validated by ``msgspec.convert``, so a corrupt row is an error, not a wrong
value.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import msgspec

from common.adapters.int64 import to_signed, to_unsigned

S = TypeVar("S", bound=msgspec.Struct)


class RowCodec(Generic[S]):
    def __init__(self, cls: type[S], *, pointer: str | None = None,
                 unsigned: frozenset[str] = frozenset(),
                 added: frozenset[str] = frozenset()) -> None:
        self.cls = cls
        fields = msgspec.structs.fields(cls)
        self._names = tuple(f.name for f in fields)
        self._bools = tuple(f.name for f in fields if f.type is bool)
        self._added = tuple(sorted(added))
        self._pointer_at = self._names.index(pointer) if pointer is not None else None
        self._unsigned_at = tuple(self._names.index(n) for n in sorted(unsigned))
        columns: list[str] = []
        for name in self._names:
            if name == pointer:
                columns += [f"{name}_file", f"{name}_offset", f"{name}_length"]
            else:
                columns.append(name)
        self.columns: tuple[str, ...] = tuple(columns)
        self.select = ", ".join(self.columns)

    def encode(self, obj: S) -> list[Any]:
        """Column values, in :attr:`columns` order."""
        values: list[Any] = list(msgspec.structs.astuple(obj))
        for i, value in enumerate(values):
            if isinstance(value, enum.Enum):
                values[i] = value.value
        for i in self._unsigned_at:
            if values[i] is not None:
                values[i] = to_signed(values[i])
        at = self._pointer_at
        if at is not None:
            pointer = values[at]
            values[at:at + 1] = ((None, None, None) if pointer is None
                                 else (pointer.file, pointer.offset, pointer.length))
        return values

    def decode(self, row: Sequence[Any]) -> S:
        """The struct of a row read back with :attr:`select`."""
        values = list(row)
        at = self._pointer_at
        if at is not None:
            file, offset, length = values[at:at + 3]
            values[at:at + 3] = [None if file is None
                                 else {"file": file, "offset": offset, "length": length}]
        for i in self._unsigned_at:
            if values[i] is not None:
                values[i] = to_unsigned(values[i])
        fields = dict(zip(self._names, values, strict=True))
        for name in self._added:
            if fields[name] is None:
                del fields[name]  # a row written before the column existed
        for name in self._bools:
            if fields[name] is not None:
                fields[name] = bool(fields[name])
        return msgspec.convert(fields, self.cls)
