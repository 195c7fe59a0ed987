"""The ``crawler`` command.

    crawler crawl URL... [--max-pages N] [--out DIR]   embedded crawl (resumable)
    crawler crawl URL... --recrawl-interval S --continuous
                                                       ... kept fresh until interrupted
    crawler demo                                       crawl the simulated web's seed scenario
    crawler stats [--out DIR] [--api URL]              figures of a crawl (folder or cluster)
    crawler seed URL... [--priority N] [--api URL]     put seed URLs into a running crawl
    crawler host NAME [--delay S] [--block|--unblock] [--max-pages N] --api URL
                                                       read or change a host (control API)
    crawler frontier|fetcher|parser|dedup|api          run one service (cluster mode)
    crawler settings [--markdown]                      every setting with its default
    crawler export --format jsonl|parquet|wacz --to PATH [--out DIR | --cluster]
                                                       kept pages as rows, or a WACZ file

Settings come from the environment (``CRAWLER_<SECTION>_<KEY>``); flags override them.
With ``--api http://host:port`` a command talks to the control API instead, with the
bearer token of ``--token`` (default: ``CRAWLER_API_TOKEN``).

Exit status: 0 done; 1 the command ran and failed (an API error, or a crawl none of
whose seeds could be fetched because the SSRF guard refused them); 2 it could not start
(an invalid setting or option, no usable seed, an output folder that cannot be one),
with nothing created; 130 stopped by Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from common.adapters.local_blobs import BlobError
from common.runtime import SERVICE_EPILOG, SERVICE_HELP, blob_root, run_loop, state_path
from common.settings import Settings, SettingsError, describe
from frontier.stats import CrawlStats

if TYPE_CHECKING:
    from frontier.seeds import SeedBatch


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crawler", description="A polite web crawler.")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("crawl", help="crawl from seed URLs in one process (embedded mode)")
    c.add_argument("urls", nargs="*", help="seed URLs (none: resume the crawl in --out)")
    c.add_argument("--max-pages", type=int, default=None, help="stop after N page fetches")
    c.add_argument("--out", default=None, help="output folder (default: crawl-out)")
    c.add_argument("--delay", type=float, default=None, help="politeness delay in seconds")
    c.add_argument("--politeness-key", choices=("host", "domain", "ip"), default=None,
                   help="what one gap and one request in flight are kept for: each host "
                        "(default), each registered domain, or each IP address")
    c.add_argument("--max-pages-per-host", type=int, default=None)
    c.add_argument("--max-depth", type=int, default=None)
    c.add_argument("--allow-network", action="append", default=[],
                   help="CIDR the SSRF guard lets through (e.g. 127.0.0.1/32)")
    c.add_argument("--resolve", action="append", default=[],
                   help="fixed DNS answer host:port:address")
    c.add_argument("--dns", action="append", default=[], help="DNS server ip[:port]")
    c.add_argument("--no-progress", action="store_true", help="no live progress line")
    c.add_argument("--recrawl-interval", type=float, default=None, metavar="SECONDS",
                   help="refresh stored pages, first this many seconds after their fetch, "
                        "then as often as they change (CRAWLER_CRAWL_RECRAWL_INTERVAL)")
    c.add_argument("--continuous", action="store_true",
                   help="keep running and refreshing stored pages when nothing is due "
                        "now, until interrupted (Ctrl-C; run again to resume); needs a "
                        "recrawl interval")
    c.add_argument("--scope", choices=("any", "seed-hosts", "seed-domains"), default=None,
                   help="hosts links may lead to: any (default), the seeds' hosts, or "
                        "hosts under the seeds' registered domains")
    c.add_argument("--allow-domain", action="append", default=[], metavar="DOMAIN",
                   help="also follow links to DOMAIN and its subdomains (with --scope "
                        "any: only to the allowed domains)")
    c.add_argument("--deny-domain", action="append", default=[], metavar="DOMAIN",
                   help="never follow links to DOMAIN and its subdomains")
    c.add_argument("--path-prefix", action="append", default=[], metavar="PATH",
                   help="follow only URLs under PATH ('/docs': /docs and /docs/..., not "
                        "/docsx), on every host")
    c.add_argument("--no-parent", action="store_true", default=None,
                   help="on a seed's host, stay under the folder of one of its seeds "
                        "(like wget --no-parent)")

    d = sub.add_parser("demo", help="start the simulated web and crawl its seed scenario")
    d.add_argument("--out", default=None, help="output folder (default: a new temp folder)")
    d.add_argument("--delay", type=float, default=0.2, help="politeness delay (default 0.2 s)")
    d.add_argument("--no-progress", action="store_true")

    s = sub.add_parser("stats", help="print the figures of a crawl folder")
    s.add_argument("--out", default=None)
    s.add_argument("--recrawl-interval", type=float, default=None, metavar="SECONDS",
                   help="the crawl's recrawl interval: also show when its stored pages "
                        "are due for a refresh (CRAWLER_CRAWL_RECRAWL_INTERVAL)")
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
        r = sub.add_parser(role, help=f"run one {role} service (settings from CRAWLER_*)",
                           description=SERVICE_HELP.get(role), epilog=SERVICE_EPILOG)
        r.set_defaults(role=role)

    e = sub.add_parser("export", help="write a crawl's kept pages as JSON Lines or Parquet, "
                       "or the crawl as a WACZ file (docs/export.md)")
    e.add_argument("--out", default=None, help="crawl folder (default: crawl-out)")
    e.add_argument("--format", required=True, choices=("jsonl", "parquet", "wacz"))
    e.add_argument("--to", required=True, metavar="PATH", help="file to write")
    e.add_argument("--content", choices=("text", "markdown"), default=None,
                   help="the page content in each row: its text (default) or Markdown; "
                        "with wacz, put it in pages.jsonl (default: none)")
    e.add_argument("--include-duplicates", action="store_true",
                   help="also export pages recorded as exact or near duplicates")
    e.add_argument("--cluster", action="store_true",
                   help="export a cluster's crawl: page records from its Kafka pages "
                        "topic (CRAWLER_BUS_*), records from its blob store (CRAWLER_BLOB_*)")
    e.add_argument("--partial", action="store_true",
                   help="with --cluster: export even when Kafka has already deleted the "
                        "oldest page records (retention)")

    st = sub.add_parser("settings", help="list every setting with its default")
    st.add_argument("--markdown", action="store_true")
    for command in sub.choices.values():  # -v after the command too
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="log more")
    return p


ROLES = ("frontier", "fetcher", "parser", "dedup", "api", "render")


def _api_options(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    p.add_argument("--api", required=required, default=None, metavar="URL",
                   help="control API base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--token", default=None,
                   help="bearer token (default: CRAWLER_API_TOKEN)")


OPTION_VARIABLES = {
    "out": ("--out", "CRAWLER_CRAWL_OUT_DIR"),
    "max_pages": ("--max-pages", "CRAWLER_CRAWL_MAX_PAGES"),
    "delay": ("--delay", "CRAWLER_POLITENESS_DEFAULT_DELAY"),
    "politeness_key": ("--politeness-key", "CRAWLER_POLITENESS_KEY"),
    "max_pages_per_host": ("--max-pages-per-host", "CRAWLER_TRAPS_MAX_PAGES_PER_HOST"),
    "max_depth": ("--max-depth", "CRAWLER_TRAPS_MAX_DEPTH"),
    "allow_network": ("--allow-network", "CRAWLER_FETCHER_ALLOW_NETWORKS"),
    "resolve": ("--resolve", "CRAWLER_FETCHER_RESOLVE"),
    "dns": ("--dns", "CRAWLER_FETCHER_DNS_SERVERS"),
    "scope": ("--scope", "CRAWLER_SCOPE_MODE"),
    "allow_domain": ("--allow-domain", "CRAWLER_SCOPE_ALLOW_DOMAINS"),
    "deny_domain": ("--deny-domain", "CRAWLER_SCOPE_DENY_DOMAINS"),
    "path_prefix": ("--path-prefix", "CRAWLER_SCOPE_PATH_PREFIXES"),
}
"""Options that set a setting: argparse dest -> (option, variable), so that an invalid
value is reported under the option the user typed."""


def _settings_for(args: argparse.Namespace) -> Settings:
    s = Settings.from_env()
    try:
        return _with_options(s, args)
    except SettingsError as exc:
        text = str(exc)
        for dest, (option, variable) in OPTION_VARIABLES.items():
            if getattr(args, dest, None) not in (None, [], "") and text.startswith(variable):
                raise SettingsError(f"{option}: {text}") from None
        raise


def _with_options(s: Settings, args: argparse.Namespace) -> Settings:
    crawl: dict[str, object] = {}
    pol: dict[str, object] = {}
    traps: dict[str, object] = {}
    fetch: dict[str, object] = {}
    if getattr(args, "out", None):
        crawl["out_dir"] = args.out
    if getattr(args, "max_pages", None) is not None:
        crawl["max_pages"] = args.max_pages
    if getattr(args, "recrawl_interval", None) is not None:
        crawl["recrawl_interval"] = args.recrawl_interval
    if getattr(args, "delay", None) is not None:
        pol["default_delay"] = args.delay
    if getattr(args, "politeness_key", None) is not None:
        pol["key"] = args.politeness_key
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
    scope: dict[str, object] = {}
    if getattr(args, "scope", None):
        scope["mode"] = args.scope
    for option, key in (("allow_domain", "allow_domains"), ("deny_domain", "deny_domains"),
                        ("path_prefix", "path_prefixes")):
        if getattr(args, option, None):
            scope[key] = getattr(s.scope, key) + tuple(getattr(args, option))
    if getattr(args, "no_parent", None):
        scope["no_parent"] = True
    return s.replace(crawl=crawl, politeness=pol, traps=traps, fetcher=fetch, scope=scope)


LABEL_WIDTH = 19
"""Width of the label column of the figures (wider when a label needs it)."""


def format_stats(stats: CrawlStats) -> str:
    """The figures as a table. Every figure but the last block comes from the store's
    rows (the same whenever it is read); the "this run" block is known only to the
    process that ran the frontier, so ``crawler stats`` has none."""
    rows: list[tuple[str, int | None]] = [
        ("fetched", stats.fetched),
        ("  new pages", stats.fetched_new),
        ("  refreshes", stats.refreshed),
        ("pages kept", stats.kept),
        ("exact duplicates", stats.exact_duplicates),
        ("near duplicates", stats.near_duplicates),
        ("not modified", stats.not_modified),
        ("redirects", stats.redirects),
        ("robots blocked", stats.robots_blocked),
        ("operator blocked", stats.blocked),
        ("out of scope", stats.out_of_scope),
        ("hosts capped", stats.hosts_capped),
        ("host-cap cut URLs", stats.host_capped_urls),
        ("trap-cut URLs", stats.trap_cut),
        ("dead URLs", stats.dead),
        ("queued", stats.queued),
        ("in flight", stats.in_flight),
        ("awaiting parse", stats.awaiting_parse),
        ("known URLs", stats.known_urls),
        ("hosts", stats.hosts),
    ]
    rows += [(f"errors: {k}", v) for k, v in sorted(stats.errors.items())]
    if stats.refresh_due is not None:
        rows.append(("refresh due:", None))
        rows += [(f"  {k.replace('_', ' ')}", v) for k, v in stats.refresh_due.items()]
    width = max(LABEL_WIDTH, *(len(k) for k, _ in rows)) + 2 + 8
    if stats.seen_filter_skipped is not None or stats.invalid_links is not None:
        rows.append(("this run:", None))
        if stats.seen_filter_skipped is not None:
            rows.append(("  seen-filter skipped", stats.seen_filter_skipped))
        if stats.invalid_links is not None:
            rows.append(("  invalid links", stats.invalid_links))
    # values right-aligned on one column, however long a label
    return "\n".join(k if v is None else f"{k}{v:>{max(width - len(k), len(str(v)) + 2)}}"
                     for k, v in rows)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help (0), or a usage error argparse has printed (2)
        return exc.code if isinstance(exc.code, int) else 2
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
        return _fail(f"invalid setting: {exc}", 2)
    if args.command in ROLES:
        return _run_role(args.command, settings)
    if getattr(args, "api", None):
        return _cmd_api(args, settings)
    if args.command == "seed":
        return _cmd_seed(settings, args.urls, args.priority)
    if args.command == "export":
        from crawler import export

        return export.main(settings, export.Request(
            format=args.format, to=Path(args.to), content=args.content,
            include_duplicates=args.include_duplicates, cluster=args.cluster,
            partial=args.partial))
    if args.command == "stats":
        from crawler import embedded  # here: the commands that need no crawl skip it

        try:
            stats = run_loop(embedded.read_stats(settings))
        except FileNotFoundError as exc:
            print(f"crawler: {exc}", file=sys.stderr)
            return 1
        print(format_stats(stats))
        return 0
    progress = not args.no_progress
    try:
        if args.command == "crawl":
            return _cmd_crawl(settings, args.urls, progress=progress,
                              continuous=args.continuous)
        if args.command == "demo":
            from crawler import embedded

            problem = _out_problem(settings) if args.out else None
            if problem:
                return _fail(problem, 2)
            stats = run_loop(embedded.demo(settings, progress=progress, out=args.out))
        else:  # pragma: no cover - argparse rejects other commands
            return 2
    except KeyboardInterrupt:
        print("\ncrawler: stopped; run the same command again to resume", file=sys.stderr)
        return 130
    except SettingsError as exc:
        return _fail(f"invalid setting: {exc}", 2)
    except BlobError as exc:  # e.g. the bucket refused the credentials at start
        return _fail(str(exc), 1)
    except OSError as exc:  # the output folder or the disk failed us mid-way
        return _fail(str(exc), 1)
    print(format_stats(stats))
    return 0


def _fail(message: str, code: int) -> int:
    print(f"crawler: {message}", file=sys.stderr)
    return code


def _out_problem(settings: Settings) -> str | None:
    """Why the output folders cannot be created or written, or None. Touches nothing."""
    folders = [("output folder (--out)", Path(settings.crawl.out_dir))]
    if settings.blob.root:
        folders.append(("WARC folder (CRAWLER_BLOB_ROOT)", blob_root(settings)))
    if settings.store.sqlite_path:
        folders.append(("folder of CRAWLER_STORE_SQLITE_PATH", state_path(settings).parent))
    for what, path in folders:
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            return f"{what} {path}: {existing} exists and is not a folder"
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{what} {path}: {existing} is not writable"
    return None


def _cmd_crawl(settings: Settings, seeds: Sequence[str], *, progress: bool,
               continuous: bool = False) -> int:
    """``crawler crawl``: check everything that can be checked without creating or
    sending anything, then crawl (with ``continuous``, until interrupted)."""
    from common import urls
    from crawler import embedded
    from frontier.seeds import seed_batch

    problem = _out_problem(settings)
    if problem:
        return _fail(problem, 2)
    if continuous and settings.crawl.recrawl_interval <= 0:
        return _fail("--continuous refreshes stored pages: give --recrawl-interval "
                     "(or CRAWLER_CRAWL_RECRAWL_INTERVAL) above 0", 2)
    if settings.render.enabled:
        from render.browser import render_problem

        problem = render_problem(settings)
        if problem:
            return _fail(problem, 2)
    tracking = urls.TrackingRules.from_settings(settings.urls)
    batch = seed_batch(seeds, 0, tracking)
    for raw, why in batch.rejected:
        print(f"crawler: seed {raw!r} rejected: {why}", file=sys.stderr)
    refused = run_loop(embedded.refused_before_start(settings, batch.valid))
    for url, advice in refused.items():
        print(f"crawler: seed {url} refused: {advice}", file=sys.stderr)
    usable = []
    for raw in seeds:
        with contextlib.suppress(urls.UrlError):
            if urls.canonicalize(raw, tracking=tracking) not in refused:
                usable.append(raw)
    if seeds and not usable:
        return _fail(("the seed URL cannot" if len(seeds) == 1 else
                      f"none of the {len(seeds)} seed URLs can") + " be crawled; nothing done",
                     2)
    if not seeds and not state_path(settings).exists():
        return _fail(f"no seed URLs, and no crawl to resume in {settings.crawl.out_dir} "
                     f"(no {state_path(settings)})", 2)
    run = run_loop(embedded.run_crawl(settings, usable, progress=progress,
                                      continuous=continuous))
    print(format_stats(run.stats))
    if run.no_seed_crawled:
        return _fail(("the seed URL" if len(run.seeds) == 1 else
                      f"none of the {len(run.seeds)} seed URLs") + " could be crawled: the "
                     "SSRF guard refused " + ("it" if len(run.seeds) == 1 else "them")
                     + " (see above)", 1)
    return 0


def _cmd_seed(settings: Settings, seeds: Sequence[str], priority: int | None) -> int:
    """``crawler seed`` without --api: publish seeds on the cluster's bus."""
    from common.urls import TrackingRules
    from frontier.seeds import seed_batch

    levels = settings.crawl.priority_levels
    if priority is not None and not 0 <= priority < levels:
        return _fail(f"--priority: expected 0 to {levels - 1} "
                     "(CRAWLER_CRAWL_PRIORITY_LEVELS)", 2)
    batch = seed_batch(seeds, settings.crawl.seed_priority if priority is None else priority,
                       TrackingRules.from_settings(settings.urls))
    for raw, why in batch.rejected:
        print(f"crawler: seed {raw!r} rejected: {why}", file=sys.stderr)
    if not batch.count:
        return _fail("no usable seed URL; nothing sent", 2)
    n = run_loop(_seed(settings, batch))
    print(f"{n} seed URLs sent")
    return 0 if n else 1


