"""The Cassandra store's small tables: hosts, control, seed_roots, robots, content
(exact duplicates) and the near-duplicate index (simhash_blocks, simhash_sketches).

Content records are cross-host and first-writer-wins, without lightweight transactions
(no Paxos round): ``record_content`` writes the hash's row ``USING TIMESTAMP`` a value
that counts down with the clock (:func:`_claim_stamp`), so Cassandra's last-write-wins
keeps the earliest copy's cells on every replica whatever order the writes arrive in;
``content_holder`` reads it at the write-overlapping level. A fetcher looks before it
writes a body (one read) and records the copy after (one write). A unique page's
near-duplicate index entries (``simhash_blocks`` and its sketch) are one unlogged batch
of their own (:meth:`SmallTables.add_simhash`), or part of the (then unlogged) batch of
``put_url_and_host`` that applies the page's result. Two fetchers that store the same
new body within one write's time of each other both store it in full; the earlier copy
stays the holder that later copies refer to.

Group commits. The look-ups and records of several pages made within the store's
``group_wait`` (a few milliseconds) go out as one request each
(:mod:`common.adapters.grouping`): the holders of several hashes in one ``IN`` read,
several records in one unlogged batch (each row its own partition, so each is still
one mutation), several pages' near-duplicate candidates in one ``IN`` read of their
block keys, split by page. A Cassandra node spends several times more CPU per request
when requests come one at a time than when several come together, and the driver
spends about as much per request whatever it carries. The frontier's result batches
are not grouped: merged batches of several hosts cost Cassandra as much in all and
the host waits for its write with its lock held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from common.adapters.cassandra.schema import HOSTS, ROBOTS
from common.adapters.cassandra.session import IN_ROWS, CassandraSession, chunks
from common.adapters.grouping import Grouped, Send
from common.adapters.int64 import index_entries, to_signed, to_unsigned
from common.messages import RecordPointer
from common.ports import (
    CrawlControl,
    HostState,
    RobotsRecord,
    SeedRoot,
    decode_control,
    encode_control,
)

SKETCHES_PER_QUERY = 100  # candidate sketches read by one IN query at most
# items of one grouped request at most: Cassandra warns of an unlogged batch over 10
# partitions, and a page's near-duplicate look-up reads a dozen or so block keys
GROUP_LIMIT = 10
_CLAIM_EPOCH_US = 1 << 60  # claim timestamps count down from here (see _claim_stamp)


def _claim_stamp(now_us: int) -> int:
    """The write timestamp of a content record made at ``now_us``: larger for earlier
    records, so last-write-wins keeps the first one."""
    return _CLAIM_EPOCH_US - now_us


class SmallTables(CassandraSession):
    """The store's methods on its small tables: hosts, control, seed roots, robots
    answers, content records and the near-duplicate index."""

    # ------------------------------------------------------------------ hosts

    async def get_host(self, host: str) -> HostState | None:
        rows = await self._rows("get_host", (host,))
        return HOSTS.decode(rows[0]) if rows else None

    async def put_host(self, row: HostState) -> None:
        await self._query("put_host", HOSTS.encode(row))

    async def list_hosts(self) -> list[HostState]:
        """Every host row, sorted by host (a scan of the hosts table)."""
        hosts = [HOSTS.decode(r) for r in await self._all_rows("list_hosts", ())]
        return sorted(hosts, key=lambda h: h.host)

    # ---------------------------------------------------------------- control

    async def get_control(self) -> CrawlControl:
        rows = await self._rows("get_control", ("crawl",))
        return decode_control(rows[0][0]) if rows else CrawlControl()

    async def put_control(self, row: CrawlControl) -> None:
        await self._query("put_control", ("crawl", encode_control(row)))

    # ------------------------------------------------------------- seed roots

    async def add_seed_roots(self, rows: Sequence[SeedRoot]) -> None:
        """Record seed roots; a root recorded again is harmless (an upsert)."""
        for chunk in chunks(list(dict.fromkeys(rows)), IN_ROWS):
            await asyncio.gather(*(self._query("seed_root_put", (r.domain, r.host, r.path))
                                   for r in chunk))

    async def seed_roots(self, domain: str) -> list[SeedRoot]:
        return [SeedRoot(domain=d, host=h, path=p)
                for d, h, p in await self._all_rows("seed_roots_get", (domain,))]

    # ----------------------------------------------------------------- robots

    async def get_robots(self, origin: str) -> RobotsRecord | None:
        rows = await self._rows("get_robots", (origin,))
        return ROBOTS.decode(rows[0]) if rows else None

    async def put_robots(self, row: RobotsRecord) -> None:
        await self._query("put_robots", ROBOTS.encode(row))

    # --------------------------------------------------------- grouped requests

    def _grouped(self, name: str) -> Grouped[Any, Any]:
        """This store's group of requests ``name`` (made on first use: the settings'
        ``group_wait``; :mod:`common.adapters.grouping`)."""
        group = self._groups.get(name)
        if group is None:
            sends: dict[str, Send[Any, Any]] = {
                "claim_get": self._holders, "claim_put": self._claims,
                "simhash_get": self._candidates}
            send = sends[name]
            group = self._groups[name] = Grouped(send, wait=self.settings.group_wait,
                                                 limit=GROUP_LIMIT)
        return group

    # --------------------------------------------------- content fingerprints

    async def content_holder(self, content_hash: str
                             ) -> tuple[str, RecordPointer | None] | None:
        """The first stored copy of ``content_hash``: (url, record), or None (read at
        the write-overlapping level; grouped with other pages' look-ups)."""
        found: tuple[str, RecordPointer | None] | None = \
            await self._grouped("claim_get")(content_hash)
        return found

    async def _holders(self, hashes: Sequence[str]
                       ) -> list[tuple[str, RecordPointer | None] | None]:
        """One ``IN`` read of the holders of ``hashes``."""
        rows = await self._all_rows("claim_get", (sorted(set(hashes)),))
        found = {h: (url, None if file is None else RecordPointer(file, offset, length))
                 for h, url, file, offset, length in rows}
        return [found.get(h) for h in hashes]

    async def record_content(self, content_hash: str, url: str,
                             record: RecordPointer) -> None:
        """Record ``url``'s copy as the holder of ``content_hash`` unless an earlier one
        is recorded. No lightweight transaction: the row is written ``USING TIMESTAMP``
        a value that is larger the earlier the copy (:func:`_claim_stamp`), so
        last-write-wins keeps the first copy on every replica whatever order the
        writes arrive in. Grouped with other pages' records as one unlogged batch:
        each row is its own partition, written as one mutation."""
        stamp = _claim_stamp(time.time_ns() // 1000)
        await self._grouped("claim_put")((content_hash, url, record.file, record.offset,
                                          record.length, stamp))

    async def _claims(self, rows: Sequence[tuple[Any, ...]]) -> list[None]:
        if len(rows) == 1:
            await self._query("claim_put", rows[0])
        else:
            batch = self._batch(logged=False)
            for row in rows:
                batch.add(self._ps["claim_put"], row)
            await self._send(batch)
        return [None] * len(rows)

    async def add_simhash(self, keys: Sequence[int], url: str, simhash: int,
                          sketch: bytes | None = None) -> None:
        """Index ``url`` under each block key and keep its sketch; adding it again is
        harmless."""
        if not keys:
            return
        batch = self._batch(logged=False)
        for entry in index_entries(keys, url, simhash):
            batch.add(self._ps["simhash_put"], entry)
        if sketch:
            batch.add(self._ps["sketch_put"], (url, sketch))
        await self._send(batch)  # one statement; each entry is idempotent

    async def simhash_sketches(self, urls: Sequence[str]) -> dict[str, bytes]:
        """The stored sketch of each of ``urls`` that has one (one ``IN`` query per
        :data:`SKETCHES_PER_QUERY` URLs: a page has a handful of candidates)."""
        wanted = sorted(set(urls))
        found: dict[str, bytes] = {}
        for start in range(0, len(wanted), SKETCHES_PER_QUERY):
            chunk = wanted[start:start + SKETCHES_PER_QUERY]
            for url, sketch in await self._all_rows("sketch_get", (chunk,)):
                if sketch:
                    found[url] = bytes(sketch)
        return found

    async def simhash_candidates(self, keys: Sequence[int]) -> list[tuple[str, int]]:
        """(url, simhash) of every page indexed under any of ``keys``, each pair once
        (one ``IN`` read, grouped with other pages' look-ups)."""
        signed = frozenset(to_signed(k) for k in keys)
        if not signed:
            return []
        found: list[tuple[str, int]] = await self._grouped("simhash_get")(signed)
        return found

    async def _candidates(self, groups: Sequence[frozenset[int]]
                          ) -> list[list[tuple[str, int]]]:
        """One ``IN`` read of the union of ``groups``' block keys, split by group."""
        rows = await self._all_rows("simhash_get", (sorted(frozenset().union(*groups)),))
        answers: list[list[tuple[str, int]]] = []
        for keys in groups:
            found: dict[tuple[str, int], None] = {}
            for key, url, value in rows:
                if key in keys:
                    found[(url, to_unsigned(value))] = None
            answers.append(list(found))
        return answers
