"""The embedded crawl's /metrics reports what the crawl did, in the documented names:
the stages' own figures, the bus's traffic and lag per topic, store call latency."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import aiohttp
import pytest

from common.messages import Topic
from crawler.embedded import EmbeddedCrawler
from simweb import SimWeb
from simweb.scenarios import seed
from tests.e2e.test_crawl_seed import seed_settings


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _value(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape(labels)}\s+([0-9.e+]+)$"
    values = [float(m.group(1)) for m in re.finditer(pattern, text, re.M)]
    assert values, f"{name}{labels} not exported"
    return sum(values)


def _by_label(text: str, name: str, label: str) -> dict[str, float]:
    """Values of the series ``name`` by their ``label``, for series with that one label."""
    pattern = rf'^{re.escape(name)}\{{{re.escape(label)}="([^"]*)"\}}\s+([0-9.e+]+)$'
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text, re.M)}


@pytest.mark.timeout(180)
async def test_metrics_count_the_seed_crawl(tmp_path: Path) -> None:
    port = _free_port()
    async with SimWeb(seed(), dns=True) as web:
        settings = seed_settings(tmp_path, web).replace(metrics={"port": port})
        crawler = EmbeddedCrawler(settings)
        await crawler.start()
        try:
            await crawler.frontier.seed(web.seed_urls())
            await crawler.wait()
            async with aiohttp.ClientSession() as http:
                resp = await http.get(f"http://127.0.0.1:{port}/metrics")
                text = await resp.text()
                ready = (await http.get(f"http://127.0.0.1:{port}/readyz")).status
        finally:
            await crawler.close()
    assert ready == 200
    assert _value(text, "crawler_fetcher_pages_fetched_total",
                  '{outcome="ok",status_class="2xx"}') == 162
    assert _value(text, "crawler_dedup_exact_duplicates_total") == 30
    assert _value(text, "crawler_dedup_unique_pages_total") == 132
    assert _value(text, "crawler_parser_pages_parsed_total") == 132
    assert _value(text, "crawler_frontier_urls_rejected_total", '{reason="robots"}') == 1
    assert _value(text, "crawler_frontier_seen_filter_skips_total") > 0

    # the bus: every message published was handed to each group of its topic once
    published = _by_label(text, "crawler_bus_messages_published_total", "topic")
    consumed = _by_label(text, "crawler_bus_messages_consumed_total", "topic")
    groups = {Topic.DISCOVERED: 1, Topic.FETCH: 1, Topic.FETCHED: 2,  # frontier, parser
              Topic.PARSED: 1, Topic.STATUS: 1, Topic.PAGES: 1}
    for topic, n in groups.items():
        assert published.get(topic.value, 0) > 0, topic
        assert consumed.get(topic.value) == n * published[topic.value], topic
    assert published[Topic.FETCHED.value] == published[Topic.FETCH.value]  # one per task
    ok_pages = _value(text, "crawler_fetcher_pages_fetched_total",
                      '{outcome="ok",status_class="2xx"}')
    assert published[Topic.PAGES.value] == ok_pages  # one page record per stored page
    assert not any(_by_label(text, "crawler_bus_handler_errors_total", "topic").values())
    assert not any(_by_label(text, "crawler_bus_dead_lettered_messages_total",
                             "topic").values())
    lag = _by_label(text, "crawler_bus_consumer_lag_messages", "topic")
    assert set(lag) >= {t.value for t in groups} and not any(lag.values())  # all handled

    # the store: each call is timed by operation, none failed
    calls = _by_label(text, "crawler_store_request_duration_seconds_count", "operation")
    seconds = _by_label(text, "crawler_store_request_duration_seconds_sum", "operation")
    for operation in ("put_url", "add_urls", "get_url", "put_host", "content_holder",
                      "record_content"):
        assert calls.get(operation, 0) > 0 and seconds[operation] > 0, operation
    assert calls["content_holder"] == ok_pages  # every body is looked up once
    assert calls["record_content"] == ok_pages - 30  # and each new one recorded once
    assert calls["open"] == 1
    assert not any(_by_label(text, "crawler_store_request_errors_total", "operation").values())
