"""The operator's say over a running frontier: the crawl-wide switches of the control
row (pause, blocked path patterns, crawl scope) and changes to one host (delay, block,
page cap). The dispatcher and the intake of discovered URLs read the switches from
here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgspec

from common.messages import HostControl
from common.patterns import OperatorPattern, PatternError, compile_operator_pattern
from common.ports import CrawlControl, HostState, ScopeRules
from common.scope import checked_rules, rules_from_settings
from frontier.hosts import HostTable
from frontier.policy import apply_host_control
from frontier.state import Context

log = logging.getLogger(__name__)


class Operator:
    """The operator's switches as this frontier applies them."""

    def __init__(self, ctx: Context, hosts: HostTable) -> None:
        self.ctx = ctx
        self.hosts = hosts
        self.paused = False
        self.control = CrawlControl()
        self.blocked_paths: tuple[OperatorPattern, ...] = ()
        # crawl scope: the settings' rules unless the operator's control row has others
        self.settings_scope = rules_from_settings(ctx.settings.scope)
        self.scope: ScopeRules = self.settings_scope

    def pause(self) -> None:
        """Dispatch nothing until :meth:`resume` (requests in flight finish)."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self.ctx.wake.set()

    async def set_host(self, change: HostControl) -> HostState:
        """Apply an operator's change to one host at once (embedded mode's API)."""
        async with self.hosts.gate.shared(), self.hosts.locks.hold(change.host):
            state = await self._set_host(change)
        self.ctx.wake.set()
        return state

    async def on_host_control(self, msg: HostControl) -> None:
        """An operator's change of one host from the bus (the caller holds its lock)."""
        if not self.hosts.owns(msg.host):
            # the partition moved away meanwhile: the row is the new owner's to load
            store = self.ctx.store
            old = await store.get_host(msg.host) or HostState(host=msg.host)
            await store.put_host(apply_host_control(old, msg))
            return
        state = await self._set_host(msg)
        log.info("frontier: host %s changed by the operator: delay override %s, "
                 "blocked %s, max pages %s", msg.host, state.delay_override, state.blocked,
                 state.max_pages)

    async def _set_host(self, change: HostControl) -> HostState:
        slot = await self.hosts.slot(change.host)
        state = apply_host_control(await self.hosts.settle(change.host, slot), change)
        slot.state = state
        await self.ctx.store.put_host(state)
        self.hosts.schedule(change.host, slot, state.next_allowed_at)
        return state

    def apply(self, control: CrawlControl, *, pause: bool = True) -> None:
        """Take the operator's crawl-wide switches: blocked path patterns, the crawl
        scope (None: the settings' one) and, unless ``pause`` is False (embedded mode
        starting up), the pause switch. A pattern that RE2 cannot run, or a scope that
        does not check, is skipped with an error (the API refuses both; this guards
        against a row written by other means or by an older version)."""
        if control.blocked_paths != self.control.blocked_paths:
            compiled: list[OperatorPattern] = []
            for pattern in control.blocked_paths:
                try:
                    compiled.append(compile_operator_pattern(pattern))
                except PatternError as exc:
                    log.error("frontier: blocked path pattern ignored: %s", exc)
            self.blocked_paths = tuple(compiled)
            log.info("frontier: blocked path patterns now %s", control.blocked_paths)
        if control.scope != self.control.scope:
            self.scope = self.settings_scope
            if control.scope is not None:
                try:
                    self.scope = checked_rules(**msgspec.structs.asdict(control.scope))
                except (ValueError, TypeError) as exc:
                    log.error("frontier: the operator's crawl scope ignored: %s", exc)
            log.info("frontier: crawl scope now %s (%s)", self.scope,
                     "the settings'" if self.scope is self.settings_scope
                     else "the operator's")
        self.control = control
        if pause and control.paused != self.paused:
            if control.paused:
                self.pause()
            else:
                self.resume()
            log.info("frontier: crawl %s by the operator",
                     "paused" if control.paused else "resumed")

    async def refresh(self) -> None:
        """Read the control row and apply it (pause only in cluster mode)."""
        self.apply(await self.ctx.store.get_control(), pause=not self.ctx.embedded)

    async def watch(self, interval: float, stopped: Callable[[], bool]) -> None:
        """Cluster mode: follow the control row (every frontier reads it) until
        ``stopped()``."""
        while not stopped():
            try:
                await self.refresh()
            except Exception as exc:  # a store hiccup must not stop the frontier
                log.warning("frontier: reading the control row failed: %s", exc)
            await asyncio.sleep(interval)
