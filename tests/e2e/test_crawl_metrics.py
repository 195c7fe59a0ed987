"""The embedded crawl's /metrics reports what the crawl did, in the documented names."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import aiohttp
import pytest

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
