"""Politeness-key groups (``CRAWLER_POLITENESS_KEY`` domain or ip): which key each
owned host counts under, and each key's rest, places in flight and line of waiting
hosts (docs/politeness.md). With ``host`` each host is its own queue and none of this
is used. The host table (frontier.hosts) wakes the waiting hosts; this module only
keeps the books."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from common.metrics import FrontierMetrics
from common.politeness import KeyMode, politeness_key, split_host_key
from frontier.state import HostSlot, KeyGroup, Resolve

log = logging.getLogger(__name__)


class KeyGroups:
    """The groups of the politeness keys of the hosts this frontier works on."""

    def __init__(self, mode: KeyMode, resolve: Resolve | None, metrics: FrontierMetrics, *,
                 embedded: bool) -> None:
        if mode == "ip" and resolve is None:
            raise ValueError("CRAWLER_POLITENESS_KEY=ip: the frontier needs a resolver "
                             "(the fetcher's), passed by whoever builds it")
        self.mode = mode
        self._resolve = resolve
        self._metrics = metrics
        self._embedded = embedded
        self.groups: dict[str, KeyGroup] = {}
        self.host_keys: dict[str, str] = {}  # host -> the key it was last counted under
        self.task_keys: dict[str, str] = {}  # id of a request in flight -> its key
        self.waiting_keys: set[str] = set()  # keys with hosts waiting for a place
        self.moves = 0  # hosts whose ip key changed with a new DNS answer

    async def key_of(self, host: str, slot: HostSlot) -> str:
        """The politeness key of an owned host, joining its group. With ``ip`` the
        host's name is resolved (the resolver caches the answer for its TTL, so this is
        a look-up in memory most of the time); a host whose answer changed moves to
        the new address's group, carrying its own rest, while requests it already has
        in flight stay counted under the old key. A name that does not resolve is its
        own key (its fetch records the DNS failure)."""
        if self.mode == "domain":
            key = politeness_key(host, "domain")
        else:
            addresses: Sequence[str] = ()
            name, port = split_host_key(host)
            # a host key without a port is on a default port: 80 or 443 (a fixed answer,
            # CRAWLER_FETCHER_RESOLVE, may name either)
            for each in (port,) if port is not None else (80, 443):
                try:
                    assert self._resolve is not None
                    addresses = await self._resolve(name, each)
                    break
                except Exception as exc:  # any failure: the host's own key
                    log.debug("frontier: %s does not resolve (%r); its own politeness "
                              "key", host, exc)
            key = politeness_key(host, "ip", addresses)
        old = self.host_keys.get(host)
        if old != key or key not in self.groups:
            if old is not None and old != key:
                self.moves += 1
                self._metrics.key_moves.inc()
                log.info("frontier: host %s now resolves to politeness key %s (was %s)",
                         host, key, old)
                self.leave(host, None)
            self.join(host, slot, key)
        return key

    def join(self, host: str, slot: HostSlot, key: str) -> None:
        """Count ``host`` under ``key``: the group starts no earlier than the host's own
        rest (and in cluster mode, with nothing in flight here, its lease: a request an
        earlier owner may still have out; in embedded mode an earlier process and its
        requests are gone)."""
        self.host_keys[host] = key
        group = self.group(key)
        rest = slot.state.next_allowed_at
        if slot.in_flight == 0 and not self._embedded:
            rest = max(rest, slot.foreign_lease)
        group.next_allowed_at = max(group.next_allowed_at, rest)

    def group(self, key: str) -> KeyGroup:
        """The group of ``key``, made when it has none."""
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = KeyGroup()
        return group

    def leave(self, host: str, slot: HostSlot | None) -> None:
        """Stop counting ``host`` under its key (it moved, or another frontier owns it
        now); with ``slot``, its requests in flight leave the key's count too."""
        key = self.host_keys.pop(host, None)
        if key is None:
            return
        group = self.groups.get(key)
        if group is not None:
            group.waiting.pop(host, None)
            if not group.waiting:
                self.waiting_keys.discard(key)
        for task_id in slot.tasks if slot is not None else ():
            self.forget_task(task_id)

    def add_task(self, key: str, task_id: str) -> None:
        """A request of ``key`` goes out (counted before its publish: its result may
        arrive before the publish returns)."""
        self.groups[key].tasks.add(task_id)
        self.task_keys[task_id] = key

    def forget_task(self, task_id: str) -> str | None:
        """A request is over (or never went out): its key's place is free again.
        Returns the key it was counted under, if any."""
        key = self.task_keys.pop(task_id, None)
        if key is not None and (group := self.groups.get(key)) is not None:
            group.tasks.discard(task_id)
        return key

    def wait(self, key: str, host: str) -> None:
        """``host`` found ``key`` busy: the key's next free place goes to it, unless
        hosts ahead of it in the line take it first."""
        self.groups[key].waiting[host] = None
        self.waiting_keys.add(key)

    def waiting_hosts(self) -> int:
        """Hosts waiting for a place of their key (a gauge)."""
        return sum(len(self.groups[k].waiting) for k in self.waiting_keys
                   if k in self.groups)

    def stop_waiting(self) -> None:
        """Nobody waits for a place any more (the page budget is spent)."""
        for group in self.groups.values():
            group.waiting.clear()
        self.waiting_keys.clear()

    def prune(self, now: float) -> None:
        """Forget the groups with nothing in flight, nobody waiting and their rest over,
        once more than a thousand of them are idle."""
        idle = [k for k, g in self.groups.items()
                if not g.tasks and not g.reserved and not g.waiting
                and g.next_allowed_at <= now]
        if len(idle) > 1000:
            for k in idle:
                del self.groups[k]
            keep = set(self.groups)
            self.host_keys = {h: k for h, k in self.host_keys.items() if k in keep}
