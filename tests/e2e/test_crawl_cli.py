"""``crawler crawl`` as a user runs it, against the simulated web on loopback (issue 10,
items 4, 7 and 8): a seed the SSRF guard refuses is named at once with the setting
that would allow it; progress is a live line on a terminal and plain lines in a log;
the figures at the end of a crawl are the ones ``crawler stats`` reads afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import sys
from pathlib import Path

import pytest

from simweb import SimWeb
from simweb.scenarios import seed

LINE = re.compile(r"pages +(\d+) +([\d.]+)/s +queued +(\d+) +in flight +(\d+) +"
                  r"errors +(\d+) +([\d.]+)s")


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}


def crawl_command(web: SimWeb, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "crawler.cli", "crawl", *web.seed_urls(), "--out", str(out),
            "--delay", "0.05", "--max-pages-per-host", "80", "--max-depth", "1000",
            "--dns", web.dns_servers[0], *extra]


async def run(argv: list[str], limit: float = 120) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), limit)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.timeout(120)
async def test_seeds_the_ssrf_guard_refuses_are_named_and_the_crawl_fails(
        tmp_path: Path) -> None:
    """The seed hosts resolve (through the simulated web's DNS) to 127.0.0.1, which the
    guard refuses without --allow-network: every seed is refused before any connection."""
    async with SimWeb(seed(), dns=True) as web:
        code, out, err = await run(crawl_command(web, tmp_path, "--no-progress"))
        requests = len(web.log.records())
    assert code == 1, err
    for url in web.seed_urls():
        host = url.split("/")[2].split(":")[0]
        assert (f"crawler: seed {url} refused: {host} resolves to 127.0.0.1 "
                "(a loopback address)") in err
    assert "--allow-network 127.0.0.1/32" in err
    assert "CRAWLER_FETCHER_ALLOW_NETWORKS=127.0.0.1/32" in err
    assert "none of the 3 seed URLs could be crawled" in err
    assert "errors: ssrf                3" in out
    assert requests == 0


@pytest.mark.timeout(180)
async def test_plain_progress_lines_and_figures_that_crawler_stats_repeats(
        tmp_path: Path) -> None:
    async with SimWeb(seed(), dns=True) as web:
        code, out, err = await run(crawl_command(web, tmp_path, "--allow-network",
                                                 "127.0.0.1/32"))
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("pages")]
    assert "\r" not in err
    parsed = [LINE.fullmatch(line) for line in lines]
    assert all(parsed), lines
    times = [float(m.group(6)) for m in parsed if m]
    # a line every 5 s of the run (on the beat), then the final one
    for k, t in enumerate(times[:-1], start=1):
        assert 5.0 * k <= t < 5.0 * k + 1.0, times
    assert times[-1] >= max(times)
    final = parsed[-1]
    assert final is not None and int(final.group(1)) == 162 and int(final.group(3)) == 0

    # the figures are the store's: crawler stats reads the same ones afterwards; the
    # per-run block is marked as such and is not in crawler stats
    assert "fetched                   162" in out
    assert "this run:" in out and "  seen-filter skipped" in out
    code2, again, err2 = await run([sys.executable, "-m", "crawler.cli", "stats", "--out",
                                    str(tmp_path)])
    assert code2 == 0, err2
    assert out.split("this run:")[0].rstrip("\n") == again.rstrip("\n")
    assert "in flight                   0" in again
    assert "awaiting parse              0" in again
    assert "seen-filter" not in again


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


@pytest.mark.timeout(180)
async def test_live_progress_line_on_a_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    try:
        async with SimWeb(seed(), dns=True) as web:
            proc = await asyncio.create_subprocess_exec(
                *crawl_command(web, tmp_path, "--allow-network", "127.0.0.1/32"),
                env=env(), stdout=asyncio.subprocess.PIPE, stderr=slave)
            os.close(slave)
            slave = -1
            reader = asyncio.create_task(asyncio.to_thread(_read_all, master))
            out, _ = await asyncio.wait_for(proc.communicate(), 120)
            text = (await asyncio.wait_for(reader, 30)).decode()
    finally:
        if slave >= 0:
            os.close(slave)
        with contextlib.suppress(OSError):
            os.close(master)
    assert proc.returncode == 0, text
    updates = [u for u in text.replace("\r\n", "\n").split("\r") if u.startswith("pages")]
    assert len(updates) >= 3, text  # one a second over a crawl of several seconds
    times = [float(m.group(6)) for u in updates
             if (m := LINE.match(u.replace("\x1b[K", "").strip()))]
    assert len(times) == len(updates)
    for k, t in enumerate(times[:-1], start=1):
        assert 1.0 * k <= t < 1.0 * k + 0.5, times
    assert all(u.endswith("\x1b[K") for u in updates[:-1])  # rewritten in place
    assert updates[-1].rstrip("\n").endswith("\x1b[K") and updates[-1].endswith("\n")
    assert b"fetched                   162" in out
