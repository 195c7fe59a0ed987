"""Results and verdicts (topics fetched and status): a fetch result closes its request
and moves its URL's row and its host's row on (frontier.policy.apply_result decides);
a later stage's verdict closes a stored page's row. A verdict that overtakes its own
fetch result is kept until the result arrives."""

from __future__ import annotations

from collections import OrderedDict

import msgspec

from common import urls
from common.messages import (
    Discovered,
    FetchResult,
    Link,
    NearIndex,
    StatusUpdate,
    Topic,
    UrlStatus,
)
from common.politeness import politeness_key
from common.ports import UrlState
from frontier.dispatch import Dispatcher
from frontier.hosts import HostTable
from frontier.policy import (
    NO_REQUEST_OUTCOMES,
    apply_result,
    politeness_delay,
    sitemap_links,
    with_verdict,
)
from frontier.state import Context, HostSlot

EARLY_VERDICTS = 10_000  # verdicts kept for rows whose fetch result has not arrived


class Results:
    """Applies fetch results and verdicts to the rows of owned hosts."""

    def __init__(self, ctx: Context, hosts: HostTable, dispatcher: Dispatcher) -> None:
        self.ctx = ctx
        self.hosts = hosts
        self.dispatcher = dispatcher
        settings = ctx.settings
        # A cluster that renders: a page stored without its verdict may be loading in a
        # render service, whose scripts' requests go to the same host; the host rests
        # until the verdict, at most this long (a render and its one retry)
        self.verdict_hold = (2 * settings.render.page_timeout
                             if settings.render.enabled and not ctx.embedded else 0.0)
        self.early: OrderedDict[tuple[str, str], StatusUpdate] = OrderedDict()

    async def on_result(self, result: FetchResult, *, retry: bool = False) -> None:
        """A fetch result (the caller holds its host's lock)."""
        task, keys = result.task, self.hosts.keys
        key = keys.forget_task(task.task_id)
        if key is None and keys.mode == "domain":
            key = politeness_key(task.host, "domain")  # a task of an earlier owner or run
        elif key is None and keys.mode == "ip":
            key = keys.host_keys.get(task.host)  # the host's address as known here, if any
        try:
            await self._apply_fetch_result(result, retry=retry)
        finally:
            if key is not None:
                # the key rests as the host does after this request, and its next
                # place goes to the first host waiting
                slot = self.hosts.slots.get(task.host)
                if slot is not None:
                    group = keys.group(key)
                    group.next_allowed_at = max(group.next_allowed_at,
                                                slot.state.next_allowed_at)
                self.hosts.wake_waiting(key)

    async def _apply_fetch_result(self, result: FetchResult, *, retry: bool) -> None:
        ctx, hosts, store = self.ctx, self.hosts, self.ctx.store
        task = result.task
        slot = hosts.slots.get(task.host)
        if slot is not None:
            # after a failed attempt, whose write may have been applied although it
            # reported a failure (the URL's row then shows it as a stale result): the
            # host's row as stored, not as remembered, so its page count is not written
            # back short
            slot.suspect = slot.suspect or retry
            await hosts.settle(task.host, slot)
        # our own request: over once its result is stored (below), not before, so that
        # a write that fails (a store outage) is tried again with the row still in
        # flight here; were it forgotten first, the retry would find no such task, take
        # the result for stale and leave the row queued, to be fetched a second time
        own = slot if slot is not None and task.task_id in slot.tasks else None
        row: UrlState | None = own.flying.get(task.task_id) if own is not None else None
        now = ctx.clock()
        if row is None or row.attempts != task.attempt:
            if own is not None:
                self._request_over(own, task.task_id)
            # a repeated delivery, or a task an earlier owner (or an earlier run) handed
            # out: the row is not in flight here (the store never held it IN_FLIGHT, see
            # frontier.dispatch), but a request that reached the host still counts for
            # its rest
            ctx.counters.stale_results += 1
            if result.fetched_at and (result.robots_fetched
                                      or result.outcome not in NO_REQUEST_OUTCOMES):
                slot = slot or await hosts.slot(task.host)  # settled above, or just read
                rest = result.fetched_at + politeness_delay(
                    slot.state, ctx.settings.politeness, ctx.delay_overrides)
                if rest > slot.state.next_allowed_at:
                    slot.state.next_allowed_at = rest
                    await store.put_host(slot.state)
            if slot is not None:
                hosts.schedule(task.host, slot, slot.state.next_allowed_at)
            if result.sitemaps:  # the robots.txt it read is not read again for a while
                await self._publish_links(sitemap_links(result.sitemaps, task.url,
                                                        ctx.settings))
            return
        slot = slot or await hosts.slot(task.host)
        effect = apply_result(result, row, slot.state, ctx.settings, now, ctx.delay_overrides)
        # the page's verdict, when it came with the result (the fetcher judged it) or
        # before it (topic status overtook topic fetched): applied in the same write
        verdict = result.verdict or self.early.get((task.host, task.url))
        index: NearIndex | None = None
        if (verdict is not None and effect.row.status is UrlStatus.FETCHED
                and verdict.content_hash == effect.row.content_hash):
            effect.row = with_verdict(effect.row, verdict)
            # a unique page's near-duplicate index entries, left by the fetcher that
            # judged it: in the same write (one store statement less per page)
            index = verdict.index if effect.row.simhash is not None else None
        # one write: a crash between the two would apply the result to the URL and not
        # to its host (a page not counted toward the host's cap and the crawl's figures)
        landed = False
        if retry and result.fetched_at:
            # an earlier call's write may have landed although it reported a failure:
            # then the row carries this response's time, and the host row read back
            # above (settle) counts the page already; writing again would count it twice
            stored = await store.get_url(task.host, task.url)
            landed = stored is not None and stored.last_fetch_at == result.fetched_at
        if not landed:
            try:
                await store.put_url_and_host(effect.row, effect.host, index=index)
            except BaseException:
                # applied or not: until the row is read back, no write of the host row
                # from memory (a dispatch's lease) may put back the page count it had
                slot.suspect = True
                raise
            slot.state = effect.host
        if own is not None:
            self._request_over(own, task.task_id)
        self.early.pop((task.host, task.url), None)
        if self.verdict_hold and effect.row.status is UrlStatus.FETCHED:
            slot.awaiting.add(task.url)
            slot.hold_until = max(slot.hold_until, now + self.verdict_hold)
        if effect.row.status is UrlStatus.REJECTED and effect.row.reason is not None:
            ctx.counters.rejected[effect.row.reason.value] += 1
            ctx.metrics.count_rejected(effect.row.reason)
        if effect.retry:
            ctx.metrics.count_retry(result.outcome)
        if effect.dead:
            ctx.metrics.dead_urls.inc()
        if effect.follow:
            await self._publish_links(effect.follow)
        hosts.schedule(task.host, slot, slot.state.next_allowed_at)

    def _request_over(self, slot: HostSlot, task_id: str) -> None:
        """A request this instance sent is over: its row leaves the flight and its
        unit of fetch capacity is free."""
        slot.tasks.discard(task_id)
        slot.flying.pop(task_id, None)
        self.dispatcher.request_over()

    async def _publish_links(self, follow: list[Link]) -> None:
        """Offer links (redirect targets, sitemaps robots.txt named) to their owners."""
        by_host: dict[str, list[Link]] = {}
        for link in follow:
            try:
                target = urls.canonicalize(link.url, tracking=self.ctx.tracking)
                by_host.setdefault(urls.host_key(target), []).append(
                    msgspec.structs.replace(link, url=target))
            except urls.UrlError:
                self.ctx.counters.invalid += 1
        for host, links in by_host.items():
            await self.ctx.bus.publish(Topic.DISCOVERED, host,
                                       Discovered(host=host, links=links))

    async def on_status(self, msg: StatusUpdate) -> None:
        """A later stage's verdict on a page (the caller holds its host's lock)."""
        slot = self.hosts.slots.get(msg.host)
        if slot is not None and msg.url in slot.awaiting:
            # the page's last stage is done (its render service's requests too): the
            # host rests its delay from now
            slot.awaiting.discard(msg.url)
            if not slot.awaiting:
                slot.hold_until = self.ctx.clock() + politeness_delay(
                    slot.state, self.ctx.settings.politeness, self.ctx.delay_overrides)
                self.hosts.schedule(msg.host, slot, slot.rest_until())
        if slot is not None and msg.url in slot.flying_urls():
            # The verdict can overtake its own fetch result (different topics, and a new
            # owner may be working through a backlog of results): keep it until the
            # result makes the row FETCHED, then apply it if it is about the same body.
            self.early[(msg.host, msg.url)] = msg
            while len(self.early) > EARLY_VERDICTS:
                self.early.popitem(last=False)
            return
        row = await self.ctx.store.get_url(msg.host, msg.url)
        if row is None or row.status is not UrlStatus.FETCHED:
            # only a stored page awaits a verdict; a queued row gets one when its next
            # fetch is parsed
            return
        await self._apply_verdict(row, msg)

    async def _apply_verdict(self, row: UrlState, msg: StatusUpdate) -> None:
        row = with_verdict(row, msg)
        if msg.index is not None and row.simhash is not None:
            # index entries a stage left to the frontier (not sent apart from a result
            # today): written before the row is closed, so a retry writes them again
            await self.ctx.store.add_simhash(msg.index.keys, row.url, row.simhash,
                                             msg.index.sketch)
        await self.ctx.store.put_url(row)
