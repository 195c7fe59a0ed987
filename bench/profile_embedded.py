"""CPU per page of the embedded crawl: a short, repeatable measurement for code changes.

    .venv/bin/python -m bench.profile_embedded                  # 100 hosts x 10 pages, 3 runs
    .venv/bin/python -m bench.profile_embedded --runs 5 --json var/bench/pe.json
    .venv/bin/python -m bench.profile_embedded --runs 1 \\
        --py-spy var/bench/tools-venv/bin/py-spy              # plus a CPU profile by component

What it does:

1. Starts the simulated web in a thread of this process: the ``generated`` scenario
   (``simweb.scenarios.generated``) with the benchmark's shape, 40 links per page and
   500 words, and every HTML page given the inline style sheet and script of
   ``bench.web.boilerplate`` (about 20 KiB per page, like bench/run's nginx web), with
   the simulated web's DNS responder. Both listen on 127.0.0.1 only.
2. Runs ``python -m crawler.cli crawl`` as a child process against it, ``--runs``
   times, each into a fresh output folder, with the benchmark's settings (per-host
   delay ``--delay``, one request per host at a time, ``--concurrency`` requests in
   flight, depth limit 16). The child's CPU (user + system) and peak memory come from
   ``os.wait4``, so the web server's own work in this process is not counted.
3. Prints, per run and as the median: pages fetched (page requests the web served,
   robots.txt not counted), wall seconds, CPU seconds, CPU seconds per 1,000 pages and
   whether the fetched set is exactly the expected one (``simweb.expected``), and the
   start-up: seconds from starting the child to the first request the web saw (its
   first robots.txt), the time a crawl spends importing, opening its state and
   starting its page workers before it fetches anything.

The crawl's environment carries no ``CRAWLER_*`` variable of the calling shell, only
the benchmark's settings and those given with ``--env CRAWLER_X=VALUE`` (repeatable),
for example ``--env CRAWLER_CRAWL_PAGE_PROCESSES=2``. ``--timeline`` prints each run's
page requests per second, second by second.

``--tree DIR`` (repeatable) runs the crawler from other copies of the source tree,
alternating between them run by run (A B A B ...), so two versions of the code are
compared under the same load on the machine; the median is given per tree.

With ``--py-spy PATH`` each run is sampled by py-spy (every thread, ``--rate`` Hz) and
the samples are folded by ``bench.cpu_profile`` into components and hot functions
(CPU ms per page); the crawl is then py-spy's child, so the run's CPU figure is not
the crawl's: read the components, and measure CPU in runs without py-spy. Every run
is bounded by ``--timeout`` (SIGINT, then SIGKILL).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.runners import wait_with_usage

REPO = Path(__file__).resolve().parents[1]


@dataclass(slots=True)
class Run:
    run: int
    pages: int
    wall_seconds: float
    cpu_seconds: float
    max_rss_mib: float
    exit_code: int
    tree: str
    missing: int
    extra: int
    first_request_seconds: float | None = None  # start-up: child started -> first request
    components: list[dict[str, Any]] | None = None
    timeline: list[int] | None = None  # page requests per second since the start

    @property
    def cpu_per_1000(self) -> float:
        return 1000 * self.cpu_seconds / max(1, self.pages)

    @property
    def pages_per_second(self) -> float:
        return self.pages / max(1e-9, self.wall_seconds)


def _with_boilerplate(web: Any) -> None:
    """Give every HTML page of the running web the benchmark's inline style and script."""
    from bench.web import boilerplate

    site = web.site
    respond = site.respond

    def wrapped(req: Any) -> Any:
        reply = respond(req)
        ctype = reply.header("Content-Type") or ""
        if reply.status != 200 or not ctype.startswith("text/html"):
            return reply
        head, tail = boilerplate(req.host)
        text = reply.body.decode("utf-8")
        text = text.replace("<head>\n", "<head>\n" + head, 1)
        text = text.replace("</body>", tail + "</body>", 1)
        return replace(reply, body=text.encode("utf-8"))

    site.respond = wrapped


