"""The ``crawler`` command.

    crawler crawl URL... [--max-pages N] [--out DIR]   embedded crawl (resumable)
    crawler demo                                       crawl the simulated web's seed scenario
    crawler stats [--out DIR] [--api URL]              figures of a crawl (folder or cluster)
    crawler seed URL... [--priority N] [--api URL]     put seed URLs into a running crawl
    crawler host NAME [--delay S] [--block|--unblock] [--max-pages N] --api URL
                                                       read or change a host (control API)
    crawler frontier|fetcher|parser|dedup|api          run one service (cluster mode)
    crawler settings [--markdown]                      every setting with its default

Settings come from the environment (``CRAWLER_<SECTION>_<KEY>``); flags override them.
With ``--api http://host:port`` a command talks to the control API instead, with the
bearer token of ``--token`` (default: ``CRAWLER_API_TOKEN``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from common.settings import Settings, SettingsError, describe
from crawler import embedded
from frontier.stats import CrawlStats


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crawler", description="A polite web crawler.")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("crawl", help="crawl from seed URLs in one process (embedded mode)")
    c.add_argument("urls", nargs="*", help="seed URLs (none: resume the crawl in --out)")
    c.add_argument("--max-pages", type=int, default=None, help="stop after N page fetches")
    c.add_argument("--out", default=None, help="output folder (default: crawl-out)")
    c.add_argument("--delay", type=float, default=None, help="politeness delay in seconds")
    c.add_argument("--max-pages-per-host", type=int, default=None)
    c.add_argument("--max-depth", type=int, default=None)
    c.add_argument("--allow-network", action="append", default=[],
                   help="CIDR the SSRF guard lets through (e.g. 127.0.0.1/32)")
    c.add_argument("--resolve", action="append", default=[],
                   help="fixed DNS answer host:port:address")
    c.add_argument("--dns", action="append", default=[], help="DNS server ip[:port]")
    c.add_argument("--no-progress", action="store_true", help="no live progress line")

    d = sub.add_parser("demo", help="start the simulated web and crawl its seed scenario")
    d.add_argument("--out", default=None, help="output folder (default: a new temp folder)")
    d.add_argument("--delay", type=float, default=0.2, help="politeness delay (default 0.2 s)")
    d.add_argument("--no-progress", action="store_true")

    s = sub.add_parser("stats", help="print the figures of a crawl folder")
    s.add_argument("--out", default=None)
    _api_options(s)

    sd = sub.add_parser("seed", help="put seed URLs into a running cluster (through the bus)")
    sd.add_argument("urls", nargs="+")
    sd.add_argument("--priority", type=int, default=None)
    _api_options(sd)

    h = sub.add_parser("host", help="read or change one host through the control API")
    h.add_argument("name", help="host key, e.g. news.test or example.org:8080")
    h.add_argument("--delay", dest="host_delay", type=float, default=None,
                   help="delay override in seconds")
    h.add_argument("--clear-delay", action="store_true", help="remove the delay override")
    block = h.add_mutually_exclusive_group()
    block.add_argument("--block", dest="blocked", action="store_const", const=True)
    block.add_argument("--unblock", dest="blocked", action="store_const", const=False)
    h.add_argument("--max-pages", dest="host_max_pages", type=int, default=None,
                   help="page cap of the host")
    _api_options(h, required=True)

    for name, text in (("pause", "pause the crawl through the control API (requests in "
                                  "flight finish)"),
                       ("resume", "resume the crawl through the control API")):
        _api_options(sub.add_parser(name, help=text), required=True)

    bp = sub.add_parser("block-path", help="list, add or remove blocked path patterns "
                        "(regular expressions on path and query) through the control API")
    bp.add_argument("pattern", nargs="?", default=None,
                    help="pattern to add (or with --remove, to remove); none: list them")
    bp.add_argument("--remove", action="store_true", help="remove the pattern")
    _api_options(bp, required=True)

    for role in ROLES:
        r = sub.add_parser(role, help=f"run one {role} service (settings from CRAWLER_*)")
        r.set_defaults(role=role)

    st = sub.add_parser("settings", help="list every setting with its default")
    st.add_argument("--markdown", action="store_true")
    return p


ROLES = ("frontier", "fetcher", "parser", "dedup", "api")


def _api_options(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    p.add_argument("--api", required=required, default=None, metavar="URL",
                   help="control API base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--token", default=None,
                   help="bearer token (default: CRAWLER_API_TOKEN)")


def _settings_for(args: argparse.Namespace) -> Settings:
    s = Settings.from_env()
    crawl: dict[str, object] = {}
    pol: dict[str, object] = {}
    traps: dict[str, object] = {}
    fetch: dict[str, object] = {}
    if getattr(args, "out", None):
        crawl["out_dir"] = args.out
    if getattr(args, "max_pages", None) is not None:
        crawl["max_pages"] = args.max_pages
    if getattr(args, "delay", None) is not None:
        pol["default_delay"] = args.delay
    if getattr(args, "max_pages_per_host", None) is not None:
        traps["max_pages_per_host"] = args.max_pages_per_host
    if getattr(args, "max_depth", None) is not None:
        traps["max_depth"] = args.max_depth
    if getattr(args, "allow_network", None):
        fetch["allow_networks"] = s.fetcher.allow_networks + tuple(args.allow_network)
    if getattr(args, "resolve", None):
        fetch["resolve"] = s.fetcher.resolve + tuple(args.resolve)
    if getattr(args, "dns", None):
        fetch["dns_servers"] = tuple(args.dns)
    return s.replace(crawl=crawl, politeness=pol, traps=traps, fetcher=fetch)


def format_stats(stats: CrawlStats) -> str:
    rows = [
        ("fetched", stats.fetched),
        ("pages kept", stats.kept),
        ("exact duplicates", stats.exact_duplicates),
        ("near duplicates", stats.near_duplicates),
        ("not modified", stats.not_modified),
        ("redirects", stats.redirects),
        ("robots blocked", stats.robots_blocked),
        ("operator blocked", stats.blocked),
        ("seen-filter skipped", stats.seen_filter_skipped),
        ("hosts capped", stats.hosts_capped),
        ("host-cap cut URLs", stats.host_capped_urls),
        ("trap-cut URLs", stats.trap_cut),
        ("dead URLs", stats.dead),
        ("queued", stats.queued),
        ("known URLs", stats.known_urls),
        ("hosts", stats.hosts),
    ]
    rows += [(f"errors: {k}", v) for k, v in sorted(stats.errors.items())]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v:>8}" for k, v in rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        if args.command == "settings":
            return _cmd_settings(args.markdown)
        settings = _settings_for(args)
        if args.command == "api":
            from crawler.api import check_service_settings

            check_service_settings(settings)
    except SettingsError as exc:
        print(f"crawler: invalid setting: {exc}", file=sys.stderr)
        return 2
    if args.command in ROLES:
        return _run_role(args.command, settings)
    if getattr(args, "api", None):
        return _cmd_api(args, settings)
    if args.command == "seed":
        n = asyncio.run(_seed(settings, args.urls, args.priority))
        print(f"{n} seed URLs sent")
        return 0 if n else 1
    if args.command == "stats":
        try:
            stats = asyncio.run(embedded.read_stats(settings))
        except FileNotFoundError as exc:
            print(f"crawler: {exc}", file=sys.stderr)
            return 1
        print(format_stats(stats))
        return 0
    progress = not args.no_progress
    try:
        if args.command == "crawl":
            stats = asyncio.run(embedded.crawl(settings, args.urls, progress=progress))
        elif args.command == "demo":
            stats = asyncio.run(embedded.demo(settings, progress=progress,
                                              out=args.out))
        else:  # pragma: no cover - argparse rejects other commands
            return 2
    except KeyboardInterrupt:
        print("\ncrawler: stopped; run the same command again to resume", file=sys.stderr)
        return 130
    except SettingsError as exc:
        print(f"crawler: invalid setting: {exc}", file=sys.stderr)
        return 2
    print(format_stats(stats))
    return 0


def _run_role(role: str, settings: Settings) -> int:
    from common.runtime import service_main

    runs = {"frontier": "frontier.main", "fetcher": "fetcher.main", "parser": "parser.main",
            "dedup": "dedup.main", "api": "crawler.api"}
    module = importlib.import_module(runs[role])
    return service_main(role, module.run)


async def _seed(settings: Settings, seeds: Sequence[str], priority: int | None) -> int:
    from common.runtime import make_bus, make_store
    from frontier.service import Frontier

    bus = make_bus(settings)
    store = make_store(settings)
    try:
        return await Frontier(settings, bus, store, embedded=False).seed(seeds, priority)
    finally:
        await bus.stop()


def _cmd_api(args: argparse.Namespace, settings: Settings) -> int:
    """seed, stats, host, pause, resume and block-path through the control API."""
    import json
    import urllib.parse

    import msgspec

    from crawler.client import ApiCallError, call

    token = args.token or settings.api.token
    if not token:
        print("crawler: no API token: pass --token or set CRAWLER_API_TOKEN", file=sys.stderr)
        return 2
    try:
        if args.command == "seed":
            body: dict[str, object] = {"urls": args.urls}
            if args.priority is not None:
                body["priority"] = args.priority
            answer = asyncio.run(call(args.api, token, "POST", "/v1/seeds", body))
            print(f"{answer['accepted']} seed URLs sent")
            return 0
        if args.command == "stats":
            answer = asyncio.run(call(args.api, token, "GET", "/v1/stats"))
            print(format_stats(msgspec.convert(answer, CrawlStats)))
            return 0
        if args.command in ("pause", "resume"):
            answer = asyncio.run(call(args.api, token, "POST", f"/v1/{args.command}"))
            print("paused" if answer["paused"] else "running")
            return 0
        if args.command == "block-path":
            if args.pattern is None:
                answer = asyncio.run(call(args.api, token, "GET", "/v1/blocked-paths"))
            elif args.remove:
                query = urllib.parse.urlencode({"pattern": args.pattern})
                answer = asyncio.run(call(args.api, token, "DELETE",
                                          f"/v1/blocked-paths?{query}"))
            else:
                answer = asyncio.run(call(args.api, token, "POST", "/v1/blocked-paths",
                                          {"pattern": args.pattern}))
            print("\n".join(answer["patterns"]) or "(no blocked path patterns)")
            return 0
        change: dict[str, object] = {}
        if args.clear_delay:
            change["crawlDelaySeconds"] = None
        elif args.host_delay is not None:
            change["crawlDelaySeconds"] = args.host_delay
        if args.blocked is not None:
            change["blocked"] = args.blocked
        if args.host_max_pages is not None:
            change["maxPages"] = args.host_max_pages
        path = "/v1/hosts/" + urllib.parse.quote(args.name, safe=":[]")
        answer = asyncio.run(call(args.api, token, "PUT" if change else "GET", path,
                                  change or None))
        print(json.dumps(answer, indent=2))
        return 0
    except ApiCallError as exc:
        print(f"crawler: {exc}", file=sys.stderr)
        return 1
    except (msgspec.ValidationError, KeyError, TypeError):
        print("crawler: the API gave an answer of an unexpected shape", file=sys.stderr)
        return 1


def _cmd_settings(markdown: bool) -> int:
    rows = describe()
    if markdown:
        print("| variable | default | meaning |\n|---|---|---|")
        for name, default, doc in rows:
            print(f"| `{name}` | `{default}` | {doc} |")
    else:
        for name, default, doc in rows:
            print(f"{name}={default}\n    {doc}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
    os._exit(0)
