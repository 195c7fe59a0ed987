"""The store's CQL statements, prepared once when it opens, each with its consistency
level: ``read`` for plain reads, ``write`` for writes and ``rmw`` (a level that
overlaps the write level) for the reads a write depends on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.adapters.cassandra.schema import HOSTS, ROBOTS, TABLES_BY_NAME, URLS


def prepare(session: Any, keyspace: str, *, read: int, write: int,
            rmw: int) -> dict[str, Any]:
    """Prepare every statement the store runs, by name (blocks: call it in a thread)."""
    ks = keyspace
    url_cols = URLS.columns

    def insert(table: str, columns: Sequence[str]) -> str:
        return (f"INSERT INTO {ks}.{table} ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' for _ in columns)})")

    old = "url, status, reason, priority, depth, seq, next_fetch_at"
    cql = {
        "put_url": (insert("url_state", url_cols), write),
        "get_url": (f"SELECT {URLS.select} FROM {ks}.url_state "
                    "WHERE host = ? AND url = ?", read),
        "host_statuses": (f"SELECT status, reason FROM {ks}.url_state WHERE host = ?",
                          rmw),
        "get_urls": (f"SELECT {URLS.select} FROM {ks}.url_state "
                     "WHERE host = ? AND url IN ?", read),
        "old_urls": (f"SELECT {old} FROM {ks}.url_state WHERE host = ? AND url IN ?",
                     rmw),
        "queue_put": (insert("url_queue", tuple(TABLES_BY_NAME["url_queue"].columns)), write),
        "queue_del": (f"DELETE FROM {ks}.url_queue WHERE host = ? AND priority = ? "
                      "AND depth = ? AND seq = ? AND url = ?", write),
        "queue_scan": ("SELECT priority, depth, seq, url, next_fetch_at "
                       f"FROM {ks}.url_queue WHERE host = ?", read),
        "next_put": (insert("url_next", ("host", "next_fetch_at", "url")), write),
        "next_del": (f"DELETE FROM {ks}.url_next WHERE host = ? AND next_fetch_at = ? "
                     "AND url = ?", write),
        "next_first": (f"SELECT next_fetch_at FROM {ks}.url_next WHERE host = ? LIMIT 1",
                       read),
        "status_put": (insert("url_by_status", ("host", "status", "url")), write),
        "status_del": (f"DELETE FROM {ks}.url_by_status WHERE host = ? AND status = ? "
                       "AND url = ?", write),
        "status_scan": (f"SELECT url FROM {ks}.url_by_status WHERE host = ? "
                        "AND status = ?", read),
        "counts_put": (insert("host_counts", ("host", "status", "reason", "n")), write),
        "counts_of_host": (f"SELECT status, reason, n FROM {ks}.host_counts "
                           "WHERE host = ?", rmw),
        "counts_scan": (f"SELECT host, status, reason, n FROM {ks}.host_counts", read),
        "put_host": (insert("hosts", HOSTS.columns), write),
        "get_host": (f"SELECT {HOSTS.select} FROM {ks}.hosts WHERE host = ?", read),
        "list_hosts": (f"SELECT {HOSTS.select} FROM {ks}.hosts", read),
        "put_control": (insert("control", ("name", "value")), write),
        "get_control": (f"SELECT value FROM {ks}.control WHERE name = ?", read),
        "seed_root_put": (insert("seed_roots", ("domain", "host", "path")), write),
        "seed_roots_get": (f"SELECT domain, host, path FROM {ks}.seed_roots "
                           "WHERE domain = ?", read),
        "put_robots": (insert("robots", ROBOTS.columns), write),
        "get_robots": (f"SELECT {ROBOTS.select} FROM {ks}.robots WHERE origin = ?", read),
        "claim_put": (insert("content", ("content_hash", "url", "record_file",
                                         "record_offset", "record_length"))
                      + " USING TIMESTAMP ?", write),
        "claim_get": ("SELECT content_hash, url, record_file, record_offset, record_length "
                      f"FROM {ks}.content WHERE content_hash IN ?", rmw),
        "simhash_put": (insert("simhash_blocks", ("block_key", "url", "simhash")), write),
        "simhash_get": (f"SELECT block_key, url, simhash FROM {ks}.simhash_blocks "
                        "WHERE block_key IN ?", read),
        "sketch_put": (insert("simhash_sketches", ("url", "sketch")), write),
        "sketch_get": (f"SELECT url, sketch FROM {ks}.simhash_sketches "
                       "WHERE url IN ?", read),
    }
    prepared: dict[str, Any] = {}
    for name, (text, level) in cql.items():
        statement = session.prepare(text)
        statement.consistency_level = level
        prepared[name] = statement
    return prepared