def _crawl_once(args: argparse.Namespace, run: int, handle: Any, expected: set[str],
                out_root: Path, tree: Path) -> Run:
    out = out_root / f"run-{run}"
    shutil.rmtree(out, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env.update({
        "PYTHONPATH": str(tree),
        "CRAWLER_FETCHER_DNS_SERVERS": f"127.0.0.1:{handle.dns_port}",
        "CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.1/32",
        "CRAWLER_POLITENESS_DEFAULT_DELAY": f"{args.delay:g}",
        "CRAWLER_POLITENESS_MAX_IN_FLIGHT_PER_HOST": "1",
        "CRAWLER_FETCHER_CONCURRENCY": str(args.concurrency),
        "CRAWLER_TRAPS_MAX_DEPTH": "16",
    })
    env.update(dict(item.split("=", 1) for item in args.env))
    cmd = [sys.executable, "-m", "crawler.cli", "crawl", "--no-progress", "--out", str(out),
           *handle.seed_urls()]
    raw = out_root / f"profile-{run}.txt"
    if args.py_spy:
        cmd = [args.py_spy, "record", "--subprocesses", "--rate", str(args.rate),
               "--format", "raw", *(["--gil"] if args.gil else []),
               "--output", str(raw), "--", *cmd]
    before = len(handle.log.records())
    started = time.monotonic()
    with (out_root / f"run-{run}.log").open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        status, rusage, timed_out = wait_with_usage(proc, started + args.timeout,
                                                    grace=20.0, poll=0.02)
        if timed_out:
            print(f"run {run}: timed out after {args.timeout:g} s; stopped it",
                  file=sys.stderr)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    records = handle.log.records()[before:]
    port = handle.port
    page_records = [r for r in records if r.path != "/robots.txt"]
    fetched = {f"http://{r.host}:{port}{r.target}" for r in page_records}
    pages = len(page_records)
    first = min((r.started for r in records), default=None)
    timeline = [0] * (int(wall) + 1)
    for r in page_records:
        timeline[min(len(timeline) - 1, max(0, int(r.started - started)))] += 1
    components = None
    if args.py_spy and raw.exists():
        from bench.cpu_profile import summarize_file

        summary = summarize_file(raw, args.rate)
        components = [{"name": c["name"],
                       "ms_per_page": 1000 * c["cpu_seconds"] / max(1, pages)}
                      for c in summary["components"]]
        components += [{"name": "hot: " + c["name"],
                        "ms_per_page": 1000 * c["cpu_seconds"] / max(1, pages)}
                       for c in summary["hot_functions"][:12]]
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return Run(run=run, pages=pages, wall_seconds=wall,
               cpu_seconds=rusage.ru_utime + rusage.ru_stime,
               max_rss_mib=rusage.ru_maxrss / 1024, exit_code=proc.returncode, tree=str(tree),
               missing=len(expected - fetched), extra=len(fetched - expected),
               components=components, timeline=timeline,
               first_request_seconds=None if first is None else first - started)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_embedded",
                                description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--pages", type=int, default=10, help="pages per host")
    p.add_argument("--links", type=int, default=40, help="links per page")
    p.add_argument("--words", type=int, default=500, help="words of text per page")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--delay", type=float, default=0.25, help="per-host politeness delay (s)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run at most")
    p.add_argument("--no-boilerplate", action="store_true",
                   help="serve the scenario's pages as they are (about 4 KiB)")
    p.add_argument("--py-spy", metavar="PATH", help="profile each run with this py-spy")
    p.add_argument("--gil", action="store_true",
                   help="sample only the thread holding the interpreter lock (py-spy "
                        "--gil): threads waiting for the lock are not counted as busy")
    p.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--keep", action="store_true", help="keep the crawl output folders")
    p.add_argument("--env", action="append", default=[], metavar="CRAWLER_X=VALUE",
                   help="a setting for the crawl (repeatable); other CRAWLER_* variables "
                        "of this shell are not passed on")
    p.add_argument("--timeline", action="store_true",
                   help="print each run's page requests per second, second by second")
    p.add_argument("--out", help="folder for crawl output and logs (default: a temp folder)")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--tree", action="append", default=[], metavar="DIR",
                   help="run the crawler from this source tree (repeat to alternate)")
    args = p.parse_args(argv)
    if args.runs < 1 or args.hosts < 1 or args.pages < 2:
        p.error("runs and hosts must be at least 1, pages at least 2")
    for item in args.env:
        if not item.startswith("CRAWLER_") or "=" not in item:
            p.error(f"--env {item!r}: give CRAWLER_NAME=VALUE")

    from simweb.expected import expected_crawl
    from simweb.scenarios import generated
    from simweb.server import SimWeb

    scenario = generated(args.hosts, args.pages, args.seed, links_per_page=args.links,
                         words=args.words)
    out_root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="profile-emb-"))
    out_root.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    with SimWeb.run_in_thread(scenario, dns=True, max_stall=10) as handle:
        if not args.no_boilerplate:
            _with_boilerplate(handle.web)
        exp = expected_crawl(scenario, port=handle.port,
                             max_urls=args.hosts * (args.pages + 2) + 10)
        expected = set(exp.fetched)
        print(f"simulated web on 127.0.0.1:{handle.port}: {args.hosts} hosts x {args.pages} "
              f"pages, {len(expected)} expected fetches; output in {out_root}",
              file=sys.stderr)
        trees = [Path(t).resolve() for t in args.tree] or [REPO]
        for i in range(1, args.runs * len(trees) + 1):
            tree = trees[(i - 1) % len(trees)]
            r = _crawl_once(args, i, handle, expected, out_root, tree)
            runs.append(r)
            label = f" [{tree}]" if len(trees) > 1 else ""
            print(f"run {i}{label}: {r.pages} pages, {r.wall_seconds:.1f} s "
                  f"({r.pages_per_second:.1f}/s), CPU {r.cpu_seconds:.2f} s = "
                  f"{r.cpu_per_1000:.2f} s per 1,000 pages, peak {r.max_rss_mib:.0f} MiB, "
                  f"first request after {r.first_request_seconds or 0:.2f} s, "
                  f"missing {r.missing}, extra {r.extra}, exit {r.exit_code}")
            for c in r.components or []:
                print(f"    {c['ms_per_page']:6.2f} ms/page  {c['name']}")
            if args.timeline and r.timeline:
                print("    page requests per second: " + " ".join(map(str, r.timeline)))
    summary: dict[str, Any] = {"config": vars(args), "runs": [
        {**asdict(r), "cpu_per_1000_pages": r.cpu_per_1000,
         "pages_per_second": r.pages_per_second} for r in runs], "median": {}}
    for name in sorted({r.tree for r in runs}):
        ok = [r for r in runs if r.exit_code == 0 and r.tree == name]
        if not ok:
            continue
        cpu = [r.cpu_per_1000 for r in ok]
        m = summary["median"][name] = {
            "pages": statistics.median(r.pages for r in ok),
            "wall_seconds": statistics.median(r.wall_seconds for r in ok),
            "pages_per_second": statistics.median(r.pages_per_second for r in ok),
            "cpu_seconds_per_1000_pages": statistics.median(cpu),
            "cpu_min": min(cpu), "cpu_max": max(cpu),
            "first_request_seconds": statistics.median(r.first_request_seconds or 0.0
                                                       for r in ok),
            "max_rss_mib": statistics.median(r.max_rss_mib for r in ok),
        }
        print(f"median of {len(ok)} ({name}): {m['pages']:.0f} pages, "
              f"{m['wall_seconds']:.1f} s, {m['pages_per_second']:.1f} pages/s, CPU "
              f"{m['cpu_seconds_per_1000_pages']:.2f} s per 1,000 pages "
              f"({m['cpu_min']:.2f}-{m['cpu_max']:.2f}), peak {m['max_rss_mib']:.0f} MiB, "
              f"first request after {m['first_request_seconds']:.2f} s")
    ok = [r for r in runs if r.exit_code == 0]
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=1))
    if not args.out and not args.keep:
        shutil.rmtree(out_root, ignore_errors=True)
    return 0 if len(ok) == len(runs) and all(r.missing == r.extra == 0 for r in ok) else 1


if __name__ == "__main__":
    sys.exit(main())
