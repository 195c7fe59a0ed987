"""The embedded crawl of the seed scenario over real HTTP, checked from both sides:
the crawler's own figures and the simulated web's request log."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from common.settings import Settings
from crawler.embedded import blob_root, crawl
from simweb import SimWeb
from simweb.scenarios import seed
from tests.warc_checks import warcat_verify, warcio_check

DELAY = 0.2


def seed_settings(out: Path, web: SimWeb, **crawl_extra: object) -> Settings:
    return Settings().replace(
        crawl={"out_dir": str(out), **crawl_extra},
        politeness={"default_delay": DELAY},
        traps={"max_pages_per_host": 80, "max_depth": 1000},
        fetcher={"dns_servers": tuple(web.dns_servers), "allow_networks": ("127.0.0.1/32",)},
    )


def page_hits(web: SimWeb) -> Counter[str]:
    return Counter(web.log.counts_by_host(exclude_paths=("/robots.txt",)))


@pytest.mark.timeout(180)
async def test_seed_scenario_figures_politeness_and_archive(tmp_path: Path) -> None:
    """One crawl of the seed scenario (about 17 s of politeness waits), checked three
    ways: the crawler's figures, the request log, and the archive it wrote."""
    async with SimWeb(seed(), dns=True) as web:
        settings = seed_settings(tmp_path, web)
        stats = await crawl(settings, web.seed_urls())
        hits = page_hits(web)
        secret = web.log.count("news.test", "/private/secret")
        gaps = {h: web.log.min_gap(h, exclude_paths=())
                for h in ("news.test", "shop.test", "trap.test")}
        dns_names = {q.name for q in web.dns.queries()}

    assert stats.fetched == 162
    assert stats.robots_blocked == 1
    assert stats.exact_duplicates == 30
    assert stats.hosts_capped == 1
    assert stats.kept == 132
    assert stats.near_duplicates == 0
    assert stats.queued == 0 and stats.in_flight == 0 and stats.awaiting_parse == 0
    assert stats.seen_filter_skipped > 0  # utm copies and back-links
    assert hits == {"news.test": 61, "shop.test": 21, "trap.test": 80}
    assert secret == 0
    for host, gap in gaps.items():
        assert gap is not None and gap >= DELAY, (host, gap)
    assert {"news.test", "shop.test", "trap.test"} <= dns_names
    root = blob_root(settings)
    warcs = sorted(root.glob("*.warc.gz"))
    assert warcs
    texts = sorted(root.glob("*-text-*.warc.gz"))
    out = await asyncio.to_thread(warcio_check, warcs)
    assert out.returncode == 0, out.stdout + out.stderr
    # warcat: responses first, then the text records that refer to them
    responses = [f for f in warcs if f not in texts]
    records = await asyncio.to_thread(warcat_verify, responses + texts)
    assert records > 162
    pages = [json.loads(line) for line in (root / "pages.jsonl").read_text().splitlines()]
    stored = [p for p in pages if not p.get("duplicateOf")]
    dups = [p for p in pages if p.get("duplicateOf")]
    assert len(stored) == 132 and len(dups) == 30
    for p in pages:
        assert p["contentHash"].startswith("sha256:")
        assert p["storageKey"]["length"] > 0
    assert all(p["textKey"] for p in stored)
    assert (root / "index.cdxj").read_text().count("\n") >= 162


@pytest.mark.timeout(240)
async def test_stop_and_resume_finishes_the_same_crawl(tmp_path: Path) -> None:
    async with SimWeb(seed(), dns=True) as web:
        first = await crawl(seed_settings(tmp_path, web, max_pages=40), web.seed_urls())
        assert first.fetched == 40
        assert first.queued > 0
        second = await crawl(seed_settings(tmp_path, web), [])
        hits = page_hits(web)
    assert second.fetched == 162
    assert second.kept == 132 and second.exact_duplicates == 30
    assert hits == {"news.test": 61, "shop.test": 21, "trap.test": 80}
