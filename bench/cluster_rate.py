"""Pages per second of a cluster-mode crawl: ``python -m bench.cluster_rate [--runs N]``.

Serves the simulated web's generated scenario (60 hosts x 20 pages, seed 1, with its
DNS responder) on 127.0.0.1 and crawls it with one frontier, two fetchers, one parser
and one dedup process on the local Kafka and Cassandra (the environment names them:
``eval "$(scripts/servers env | sed 's/^/export /')"``), each run with topics and a
keyspace of its own (dropped afterwards). The rate is measured at the server: page
requests (robots.txt not counted) over the time from the first request's start to the
last one's end. Also printed: the smallest gap between two requests to one host and the
most requests one host had at once, so a fast run that broke politeness shows it, and
the Cassandra statements (by kind) and store calls (by operation) per fetched page, read
from every service's /metrics just before it stops.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.cluster_child import scrape
from simweb import SimWeb
from simweb.scenarios import generated
from tests.integration.cluster import cluster, require_cluster_servers


async def one_run(*, hosts: int, pages: int, delay: float, fetchers: int,
                  env: dict[str, str]) -> dict[str, float]:
    scenario = generated(hosts, pages, seed=1)
    with tempfile.TemporaryDirectory(prefix="cluster-rate-") as tmp:
        async with SimWeb(scenario, dns=True) as web:
            run_env = {
                "CRAWLER_FETCHER_DNS_SERVERS": ",".join(web.dns_servers),
                "CRAWLER_FETCHER_ALLOW_NETWORKS": "127.0.0.1/32",
                "CRAWLER_POLITENESS_DEFAULT_DELAY": str(delay),
                **env,
            }
            with cluster(Path(tmp), run_env) as c:
                ports: dict[str, int] = {}

                def start(name: str, role: str) -> None:
                    ports[name] = c.free_port()
                    c.start(name, role, {"CRAWLER_METRICS_PORT": str(ports[name])})

                start("frontier", "frontier")
                for i in range(fetchers):
                    start(f"fetcher-{i + 1}", "fetcher")
                start("parser", "parser")
                start("dedup", "dedup")
                began = time.monotonic()
                c.seed(web.seed_urls())
                stats = await c.wait_done(600, quiet_polls=3, poll=0.5)
                wall = time.monotonic() - began
                counters: dict[str, float] = {}
                for port in ports.values():
                    for key, value in scrape(port).items():
                        counters[key] = counters.get(key, 0.0) + value
            records = [r for r in web.log.records() if r.path != "/robots.txt"]
            gaps = [g for h in web.log.hosts()
                    if (g := web.log.min_gap(h, exclude_paths=())) is not None]
            most = max((web.log.max_in_flight(h) for h in web.log.hosts()), default=0)
    if not records:
        raise RuntimeError("the crawl made no page requests")
    span = max(r.ended for r in records) - min(r.started for r in records)
    return {"pages": float(len(records)), "fetched": float(stats.fetched),
            "span": span, "wall": wall, "rate": len(records) / span if span > 0 else 0.0,
            "min_gap": min(gaps, default=0.0), "max_in_flight": float(most),
            **{f"statements:{k}": v
               for k, v in _by_label(counters, "crawler_store_statements_sent_total").items()},
            **{f"calls:{k}": v for k, v in _by_label(
                counters, "crawler_store_request_duration_seconds_count").items()}}


def _by_label(counters: dict[str, float], name: str) -> dict[str, float]:
    """``name``'s samples summed by their one label's value."""
    out: dict[str, float] = {}
    for key, value in counters.items():
        if key.startswith(name + "{"):
            label = key[len(name) + 1:-1].partition("=")[2]
            out[label] = out.get(label, 0.0) + value
    return out


def cost_line(r: dict[str, float]) -> str:
    """Statements by kind and store calls by operation, per fetched page."""
    pages = r["fetched"] or 1.0
    kinds = {k.partition(":")[2]: v / pages for k, v in r.items()
             if k.startswith("statements:")}
    calls = sorted(((k.partition(":")[2], v / pages) for k, v in r.items()
                    if k.startswith("calls:")), key=lambda kv: -kv[1])
    return (f"  Cassandra statements per fetched page: {sum(kinds.values()):.2f} ("
            + ", ".join(f"{k} {v:.2f}" for k, v in sorted(kinds.items())) + ")\n"
            + "  store calls per fetched page: "
            + ", ".join(f"{k} {v:.2f}" for k, v in calls if v >= 0.005))


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=60)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.25)
    parser.add_argument("--fetchers", type=int, default=2)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="an extra CRAWLER_* setting for every service")
    args = parser.parse_args(argv)
    require = require_cluster_servers
    try:
        require()
    except BaseException as exc:  # pytest.skip raises an exception of its own kind
        print(f"servers not reachable: {exc}", file=sys.stderr)
        return 2
    extra = dict(item.split("=", 1) for item in args.env)
    rates = []
    for i in range(args.runs):
        r = await one_run(hosts=args.hosts, pages=args.pages, delay=args.delay,
                          fetchers=args.fetchers, env=extra)
        rates.append(r["rate"])
        print(f"run {i + 1}: {r['pages']:.0f} page requests ({r['fetched']:.0f} fetched) "
              f"in {r['span']:.1f} s at the server ({r['wall']:.1f} s seed to done): "
              f"{r['rate']:.1f} pages/s; smallest gap {r['min_gap']:.3f} s, "
              f"most in flight per host {r['max_in_flight']:.0f}", flush=True)
        print(cost_line(r), flush=True)
    print(f"median of {len(rates)}: {statistics.median(rates):.1f} pages/s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
