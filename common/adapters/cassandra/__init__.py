"""The cluster-mode :class:`~common.ports.StateStore`: Apache Cassandra 4.x and 5.x.

One keyspace per crawl (``CRAWLER_STORE_KEYSPACE``), created with ``SimpleStrategy`` and
``CRAWLER_STORE_REPLICATION_FACTOR`` when it does not exist yet (an existing keyspace keeps
the replication an operator gave it) by :meth:`CassandraStateStore.open`, which also
creates and checks the schema (``CREATE ... IF NOT EXISTS``, table ids derived from the
keyspace and table names so that services starting side by side on different
coordinators create the same tables, missing regular columns added, a ``schema_version``
row). Plain CQL only: no secondary indexes, SAI, materialized views or ``ALLOW
FILTERING``.

Tables (partition key in double parentheses):

- ``url_state ((host), url)``: every :class:`~common.ports.UrlState` field, the record
  pointer as ``record_file``, ``record_offset``, ``record_length``. The truth.
- ``url_queue ((host), priority, depth, seq, url)`` -> ``next_fetch_at``: the host's
  QUEUED rows in fetch order, for :meth:`~CassandraStateStore.due_urls`.
- ``url_next ((host), next_fetch_at, url)``: the same rows by time, for
  :meth:`~CassandraStateStore.next_due_time` (one row read).
- ``url_by_status ((host), status, url)``: rows in every other status, so recovery
  (IN_FLIGHT, FETCHED) reads one slice of a host's partition instead of scanning.
- ``host_counts ((host), status, reason)`` -> ``n``: the host's rows per (status,
  reason). ``hosts_with_status`` and ``count_urls`` (``crawler stats``, the API, the
  frontier's queued gauge every 10 s, recovery) scan the whole table, paged: cost
  grows with hosts x (status, reason) pairs, a few rows per host (one statement per
  5,000 rows), not with URLs.

Every table written with a host's URL rows (url_state, url_queue, url_next,
url_by_status, host_counts, hosts) has the partition key ``host``, so one batch of a
host's writes is one mutation: atomic on each replica and never written to the batch
log (see :mod:`~common.adapters.cassandra.url_state`). Schema version 2; a keyspace of
version 1 (statuses by (host, status), counts by status bucket) is refused at open.
- ``hosts ((host))``, ``robots ((origin))``, ``content ((content_hash))``,
  ``simhash_blocks ((block_key), url)`` -> ``simhash``, ``simhash_sketches ((url))`` ->
  ``sketch`` (the page's MinHash sketch), ``seed_roots ((domain), host, path)`` (the
  seeds as the crawl scope knows them; one partition per registered domain).

Consistency levels come from the settings: ``read_consistency`` for plain reads,
``write_consistency`` for writes. The reads that a write depends on (does this URL exist,
what was its status, what are the counts) use a level that overlaps the write level
(LOCAL_QUORUM when writes are LOCAL_QUORUM; ALL when writes are ONE), so a writer always
sees its own earlier writes. With RF > 1, give plain reads an overlapping level too
(LOCAL_QUORUM) if callers read a row and write it back. On one node, LOCAL_QUORUM with
RF=1 is one replica.

Requests run concurrently on the driver's own I/O thread (``execute_async``), bridged into
asyncio, at most ``max_concurrency`` at a time.

The parts, one module each:

- :mod:`~common.adapters.cassandra.schema`: the tables, their row codecs, creating,
  migrating and checking a keyspace;
- :mod:`~common.adapters.cassandra.statements`: the prepared statements;
- :mod:`~common.adapters.cassandra.session`: connecting, running statements, batches,
  per-host write locks, consistency levels, outage reports;
- :mod:`~common.adapters.cassandra.url_state`: url_state and its derived tables (the
  write path that keeps them in step, the count repair, the queue and status reads),
  with :mod:`~common.adapters.cassandra.row_cache`, what a host's one writer keeps of
  its rows in memory;
- :mod:`~common.adapters.cassandra.small_tables`: hosts, control, seed roots, robots,
  content records and the near-duplicate index;
- :mod:`~common.adapters.cassandra.store`: :class:`CassandraStateStore`, all of them
  together.
"""

from common.adapters.cassandra.schema import SCHEMA_VERSION, TABLES
from common.adapters.cassandra.session import CassandraUnavailableError
from common.adapters.cassandra.store import CassandraStateStore
from common.adapters.cassandra.url_state import BATCH_BYTES, BATCH_ROWS

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "SCHEMA_VERSION",
    "TABLES",
    "CassandraStateStore",
    "CassandraUnavailableError",
]
