"""A fetch task delivered again is never fetched again: a second delivery that comes
while the first is still being handled (a partition lost in a broker outage and given
back) waits for the first one's result; one that comes after it is answered from memory."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import msgspec

from common.messages import FetchOutcome, FetchResult, FetchTask, ParsedPage, Topic
from common.ports import Delivery
from common.urls import host_key
from crawler.embedded import EmbeddedCrawler
from simweb import SimWeb
from simweb.scenarios import seed
from tests.e2e.test_crawl_seed import seed_settings


async def test_a_task_delivered_twice_reaches_the_server_once(tmp_path: Path) -> None:
    async with SimWeb(seed(), dns=True) as web:
        crawler = EmbeddedCrawler(seed_settings(tmp_path, web))
        await crawler.start()
        results: list[FetchResult] = []
        original = crawler.bus.publish

        async def publish(topic: Topic, key: str, message: object) -> None:
            if topic is Topic.FETCHED and isinstance(message, FetchResult):
                results.append(message)
            await original(topic, key, message)  # type: ignore[arg-type]

        crawler.bus.publish = publish  # type: ignore[assignment,method-assign]
        try:
            url = web.seed_urls()[0]
            host = host_key(url)
            task = FetchTask(task_id="once", url=url, host=host, attempt=1)
            delivery = Delivery(topic=Topic.FETCH, key=host, message=task)
            # the second delivery comes while the first is being handled ...
            await asyncio.gather(crawler.fetcher.handle(delivery),
                                 crawler.fetcher.handle(delivery))
            # ... and a third after it
            await crawler.fetcher.handle(delivery)
        finally:
            await crawler.close()
        path = url.split(host.split(":")[0], 1)[1].split("/", 1)[-1]
        pages = [r for r in web.log.records() if r.path != "/robots.txt"
                 and r.path.lstrip("/") == path]
    assert len(pages) == 1, pages
    assert crawler.fetcher.counters.redelivered == 2
    assert len(results) == 3 and len({r.fetched_at for r in results}) == 1
    assert results[0].outcome is FetchOutcome.OK



async def _died_then_fetched(tmp_path: Path, again: Callable[[FetchTask, FetchResult], FetchTask]
                             ) -> tuple[FetchResult, ParsedPage, FetchResult, ParsedPage]:
    """The seed page fetched and stored by a fetcher that then "died" (nothing of it
    remembered), and the task ``again`` makes of the first task and result fetched by
    the new one; both parsed. Returns the first result and parse, then the second's."""
    async with SimWeb(seed(), dns=True) as web:
        crawler = EmbeddedCrawler(seed_settings(tmp_path, web))
        await crawler.start()
        try:
            url = web.seed_urls()[0]
            task = FetchTask(task_id="died", url=url, host=host_key(url), attempt=1)
            first = await crawler.fetcher.fetch(task)  # stored, then the fetcher "died"
            assert first.outcome is FetchOutcome.OK and first.duplicate_of is None
            parsed_first = await crawler.parser.parse(first, first.record)  # type: ignore[arg-type]
            crawler.fetcher._done.clear()  # a new fetcher process remembers nothing
            second = await crawler.fetcher.fetch(again(task, first))
            assert second.record is not None
            parsed = await crawler.parser.parse(second, second.record)
        finally:
            await crawler.close()
    return first, parsed_first, second, parsed


async def test_a_page_stored_by_a_fetcher_that_died_is_parsed_from_that_copy(
        tmp_path: Path) -> None:
    """A fetcher dies after storing a page's body (the content index names the URL as
    the body's holder) but before the page was parsed; the task is delivered again and
    fetched again. The second response is stored as a revisit of the URL's own copy,
    and the parse reads the payload from that copy: the page's text and links are
    found, as if the first delivery had finished."""
    first, parsed_first, again, parsed = await _died_then_fetched(
        tmp_path, lambda task, _: task)
    assert again.outcome is FetchOutcome.OK
    assert again.duplicate_of is None  # not a duplicate of another URL
    assert again.record != first.record  # the second response has a record of its own
    assert parsed_first.links, "the seed page has links"
    assert parsed.links == parsed_first.links
    assert again.payload_record == first.record  # whose payload is the first copy
    assert parsed.text_chars == parsed_first.text_chars > 0
    assert parsed.simhash == parsed_first.simhash is not None


async def test_a_retry_after_a_failed_attempt_is_parsed_from_the_dead_fetchers_copy(
        tmp_path: Path) -> None:
    """As above, but the task delivered again failed (the server was restarting), so
    the frontier retried it: the retry carries the failed attempt's time as
    previous_fetch_at, and still no stored page (previous_record). It is a first fetch
    all the same, parsed from the dead fetcher's copy; its links are followed. (In the
    compose test's fetcher kill, the trap host's chain of pages stopped here.)"""
    first, parsed_first, again, parsed = await _died_then_fetched(
        tmp_path, lambda task, first: msgspec.structs.replace(
            task, task_id="retry", attempt=2, previous_fetch_at=first.fetched_at + 1.0))
    assert again.outcome is FetchOutcome.OK and again.duplicate_of is None
    assert again.payload_record == first.record
    assert parsed_first.links and parsed.links == parsed_first.links
