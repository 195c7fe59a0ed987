"""url_state and the tables derived from it: url_queue (a host's QUEUED rows in fetch
order), url_next (the same rows by time), url_by_status (rows in every other status)
and host_counts (rows per status and reason). Every one of them, and the hosts table, is
partitioned by ``host`` alone.

Writes to url_state and the four derived tables. Each host has a single writer (its
frontier owner), so there are no lightweight transactions on this path: a write reads the
old rows and the host's counts (at a level that overlaps the write level; a writer that
holds them in memory reads neither), then writes the new rows together with their queue,
time, status and count entries (and, for ``put_url_and_host``, the host's row) as one
batch per chunk of rows. All of a chunk's statements share the partition key, so
Cassandra turns the batch into ONE mutation (it groups a batch by keyspace and partition
key, across tables): a mutation is applied whole or not at all on each replica, even if
the writer dies mid-call, and a batch of one mutation is not written to the batch log
(only a logged batch of several mutations is: ``mutateAtomic = isLogged &&
mutations.size() > 1``). So the derived tables never disagree with url_state and the
counts stay exact, at one round trip and no batch-log write per chunk. A call of many
rows is atomic per chunk (rows of one host, at most :data:`BATCH_ROWS` and about
:data:`BATCH_BYTES` of data, under Cassandra's default batch-size warning of 5 KiB), not
as a whole, unlike the SQLite store. A host's chunks run one after the other (each
carries the host's running counts); different hosts run concurrently. Within one
process, calls that touch the same host are serialized by a per-host lock. The
single-writer rule also relies on Cassandra's last-write-wins timestamps: when a host
moves to a new owner, the owners' clocks must agree to better than the hand-over time.

A unique page's near-duplicate index entries (simhash_blocks, simhash_sketches: other
partitions) ride in the batch of its result, which is then UNLOGGED: the host's part is
still one atomic mutation; the index entries are applied on their own. Should such a
write fail after part of it landed, the page may stay out of the near-duplicate index
(a later near copy of it is then not recognised); its row and counts stay exact.

``seq`` (discovery order): Cassandra has no global sequence, so ``add_urls`` numbers rows
with ``time.time_ns()``, raised where needed to stay strictly increasing within the
process. Rows written by one process are in insert order; across processes the order is
the clocks', which only affects breadth-first tie-breaking.

A write that fails may still land later; the host's counts are then checked against its
rows once that can no longer happen (:data:`REPAIR_AFTER`).

Tombstones: url_queue, url_next and url_by_status delete an entry whenever a URL leaves a
status, so a host's partitions collect tombstones at its fetch rate, which politeness
bounds (about one per second per host). These tables use a three-hour gc_grace_seconds
and tombstone compaction so they are purged within hours; a resurrected entry is
harmless because ``due_urls`` and ``urls_with_status`` check url_state.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from cassandra.query import UNSET_VALUE

from common.adapters.cassandra.row_cache import RowCache
from common.adapters.cassandra.schema import HOSTS, URLS
from common.adapters.cassandra.session import IN_ROWS, CassandraSession, chunks
from common.adapters.int64 import index_entries, to_signed
from common.messages import NearIndex, UrlStatus
from common.ports import HostState, UrlState
from common.settings import StoreSettings

log = logging.getLogger(__name__)

# Seconds after a failed url write of a host (and after the store's last outage) before
# its counts are checked against its rows: longer than a request the client gave up on
# can take to land, and than a restarted node takes to replay its batch log.
REPAIR_AFTER = 60.0
BATCH_ROWS = 32  # url_state rows per batch at most (with their derived entries)
BATCH_BYTES = 4096  # estimated data per batch at most
_ROW_BYTES = 320  # estimated data of one new row and its entries, besides its text
_REPLACE_BYTES = 400  # more for a replaced row: cleared columns, deleted entries

_QUEUED = str(UrlStatus.QUEUED)
_STATUSES = tuple(str(s) for s in UrlStatus)


def _unset_none(values: list[Any]) -> list[Any]:
    """None leaves a column unset on insert (no tombstone)."""
    return [UNSET_VALUE if v is None else v for v in values]

_seq_lock = threading.Lock()
_last_seq = 0


def _take_seqs(n: int) -> int:
    """The first of ``n`` discovery numbers, above every number this process gave out."""
    global _last_seq
    with _seq_lock:
        first = max(time.time_ns(), _last_seq + 1)
        _last_seq = first + n - 1
    return first


def _check(row: UrlState) -> None:
    """Fail before anything is written on a value the table cannot hold."""
    if row.simhash is not None:
        to_signed(row.simhash)


def _batches(items: Sequence[tuple[_Old | None, UrlState]]
             ) -> Iterable[Sequence[tuple[_Old | None, UrlState]]]:
    """Consecutive chunks of at most BATCH_ROWS rows and about BATCH_BYTES of data."""
    start, size = 0, 0
    for i, (old, new) in enumerate(items):
        texts = (new.detail, new.source, new.etag, new.last_modified, new.content_hash,
                 new.duplicate_of)
        row = (_ROW_BYTES + (0 if old is None else _REPLACE_BYTES) + 3 * len(new.url)
               + 2 * len(new.host) + sum(len(v) for v in texts if v is not None))
        if i > start and (i - start >= BATCH_ROWS or size + row > BATCH_BYTES):
            yield items[start:i]
            start, size = i, 0
        size += row
    if start < len(items):
        yield items[start:]


def _reason(value: object) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class _Old:
    """What a write needs to know of the row it replaces."""

    status: str
    reason: str
    priority: int
    depth: int
    seq: int
    next_fetch_at: float


def _old_of(row: UrlState) -> _Old:
    return _Old(str(row.status), _reason(row.reason), row.priority, row.depth, row.seq,
                row.next_fetch_at)


class UrlStateTables(CassandraSession):
    """url_state and the tables derived from it (url_queue, url_next, url_by_status,
    host_counts): the store's URL methods. See the module docstring for how a write keeps
    them in step."""

    def __init__(self, settings: StoreSettings, *, connect_timeout: float,
                 request_timeout: float, max_concurrency: int,
                 on_statement: Callable[[str, int], None] | None, row_cache: int,
                 repair_after: float) -> None:
        super().__init__(settings, connect_timeout=connect_timeout,
                         request_timeout=request_timeout, max_concurrency=max_concurrency,
                         on_statement=on_statement)
        self._cache = RowCache(row_cache) if row_cache > 0 else None
        # hosts whose url write failed (monotonic time of the last failure), and the
        # tasks that count their rows again once a late landing of it is no longer
        # possible (see _repair_counts)
        self._repair_after = repair_after
        self._suspect: dict[str, float] = {}
        self._repairs: dict[str, asyncio.Task[None]] = {}

    async def add_urls(self, rows: Sequence[UrlState]) -> list[UrlState]:
        """Insert rows whose (host, url) is new, numbering them in order (``seq``).

        Of rows repeated within the call, the first counts. Returns the inserted rows.
        """
        if not rows:
            return []
        unique: dict[tuple[str, str], UrlState] = {}
        for r in rows:
            _check(r)
            unique.setdefault((r.host, r.url), r)
        by_host: dict[str, list[UrlState]] = {}
        for r in unique.values():
            by_host.setdefault(r.host, []).append(r)
        async with self._locked(by_host):
            known = await self._old_rows(by_host)
            fresh = [r for r in unique.values() if (r.host, r.url) not in known]
            if not fresh:
                return []
            first = _take_seqs(len(fresh))
            inserted = [msgspec.structs.replace(r, seq=first + i) for i, r in enumerate(fresh)]
            changes: dict[str, list[tuple[_Old | None, UrlState]]] = {}
            for r in inserted:
                changes.setdefault(r.host, []).append((None, r))
            await self._apply(changes)
        return inserted

    async def get_url(self, host: str, url: str) -> UrlState | None:
        if self._cache is not None and (cached := self._cache.row(host, url)) is not None:
            return msgspec.structs.replace(cached)
        rows = await self._rows("get_url", (host, url))
        return URLS.decode(rows[0]) if rows else None

    async def put_url(self, row: UrlState) -> None:
        """Insert or replace one row, ``seq`` included."""
        await self.put_urls([row])

    async def put_urls(self, rows: Sequence[UrlState]) -> None:
        """Insert or replace rows; of rows repeated within the call, the last counts."""
        if not rows:
            return
        last: dict[tuple[str, str], UrlState] = {}
        for r in rows:
            last.pop((r.host, r.url), None)
            last[(r.host, r.url)] = r
        for r in last.values():
            _check(r)
        by_host: dict[str, list[UrlState]] = {}
        for r in last.values():
            by_host.setdefault(r.host, []).append(r)
        async with self._locked(by_host):
            old = await self._old_rows(by_host)
            changes = {host: [(old.get((host, r.url)), r) for r in group]
                       for host, group in by_host.items()}
            await self._apply(changes)

    async def put_url_and_host(self, row: UrlState, host: HostState, *,
                               index: NearIndex | None = None) -> None:
        """The URL's row, its index entries and counts, the host's row and, with
        ``index``, the page's near-duplicate index entries and sketch, in one batch:
        everything but the index entries is the host's partition, one mutation that
        Cassandra applies in full or not at all (see the module docstring)."""
        if row.host != host.host:
            raise ValueError(f"url row of {row.host!r} with the host row of {host.host!r}")
        _check(row)
        near = [] if index is None else index_entries(index.keys, row.url, row.simhash)
        sketch = index.sketch if index is not None else None
        async with self._locked([row.host]):
            old = await self._old_rows({row.host: [row]})
            await self._apply_host(row.host, [(old.get((row.host, row.url)), row)],
                                   host_row=host, near=(near, sketch))

    async def _old_rows(self, by_host: dict[str, list[UrlState]]) -> dict[tuple[str, str], _Old]:
        """The stored state of these rows, read at the write-overlapping level (rows in
        the cache are not read)."""
        found: dict[tuple[str, str], _Old] = {}
        cache = self._cache
        if cache is not None:
            unread: dict[str, list[str]] = {}
            for host, group in by_host.items():
                cached, missing = cache.split(host, (r.url for r in group))
                found.update({(host, url): _old_of(row) for url, row in cached.items()})
                if missing and not cache.complete(host):  # else: rows that do not exist
                    unread[host] = missing
        else:
            unread = {host: [r.url for r in group] for host, group in by_host.items()}
        keys = [(host, list(chunk)) for host, group in unread.items()
                for chunk in chunks(group, IN_ROWS)]
        results = await asyncio.gather(*(self._rows("old_urls", key) for key in keys))
        for (host, _), result in zip(keys, results, strict=True):
            for url, status, reason, priority, depth, seq, next_fetch_at in result:
                found[(host, url)] = _Old(status, reason or "", priority, depth, seq,
                                          next_fetch_at)
        return found

    async def _apply(self, changes: dict[str, list[tuple[_Old | None, UrlState]]]) -> None:
        """Write each host's changes: its chunks in order, hosts concurrently. Returns
        (or raises the first failure) only once every host's write has ended: the
        caller's host locks are held until then, so no other call reads a host's counts
        while a write of them is still on its way (which would lose one of the two)."""
        results = await asyncio.gather(
            *(self._apply_host(host, items) for host, items in changes.items()),
            return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _apply_host(self, host: str, items: list[tuple[_Old | None, UrlState]], *,
                          host_row: HostState | None = None,
                          near: tuple[list[tuple[int, str, int]], bytes | None] = ([], None)
                          ) -> None:
        """Write the rows of one host; ``host_row`` and ``near`` (near-duplicate index
        entries and a sketch) go into the last batch."""
        try:
            await self._write_host(host, items, host_row, near)
        except BaseException:
            if self._cache is not None:  # applied or not: read it back next time
                self._cache.forget(host)
            self._suspect_counts(host)
            raise

    def _suspect_counts(self, host: str) -> None:
        """A write of ``host`` failed: it may still land later (a request the client
        gave up on, a logged batch replayed from the batch log after a restart), after
        a later write that read the counts without it, which then disagree with the
        rows. Count the host's rows again once that can no longer happen."""
        self._suspect[host] = time.monotonic()
        if host not in self._repairs and self._session is not None:
            task = asyncio.get_running_loop().create_task(self._repair_counts(host),
                                                          name=f"repair-counts:{host}")
            self._repairs[host] = task
            task.add_done_callback(functools.partial(self._repair_done, host))

    def _repair_done(self, host: str, task: asyncio.Task[None]) -> None:
        if self._repairs.get(host) is task:
            del self._repairs[host]

    async def _repair_counts(self, host: str) -> None:
        """Wait until ``repair_after`` seconds have passed since the host's last failed
        write, then, under the host's lock, count its rows by (status, reason) and write
        the counts that differ. Tried again later while the store is down."""
        while True:
            since = self._suspect.get(host)
            if since is None:
                return
            # a node that was down replays its batch log some time after it is back
            wait = max(since, self._trouble) + self._repair_after - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                async with self._locked([host]):
                    if self._suspect.get(host) != since:
                        continue  # failed again meanwhile: wait from that failure
                    fixed = await self._recount(host)
                    del self._suspect[host]
                if fixed:
                    log.warning("counts of %s did not match its rows after a failed write; "
                                "repaired: %s", host, fixed)
                return
            except Exception as exc:
                log.info("recounting %s failed (%r); trying again later", host, exc)
                self._suspect[host] = time.monotonic()

    async def _recount(self, host: str) -> dict[tuple[str, str], tuple[int, int]]:
        """Count ``host``'s rows and write the counts that were wrong; returns them as
        (status, reason) -> (was, is). The caller holds the host's lock."""
        actual: Counter[tuple[str, str]] = Counter()
        async with contextlib.aclosing(self._pages("host_statuses", (host,))) as pages:
            async for page in pages:
                for status, reason in page:
                    actual[(status, reason or "")] += 1
        stored = await self._host_counts(host)
        wrong = {key: (stored.get(key, 0), actual.get(key, 0))
                 for key in set(stored) | set(actual)
                 if stored.get(key, 0) != actual.get(key, 0)}
        if wrong:
            batch = self._batch()  # one partition: the host's
            for (status, reason), (_, n) in sorted(wrong.items()):
                batch.add(self._ps["counts_put"], (host, status, reason, n))
            await self._send(batch)
        if self._cache is not None:
            self._cache.set_counts(host, _STATUSES, actual)
        return wrong

    async def _write_host(self, host: str, items: list[tuple[_Old | None, UrlState]],
                          host_row: HostState | None,
                          near: tuple[list[tuple[int, str, int]], bytes | None] = ([], None)
                          ) -> None:
        statuses = {str(new.status) for _, new in items}
        statuses |= {old.status for old, _ in items if old is not None}
        cache = self._cache
        if cache is not None:
            counts, unread = cache.host_counts(host, statuses)
            if unread:  # every status in one read, so the host's later writes read none
                counts = await self._host_counts(host)
                cache.set_counts(host, _STATUSES, counts)
        else:
            counts = await self._host_counts(host)
        ps = self._ps
        chunks = list(_batches(items))
        for number, chunk in enumerate(chunks, 1):
            # Every statement but the near-duplicate index entries is in the host's
            # partition (every table here is keyed by host), so Cassandra makes the
            # batch one mutation: applied whole or not at all on each replica, and
            # not written to the batch log (only a logged batch of several
            # partitions is). Index entries are other partitions: with them the batch
            # is unlogged, the host's part still one mutation (see put_url_and_host).
            indexed = number == len(chunks) and bool(near[0])
            batch = self._batch(logged=not indexed)
            if number == len(chunks):
                if host_row is not None:
                    batch.add(ps["put_host"], HOSTS.encode(host_row))
                entries, sketch = near
                for entry in entries:
                    batch.add(ps["simhash_put"], entry)
                if entries and sketch:
                    batch.add(ps["sketch_put"], (entries[0][1], sketch))
            touched: set[tuple[str, str]] = set()
            for old, new in chunk:
                url, status = new.url, str(new.status)
                key = (new.priority, new.depth, new.seq)
                values = URLS.encode(new)
                batch.add(ps["put_url"], _unset_none(values) if old is None else values)
                if old is not None:
                    if old.status == _QUEUED:
                        if status != _QUEUED or (old.priority, old.depth, old.seq) != key:
                            batch.add(ps["queue_del"], (host, old.priority, old.depth,
                                                        old.seq, url))
                        if status != _QUEUED or old.next_fetch_at != new.next_fetch_at:
                            batch.add(ps["next_del"], (host, old.next_fetch_at, url))
                    elif old.status != status:
                        batch.add(ps["status_del"], (host, old.status, url))
                    was = (old.status, old.reason)
                    counts[was] -= 1
                    touched.add(was)
                if status == _QUEUED:
                    batch.add(ps["queue_put"], (host, *key, url, new.next_fetch_at))
                    batch.add(ps["next_put"], (host, new.next_fetch_at, url))
                else:
                    batch.add(ps["status_put"], (host, status, url))
                now = (status, _reason(new.reason))
                counts[now] += 1
                touched.add(now)
            for status, reason in sorted(touched):
                batch.add(ps["counts_put"], (host, status, reason,
                                             counts[(status, reason)]))
            await self._send(batch)
            if cache is not None:
                cache.put(host, (new for _, new in chunk))
                cache.set_counts(host, statuses, counts)

    async def _host_counts(self, host: str) -> Counter[tuple[str, str]]:
        """The host's counts of every status, in one statement (one small partition)."""
        counts: Counter[tuple[str, str]] = Counter()
        for status, reason, n in await self._rows("counts_of_host", (host,)):
            counts[(status, reason)] = n
        return counts

    async def _fetch_rows(self, host: str, urls: Sequence[str]) -> dict[str, UrlState]:
        results = await asyncio.gather(*(self._rows("get_urls", (host, list(chunk)))
                                         for chunk in chunks(urls, IN_ROWS)))
        return {r.url: r for rows in results for r in map(URLS.decode, rows)}

    async def _rows_of(self, host: str, urls: Sequence[str]) -> dict[str, UrlState]:
        """The rows of these URLs: copies of cached ones, the rest read."""
        if self._cache is None:
            return await self._fetch_rows(host, urls)
        cached, unread = self._cache.split(host, urls)
        found = {url: msgspec.structs.replace(row) for url, row in cached.items()}
        if unread:
            found.update(await self._fetch_rows(host, unread))
        return found

    async def due_urls(self, host: str, now: float, limit: int) -> list[UrlState]:
        """Queued rows of ``host`` with next_fetch_at <= now, by (priority, depth, seq)."""
        if limit <= 0:
            return []
        return await self._queued(host, limit, now)

    async def _queued(self, host: str, limit: int, now: float | None) -> list[UrlState]:
        """The host's queued rows in queue order (those due by ``now``, if given).

        Reads url_queue in order and the url_state rows its entries name; an entry that
        disagrees with its row (a resurrected delete) is skipped.
        """
        found: list[UrlState] = []
        fetch_size = min(max(4 * limit, 100), 5000)
        async with contextlib.aclosing(self._pages("queue_scan", (host,),
                                                   fetch_size)) as pages:
            async for page in pages:
                entries = [e for e in page if now is None or e[4] <= now]
                while entries and len(found) < limit:
                    take, entries = entries[:limit - len(found)], entries[limit - len(found):]
                    rows = await self._rows_of(host, [e[3] for e in take])
                    for priority, depth, seq, url, next_fetch_at in take:
                        r = rows.get(url)
                        if (r is not None and r.status is UrlStatus.QUEUED
                                and (r.priority, r.depth, r.seq, r.next_fetch_at)
                                == (priority, depth, seq, next_fetch_at)):
                            found.append(r)
                if len(found) >= limit:
                    break
        return found

    async def next_due_time(self, host: str) -> float | None:
        """Smallest next_fetch_at of the host's queued rows, or None if none are queued."""
        rows = await self._rows("next_first", (host,))
        return float(rows[0][0]) if rows else None

    async def urls_with_status(self, status: UrlStatus, limit: int,
                               host: str | None = None) -> list[UrlState]:
        """Rows in ``status``: of one host by (priority, depth, seq), else host by host.

        Reads the host's partition of that status (url_queue for QUEUED, else
        url_by_status) and the rows it names: cost grows with the host's rows in that
        status, which for the recovery statuses (IN_FLIGHT, FETCHED) stays small.
        """
        if limit <= 0:
            return []
        status = UrlStatus(status)
        if host is not None:
            return await self._host_urls_with_status(status, limit, host)
        found: list[UrlState] = []
        for h in await self.hosts_with_status(status):
            found += await self._host_urls_with_status(status, limit - len(found), h)
            if len(found) >= limit:
                break
        return found

    async def _host_urls_with_status(self, status: UrlStatus, limit: int,
                                     host: str) -> list[UrlState]:
        if status is UrlStatus.QUEUED:
            return await self._queued(host, limit, None)
        urls = [r[0] for r in await self._all_rows("status_scan", (host, str(status)))]
        rows = await self._fetch_rows(host, urls)
        matching = [r for r in rows.values() if r.status is status]
        matching.sort(key=lambda r: (r.priority, r.depth, r.seq, r.url))
        return matching[:limit]

    async def hosts_with_status(self, status: UrlStatus) -> list[str]:
        """Hosts with at least one row in ``status``, sorted.

        A paged scan of host_counts: cost grows with hosts x (status, reason) pairs
        (a few rows per host), one statement per 5,000 of them, not with URLs."""
        wanted = str(UrlStatus(status))
        found: set[str] = set()
        async with contextlib.aclosing(self._pages("counts_scan", ())) as pages:
            async for page in pages:
                found.update(host for host, st, _, n in page if st == wanted and n > 0)
        return sorted(found)

    async def count_urls(self) -> dict[tuple[str, str], int]:
        """Counts by (status, reason or ''), summed over every host's count rows (a
        paged scan of host_counts, as :meth:`hosts_with_status`)."""
        totals: Counter[tuple[str, str]] = Counter()
        async with contextlib.aclosing(self._pages("counts_scan", ())) as pages:
            async for page in pages:
                for _, status, reason, n in page:
                    totals[(status, reason or "")] += n
        return {k: n for k, n in totals.items() if n > 0}
