"""The Scrapy side of the benchmark: one spider with settings equivalent to the crawler's.

Runs in its own virtual environment (never imports the project):

    BENCH_SCRAPY_CONFIG=config.json PYTHONPATH=bench/scrapyside scrapy runspider \
        bench/scrapyside/scrapy_bench.py -s TWISTED_DNS_RESOLVER=scrapy_bench.BenchResolver \
        -s BENCH_DNS_SERVER=127.0.0.1:PORT

The resolver is a process-wide setting, so it goes on the command line (a spider's
custom_settings come too late for it).

``config.json`` names the seeds file, the output folder, the DNS responder, the
per-host delay, the concurrency and the depth limit. What is equivalent to the crawler:

- the same seeds; robots.txt obeyed (Protego, the same parser the crawler uses), with
  the crawler's User-Agent so the same robots.txt group applies;
- one request at a time per host and the same per-host delay (no random jitter);
  the same total concurrency;
- breadth-first order (DEPTH_PRIORITY=1 with FIFO queues) and the same depth limit;
  the downloader-aware priority queue that Scrapy's broad-crawl guide recommends, so
  a few hosts cannot fill every download slot;
- links extracted from every page (``a`` and ``area``), tracking parameters (utm_*
  and the crawler's list) removed, the same way the crawler canonicalises them;
- every page written to disk: url, status, headers and body as gzip-compressed JSON
  lines (Scrapy's feed export with its gzip post-processing plugin);
- names resolved through the same DNS responder (twisted.names), answers cached.

What Scrapy does not do here that the crawler does: WARC records, text extraction,
SimHash and duplicate detection, durable crawl state (no JOBDIR by default).
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import scrapy
from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from twisted.internet import defer
from twisted.internet.abstract import isIPAddress
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from twisted.names import client, dns
from zope.interface import implementer

TRACKING = ("utm_*", "gclid", "fbclid", "msclkid", "dclid", "mc_cid", "mc_eid", "_ga", "yclid")
USER_AGENT = "PoliteCrawler/0.1 (+https://example.com/crawler-info)"


def _config() -> dict[str, Any]:
    path = os.environ.get("BENCH_SCRAPY_CONFIG")
    if not path:
        return {}
    with open(path) as f:
        data: dict[str, Any] = json.load(f)
    return data


CONFIG = _config()


def _seeds(cfg: dict[str, Any]) -> list[str]:
    if not cfg:
        return []
    with open(cfg["seeds_file"]) as f:
        return [line.strip() for line in f if line.strip()]


SEEDS = _seeds(CONFIG)


def strip_tracking(url: str) -> str:
    parts = urlsplit(url)
    if not parts.query:
        return url
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if not any(fnmatch.fnmatchcase(k, p) for p in TRACKING)]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query),
                       parts.fragment))


@implementer(IResolverSimple)
class BenchResolver:
    """Asks the benchmark's DNS responder (twisted.names) and caches the answers."""

    def __init__(self, reactor: Any, server: tuple[str, int]) -> None:
        self.reactor = reactor
        self.client = client.Resolver(servers=[server], reactor=reactor)
        self.cache: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> BenchResolver:
        host, _, port = str(crawler.settings.get("BENCH_DNS_SERVER")).rpartition(":")
        return cls(reactor, (host, int(port)))

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Any = (1, 3, 11)) -> defer.Deferred[str]:  # noqa: N802
        if isIPAddress(name):
            return defer.succeed(name)
        cached = self.cache.get(name)
        if cached is not None:
            return defer.succeed(cached)
        # An A query (twisted's own getHostByName asks for ANY records, which the
        # responder, like many servers, answers with nothing).
        d = self.client.lookupAddress(name, timeout)

        def first_address(result: Any) -> str:
            answers = result[0]
            for rr in answers:
                if rr.type == dns.A:
                    address = str(rr.payload.dottedQuad())
                    self.cache[name] = address
                    return address
            raise DNSLookupError(name)

        d.addCallback(first_address)
        return d


def _settings(cfg: dict[str, Any]) -> dict[str, Any]:
    if not cfg:
        return {}
    out = cfg["out_dir"]
    settings: dict[str, Any] = {
        "USER_AGENT": USER_AGENT,
        "ROBOTSTXT_OBEY": True,
        "ROBOTSTXT_PARSER": "scrapy.robotstxt.ProtegoRobotParser",
        "CONCURRENT_REQUESTS": cfg["concurrency"],
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": cfg["delay"],
        "DOWNLOAD_DELAY_JITTER": 0,
        "DEPTH_LIMIT": cfg["max_depth"],
        "DEPTH_PRIORITY": 1,
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "LOGSTATS_INTERVAL": 30.0,
        "DOWNLOAD_TIMEOUT": 30,
        "RETRY_TIMES": 4,
        "REACTOR_THREADPOOL_MAXSIZE": 20,
        "TWISTED_DNS_RESOLVER": "scrapy_bench.BenchResolver",
        "BENCH_DNS_SERVER": cfg["dns_server"],
        "FEEDS": {
            os.path.join(out, "pages.jsonl.gz"): {
                "format": "jsonlines",
                "encoding": "utf8",
                "postprocessing": ["scrapy.extensions.postprocessing.GzipPlugin"],
            },
        },
    }
    if cfg.get("jobdir"):
        settings["JOBDIR"] = os.path.join(out, "job")
    return settings


class BenchSpider(scrapy.Spider):
    name = "bench"
    custom_settings = _settings(CONFIG)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.links = LinkExtractor(tags=("a", "area"), attrs=("href",),
                                   process_value=strip_tracking, unique=True)

    # the real web: links stay on the seeds' hosts, as the crawler's seed-hosts scope
    allowed_domains = (sorted({urlsplit(u).hostname or "" for u in SEEDS})
                       if CONFIG.get("same_host") else None)

    async def start(self) -> AsyncIterator[Any]:
        for url in SEEDS:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {
            "url": response.url,
            "status": response.status,
            "headers": {k.decode("latin-1"): [v.decode("latin-1") for v in vs]
                        for k, vs in response.headers.items()},
            "body": response.text,
        }
        for link in self.links.extract_links(response):
            yield response.follow(link.url, callback=self.parse)

    def closed(self, reason: str) -> None:
        stats = self.crawler.stats.get_stats() if self.crawler.stats else {}
        path = os.path.join(CONFIG["out_dir"], "scrapy-stats.json")
        with open(path, "w") as f:
            json.dump({"reason": reason, **{k: str(v) for k, v in stats.items()}}, f)
