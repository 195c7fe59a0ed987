"""One scaling point: the embedded crawler with N known URLs, crawling a fixed budget.

    python -m bench.scale_child CONFIG.json      (prints one JSON line of results)

Settings come from the CRAWLER_* environment, like ``crawler crawl``. The steps:

1. Start the embedded crawler (every stage, SQLite, WARC folder) in this process and
   read its resident memory.
2. Make the URL set known: N URLs spread over ``filler_hosts`` hosts (``q0.test`` ...)
   go in as seeds through the frontier (seen filter, trap rules, url_state rows),
   in batches. Those hosts were first given a politeness timer a year ahead (their
   HostState rows, through the StateStore port), so their URLs stay queued: known to
   the frontier and the store, never fetched during the measurement.
3. Read the memory again (after a collection), then seed the benchmark web and crawl
   until ``budget`` pages have been dispatched and answered; time, CPU (this process
   and its page worker processes) and memory (sampled, this process: the one that
   holds the crawl's state) over that phase give the time per page at this size.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from common.pagework import ProcessPageWork
from common.ports import HostState
from common.settings import Settings
from crawler.embedded import EmbeddedCrawler

YEAR = 365 * 86400.0
BATCH = 20_000


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(crawler: EmbeddedCrawler) -> float:
    """CPU of this process and of the crawler's page worker processes (still running,
    so not in RUSAGE_CHILDREN: read from /proc)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    total = ru.ru_utime + ru.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    pids = crawler.work.pids() if isinstance(crawler.work, ProcessPageWork) else []
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


async def drained(crawler: EmbeddedCrawler, limit: float) -> None:
    deadline = time.monotonic() + limit
    while crawler.bus.pending() > 0:
        if time.monotonic() > deadline:
            raise TimeoutError("the bus did not drain")
        await asyncio.sleep(0.02)


async def run(cfg: dict[str, Any]) -> dict[str, Any]:
    settings = Settings.from_env().replace(crawl={"out_dir": cfg["out_dir"],
                                                  "max_pages": cfg["budget"]})
    crawler = EmbeddedCrawler(settings)
    await crawler.start()
    try:
        gc.collect()
        rss_start = rss_bytes()
        n = int(cfg["known"])
        hosts = int(cfg["filler_hosts"])
        later = time.time() + YEAR
        for i in range(hosts):
            await crawler.store.put_host(HostState(host=f"q{i}.test", next_allowed_at=later))
        seeding_started = time.monotonic()
        cpu0 = cpu_seconds(crawler)
        for start in range(0, n, BATCH):
            batch = [f"http://q{j % hosts}.test/item/{j}/page.html"
                     for j in range(start, min(n, start + BATCH))]
            await crawler.frontier.seed(batch)
            await drained(crawler, 600)
        seeding_seconds = time.monotonic() - seeding_started
        seeding_cpu = cpu_seconds(crawler) - cpu0
        gc.collect()
        rss_seeded = rss_bytes()
        seen = crawler.frontier.seen.stats()
        stats_before = await crawler.stats()

        seeds = cfg["seeds"]
        budget = int(cfg["budget"])
        started = time.monotonic()
        cpu1 = cpu_seconds(crawler)
        await crawler.frontier.seed(seeds)
        peak = rss_bytes()
        deadline = started + float(cfg.get("timeout", 1800))
        while True:
            await asyncio.sleep(0.1)
            peak = max(peak, rss_bytes())
            f = crawler.frontier
            if (f.counters.dispatched >= budget and f.outstanding == 0
                    and crawler.bus.pending() == 0):
                break
            if crawler.done():
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the crawl did not reach its budget in time")
        crawl_seconds = time.monotonic() - started
        crawl_cpu = cpu_seconds(crawler) - cpu1
        stats = await crawler.stats()
        pages = stats.fetched
    finally:
        await crawler.close()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "known_filler": n, "filler_hosts": hosts, "budget": budget,
        "known_urls_before_crawl": stats_before.known_urls,
        "known_urls_after_crawl": stats.known_urls,
        "seeding_seconds": seeding_seconds, "seeding_cpu_seconds": seeding_cpu,
        "seeding_urls_per_second": n / seeding_seconds if seeding_seconds else None,
        "rss_start_bytes": rss_start, "rss_seeded_bytes": rss_seeded,
        "rss_peak_crawl_bytes": peak, "ru_maxrss_bytes": ru.ru_maxrss * 1024,
        "seen_filter_bits": seen.bits, "seen_filter_items": seen.items,
        "seen_filter_stages": seen.stages,
        "pages": pages, "crawl_seconds": crawl_seconds, "crawl_cpu_seconds": crawl_cpu,
        "ms_per_page": 1000 * crawl_seconds / max(1, pages),
        "cpu_ms_per_page": 1000 * crawl_cpu / max(1, pages),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.scale_child CONFIG.json", file=sys.stderr)
        return 2
    cfg = json.loads(Path(argv[0]).read_text())
    cfg["seeds"] = [s for s in Path(cfg["seeds_file"]).read_text().splitlines() if s.strip()]
    result = asyncio.run(run(cfg))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
