"""The Cassandra store's schema: its tables, how their rows map to the state records,
and how a keyspace is created, migrated and checked when a store opens.

Table ids are derived from the keyspace and table names, so services starting side by
side on different coordinators create the same tables. Columns that later versions add
to a table are added to an older keyspace (``ALTER TABLE``); a key column that is
missing or a column of another type is a :class:`~common.ports.SchemaError`. The first
store to open a keyspace records its schema version (``schema_version``); a newer
version is refused, and so is a keyspace of version 1, whose status and count tables
have another partition key (see :func:`migrate`).

The functions here block (the driver's synchronous calls): the store runs them in a
worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from cassandra import ConsistencyLevel, InvalidRequest, OperationTimedOut, Unavailable, WriteTimeout
from cassandra.query import SimpleStatement

from common.adapters.rowcodec import RowCodec
from common.ports import HostState, RobotsRecord, SchemaError, UrlState

log = logging.getLogger(__name__)

# 2: url_by_status and the counts (host_counts) are partitioned by host alone, so that
# every write of one host's rows is a single-partition batch
SCHEMA_VERSION = 2
SCHEMA_CLAIM_TRIES = 5  # tries of the schema version's lightweight transaction at start
# how long a table seen without its key columns is re-read before it is called a table
# of another layout (a refresh can read it half-created, see _columns)
PARTIAL_TABLE_WAIT = 5.0

# lower case only: Cassandra folds unquoted names to lower case, so a keyspace created
# as krunA is krunA's lower-case twin, and looking it up as krunA finds nothing
KEYSPACE_RE = re.compile(r"[a-z][a-z0-9_]{0,47}")
_TABLE_ID_NAMESPACE = uuid.UUID("0f5c6a52-5e0a-4c1e-9a53-2b1f8f0d6c11")


@dataclass(frozen=True)
class Table:
    name: str
    columns: dict[str, str]  # name -> CQL type, in declaration order
    key: str  # the PRIMARY KEY clause
    options: str = ""

    @property
    def key_columns(self) -> frozenset[str]:
        return frozenset(re.findall(r"[a-z_]+", self.key))

    def ddl(self, keyspace: str) -> str:
        table_id = uuid.uuid5(_TABLE_ID_NAMESPACE, f"{keyspace}.{self.name}")
        columns = ", ".join(f"{n} {t}" for n, t in self.columns.items())
        options = f" AND {self.options}" if self.options else ""
        return (f"CREATE TABLE IF NOT EXISTS {keyspace}.{self.name} ({columns}, "
                f"PRIMARY KEY {self.key}) WITH ID = {table_id}{options}")


# Tables that lose entries as URLs move on: purge their tombstones within hours.
_CHURN = ("gc_grace_seconds = 10800 AND compaction = {'class': "
          "'SizeTieredCompactionStrategy', 'unchecked_tombstone_compaction': 'true', "
          "'tombstone_compaction_interval': '3600'}")

URL_COLUMNS = {
    "host": "text", "url": "text", "status": "text", "reason": "text", "detail": "text",
    "depth": "bigint", "priority": "bigint", "hops": "bigint", "source": "text",
    "discovered_at": "double", "seq": "bigint", "last_fetch_at": "double",
    "next_fetch_at": "double", "attempts": "bigint", "http_status": "bigint",
    "etag": "text", "last_modified": "text", "content_hash": "text", "simhash": "bigint",
    "duplicate_of": "text", "revisit_interval": "double", "record_file": "text",
    "record_offset": "bigint", "record_length": "bigint", "kind": "text", "lastmod": "double",
}

TABLES: tuple[Table, ...] = (
    # buckets: the count partitions per status of version 1; 1 (unused) since version 2
    Table("schema_version", {"name": "text", "version": "int", "buckets": "int"},
          "(name)"),
    Table("url_state", URL_COLUMNS, "((host), url)"),
    Table("url_queue", {"host": "text", "priority": "bigint", "depth": "bigint",
                        "seq": "bigint", "url": "text", "next_fetch_at": "double"},
          "((host), priority, depth, seq, url)", _CHURN),
    Table("url_next", {"host": "text", "next_fetch_at": "double", "url": "text"},
          "((host), next_fetch_at, url)", _CHURN),
    Table("url_by_status", {"host": "text", "status": "text", "url": "text"},
          "((host), status, url)", _CHURN),
    Table("host_counts", {"host": "text", "status": "text", "reason": "text",
                          "n": "bigint"}, "((host), status, reason)"),
    Table("hosts", {"host": "text", "crawl_delay": "double", "delay_override": "double",
                    "blocked": "boolean", "max_pages": "bigint", "page_count": "bigint",
                    "next_allowed_at": "double", "last_response_time": "double",
                    "capped": "boolean",
                    "lease_until": "double",
                    # added later (ALTER TABLE at start): empty in older rows
                    "refreshes": "bigint", "sitemap_files": "bigint"}, "(host)"),
    Table("robots", {"origin": "text", "status": "bigint", "body": "blob",
                     "fetched_at": "double", "expires_at": "double"}, "(origin)"),
    Table("content", {"content_hash": "text", "url": "text", "record_file": "text",
                      "record_offset": "bigint", "record_length": "bigint"},
          "(content_hash)"),
    Table("simhash_blocks", {"block_key": "bigint", "url": "text", "simhash": "bigint"},
          "((block_key), url)"),
    Table("simhash_sketches", {"url": "text", "sketch": "blob"}, "(url)"),
    Table("control", {"name": "text", "value": "text"}, "(name)"),
    Table("seed_roots", {"domain": "text", "host": "text", "path": "text"},
          "((domain), host, path)"),
)
TABLES_BY_NAME = {t.name: t for t in TABLES}

# ---------------------------------------------------------------------------- codecs

URLS = RowCodec(UrlState, pointer="record", unsigned=frozenset({"simhash"}))
HOSTS = RowCodec(HostState, added=frozenset({"refreshes", "sitemap_files"}))
ROBOTS = RowCodec(RobotsRecord)

# --------------------------------------------------------------- create and migrate


def migrate(cluster: Any, session: Any, keyspace: str, *, replication_factor: int,
            write_level: int, request_timeout: float) -> None:
    """Create what is missing (idempotent), add missing columns, check the version.

    A keyspace of schema version 1 is refused with a :class:`~common.ports.SchemaError`
    before anything is created in it: its url_by_status is partitioned by (host,
    status) and its counts live in url_counts by (status, bucket), so its rows cannot
    be read through this layout, and rewriting a running crawl's tables in place is
    not attempted. Crawl into a new keyspace (or drop the old one).
    """
    ks = keyspace
    timeout = max(request_timeout, 60.0)
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {{'class': "
        f"'SimpleStrategy', 'replication_factor': {replication_factor}}}",
        timeout=timeout)
    _refuse_old_layout(cluster, session, ks, timeout)
    for table in TABLES:
        session.execute(table.ddl(ks), timeout=timeout)
    cluster.refresh_keyspace_metadata(ks)
    for table in TABLES:
        have = _columns(cluster, ks, table)
        for name, cql_type in table.columns.items():
            if name not in have:
                if name in table.key_columns:
                    raise SchemaError(f"{ks}.{table.name}: key column {name} is missing; "
                                      "the table has another layout")
                # Migration: columns added by later versions of a table. Another
                # process may be adding the same column: that is fine too.
                with contextlib.suppress(InvalidRequest):
                    session.execute(f"ALTER TABLE {ks}.{table.name} ADD {name} "
                                    f"{cql_type}", timeout=timeout)
            elif have[name] != cql_type:
                raise SchemaError(f"{ks}.{table.name}.{name} is {have[name]}, "
                                  f"expected {cql_type}")
    # The first store to open a keyspace fixes its version.
    row = _claim_schema_version(session, ks, write_level, timeout)
    if not row["[applied]"]:
        _check_version(ks, row["version"])


def _check_version(keyspace: str, version: int | None) -> None:
    if version is None:
        raise SchemaError(f"{keyspace}.schema_version: incomplete row (no version)")
    if version > SCHEMA_VERSION:
        raise SchemaError(f"keyspace {keyspace}: schema version {version} is newer than "
                          f"this code supports ({SCHEMA_VERSION})")
    if version < SCHEMA_VERSION:
        raise SchemaError(
            f"keyspace {keyspace}: schema version {version} has the old layout "
            "(url_by_status by (host, status), counts in url_counts by status bucket); "
            f"this code needs version {SCHEMA_VERSION} (every table of a host's URL rows "
            "partitioned by host) and does not convert a keyspace: crawl into a new "
            "keyspace (CRAWLER_STORE_KEYSPACE) or drop this one")


def _refuse_old_layout(cluster: Any, session: Any, keyspace: str, timeout: float) -> None:
    """Raise before anything is created when the keyspace records an older version."""
    cluster.refresh_keyspace_metadata(keyspace)
    found = cluster.metadata.keyspaces.get(keyspace)
    if found is None or "schema_version" not in found.tables:
        return
    result = session.execute(SimpleStatement(
        f"SELECT version FROM {keyspace}.schema_version WHERE name = 'crawler'",
        consistency_level=ConsistencyLevel.QUORUM), timeout=timeout)
    row = result.one()
    if row is not None:
        _check_version(keyspace, row[0])


def _claim_schema_version(session: Any, keyspace: str, write_level: int,
                          timeout: float) -> dict[str, Any]:
    """Insert the keyspace's version row unless there is one (a lightweight
    transaction); the row as it is. Services that start together race for it, and on
    a busy node a Paxos round can time out with its outcome unknown: asking again is
    safe (the row is the same whoever wrote it), a few times."""
    statement = SimpleStatement(
        f"INSERT INTO {keyspace}.schema_version (name, version, buckets) VALUES "
        f"('crawler', {SCHEMA_VERSION}, 1) IF NOT EXISTS",
        consistency_level=write_level)
    for attempt in range(1, SCHEMA_CLAIM_TRIES + 1):
        try:
            result = session.execute(statement, timeout=timeout)
        except (WriteTimeout, Unavailable, OperationTimedOut) as exc:
            if attempt == SCHEMA_CLAIM_TRIES:
                raise
            log.info("recording the schema version timed out (%s); asking again", exc)
            time.sleep(0.5 * attempt)
            continue
        return dict(zip(result.column_names, result.one(), strict=True))
    raise AssertionError("unreachable")


def _columns(cluster: Any, keyspace: str, table: Table) -> dict[str, str]:
    """The table's columns and types, once the driver's schema metadata shows it.

    A table another process created a moment ago can take a refresh or two to appear,
    and a refresh that ran while it was being created can hold the table without all
    of its columns (the driver reads the tables and the columns of the schema in
    separate queries). So a table is re-read until its key columns are there, for a
    few seconds, before the caller may call it a table of another layout.
    """
    deadline = time.monotonic() + 30.0
    partial_deadline: float | None = None
    while True:
        found_keyspace = cluster.metadata.keyspaces.get(keyspace)
        found = found_keyspace.tables.get(table.name) if found_keyspace is not None else None
        if found is not None:
            have = {name: col.cql_type for name, col in found.columns.items()}
            if table.key_columns <= have.keys():
                return have
            now = time.monotonic()
            if partial_deadline is None:
                partial_deadline = now + PARTIAL_TABLE_WAIT
            elif now > partial_deadline:
                return have
            time.sleep(0.2)
            cluster.refresh_table_metadata(keyspace, table.name)
            continue
        if time.monotonic() > deadline:
            raise SchemaError(f"{keyspace}.{table.name}: not visible after it was created")
        time.sleep(0.2)
        cluster.refresh_schema_metadata(max_schema_agreement_wait=10)
