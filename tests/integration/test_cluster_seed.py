"""Cluster mode end to end: the seed scenario crawled by separate service processes
(1 frontier, 2 fetchers, 1 parser, 1 dedup) on real Kafka and Cassandra gives the
embedded figures, and the simulated web's log shows politeness held."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from warcio.archiveiterator import ArchiveIterator

from simweb import SimWeb
from simweb.scenarios import seed
from tests.integration.cluster import cluster, require_cluster_servers

pytestmark = pytest.mark.integration

DELAY = 0.2


@pytest.mark.timeout(420)
async def test_seed_scenario_on_kafka_and_cassandra(tmp_path: Path) -> None:
    require_cluster_servers()
    async with SimWeb(seed(), dns=True) as web:
        env = {
            "CRAWLER_FETCHER_DNS_SERVERS": ",".join(web.dns_servers),
            "CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.1/32",
            "CRAWLER_POLITENESS_DEFAULT_DELAY": str(DELAY),
            "CRAWLER_TRAPS_MAX_PAGES_PER_HOST": "80",
            "CRAWLER_TRAPS_MAX_DEPTH": "1000",
            "CRAWLER_FETCHER_CONCURRENCY": "16",
        }
        with cluster(tmp_path, env) as c:
            metrics_port = c.free_port()
            c.start("frontier", "frontier", {"CRAWLER_METRICS_PORT": str(metrics_port)})
            c.start("fetcher-1", "fetcher")
            c.start("fetcher-2", "fetcher")
            # the fetchers parse and judge the pages (parse_inline, the default)
            c.seed(web.seed_urls())
            stats = await c.wait_done(300)
            async with aiohttp.ClientSession() as http:
                base = f"http://127.0.0.1:{metrics_port}"
                health = {p: (await http.get(base + p)).status
                          for p in ("/healthz", "/readyz", "/metrics")}
                metrics_text = await (await http.get(base + "/metrics")).text()
        hits = Counter(web.log.counts_by_host(exclude_paths=("/robots.txt",)))
        gaps = {h: web.log.min_gap(h, exclude_paths=()) for h in hits}
        in_flight = {h: web.log.max_in_flight(h) for h in hits}
        secret = web.log.count("news.test", "/private/secret")

    assert health == {"/healthz": 200, "/readyz": 200, "/metrics": 200}
    assert "process_cpu_seconds_total" in metrics_text
    assert stats.fetched == 162, stats
    assert stats.robots_blocked == 1
    assert stats.exact_duplicates == 30
    assert stats.hosts_capped == 1
    assert stats.kept == 132
    assert hits == {"news.test": 61, "shop.test": 21, "trap.test": 80}
    assert secret == 0
    for host, gap in gaps.items():
        assert gap is not None and gap >= DELAY, (host, gap)
    assert all(n == 1 for n in in_flight.values()), in_flight
    warcs = list((tmp_path / "warc").glob("*fetcher*.warc.gz"))
    assert len({w.name.split("-warc-")[0] for w in warcs}) >= 1
    # every kept page's Markdown record, written by the fetchers' inline parse, refers
    # to its response record and carries that record's payload digest
    digests: dict[str, str] = {}
    texts: Counter[str] = Counter()
    markdown: dict[str, dict[str, str]] = {}
    for path in sorted((tmp_path / "warc").glob("*.warc.gz")):
        with path.open("rb") as fh:
            for rec in ArchiveIterator(fh):
                headers = dict(rec.rec_headers.headers)
                if rec.rec_type == "response":
                    digests[headers["WARC-Record-ID"]] = headers["WARC-Payload-Digest"]
                elif rec.rec_type == "conversion" and "-text-" in path.name:
                    if headers["Content-Type"].startswith("text/markdown"):
                        assert headers["WARC-Refers-To"] not in markdown
                        markdown[headers["WARC-Refers-To"]] = headers
                    else:
                        texts[headers["WARC-Refers-To"]] += 1
    assert len(markdown) == stats.kept and set(markdown) == set(texts)
    for refers, headers in markdown.items():
        assert headers["WARC-Refers-To-Payload-Digest"] == digests[refers]
