"""The render stage of a cluster: pages the render rules chose in, verdicts out.

With ``CRAWLER_RENDER_ENABLED`` a cluster's parser (the fetcher's inline one, or the
parser service) hands a page the rules choose to topic ``render`` (its fetch result,
keyed by host) instead of parsing it. This stage consumes that topic: it reads the
stored response back by pointer, loads it in headless Chromium
(:class:`render.browser.ChromiumRenderer`), archives the DOM, parses and judges it with
the same parser and dedup stages as everywhere else, and sends the verdict to the
frontier on topic ``status`` (the frontier waits for it as for any later stage's). A
failed rendering keeps the plain parse and ends as ``render_error``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from common.adapters.handling import while_down
from common.messages import (
    FetchOutcome,
    FetchResult,
    ParsedPage,
    RecordPointer,
    StatusUpdate,
    Topic,
)
from common.ports import Bus, Delivery
from render.needs import Gate

log = logging.getLogger(__name__)

#: Parse a page by rendering it (the parser stage built with the renderer, which
#: renders every page handed to it); None never comes back from it here.
ParsePage = Callable[[FetchResult, RecordPointer], Awaitable[ParsedPage | None]]
#: Judge a parsed page (the dedup stage): its verdict for the frontier.
JudgePage = Callable[[ParsedPage], Awaitable[StatusUpdate]]


class RenderStage:
    def __init__(self, bus: Bus, parse: ParsePage, judge: JudgePage, *,
                 gate: Gate | None = None) -> None:
        self.bus = bus
        # the gate the renderer's requests wait at: it learns when the page itself was
        # fetched, so the page's first script waits the host's delay after it
        self.gate = gate
        # every page handed here is rendered: the parser that handed it chose it (this
        # service's own rules might differ); the composition root builds it so
        self.parse = parse
        self.judge = judge

    async def handle(self, delivery: Delivery) -> None:
        result = delivery.message
        if not isinstance(result, FetchResult):
            raise TypeError(f"render cannot handle {type(result).__name__}")
        if result.outcome is not FetchOutcome.OK or result.record is None:
            return
        if self.gate is not None and result.fetched_at:
            self.gate.done(result.task.host, result.fetched_at, result.task.delay)
        page = await self.parse(result, result.record)
        assert page is not None  # this stage renders itself: nothing is handed on
        verdict = await while_down(lambda: self.judge(page),
                                   f"judging the rendered {page.url}")
        await while_down(lambda: self.bus.publish(Topic.STATUS, page.host, verdict),
                         f"publishing the verdict of {page.url}")
