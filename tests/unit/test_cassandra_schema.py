"""How the Cassandra store reads a table's columns from the driver's schema metadata.

The driver builds a table's metadata from the schema's tables and its columns, read in
separate queries; a refresh that runs while another process creates the table can hold
it with none or some of its columns. These tests give ``_columns`` a metadata source
that answers the way the driver does in that moment (the race itself needs two
processes and luck to reproduce on a real node).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from common.adapters.cassandra import schema


@dataclass
class _Column:
    cql_type: str


@dataclass
class _TableMeta:
    columns: dict[str, _Column]


@dataclass
class _KeyspaceMeta:
    tables: dict[str, _TableMeta]


@dataclass
class _Metadata:
    keyspaces: dict[str, _KeyspaceMeta]


@dataclass
class _Cluster:
    """Shows each table with the columns of the next answer in ``answers`` at every
    refresh (the last answer stays)."""

    answers: list[dict[str, str]]
    refreshes: list[str] = field(default_factory=list)
    metadata: _Metadata = field(init=False)

    def __post_init__(self) -> None:
        self._show()

    def _show(self) -> None:
        columns = self.answers[0] if self.answers else {}
        tables = {t.name: _TableMeta({n: _Column(c) for n, c in columns.items()})
                  for t in schema.TABLES}
        self.metadata = _Metadata({"ks": _KeyspaceMeta(tables)})

    def refresh_table_metadata(self, keyspace: str, table: str) -> None:
        self.refreshes.append(f"{keyspace}.{table}")
        if len(self.answers) > 1:
            self.answers.pop(0)
        self._show()

    def refresh_schema_metadata(self, **_: Any) -> None:
        self.refresh_table_metadata("ks", "*")


ROBOTS = schema.TABLES_BY_NAME["robots"]


def test_a_table_read_without_its_columns_is_read_again() -> None:
    cluster = _Cluster([{}, {"status": "bigint"}, ROBOTS.columns])
    assert schema._columns(cluster, "ks", ROBOTS) == ROBOTS.columns
    assert cluster.refreshes == ["ks.robots", "ks.robots"]


def test_a_table_of_another_layout_is_given_back_as_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "PARTIAL_TABLE_WAIT", 0.5)
    other = {"name": "text", "status": "bigint"}  # no origin: another key
    cluster = _Cluster([other])
    assert schema._columns(cluster, "ks", ROBOTS) == other
    assert 1 <= len(cluster.refreshes) <= 5


def test_a_whole_table_is_not_read_again() -> None:
    cluster = _Cluster([ROBOTS.columns])
    assert schema._columns(cluster, "ks", ROBOTS) == ROBOTS.columns
    assert cluster.refreshes == []
