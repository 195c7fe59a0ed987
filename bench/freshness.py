"""Freshness: adaptive revisit intervals against one fixed interval, same fetch budget.

    python -m bench.freshness                 # 4 hosts x 40 pages, 72 simulated hours
    python -m bench.freshness --hours 168 --hosts 6 --pages 40

A simulated web whose pages change on schedules of their own (a quarter hourly, a
quarter every 6 hours, a quarter daily, a quarter never) is crawled by the embedded
crawler on a simulated clock (tests/e2e/freshness_support.py): the crawl runs, the
clock moves an hour at a time, and after each step every stored copy is compared with
the page the web serves at that moment (same ETag: current). The same window is run
twice:

- adaptive: revisit intervals halved on a change, doubled otherwise, from
  ``--start`` hours, between 1 hour and 90 days (the defaults);
- fixed: every page every N hours (``CRAWLER_REFRESH_ADAPTIVE=false``), N chosen as the
  shortest whole number of hours that makes no more page fetches than the adaptive run
  made (so the fixed run gets at most the same budget; ``--fixed`` to give N), and
  also N - 1 hours, which makes more fetches than the adaptive run: the two bracket
  the adaptive run's budget.

It prints, for both, the page fetches and the share of stored copies current: over the
window's last day (the figure for "at the end": averaged over its 24 hourly steps, so
it does not depend on whether the last step falls just before or just after a
change or a fixed-interval sweep), after the last step alone, and over the whole
window; ``--json`` also writes them to a file. Not a timed test: the figures are
counts, whatever the machine's speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from simweb import Page
from simweb.model import Scenario
from tests.e2e.crawl_support import host, key, scenario
from tests.e2e.freshness_support import HOUR, SimulatedCrawl

PERIODS = (HOUR, 6 * HOUR, 24 * HOUR, 0.0)  # change_every of each quarter (0: never)


def freshness_web(hosts: int, pages: int) -> Scenario:
    """``hosts`` hosts of ``pages`` pages each, linked from the host's home page (which
    never changes); page i changes every PERIODS[i % 4]."""
    out = []
    for h in range(hosts):
        paths = [f"/p{i}" for i in range(pages)]
        out.append(host(f"f{h}.test", Page(path="/", words=30, links=tuple(paths)),
                        *(Page(path=p, words=80, change_every=PERIODS[i % len(PERIODS)])
                          for i, p in enumerate(paths))))
    return scenario(*out, name="freshness")


@dataclass(slots=True)
class Run:
    mode: str
    interval_hours: float  # the starting (adaptive) or the only (fixed) interval
    fetches: int  # page requests at the server (robots.txt not counted), first crawl included
    fresh_at_end: float  # share of stored copies current after the window's last step
    fresh_last_day: float  # the same share, averaged over the window's last 24 steps
    fresh_mean: float  # the same share, averaged over every hourly step
    fresh_by_period: dict[str, float]  # averaged over the steps, by change period


async def run(web_scenario: Scenario, hours: int, *, adaptive: bool, interval: float,
              out: Path) -> Run:
    refresh = {"adaptive": adaptive}
    async with SimulatedCrawl(web_scenario, out, crawl={"recrawl_interval": interval},
                              refresh=refresh) as sim:
        names = [h.name for h in web_scenario.hosts]
        await sim.seed([f"{n}/" for n in names])
        await sim.settle()
        site = sim.web.site
        pages = [(h.name, p) for h in web_scenario.hosts for p in h.pages if p.path != "/"]
        keys = {(n, p.path): key(sim.web, n + p.path) for n, p in pages}
        shares: list[float] = []
        by_period: dict[float, list[float]] = {p: [] for p in PERIODS}
        last = 0.0
        for _ in range(hours):
            await sim.advance(HOUR)
            rows = await sim.rows()
            current = {}
            for n, p in pages:
                row = rows.get(keys[(n, p.path)])
                served = site.render(n, p.path).header("ETag")
                current[(n, p.path)] = row is not None and row.etag == served
            last = sum(current.values()) / len(current)
            shares.append(last)
            for period in PERIODS:
                sel = [v for (n, path), v in current.items()
                       if site.page(n, path) is not None
                       and site.page(n, path).change_every == period]  # type: ignore[union-attr]
                if sel:
                    by_period[period].append(sum(sel) / len(sel))
        fetches = sum(1 for r in sim.web.log.records() if r.path != "/robots.txt")
    label = {HOUR: "hourly", 6 * HOUR: "6-hourly", 24 * HOUR: "daily", 0.0: "never"}
    return Run(mode="adaptive" if adaptive else "fixed", interval_hours=interval / HOUR,
               fetches=fetches, fresh_at_end=last,
               fresh_last_day=sum(shares[-24:]) / len(shares[-24:]),
               fresh_mean=sum(shares) / len(shares),
               fresh_by_period={label[p]: sum(v) / len(v) for p, v in by_period.items() if v})


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    web = freshness_web(args.hosts, args.pages)
    with tempfile.TemporaryDirectory(prefix="freshness-") as tmp:
        adaptive = await run(web, args.hours, adaptive=True, interval=args.start * HOUR,
                             out=Path(tmp) / "adaptive")
        print(_line(adaptive), flush=True)
        fixed_runs: list[Run] = []
        if args.fixed:
            candidates = [args.fixed]
        else:
            # fetches of a fixed interval n: every page (home pages too) 1 + hours // n
            # times; start from the n that this estimate puts at the adaptive budget
            per_page = adaptive.fetches / (args.hosts * (args.pages + 1)) - 1
            candidates = [max(1, math.ceil(args.hours / max(per_page, 1e-9)))]
        fixed = more = None
        for n in candidates:
            while True:
                trial = await run(web, args.hours, adaptive=False, interval=n * HOUR,
                                  out=Path(tmp) / f"fixed-{n}")
                print(_line(trial), flush=True)
                fixed_runs.append(trial)
                if args.fixed or trial.fetches <= adaptive.fetches:
                    fixed = trial
                    break
                n += 1
        if not args.fixed and n > 1:
            # the next shorter interval: more fetches than the adaptive run made
            more = await run(web, args.hours, adaptive=False, interval=(n - 1) * HOUR,
                             out=Path(tmp) / f"fixed-{n - 1}")
            print(_line(more), flush=True)
    assert fixed is not None
    return {"hosts": args.hosts, "pages_per_host": args.pages, "hours": args.hours,
            "adaptive": asdict(adaptive), "fixed": asdict(fixed),
            "fixed_more_fetches": asdict(more) if more is not None else None,
            "fixed_tried": [asdict(r) for r in fixed_runs]}


def _line(r: Run) -> str:
    periods = ", ".join(f"{k} {v:.0%}" for k, v in r.fresh_by_period.items())
    return (f"{r.mode:>8} (interval {r.interval_hours:g} h): {r.fetches} fetches, "
            f"current over the last day {r.fresh_last_day:.1%} (after the last step "
            f"{r.fresh_at_end:.1%}), over the window {r.fresh_mean:.1%} "
            f"({periods})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.freshness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--pages", type=int, default=40, help="pages per host")
    p.add_argument("--hours", type=int, default=72, help="simulated window in hours")
    p.add_argument("--start", type=float, default=6.0,
                   help="adaptive run's starting interval in hours (default 6)")
    p.add_argument("--fixed", type=int, default=0,
                   help="fixed run's interval in hours (default: matched to the budget)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    result = asyncio.run(main_async(args))
    a, f = result["adaptive"], result["fixed"]
    assert isinstance(a, dict) and isinstance(f, dict)
    print(f"adaptive: {a['fetches']} fetches, {a['fresh_last_day']:.1%} current over the "
          f"last day; fixed every {f['interval_hours']:g} h: {f['fetches']} fetches, "
          f"{f['fresh_last_day']:.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
