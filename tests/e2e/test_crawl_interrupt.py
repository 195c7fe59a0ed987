"""Ctrl-C stops `crawler crawl` cleanly, and the same command run again resumes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

from simweb import SimWeb
from simweb.scenarios import seed


def crawl_command(web: SimWeb, out: Path, *seeds: str) -> list[str]:
    return [sys.executable, "-m", "crawler.cli", "crawl", *seeds, "--out", str(out),
            "--delay", "0.1", "--max-pages-per-host", "80", "--max-depth", "1000",
            "--allow-network", "127.0.0.1/32", "--dns", web.dns_servers[0], "--no-progress"]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.timeout(240)
async def test_ctrl_c_then_the_same_command_resumes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    async with SimWeb(seed(), dns=True) as web:
        # a test run started as a background job inherits SIGINT ignored; give the
        # crawler the disposition a terminal gives it
        first = await asyncio.create_subprocess_exec(
            *crawl_command(web, tmp_path, *web.seed_urls()), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=_default_sigint)
        async with asyncio.timeout(120):
            await web.log.wait_until(
                lambda log: sum(log.counts_by_host(exclude_paths=("/robots.txt",)).values())
                >= 60)
        first.send_signal(signal.SIGINT)
        _, err1 = await asyncio.wait_for(first.communicate(), 60)
        assert first.returncode == 130, err1.decode()
        assert b"run the same command again to resume" in err1
        before = sum(web.log.counts_by_host(exclude_paths=("/robots.txt",)).values())
        assert 60 <= before < 162

        second = await asyncio.create_subprocess_exec(
            *crawl_command(web, tmp_path, *web.seed_urls()), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out2, err2 = await asyncio.wait_for(second.communicate(), 180)
        assert second.returncode == 0, err2.decode()
        hits = Counter(web.log.counts_by_host(exclude_paths=("/robots.txt",)))
        distinct = {h: len([t for t in web.log.counts_by_path(h, with_query=True)
                            if t != "/robots.txt"]) for h in hits}
        repeated_by_host = {
            h: [t for t, n in web.log.counts_by_path(h, with_query=True).items()
                if n > 1 and t != "/robots.txt"] for h in hits}
        repeated = [t for ts in repeated_by_host.values() for t in ts]
        gaps = [web.log.min_gap(h, exclude_paths=()) for h in hits]

    text = out2.decode()
    assert "fetched                   162" in text, text
    assert "pages kept                132" in text
    assert "exact duplicates           30" in text
    assert distinct == {"news.test": 61, "shop.test": 21, "trap.test": 80}
    # only pages in flight at the interrupt are fetched again (at least once), and a
    # host has at most one request in flight
    assert all(len(ts) <= 1 for ts in repeated_by_host.values()), repeated_by_host
    assert sum(hits.values()) == 162 + len(repeated)
    assert all(g is not None and g >= 0.1 for g in gaps), gaps