def _run_role(role: str, settings: Settings) -> int:
    from common.runtime import service_main

    runs = {"frontier": "crawler.roles.frontier", "fetcher": "crawler.roles.fetcher",
            "parser": "crawler.roles.parser", "dedup": "crawler.roles.dedup",
            "api": "crawler.api", "render": "crawler.roles.render"}
    module = importlib.import_module(runs[role])
    return service_main(role, module.run)


async def _seed(settings: Settings, batch: SeedBatch) -> int:
    """Publish the checked seeds on the bus, each host's to its owner; nothing else is
    opened (no store, no frontier): the command is part of the time to a crawl's first
    request."""
    from common.runtime import make_bus
    from frontier.seeds import publish_batch

    bus = make_bus(settings)
    try:
        return await publish_batch(bus, batch)
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
    problem = _api_request_problem(args, token, settings)
    if problem:
        return _fail(problem, 2)
    try:
        if args.command == "seed":
            body: dict[str, object] = {"urls": args.urls}
            if args.priority is not None:
                body["priority"] = args.priority
            answer = run_loop(call(args.api, token, "POST", "/v1/seeds", body))
            print(f"{answer['accepted']} seed URLs sent")
            return 0
        if args.command == "stats":
            answer = run_loop(call(args.api, token, "GET", "/v1/stats"))
            print(format_stats(msgspec.convert(answer, CrawlStats)))
            return 0
        if args.command in ("pause", "resume"):
            answer = run_loop(call(args.api, token, "POST", f"/v1/{args.command}"))
            print("paused" if answer["paused"] else "running")
            return 0
        if args.command == "block-path":
            if args.pattern is None:
                answer = run_loop(call(args.api, token, "GET", "/v1/blocked-paths"))
            elif args.remove:
                query = urllib.parse.urlencode({"pattern": args.pattern})
                answer = run_loop(call(args.api, token, "DELETE",
                                       f"/v1/blocked-paths?{query}"))
            else:
                answer = run_loop(call(args.api, token, "POST", "/v1/blocked-paths",
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
        answer = run_loop(call(args.api, token, "PUT" if change else "GET", path,
                               change or None))
        print(json.dumps(answer, indent=2))
        return 0
    except ApiCallError as exc:
        print(f"crawler: {exc}", file=sys.stderr)
        return 1
    except (msgspec.ValidationError, KeyError, TypeError):
        print("crawler: the API gave an answer of an unexpected shape", file=sys.stderr)
        return 1


def _api_request_problem(args: argparse.Namespace, token: str, settings: Settings
                         ) -> str | None:
    """What the API would refuse in the request, checked before sending (the same rules
    as the API's), or None."""
    import math

    import msgspec
    import yarl

    from crawler.api import ApiError, check_pattern, parse_host, parse_host_update

    try:
        base = yarl.URL(args.api)
        good = base.scheme in ("http", "https") and bool(base.host) and base.is_absolute()
    except (ValueError, TypeError):
        good = False
    if not good:
        return f"--api: expected a base URL such as http://127.0.0.1:8080, got {args.api!r}"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in token):
        return "--token: must not contain white space or control characters"
    try:
        if args.command == "seed":
            from common.urls import TrackingRules
            from frontier.seeds import seed_batch

            if args.priority is not None and args.priority < 0:
                return "--priority: must be at least 0"
            batch = seed_batch(args.urls, 0, TrackingRules.from_settings(settings.urls))
            for raw, why in batch.rejected:
                print(f"crawler: seed {raw!r} rejected: {why}", file=sys.stderr)
            if batch.invalid:
                return "the API takes a batch of seeds only when every one is usable; " \
                       "nothing sent"
        elif args.command == "block-path" and args.pattern is not None and not args.remove:
            check_pattern(args.pattern)
        elif args.command == "host":
            parse_host(args.name)
            if args.host_delay is not None and not math.isfinite(args.host_delay):
                return f"--delay: expected a number of seconds, got {args.host_delay!r}"
            change: dict[str, object] = {}
            if args.host_delay is not None and not args.clear_delay:
                change["crawlDelaySeconds"] = args.host_delay
            if args.blocked is not None:
                change["blocked"] = args.blocked
            if args.host_max_pages is not None:
                change["maxPages"] = args.host_max_pages
            if change:
                parse_host_update(msgspec.json.encode(change))
    except ApiError as exc:
        return exc.message
    return None


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
