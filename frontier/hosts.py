"""The host table: the hosts this frontier is working on and how each is guarded and
timed.

- :attr:`HostTable.slots`: one :class:`~frontier.state.HostSlot` per host in memory
  (its row, queue head, requests in flight); an idle host leaves, its row stays in the
  store.
- :attr:`HostTable.locks`: one lock per host (:class:`~common.keyedlock.KeyedLock`);
  a handler, a host's dispatch and an operator change hold it around everything they
  read or change of the host's slot, so no two interleave around a store call.
- :attr:`HostTable.gate`: the ownership gate (:class:`~frontier.gate.OwnershipGate`).
- :attr:`HostTable.timer`: the min-heap of (next allowed time, host) that the
  dispatcher (frontier.dispatch) takes due hosts from; :meth:`HostTable.schedule`
  puts a host on it.
- which hosts this instance owns (:meth:`HostTable.owns`), and the politeness-key
  groups of its hosts (:attr:`HostTable.keys`).
- the host leases this instance wrote (cluster mode, :meth:`HostTable.renew_lease`):
  a lease in a host's row says how long a request of its owner may still be running,
  for a later owner to wait out. It covers a period (:data:`LEASE_SPANS` times the
  longest a request can take) and is renewed when less than one request's span is
  left, not written with every dispatch; results leave it in place. A lease this
  instance wrote is its own: it does not wait for it. A graceful stop ends the leases
  of the hosts with nothing in flight (:meth:`HostTable.release_leases`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time

from common.keyedlock import KeyedLock
from common.messages import Topic
from common.politeness import politeness_key
from common.ports import HostState
from frontier.gate import OwnershipGate
from frontier.keys import KeyGroups
from frontier.state import Context, HostSlot

log = logging.getLogger(__name__)

LEASE_SPANS = 1.5
"""A renewed lease runs this many request spans from now; it is renewed once less than
one span is left, so a host writes its row for its lease about once every half span
(the longest a request can take, with its robots.txt and rest) while it is crawled,
and a later owner waits at most this many spans after the last renewal."""

RELEASE_SECONDS = 5.0
"""How long a graceful stop may spend ending its leases (:meth:`HostTable.release_leases`);
a lease not ended runs out by itself."""


class HostTable:
    """The slots, locks, timers and ownership of the hosts of one frontier."""

    def __init__(self, ctx: Context, keys: KeyGroups) -> None:
        self.ctx = ctx
        self.keys = keys
        self.slots: dict[str, HostSlot] = {}
        self.locks = KeyedLock()
        self.gate = OwnershipGate()
        # Embedded: one process owns every host. Cluster: the hosts of the partitions
        # the bus assigned to this instance (frontier.ownership).
        self.owned: frozenset[int] | None = None
        self.timer: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self.max_in_flight = ctx.settings.politeness.max_in_flight_per_host
        # host -> the lease_until this instance last wrote to the host's row (cluster)
        self.own_leases: dict[str, float] = {}

    def owns(self, host: str) -> bool:
        if self.owned is None:
            return True
        return self.ctx.bus.partition_of(Topic.DISCOVERED, host) in self.owned

    def dispatched_here(self, host: str) -> bool:
        """Whether this instance has a request of ``host`` in flight."""
        slot = self.slots.get(host)
        return slot is not None and slot.in_flight > 0

    async def slot(self, host: str) -> HostSlot:
        """The host's slot, made from its stored row when it has none."""
        slot = self.slots.get(host)
        if slot is None:
            state = await self.ctx.store.get_host(host) or HostState(host=host)
            slot = HostSlot(state=state)
            if not self.ctx.embedded and self.own_leases.get(host) != state.lease_until:
                # written by an earlier owner (or an earlier run of this one): a request
                # of it may still be running
                slot.foreign_lease = state.lease_until
            self.slots[host] = slot
            if self.keys.mode == "domain":
                # known from the name: joined at once, so its rest and lease (a request
                # of an earlier owner) count for its siblings before any of them goes
                self.keys.join(host, slot, politeness_key(host, "domain"))
        return slot

    async def settle(self, host: str, slot: HostSlot) -> HostState:
        """The host's row, read back after a failed write of it (see
        :attr:`HostSlot.suspect`), keeping this process's timers where they are later.
        The caller holds the host's lock."""
        if slot.suspect:
            stored = await self.ctx.store.get_host(host)
            if stored is not None:
                stored.next_allowed_at = max(stored.next_allowed_at,
                                             slot.state.next_allowed_at)
                stored.lease_until = max(stored.lease_until, slot.state.lease_until)
                slot.state = stored
            slot.suspect = False
        return slot.state

    def schedule(self, host: str, slot: HostSlot, at: float) -> None:
        """Wake the host at ``at`` (no earlier than its rest), unless it is ready, has
        all its places in flight, or already wakes no later."""
        if slot.in_flight >= self.max_in_flight or slot.ready:
            return
        at = max(at, slot.rest_until())
        if slot.wake_at is not None and slot.wake_at <= at:
            return
        slot.wake_at = at
        heapq.heappush(self.timer, (at, next(self._seq), host))

    def unschedule_all(self) -> None:
        """Empty the timer and mark every slot neither timed, ready nor due."""
        self.timer.clear()
        for slot in self.slots.values():
            slot.ready = False
            slot.wake_at = None
            slot.due_since = None

    async def renew_lease(self, host: str, slot: HostSlot, now: float, span: float) -> None:
        """Make sure the host's stored lease covers a request of ``span`` seconds sent
        now: when less than that is left, write a lease of :data:`LEASE_SPANS` spans
        with the host's row. The caller holds the host's lock and has settled its row."""
        state = slot.state
        if state.lease_until >= now + span:
            return
        before = state.lease_until
        state.lease_until = now + LEASE_SPANS * span
        try:
            await self.ctx.store.put_host(state)
        except BaseException:
            state.lease_until = before
            slot.suspect = True  # it may have been applied all the same
            raise
        self.own_leases[host] = state.lease_until
        if len(self.own_leases) > 2 * len(self.slots) + 10_000:
            # leases that ran out need no remembering: nobody waits for them
            self.own_leases = {h: t for h, t in self.own_leases.items() if t > now}

    async def release_leases(self, now: float, *, budget: float = RELEASE_SECONDS) -> int:
        """At a graceful stop (cluster mode): end the leases this instance wrote for the
        hosts it has nothing in flight for, so that their next owner (another instance,
        or this one started again, which no longer knows the lease for its own) need
        not wait them out. The host's row is written with its lease ended and its rest
        (``next_allowed_at``) as this instance knows it. A host with a request in flight
        keeps its lease: its fetcher may still be working. Best effort, within
        ``budget`` seconds and until the store refuses a write. Returns how many leases
        were ended."""
        deadline = time.monotonic() + budget
        released = 0
        for host, until in list(self.own_leases.items()):
            if until <= now or not self.owns(host):
                continue
            if time.monotonic() > deadline:
                break
            async with self.gate.shared(), self.locks.hold(host):
                slot = self.slots.get(host)
                if slot is not None and slot.in_flight:
                    continue
                try:
                    # a host that went idle has left memory: its row is read back
                    state = (await self.settle(host, slot) if slot is not None
                             else await self.ctx.store.get_host(host))
                    if state is None or state.lease_until != until:
                        continue  # not the lease this instance wrote
                    state.lease_until = now
                    await self.ctx.store.put_host(state)
                except Exception as exc:  # an outage: the rest run out by themselves
                    if slot is not None:
                        slot.suspect = True
                    log.warning("ending host leases at stop: %r (%d ended)", exc, released)
                    break
                self.own_leases[host] = now
                released += 1
        return released

    def drop_unowned(self) -> int:
        """Forget the hosts no longer owned (an ownership change); returns how many
        requests they had in flight here."""
        self.own_leases = {h: t for h, t in self.own_leases.items() if self.owns(h)}
        in_flight = 0
        for host in [h for h in self.slots if not self.owns(h)]:
            slot = self.slots.pop(host)
            in_flight += slot.in_flight
            self.keys.leave(host, slot)
        return in_flight

    def wake_waiting(self, key: str) -> None:
        """Schedule the first host waiting for a place of ``key``, if one is free."""
        group = self.keys.groups.get(key)
        if group is None:
            self.keys.waiting_keys.discard(key)
            return
        while group.waiting and group.in_flight < self.max_in_flight:
            host = next(iter(group.waiting))
            del group.waiting[host]
            slot = self.slots.get(host)
            if slot is not None and not slot.ready and self.owns(host):
                self.schedule(host, slot, group.next_allowed_at)
                break
        if not group.waiting:
            self.keys.waiting_keys.discard(key)

    def tend_groups(self) -> None:
        """About once a second: wake a waiting host of every key with nothing in flight
        (a safety net: each place that frees wakes one already), and forget the groups
        with nothing in flight, nobody waiting and their rest over."""
        for key in list(self.keys.waiting_keys):
            self.wake_waiting(key)
        self.keys.prune(self.ctx.clock())

    def describe(self, now: float) -> str:
        """Every host in memory and its timers, for diagnostics."""
        return ", ".join(
            f"{h}(in_flight={s.in_flight} ready={s.ready} head={len(s.head)} "
            f"wake={None if s.wake_at is None else round(s.wake_at - now, 1)} "
            f"next={round(s.state.next_allowed_at - now, 1)} "
            f"lease={round(s.state.lease_until - now, 1)} "
            f"foreign_lease={round(s.foreign_lease - now, 1)})"
            for h, s in sorted(self.slots.items()))
