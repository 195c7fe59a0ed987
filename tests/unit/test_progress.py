"""The progress line of an embedded crawl (issue 10, items 7 and 8): a steady beat
(1 s live line on a terminal, a plain line every 5 s otherwise), a final line, and a
rate of this run's pages only (a resumed crawl starts at its own zero)."""

from __future__ import annotations

import io
import re

from crawler.embedded import LOG_PROGRESS_INTERVAL, TTY_PROGRESS_INTERVAL, Progress
from frontier.stats import CrawlStats

LINE = re.compile(r"pages +(\d+) +([\d.]+)/s +queued +(\d+) +in flight +(\d+) +"
                  r"errors +(\d+) +([\d.]+)s")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def drive(meter: Progress, clock: Clock, *, seconds: float, step: float = 0.1,
          fetched: int = 0, per_second: float = 10.0) -> int:
    """Poll like EmbeddedCrawler.wait does, for ``seconds``; returns pages fetched."""
    start = clock.now
    while clock.now - start < seconds - 1e-9:
        clock.now = round(clock.now + step, 6)
        fetched_now = fetched + int((clock.now - start) * per_second)
        if meter.due():
            meter.report(CrawlStats(fetched=fetched_now, queued=5, in_flight=1))
    return fetched + int(seconds * per_second)


def test_plain_lines_every_5_seconds_and_a_final_line() -> None:
    out, clock = io.StringIO(), Clock()
    meter = Progress(out, tty=False, clock=clock)
    assert meter.interval == LOG_PROGRESS_INTERVAL == 5.0
    meter.start(0)
    fetched = drive(meter, clock, seconds=12.3)
    meter.report(CrawlStats(fetched=fetched), final=True)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    times = [float(LINE.fullmatch(line).group(6)) for line in lines]  # type: ignore[union-attr]
    assert times == [5.0, 10.0, 12.3]
    assert [int(LINE.fullmatch(line).group(1)) for line in lines][-1] == 123  # type: ignore[union-attr]


def test_live_line_on_a_terminal_every_second() -> None:
    out, clock = io.StringIO(), Clock()
    meter = Progress(out, tty=True, clock=clock)
    assert meter.interval == TTY_PROGRESS_INTERVAL == 1.0
    meter.start(0)
    fetched = drive(meter, clock, seconds=3.5)
    meter.message("crawler: a warning")
    meter.report(CrawlStats(fetched=fetched), final=True)
    text = out.getvalue()
    updates = text.split("\r")[1:]
    shown = [u for u in updates if u.startswith("pages")]
    assert len(shown) == 4  # 1 s, 2 s, 3 s and the final line
    assert all(u.endswith("\x1b[K") for u in shown[:-1])  # rewritten in place
    assert "\r\x1b[Kcrawler: a warning\n" in text  # a message clears the live line first
    assert text.endswith("\x1b[K\n")  # the final line stays, with its newline


def test_a_slow_poll_keeps_the_beat() -> None:
    out, clock = io.StringIO(), Clock()
    meter = Progress(out, tty=False, interval=5.0, clock=clock)
    meter.start(0)
    drive(meter, clock, seconds=17.0, step=0.7)
    times = [float(LINE.fullmatch(line).group(6))  # type: ignore[union-attr]
             for line in out.getvalue().splitlines()]
    assert len(times) == 3
    assert all(t - 5.0 * (i + 1) < 0.7 for i, t in enumerate(times))  # no drift


def test_the_rate_after_a_resume_counts_only_this_run() -> None:
    """A resumed crawl with 3,000 pages from earlier runs fetches 10 pages a second:
    the rate is 10/s, not 3,000 pages over this run's few seconds."""
    out, clock = io.StringIO(), Clock()
    meter = Progress(out, tty=False, clock=clock)
    clock.now += 60.0  # the crawler starting up
    meter.start(3000)
    drive(meter, clock, seconds=5.0, fetched=3000)
    match = LINE.fullmatch(out.getvalue().splitlines()[0])
    assert match is not None
    assert int(match.group(1)) == 3050  # pages: the whole crawl's
    assert float(match.group(2)) == 10.0  # rate: this run's
    assert float(match.group(6)) == 5.0  # time: this run's
