"""Command line: serve a scenario, or write one as JSON.

    python -m simweb --scenario seed --port 8080 [--dns --dns-port 5353]
    python -m simweb --scenario generated:10:500:1
    python -m simweb --scenario path/to/scenario.json
    python -m simweb dump seed > seed.json
    python -m simweb seeds --scenario seed --port 8081   # the seed URLs, one a line

When serving, the first line on stdout is JSON with the port, the DNS port and the seed
URLs; the server runs until SIGINT or SIGTERM, or, with ``--exit-with HOST:PORT``, until
that address, once it answered, stops answering for a few seconds (exit code 3). The
compose demo uses it: each simulated web lives in a fetcher container's network
namespace, and when that container restarts (a crash, SIGKILL) it gets a new namespace;
the web notices that the fetcher's metrics port is gone from its old one and exits, and
its restart policy starts it again in the new one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from typing import Any

from simweb.clock import clock_for
from simweb.model import ScenarioError, dump_scenario
from simweb.scenarios import build_features, build_seed, load
from simweb.server import SimWeb
from simweb.site import Site


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simweb",
                                     description="Serve a simulated web on loopback.")
    parser.add_argument("command", nargs="?", choices=("serve", "dump", "seeds"),
                        default="serve",
                        help="serve (default); dump: print the scenario as JSON; seeds: "
                             "print its seed URLs for a server on --port")
    parser.add_argument("name", nargs="?", help="scenario for dump (like --scenario)")
    parser.add_argument("--scenario", default="seed",
                        help="seed, features, generated:HOSTS:PAGES[:SEED] or a JSON file")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--port", type=int, default=0, help="HTTP port (0: any free one)")
    parser.add_argument("--dns", action="store_true", help="also run the DNS responder")
    parser.add_argument("--dns-port", type=int, default=0, help="UDP port of the responder")
    parser.add_argument("--max-stall", type=float, default=30.0,
                        help="longest delay, hang or drip of one answer (seconds)")
    parser.add_argument("--exit-with", metavar="HOST:PORT",
                        help="exit (code 3) when this TCP address, once it answered, "
                             "stops answering for MISSES checks a second apart")
    parser.add_argument("--misses", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--clock-offset-file", default=None, metavar="PATH",
                        help="a file holding seconds added to the clock that pages with "
                             "change_every change on (the crawler's "
                             "CRAWLER_CRAWL_CLOCK_OFFSET_FILE)")
    return parser


EXIT_PARTNER_GONE = 3


async def _answers(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _watch(address: str, misses: int) -> None:
    """Return once ``address`` answered at least once and then missed ``misses`` checks."""
    host, _, port = address.rpartition(":")
    armed, missed = False, 0
    while True:
        if await _answers(host.strip("[]"), int(port)):
            armed, missed = True, 0
        elif armed:
            missed += 1
            if missed >= misses:
                return
        await asyncio.sleep(1.0)


async def _serve(args: argparse.Namespace) -> int:
    web = SimWeb(load(args.scenario), port=args.port, host=args.host, dns=args.dns,
                 dns_port=args.dns_port, max_stall=args.max_stall,
                 clock=clock_for(args.clock_offset_file))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with web:
        info = {"port": web.port, "dns_port": web.dns_port if args.dns else None,
                "seeds": web.seed_urls(), "resolve": web.resolve_entries()}
        print(json.dumps(info), flush=True)
        waits: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait())]
        if args.exit_with:
            waits.append(asyncio.create_task(_watch(args.exit_with, args.misses)))
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        gone = not stop.is_set()
    counts = web.log.counts_by_host()
    print(json.dumps({"requests": counts}), file=sys.stderr, flush=True)
    if gone:
        print(f"simweb: {args.exit_with} stopped answering; exiting", file=sys.stderr,
              flush=True)
        return EXIT_PARTNER_GONE
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "dump":
            name = args.name or args.scenario
            builders = {"seed": build_seed, "features": build_features}
            scenario = builders[name]() if name in builders else load(name)
            sys.stdout.buffer.write(dump_scenario(scenario))
            return 0
        if args.command == "seeds":
            site = Site(load(args.name or args.scenario), port=args.port or None)
            print("\n".join(site.seed_urls()))
            return 0
        if args.exit_with:
            _, sep, port = args.exit_with.rpartition(":")
            if not sep or not port.isdigit():
                raise ValueError(f"--exit-with {args.exit_with!r}: expected HOST:PORT")
        return asyncio.run(_serve(args))
    except ScenarioError as exc:
        print(f"simweb: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"simweb: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
