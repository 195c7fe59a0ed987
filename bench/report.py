"""The markdown report (docs/benchmarks.md) from a results dictionary.

Everything printed is computed from the results file, so the report and
bench/results/<preset>.json always agree; the prose around the tables is fixed text
that explains how each figure was measured.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cpu_profile import SEED

MiB = 2**20


def _f(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    text = f"{x:,.{digits}f}"
    return text[1:] if text.startswith("-") and float(text.replace(",", "")) == 0 else text


def _spread(s: dict[str, Any] | None, key: str, scale: float = 1.0, digits: int = 1) -> str:
    if not s or not s.get(key):
        return "–"
    v = s[key]
    med, lo, hi = v["median"] / scale, v["min"] / scale, v["max"] / scale
    if lo == hi:
        return _f(med, digits)
    return f"{_f(med, digits)} ({_f(lo, digits)}–{_f(hi, digits)})"


def _median(s: dict[str, Any] | None, key: str) -> float | None:
    if not s or not s.get(key):
        return None
    return float(s[key]["median"])


def ratios(results: dict[str, Any]) -> dict[str, float | None]:
    summary = results.get("summary") or {}
    emb = summary.get("embedded")
    scr = summary.get("scrapy")
    clu = summary.get("cluster")

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    out: dict[str, float | None] = {
        "embedded_vs_scrapy_pages_per_second": ratio(_median(emb, "pages_per_second"),
                                                     _median(scr, "pages_per_second")),
        "embedded_vs_scrapy_cpu_per_page": ratio(_median(emb, "cpu_seconds_per_1000_pages"),
                                                 _median(scr, "cpu_seconds_per_1000_pages")),
        "cluster_vs_scrapy_pages_per_second": ratio(_median(clu, "pages_per_second"),
                                                    _median(scr, "pages_per_second")),
        "embedded_vs_scrapy_peak_memory": ratio(_median(emb, "max_rss_bytes"),
                                                _median(scr, "max_rss_bytes")),
        "embedded_vs_scrapy_peak_pss": ratio(_median(emb, "max_pss_bytes"),
                                             _median(scr, "max_pss_bytes")),
    }
    scaling = [r for r in results.get("scaling") or [] if "error" not in r]
    if len(scaling) >= 2:
        first, last = scaling[0], scaling[-1]
        out["time_per_page_largest_vs_smallest"] = ratio(last["ms_per_page"],
                                                         first["ms_per_page"])
        out["cpu_per_page_largest_vs_smallest"] = ratio(last["cpu_ms_per_page"],
                                                        first["cpu_ms_per_page"])
        before = scaling[-2]
        slope = marginal(before, last)
        if slope is not None:
            out["bytes_per_known_url"], out["bytes_per_known_url_beyond_seen_filter"] = slope
    return out


def _completed_runs(runs: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    """The runs of ``tool`` that ended well (exit code 0, not timed out), as
    :func:`bench.runners.summarize` counts them."""
    return [r for r in runs if r.get("tool") == tool and r.get("exit_code") == 0
            and not r.get("timed_out")]


def paired(runs: list[dict[str, Any]], tool: str, other: str, key: str) -> float | None:
    """The median over rounds of ``tool``'s figure ``key`` divided by ``other``'s in the
    same round (runs of one round alternate, so the two ran one right after the other);
    rounds where either run failed or lacks the figure are left out. The machine's speed
    drifts from minute to minute, and a ratio of runs made side by side follows less of
    that drift than a ratio of each tool's median."""
    def completed(name: str) -> dict[int, float]:
        return {r["run"]: r[key] for r in _completed_runs(runs, name) if r.get(key) is not None}

    mine, theirs = completed(tool), completed(other)
    values = [mine[n] / theirs[n] for n in sorted(mine.keys() & theirs.keys()) if theirs[n]]
    return statistics.median(values) if values else None


#: the figures of each scaling run kept beside the median row, for the report's spread
SCALING_RUN_KEYS = ("ms_per_page", "cpu_ms_per_page", "seeding_urls_per_second",
                    "rss_seeded_bytes", "loadavg_before")


def scaling_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Pure: one known-URL size's row from its runs: the median of every number the
    successful runs all have (the middle run's for an even count: the lower of the
    two middle values), the other fields of the first; ``runs`` keeps each run's main
    figures. A size with no successful run is its last failure."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[-1]
    if len(ok) == 1:
        return ok[0]
    row = dict(ok[0])
    for key, value in ok[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and all(
                isinstance(r.get(key), (int, float)) for r in ok):
            row[key] = sorted(r[key] for r in ok)[(len(ok) - 1) // 2]
    row["runs"] = [{k: r.get(k) for k in SCALING_RUN_KEYS} for r in ok]
    return row


def marginal(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, float] | None:
    """Resident bytes per URL added from size ``a`` to size ``b``: in all, and beyond
    the seen filter's bits (counted as fully resident)."""
    dn = b["known_filler"] - a["known_filler"]
    if dn <= 0:
        return None
    drss = b["rss_seeded_bytes"] - a["rss_seeded_bytes"]
    dseen = (b["seen_filter_bits"] - a["seen_filter_bits"]) / 8
    return drss / dn, (drss - dseen) / dn


def headline(results: dict[str, Any]) -> list[str]:
    r = ratios(results)
    lines = []

    def x(v: float | None) -> str:
        return "–" if v is None else f"{v:.2f}x"

    lines.append(f"embedded / Scrapy pages per second: "
                 f"{x(r['embedded_vs_scrapy_pages_per_second'])} (goal >= 2x)")
    lines.append(f"embedded / Scrapy CPU per page: "
                 f"{x(r['embedded_vs_scrapy_cpu_per_page'])} (goal <= 0.8x)")
    cluster = results.get("cluster") or {}
    if r["cluster_vs_scrapy_pages_per_second"] is not None:
        lines.append(f"cluster / Scrapy pages per second: "
                     f"{x(r['cluster_vs_scrapy_pages_per_second'])} (goal >= 1x)")
    elif cluster and not cluster.get("available"):
        lines.append(f"cluster mode: not run ({cluster.get('reason')})")
    if r.get("time_per_page_largest_vs_smallest") is not None:
        sizes = [row["known_filler"] for row in results.get("scaling") or []
                 if "error" not in row]
        lines.append(f"time per page at {sizes[-1]:,} / {sizes[0]:,} known URLs: "
                     f"{x(r['time_per_page_largest_vs_smallest'])} wall, "
                     f"{x(r['cpu_per_page_largest_vs_smallest'])} CPU (goal: flat)")
    if r.get("bytes_per_known_url_beyond_seen_filter") is not None:
        sizes = [row["known_filler"] for row in results.get("scaling") or []
                 if "error" not in row]
        lines.append(f"memory per known URL beyond the seen filter ({sizes[-2]:,} to "
                     f"{sizes[-1]:,} known URLs): "
                     f"{_f(r['bytes_per_known_url_beyond_seen_filter'], 1)} bytes "
                     "(goal < 16)")
    return lines


def _goal_rows(results: dict[str, Any]) -> list[str]:
    r = ratios(results)
    rows = ["| goal | measured | met |", "|---|---|---|"]

    def row(goal: str, value: float | None, fmt: str, ok: bool | None) -> None:
        shown = "–" if value is None else fmt.format(value)
        met = "–" if ok is None else ("yes" if ok else "**no**")
        rows.append(f"| {goal} | {shown} | {met} |")

    v = r["embedded_vs_scrapy_pages_per_second"]
    row("embedded mode: at least 2x Scrapy's pages per second", v, "{:.2f}x",
        None if v is None else v >= 2)
    v = r["embedded_vs_scrapy_cpu_per_page"]
    row("embedded mode: at most 0.8x Scrapy's CPU per page", v, "{:.2f}x Scrapy's",
        None if v is None else v <= 0.8)
    runs = results.get("runs") or []
    pace = paired(runs, "embedded", "scrapy", "pages_per_second")
    cpu = paired(runs, "embedded", "scrapy", "cpu_seconds_per_1000_pages")
    if pace is not None and cpu is not None:
        rows.append("| (the same two, each embedded run against the Scrapy run beside it, the "
                    "median of the rounds; for information, as the machine's speed drifts "
                    f"between runs) | {pace:.2f}x pace, {cpu:.2f}x CPU | – |")
    v = r["embedded_vs_scrapy_peak_memory"]
    row("embedded mode: peak memory at most 1.5x Scrapy's", v, "{:.2f}x Scrapy's",
        None if v is None else v <= 1.5)
    v = r.get("embedded_vs_scrapy_peak_pss")
    if v is not None:
        row("(the same counted by PSS, shared pages split between the processes that map "
            "them; for information, the goal is judged on the resident sets)", v,
            "{:.2f}x Scrapy's", None)
    v = r["cluster_vs_scrapy_pages_per_second"]
    row("cluster mode: at least Scrapy's pages per second", v, "{:.2f}x",
        None if v is None else v >= 1)
    cost = cluster_cost(results)
    if cost is not None:
        v = (cost["total_ms"] / cost["embedded_ms"]) if cost["embedded_ms"] else None
        row("cluster mode: total CPU per page (services and JVMs) at most 2x embedded "
            "mode's", v, "{:.2f}x", None if v is None else v <= 2)
        v = cost["statements"].get("lwt", 0.0)
        row("cluster mode: no Paxos round per page", v, "{:.2f} per page", v < 0.01)
        v = cost["statements_total"]
        row("cluster mode: at most 4 Cassandra statements per page", v, "{:.2f}", v <= 4)
        v = max(cost["produced_total"], cost["consumed_total"])
        row("cluster mode: at most 6 Kafka messages per page (produced, and consumed)", v,
            f"{cost['produced_total']:.2f} produced, {cost['consumed_total']:.2f} consumed",
            v <= 6)
    v = r.get("time_per_page_largest_vs_smallest")
    c = r.get("cpu_per_page_largest_vs_smallest")
    row("time per page flat from the smallest to the largest known-URL count "
        "(within 15%)", v, "{:.2f}x wall" + (f", {c:.2f}x CPU" if c is not None else ""),
        None if v is None or c is None else max(v, c) <= 1.15)
    v = r.get("bytes_per_known_url_beyond_seen_filter")
    row("crawler memory per known URL under 16 bytes beyond the seen filter (between "
        "the two largest sizes)", v,
        "{:.1f} bytes", None if v is None else v < 16)
    return rows


CHANGES: tuple[tuple[str, str, str], ...] = (
    ("SQLite calls grouped", "the store's worker runs every waiting call in one "
     "transaction, a savepoint each; a call still returns after its commit",
     "embedded CPU per 1,000 pages 14.1 s -> 11.3 s"),
    ("one discovered message per partition", "dedup sends a page's links to each "
     "frontier owner in one message (one per page in embedded mode)", "included above"),
    ("canonical URLs memoised", "a bounded cache of parsed and canonical forms; the "
     "frontier's pass over links the parser already canonicalised is a lookup",
     "11.3 s -> 10.8 s"),
    ("SimHash in numpy", "one vectorised pass over MD5 digests; fingerprints identical to "
     "the simhash package's", "10.8 s -> 10.0 s; SimHash 1.5 -> 0.6 ms per page"),
    ("seen filter sized per stage", "stage i planned at p(1-r)r^i so the sum stays under "
     "p (was p r^i)", "1e7 URLs: 1.81% -> 0.86% false positives"),
    ("one thread hop per page in the parser", "read, analyse, write text and SimHash in "
     "one worker call instead of three", "thread hand-off 2.1 -> 0.4 ms per page"),
    ("concurrent cluster frontier", "per-host locks instead of one lock around every "
     "Cassandra round trip; each ready host dispatched in its own task",
     "cluster 22.0 -> 55.4 pages/s"),
    ("page work in a worker process", "embedded mode writes WARC records and parses pages "
     "in a `python -m common.pagework` process beside the event loop (a socket pair the "
     "loop reads itself, no helper threads), so a crawl uses the second core",
     "`bench.profile_embedded`, 100 hosts x 10 pages: 100.7 -> 204.9 pages/s, CPU per "
     "1,000 pages 9.87 -> 6.71 s"),
    ("records at gzip level 6", "warcio compresses at level 9; level 6 (zlib's default) "
     "costs less CPU for records about 5% larger", "included above"),
    ("no read-back of a page just written", "the worker that wrote a response parses it "
     "from memory; the response it keeps is exactly what reading the record gives",
     "300 hosts x 10 pages: 220.6 -> 247.8 pages/s, 6.66 -> 6.01 CPU s per 1,000 pages"),
    ("fingerprints from one pass over the words", "SimHash and the MinHash sketch share "
     "the page's tokenised, encoded words; the sketch drops repeated values of sorted "
     "hashes without a second sort; values identical to before", "500 real-web pages "
     "(10.9k characters of main text), medians of 5 alternating passes: 2.58 -> 1.98 CPU "
     "ms per page for both"),
    ("near-duplicate index written with the result", "a unique page's SimHash and sketch "
     "keys travel in the fetcher's verdict and the frontier writes them in the batch that "
     "applies the result", "`bench.cluster_rate`: 7.90 -> 6.93 Cassandra statements per "
     "page (300 x 10 compare: 8.16 -> 7.21)"),
    ("more parse workers where cores are idle", "`CRAWLER_CRAWL_PARSE_PROCESSES` "
     "(default 4): embedded mode starts another parse process while pages wait for a "
     "parse and the machine has at least half a core idle; on the real web the one parse "
     "process was the busiest (about 90% of a core, the writer under 20%, 0.6 core idle)",
     "2 alternating runs each, 1 parse process against up to 4: real web, every host, "
     "131-135 -> 149-152 pages/s (11.2-11.5 -> 12.1-12.3 CPU ms per page, +180 MiB); "
     "generated web 229-233 -> 226-236 (no worker added: under 0.1 core idle); pgdoc "
     "alone 173 -> 159-164 (a worker added; its start-up is a second of CPU in a 7 s "
     "crawl)"),
    ("the language model only where pages are parsed", "embedded mode's WARC writer "
     "process no longer loads the language identifier's model at start (page work "
     "preloads per lane)", "resident set of the writer process after start: 141 -> 51 "
     "MiB (about 0.4 s less CPU at start); measured after this report's runs, so not in "
     "their memory figures"),
    ("Cassandra: every per-page batch in one partition", "schema 2: the status index and "
     "the counts keyed by host (url_by_status, host_counts), so a page's write is one "
     "mutation of the host's partition, never the batch log; the row cache answers a "
     "host known to be complete without a read", "statements per page 6.9 -> 6.2 "
     "(`bench.cluster_rate`)"),
    ("a dispatch writes nothing", "the row stays QUEUED in the store until its result (in "
     "flight in the frontier's memory; a result is current when its task id was handed "
     "out here); the host's lease covers a period of requests and is renewed when less "
     "than a request's span is left", "with the row above, against the report of "
     "2026-12-05: Cassandra statements per page 7.35 -> 5.75 (batches 2.67 -> 1.52), "
     "Cassandra CPU 10.1 -> 5.3 ms per page, cluster CPU 3.16x -> 2.30x embedded's, pace "
     "0.35x -> 0.47x Scrapy's (a first run the same day: 4.5 ms, 1.81x, 0.56x)"),
    ("WARC records written directly", "records built as warcio builds them (byte for "
     "byte, tested) without its writer's copies, gzip level 5 instead of 6 (on the 181 "
     "real pages: 2.54 against 3.37 ms per page for 0.200 against 0.198 of the bytes), "
     "each record's compressor sized to it, imports deferred to where they are used",
     "writing a page's records 0.93 -> 0.64 ms; profiled embedded CPU 10.17 -> 9.32 ms "
     "per page, start-up 1.28 -> 0.69 s, peak RSS 106 -> 90 MiB "
     "(`bench.profile_embedded`)"),
    ("Markdown per page (new output)", "each kept page also gets a Markdown record "
     "(`CRAWLER_PARSER_MARKDOWN`, on by default): work embedded mode did not do before",
     "about 1.3 ms of CPU per page, 0.2 ms more to write it; its escaping was the "
     "crawl's hottest function (a run the same day without the fix: 9.26 CPU s per 1,000 "
     "pages) and now skips text with nothing to escape (0.45 -> 0.06 ms per page)"),
    ("a crawl's main process loads only what it uses", "the parser's page work moved to "
     "`parser/jobs.py` and is named, not imported, by the stage (`common.pagework.JobRef`), "
     "so only page workers load the parsing libraries and the language model; numpy "
     "comes with the first near-duplicate check, the XML parser with the first sitemap; "
     "registered domains from `publicsuffixlist` (the same list, no HTTP library) "
     "instead of `tldextract`, which imported requests and urllib3 before the first "
     "request", "start-up to the first request 0.75 -> 0.56 s (8 alternating runs), then "
     "0.75 -> 0.47 s with the suffix list change (5 runs); CPU per 1,000 pages "
     "10.64 -> 10.19 s and 10.46 -> 10.31 s in the same runs (`bench.profile_embedded`, "
     "after this report's runs)"),
    ("bytecode compiled at setup", "an editable install leaves no bytecode, and with "
     "PYTHONDONTWRITEBYTECODE set every process compiled about a hundred modules at "
     "each start", "embedded start-up to the first request 0.59 -> 0.47 s, CPU per 1,000 "
     "pages 10.69 -> 10.44 s (3 runs each, after this report's runs)"),
    ("a seed is a publish, and the bus connects first", "`crawler seed` builds no store "
     "or frontier; the Kafka bus waits for one metadata answer at start, so the "
     "idempotent producer's first message no longer waits 0.5 s for its producer id; "
     "writers load the SURT library before their first record",
     "seeding 60 URLs 1.2 -> 0.53 s, CPU 0.47 -> 0.23 s; quick preset cluster 0.42x -> "
     "0.51x Scrapy (after this report's runs; `bench/results/quick.json`)"),
    ("page analysis with less Python per node", "the Markdown walk takes children from "
     "the parser's C iterator, pushes no exit step for inline elements and collapses "
     "whitespace without a regular expression; fingerprints build shingles with fewer "
     "concatenations, hash the distinct words from one joined digest and find distinct "
     "values by a sort; the markup guard lower-cases only ASCII letters of a large "
     "page; every output identical on 511 pages (`bench.page_analysis --digest`)",
     "whole analysis per generated page 4.07 -> 3.46 ms, per article 11.60 -> 10.43 ms "
     "(`python -m bench.page_analysis`, medians of 3 alternating runs; Markdown 1.37 -> "
     "1.01 ms, fingerprints 1.24 -> 1.00 ms)"),
    ("the main process loads no parsing library", "a page worker's answer is unpickled "
     "from classes in `parser.results` (they were in `parser.jobs`, whose import brought "
     "selectolax, resiliparse, numpy and the language model into the main process with "
     "the first page); MinHash sketches are compared in plain Python, same results",
     "quick preset, embedded, one run: main process 81 -> 65 MiB, the crawl's peak "
     "218 -> 202 MiB by RSS, 171 -> 152 MiB by PSS"),
    ("servers warmed before the measured runs", "every tool runs once unmeasured on each "
     "web, and the cluster three more times when the benchmark started Kafka and "
     "Cassandra itself; the peak PSS of a crawl's processes is reported beside their "
     "summed resident sets", "a Cassandra just started spent 12.8, 8.3 and 7.1 CPU s in "
     "its first three quick-preset crawls and 4.6 to 5.6 s once warm"),
    ("group commits of the fetcher's store requests", "a fetcher's content look-ups, "
     "content records and near-duplicate look-ups made within "
     "`CRAWLER_STORE_GROUP_WAIT` (5 ms) go to Cassandra as one request of each kind: an "
     "`IN` read, an unlogged batch of single-row partitions, an `IN` read of the block "
     "keys split by page; store and bus metrics look their series up once",
     "quick preset, cluster, 6 runs each alternating with the code before: statements "
     "per page 5.75 -> 3.7, servers' CPU 11.2 -> 9.5 ms per page, pace 54.1 -> 59.6 "
     "pages/s (medians)"),
    ("WARC records written on the main process's threads", "embedded mode has no "
     "writer process any more: compression, digests and file writes run outside the "
     "interpreter's lock on threads of the main process, which also loads the SURT "
     "library at start; parsing stays in worker processes",
     "quick preset, embedded, 12 runs each alternating: peak memory 200 -> 160 MiB "
     "(PSS 161 -> 136), pace and CPU within the noise; default preset, 6 runs each: a "
     "second parse worker started in 1 run instead of 3, peak 177 MiB without one"),
    ("the language model's table kept float16", "the probability table stays float16, "
     "as in py3langid's model file (27 instead of 54 MiB mapped by each parse worker); "
     "the rows a text touches are widened to float32 exactly, so every score is the same "
     "to the bit",
     "default preset, embedded, 9 runs each alternating: peak memory 177-178 -> 170-171 "
     "MiB (PSS 154 -> 147) where no second parse worker started, CPU per page 9.41 -> "
     "9.08 ms (medians; within the noise)"),
    ("page workers give freed memory back", "after a job that grew a page worker's "
     "anonymous memory by 32 MiB or more (a large page's parse), the worker asks glibc "
     "to release its free pages (`malloc_trim`, about 4 ms after a 2.5 MB page)",
     "real-HTML web, embedded, 3 runs each alternating: every host at once 402 -> 348 "
     "MiB peak, Python's docs alone 362 -> 303, the other sites unchanged; pace and CPU "
     "within the noise"),
    ("the parse lane grows on a backlog that lasts", "another parse worker starts when "
     "100 jobs in a row found every worker busy over at least 2 seconds (before: 100 "
     "jobs, which pass in half a second on the generated web)",
     "default preset, embedded, 8 runs: 166-167 MiB peak in every run (a second worker "
     "had started in 2 of 3 runs of the report before, 226 and 254 MiB); real-HTML web "
     "every host at once, 3 runs: the lane still grows, 337-340 MiB, pace unchanged"),
    ("the parse lane grows only with work ahead", "embedded mode tells the lane how many "
     "pages wait in the bus for the parser; it grows only when those would take its "
     "workers at least 5 s (before: a worker also started near a crawl's end, with 2 to "
     "3 s of parsing left)", "real-HTML web, embedded, 2 rounds of 2 runs alternating: "
     "PostgreSQL's docs alone 218-244 MiB (grew in 4 of 4) -> 160 (one worker in 4 of "
     "4); every host at once and Python's docs still grow, at the same peak"),
    ("a page's two trees never held at once", "the Markdown walk runs on the content root "
     "first and the page's lexbor tree is released before the root is parsed again for "
     "its text; outputs identical (511 pages)", "parse peak of one page: 94 -> 62 MiB "
     "(2.57 MB table of contents), 65 -> 46 (1.68 MB index); real-HTML web every host "
     "at once 331-336 -> 325-327 MiB, Python's docs 294-301 -> 281-284"),
    ("WARC records compressed by ISA-L", "each record is still one gzip member, compressed "
     "by ISA-L's level 2 (isal) instead of zlib's level 5: records about 14% larger on "
     "real pages, 8% on the generated web", "181 real pages (174 KB): 2.25 -> 0.27 ms "
     "per page for 0.200 -> 0.228 of the bytes; 20 KB pages 0.26 -> 0.05 ms; embedded, "
     "generated web, 4 runs alternating: 12.14 -> 11.26 CPU s per 1,000 pages (medians, "
     "runs overlapping)"),
    ("uvloop's event loop", "every process runs its main coroutine on uvloop's loop "
     "(common.runtime.run_loop; asyncio's own where uvloop is not installed); a host name "
     "told from an IP literal without two failed parses", "embedded, generated web, 4 "
     "runs each alternating: 7.73 -> 7.56 CPU s per 1,000 pages (ranges apart), 208.4 "
     "-> 214.2 pages/s; cluster, quick preset, 6 runs each: the services' 13.54 -> "
     "12.84 CPU s per 1,000 pages, 75.8 -> 80.2 pages/s"),
)


TEXT_QUALITY = Path(__file__).resolve().parent / "results" / "text-quality.json"


def real_page_parser_cost(prof: dict[str, Any], w: Callable[[str], None]) -> None:
    """The parser's CPU per page on the generated web (this profile) beside its CPU per
    real page (the article-extraction benchmark's 181 news and blog pages, measured by
    ``python -m bench.text_quality`` into :data:`TEXT_QUALITY`), when both are known."""
    try:
        real = json.loads(TEXT_QUALITY.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    pages = max(1, prof["pages"])
    html = next((r for r in prof.get("components", [])
                 if r["name"].startswith("HTML parsing")), None)
    median = real.get("parser_cost_ms_median")
    if html is None or not isinstance(median, (int, float)):
        return
    steps = real.get("parser_steps_ms_median") or {}
    by_step = ", ".join(f"{name} {_f(ms, 2)}" for name, ms in steps.items())
    w(f"**Parser cost per page, generated and real pages.** Here, on the generated web: "
      f"{_f(1000 * html['cpu_seconds'] / pages, 2)} ms per page in HTML parsing, links and "
      f"text (the component above; profiled). On real pages (the 181 news and blog pages "
      f"of the article-extraction benchmark, `python -m bench.text_quality`, "
      f"`bench/results/text-quality.json`): {_f(median, 2)} ms per page, the median CPU "
      f"time of `parser.jobs.analyse` (decode, markup guard, links, main text, text "
      f"signals; by step: {by_step}). Real pages are larger and messier than generated "
      f"ones; see docs/text-quality.md.\n")



def _warmup_note(results: dict[str, Any]) -> str:
    """How many unmeasured runs came first (results of older runs do not say)."""
    cfg = results.get("config") or {}
    if cfg.get("warmup") is None:
        return ""
    note = f", after {cfg['warmup']} unmeasured run(s) of each tool"
    started = (results.get("cluster") or {}).get("started_servers")
    if started and cfg.get("server_warmup"):
        note += (f" and {cfg['server_warmup']} more of the cluster, whose Kafka and "
                 "Cassandra the benchmark had just started (a JVM spends 2-3x its settled "
                 "CPU per request while it compiles its hot code)")
    return note

def render(results: dict[str, Any], *, results_file: str) -> str:
    cfg = results.get("config", {})
    machine = results.get("machine", {})
    web = results.get("web", {})
    out: list[str] = []
    w = out.append

    w("# Benchmarks\n")
    w("How fast the crawler crawls, what each page costs and how the cost grows, next to "
      "Scrapy on the same machine in the same run. Everything below is written by "
      "`bench/run` (see [Running it](#running-it)); the raw numbers of every run are in "
      f"[`{results_file}`](../{results_file}).\n")
    w(f"Preset **{results.get('preset')}**, run on {results.get('date')}, "
      f"{_f(results.get('wall_seconds', 0) / 60, 0)} minutes in all.\n")

    w("## Headline\n")
    for line in [*headline(results), *real_headline(results)]:
        w(f"- {line}")
    w("")
    w("## Goals\n")
    w("The goals the report is read against (not CI assertions):\n")
    out.extend(_goal_rows(results))
    w("")

    # ---- machine
    w("## Machine\n")
    v = machine.get("versions", {})
    w("| | |\n|---|---|")
    w(f"| CPU | {machine.get('cpu', '?')}, {machine.get('cores')} cores |")
    w(f"| memory | {machine.get('memory_gib')} GiB |")
    w(f"| system | {machine.get('os', '?')}, Linux {machine.get('kernel')} |")
    w(f"| Python | {machine.get('python')} |")
    w(f"| nginx | {v.get('nginx', '–')} (distribution package) |")
    w(f"| Scrapy | {v.get('scrapy', '–')} (pip, own virtual environment) |")
    w(f"| py-spy | {v.get('py-spy', '–')} |")
    w(f"| crawler commit | {v.get('crawler_commit', '–')} (plus the working tree) |")
    w(f"| load average at start | {' '.join(machine.get('loadavg_at_start', []))} |")
    others = machine.get("other_servers_running") or []
    started = (results.get("cluster") or {}).get("started_servers")
    w(f"| other servers running at start | {', '.join(others) if others else 'none'}"
      + ("; Kafka and Cassandra were started by the benchmark for cluster mode" if started
         else "") + " |")
    w("")
    w("Every figure comes from one machine: the web server, the DNS responder and the "
      "crawler share its cores. The load average before each run is in the results file; "
      "a busy machine slows every tool, which is why the tools alternate and each runs "
      "several times.\n")

    # ---- web
    w("## The web\n")
    spec = web.get("spec", {})
    w(f"A generated web (`simweb.scenarios.generated`) written as static files and served "
      f"by nginx: **{spec.get('hosts'):,} hosts x {spec.get('pages_per_host')} pages**, "
      f"{spec.get('links_per_page')} links per page (about 15% to other hosts, a few "
      f"repeated with `?utm_source=x`), {spec.get('words')} words of text per page, and the "
      f"inline style sheet and script a real page carries (no extra links or text), "
      f"{_f(web.get('mean_page_bytes', 0) / 1024, 1)} KiB per page on average. About 5% of "
      f"the pages are byte-identical copies of others ({web.get('duplicates'):,} "
      f"duplicates), and every host has a robots.txt that disallows `/private/`, which "
      f"every home page links ({web.get('robots_blocked'):,} URLs a polite crawler "
      f"leaves alone). A correct crawl fetches **{web.get('expected_fetches'):,} pages** "
      f"(computed by `simweb.expected.expected_crawl` from the scenario itself) plus "
      f"one robots.txt per host.\n")
    w("Names resolve through the simulated web's DNS responder on loopback "
      "(`bench/dnsd.py`), for every crawler.\n")

    # ---- settings
    w("## Equal settings\n")
    w("| | this crawler | Scrapy |\n|---|---|---|")
    w(f"| seeds | the {spec.get('hosts'):,} home pages | the same |")
    w(f"| per-host delay | {cfg.get('delay')} s after each response "
      f"(`CRAWLER_POLITENESS_DEFAULT_DELAY`) | `DOWNLOAD_DELAY` {cfg.get('delay')} s, "
      "no jitter |")
    w("| per host at once | 1 | `CONCURRENT_REQUESTS_PER_DOMAIN` 1 |")
    w(f"| requests in flight | {cfg.get('concurrency')} (`CRAWLER_FETCHER_CONCURRENCY`) | "
      f"`CONCURRENT_REQUESTS` {cfg.get('concurrency')} |")
    w(f"| depth limit | {cfg.get('max_depth')} | `DEPTH_LIMIT` {cfg.get('max_depth')} |")
    w("| order | breadth-first (priority, depth, discovery) | `DEPTH_PRIORITY` 1, FIFO queues, "
      "downloader-aware priority queue (Scrapy's broad-crawl advice) |")
    w("| robots.txt | obeyed (Protego rules) | `ROBOTSTXT_OBEY`, Protego |")
    w("| links | every `a`/`area` of every page, tracking parameters dropped | "
      "`LinkExtractor` on every page, the same parameters dropped |")
    w("| output | WARC (request, response, metadata; gzip per record), CDXJ index, text as "
      "WARC conversion records, page records, SQLite state | every page (url, status, "
      "headers, body) as gzip-compressed JSON lines |")
    w("| duplicates | exact (SHA-256) and near (SimHash) detected; links of duplicates not "
      "followed | not detected |")
    w("| durable state | yes (SQLite, resumable after a kill) | " +
      ("yes (`JOBDIR`)" if cfg.get("scrapy_jobdir") else "no (no `JOBDIR`)") + " |")
    w("")
    w("So the crawler does more work per page than Scrapy here (WARC, text extraction, "
      "SimHash, duplicate detection, durable state); the comparison is what a user gets "
      "from each with the settings that make them crawl the same pages politely.\n")

    # ---- ceiling
    w("## The server alone\n")
    ceiling = results.get("ceiling")
    polite = results.get("politeness_ceiling_pages_per_second")
    if ceiling:
        w(f"wrk on loopback against nginx, cycling through {ceiling.get('targets'):,} "
          f"page URLs over every host, {ceiling.get('connections')} connections, "
          f"{_f(ceiling.get('seconds'), 0)} s (`{ceiling.get('command')}`):\n")
        w("| | requests per second | MB/s | mean latency |\n|---|---|---|---|")
        w(f"| nginx (1 worker) | **{_f(ceiling.get('requests_per_second'), 0)}** | "
          f"{_f(ceiling.get('megabytes_per_second'), 0)} | "
          f"{_f(ceiling.get('mean_latency_ms'), 2)} ms |")
        w("")
    else:
        w("wrk was not available, so the server ceiling was not measured.\n")
    if polite:
        w(f"Politeness allows at most {spec.get('hosts'):,} hosts / {cfg.get('delay')} s = "
          f"**{_f(polite, 0)} pages per second** (one request per host at a time, then "
          "the delay). Both ceilings sit far above every crawl rate below, so the crawlers, "
          "not the server or the delay, set the pace.\n")

    # ---- comparison
    summary = results.get("summary") or {}
    if summary:
        w("## Throughput and cost per page\n")
        w(f"Median over the runs, with the spread (lowest–highest) in brackets; "
          f"{cfg.get('runs')} runs per tool, alternating "
          f"({', '.join(summary)} then the reverse order){_warmup_note(results)}. "
          "Pages per second count every "
          "page request the server saw (robots.txt not included) over the whole run, "
          "start-up included; for the cluster, whose services run before a crawl is "
          "seeded into them, from the seed to the crawl seen done, with the services' "
          "start-up (spawned to every one answering `/readyz`) given on its own below. "
          "CPU is user + system time of the crawler's processes "
          "(`wait4`), memory the peak resident set of the crawler's processes together "
          "(sampled every 50 ms, and never less than `ru_maxrss`; in embedded mode the "
          "main process and its page worker, in cluster mode the sum of the service "
          "processes' peaks), bytes what they wrote to disk.\n")
        w("| tool | pages/s | CPU s per 1,000 pages | peak memory MiB | bytes written MB "
          "| pages | missing | extra | fetched twice | smallest same-host gap s |")
        w("|---|---|---|---|---|---|---|---|---|---|")
        names = {"embedded": "this crawler, embedded", "scrapy": "Scrapy",
                 "cluster": "this crawler, cluster"}
        for tool, s in summary.items():
            failed = s.get("failed", 0)
            label = names.get(tool, tool) + (f" ({s.get('completed')} of {s.get('runs')} runs "
                                             "completed)" if failed else "")
            if not s.get("completed"):
                w(f"| {label} | every run failed (see below) | | | | | | | | |")
                continue
            w(f"| {label} | **{_spread(s, 'pages_per_second')}** | "
              f"{_spread(s, 'cpu_seconds_per_1000_pages', digits=2)} | "
              f"{_spread(s, 'max_rss_bytes', MiB, 0)} | "
              f"{_spread(s, 'bytes_written', 1e6, 1)} | {_spread(s, 'pages', digits=0)} | "
              f"{_spread(s, 'missing', digits=0)} | {_spread(s, 'extra', digits=0)} | "
              f"{_spread(s, 'refetched', digits=0)} | "
              f"{_spread(s, 'min_gap_seconds', digits=3)} |")
        cluster = results.get("cluster")
        if cluster and not cluster.get("available"):
            w(f"| this crawler, cluster | not run: {cluster.get('reason')} | | | | | | | | |")
        w("")
        pss = {tool: (s.get("max_pss_bytes") or {}).get("median")
               for tool, s in summary.items() if tool != "cluster"}
        if pss and all(pss.values()):
            w("Counted by PSS instead (sampled with the resident sets; a page that several "
              "processes map, such as the shared libraries and the language model every "
              "page worker maps, is split between them rather than counted in each), the "
              "peaks are: " + ", ".join(f"{names.get(t, t)} {_f(v / MiB, 0)} MiB"
                                        for t, v in pss.items() if v) + ".\n")
        w("*Missing* and *extra* compare the URLs each tool fetched (from nginx's access "
          "log) with the expected set; *fetched twice* counts repeated requests for one "
          "URL. The smallest same-host gap is the shortest time, over all hosts, between "
          "the end of one response and the start of the next request to the same host, "
          "as nginx logged it (Scrapy counts its delay from the start of the previous "
          "request, so its gap can be a little shorter than the delay).\n")
        w("Every run (*processes*: the most of the crawler's processes seen at once in "
          "the memory samples; in embedded mode the main process and its parse workers, "
          "so more than 2 means the parse lane grew; – where not sampled, as for the "
          "cluster, whose services are measured one by one):\n")
        w("| tool | run | pages | seconds | pages/s | CPU s | peak MiB | processes | "
          "bytes written MB | missing | extra | server CPU s | load before | exit |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in results.get("runs", []):
            w(f"| {r['tool']} | {r['run']} | {r['pages']:,} | {_f(r['wall_seconds'])} | "
              f"{_f(r['pages_per_second'])} | {_f(r['cpu_seconds'])} | "
              f"{_f(r['max_rss_bytes'] / MiB, 0)} | {r.get('max_processes') or '–'} | "
              f"{_f(r['bytes_written'] / 1e6, 1)} | "
              f"{r['missing']} | {r['extra']} | {_f(r['server_cpu_seconds'])} | "
              f"{' '.join(str(x) for x in r.get('loadavg_before', [])[:1])} | "
              f"{r['exit_code']}{' (timed out)' if r['timed_out'] else ''} |")
        w("")
        infra = [r for r in results.get("runs", []) if r.get("infra_cpu_seconds")]
        if infra:
            total = sum(r["infra_cpu_seconds"] for r in infra) / len(infra)
            w(f"Cluster runs also used {_f(total)} CPU seconds of Kafka and Cassandra per "
              "run on average (not included above; read from their processes from the "
              "seed to the crawl done, so it also counts anything else those servers did "
              "meanwhile, but not the keyspace and topics the benchmark creates and drops "
              "around each run).\n")
        started = [r for r in results.get("runs", []) if r.get("start_seconds")]
        if started:
            starts = sorted(r["start_seconds"] for r in started)
            walls = sorted(r["process_wall_seconds"] for r in started
                           if r.get("process_wall_seconds"))
            w(f"Cluster start-up (services spawned to every one ready): median "
              f"{_f(starts[len(starts) // 2])} s; each cluster run's whole time, start-up, "
              "shut-down and the benchmark's keyspace and topic clean-up included: "
              + ", ".join(f"{_f(x)} s" for x in walls) + ".\n")

    out.extend(cluster_cost_lines(results))
    out.extend(cluster_profile_lines(results))

    # ---- scaling
    scaling = [r for r in results.get("scaling") or [] if "error" not in r]
    if scaling:
        budget = scaling[0].get("budget")
        w("## How the cost grows with known URLs\n")
        w(f"The embedded crawler (`bench/scale_child.py`: every stage in one process, with "
          f"its page worker process) first gets N URLs "
          f"it knows but will not fetch during the measurement: they go in as seeds "
          f"through the frontier (seen filter, trap rules, url_state rows in SQLite) on "
          f"{scaling[0].get('filler_hosts'):,} hosts whose politeness timers were set a "
          f"year ahead, so they stay queued. Then it crawls the benchmark web until "
          f"{budget:,} pages have been fetched. Time and CPU per page are over that crawl "
          "(CPU of the main process and the page worker); memory is the main process's "
          "resident set (the one that holds the crawl's state) after the N URLs are in "
          "(after a garbage collection), against its resident set before.\n")
        loads = any(row.get("loadavg_before") for row in scaling)
        w("| known URLs | seeding URLs/s | ms per page | CPU ms per page | resident MiB "
          "before / after seeding | bytes per URL added since the size above | of which "
          "beyond the seen filter | seen-filter bits per known URL | peak MiB while "
          "crawling |" + (" load before |" if loads else ""))
        w("|---|---|---|---|---|---|---|---|---|" + ("---|" if loads else ""))
        previous = None
        for row in scaling:
            n = row["known_filler"]
            slope = marginal(previous, row) if previous is not None else None
            w(f"| {n:,} | {_f(row['seeding_urls_per_second'], 0)} | "
              f"{_f(row['ms_per_page'], 2)} | {_f(row['cpu_ms_per_page'], 2)} | "
              f"{_f(row['rss_start_bytes'] / MiB, 1)} / "
              f"{_f(row['rss_seeded_bytes'] / MiB, 1)} | "
              f"{_f(slope[0], 1) if slope else '–'} | {_f(slope[1], 1) if slope else '–'} | "
              f"{_f(row['seen_filter_bits'] / n, 1)} | "
              f"{_f(row['rss_peak_crawl_bytes'] / MiB, 0)} |"
              + (f" {(row.get('loadavg_before') or ['–'])[0]} |" if loads else ""))
            previous = row
        w("")
        repeated = [row for row in scaling if len(row.get("runs") or []) > 1]
        if repeated:
            w(f"Each size ran {len(repeated[0]['runs'])} times, in rounds over the sizes "
              "(so a slower spell of the machine falls on every size alike); the table "
              "gives each figure's median. CPU ms per page in each run: "
              + "; ".join(f"{row['known_filler']:,}: " + ", ".join(
                  _f(run["cpu_ms_per_page"], 2) for run in row["runs"])
                  for row in repeated) + ".\n")
        w("Memory is read as the resident set, so fixed-size parts fill first: SQLite's "
          "page cache (2 MiB by default), the pages of the seen filter's bit array (which "
          "is allocated for 1,000,000 URLs at start and becomes resident as bits are set), "
          "the allocator's arenas. The cost of one more known URL is therefore the "
          "difference between sizes, and the goal is read on the last one (the two "
          "largest sizes). The seen filter's bits are counted as fully resident in the "
          "*beyond the seen filter* column.\n")
        w("The seeding rate is the cost of discovering a new URL (canonical form, seen "
          "filter, trap rules, one url_state row), measured through the in-process bus.\n")
    errors = [r for r in results.get("scaling") or [] if "error" in r]
    for row in errors:
        w(f"Scaling at {row['known_filler']:,} known URLs failed: `{row['error'][-300:]}`\n")

    # ---- seen filter
    seen = results.get("seen_filter")
    if seen:
        w("## Seen filter\n")
        w(f"`frontier.seen.SeenFilter` (rbloom underneath) at the 1% target. Formula: m = "
          f"-n ln p / (ln 2)^2 = **{_f(seen['formula_bits_per_url'], 2)} bits per URL** "
          f"planned, k = (m/n) ln 2 = {seen['formula_hashes']} hashes, and a rate of "
          "(1 - e^(-kn'/m))^k with n' URLs held (for a staged filter the stages' rates "
          "combine). Measured: n distinct URLs added, then URLs never added looked up; "
          "*lost on insert* counts new URLs the filter called \"seen\" while they were "
          "added (the frontier skips such a URL).\n")
        w("| URLs | plan | stages | bits per URL | formula bits per URL | false positives "
          "measured | formula | lost on insert | ns per insert |")
        w("|---|---|---|---|---|---|---|---|---|")
        for row in seen["rows"]:
            w(f"| {row['urls']:,} | {row['plan']} | {row['stages']} | "
              f"{_f(row['bits_per_url'], 2)} | {_f(row['formula_bits_per_url'], 2)} | "
              f"{100 * row['measured_fp_rate']:.3f}% | {100 * row['formula_fp_rate']:.3f}% | "
              f"{100 * row['lost_on_insert_rate']:.3f}% | "
              f"{_f(row['insert_ns_per_url'], 0)} |")
        w("")
        frontier_rows = [r for r in seen["rows"] if r["plan"].startswith("frontier")]
        text = ("The frontier plans its filter for 1,000,000 URLs "
                "(`Frontier(seen_capacity=...)`, 1%): below that it spends more bits per URL "
                "than the formula needs and has far fewer false positives; past it, it adds "
                "stages twice as large at half the rate each, and the stages' rates add up.")
        if frontier_rows:
            big = frontier_rows[-1]
            target = seen["target"]
            verdict = ("above" if big["measured_fp_rate"] > target * 1.05 else "within")
            text += (f" At {big['urls']:,} URLs it holds {big['stages']} stages, "
                     f"{_f(big['bits_per_url'], 1)} bits per URL, and its measured rate is "
                     f"{100 * big['measured_fp_rate']:.2f}% (formula "
                     f"{100 * big['formula_fp_rate']:.2f}%): **{verdict} the "
                     f"{100 * target:g}% target**, and "
                     f"{100 * big['lost_on_insert_rate']:.2f}% of new URLs were taken for "
                     "seen while they went in.")
            if verdict == "above":
                text += (" A scalable Bloom filter keeps the sum of its stages' rates under "
                         "the target by starting below it: with a tightening ratio r the "
                         "first stage needs p(1 - r) (0.5% for r = 1/2), not p.")
        w(text + "\n")

    # ---- profile
    prof = results.get("profile")
    if prof and "components" in prof:
        w("## Where the CPU goes (embedded crawl, profiled)\n")
        w(f"py-spy sampled every thread of `crawler crawl` and of its page worker "
          f"process at {prof['rate_hz']} Hz over "
          f"{prof['pages']:,} pages ({_f(prof['wall_seconds'])} s; "
          f"{_f(prof['process_cpu_seconds'])} CPU seconds by the kernel's count, "
          f"{_f(prof['cpu_seconds'])} s in CPU samples). Samples of threads waiting for "
          "work are left out. Raw stacks: `" + prof.get("raw_file", "") + "` (not "
          "committed).\n")
        comps = prof["components"]
        top = comps[:3]
        if top:
            share = sum(r["share"] for r in top)
            parts = ", ".join(f"{r['name'].split(' (')[0]} "
                              f"({_f(1000 * r['cpu_seconds'] / max(1, prof['pages']), 2)} ms "
                              "per page)" for r in top)
            w(f"The three largest components take {100 * share:.0f}% of the CPU: {parts}.\n")
        w("By component (the innermost frame that belongs to a known part):\n")
        w("| component | CPU s | share | ms per page |\n|---|---|---|---|")
        pages = max(1, prof["pages"])
        for row in prof["components"]:
            w(f"| {row['name']} | {_f(row['cpu_seconds'])} | {100 * row['share']:.1f}% | "
              f"{_f(1000 * row['cpu_seconds'] / pages, 2)} |")
        w("")
        real_page_parser_cost(prof, w)
        w("By stage (the outermost stage frame; the SQLite store's worker thread on its "
          "own):\n")
        w("| stage | CPU s | share |\n|---|---|---|")
        for row in prof["stages"]:
            w(f"| {row['name']} | {_f(row['cpu_seconds'])} | {100 * row['share']:.1f}% |")
        w("")
        w("By process and thread:\n")
        w("| process or thread | CPU s | share |\n|---|---|---|")
        for row in prof["threads"]:
            w(f"| {row['name']} | {_f(row['cpu_seconds'])} | {100 * row['share']:.1f}% |")
        w("")
        w("Hottest functions (self time):\n")
        w("| function | CPU s | share |\n|---|---|---|")
        for row in prof["hot_functions"][:15]:
            w(f"| `{row['name']}` | {_f(row['cpu_seconds'])} | {100 * row['share']:.1f}% |")
        w("")
    elif prof and "error" in prof:
        w("## Profile\n")
        w(f"The profiler failed: `{prof['error'][-300:]}`\n")

    out.extend(real_web_lines(results))

    # ---- what changed
    w("## What changed after the profile\n")
    w("Each step was measured with `python -m bench.profile_embedded` (100 hosts x 10 "
      "pages of the same shape, median of 4 runs per step, steps alternated on the same "
      "machine) or `python -m bench.cluster_rate` (60 hosts x 20 pages, cluster mode, "
      "median of 3); the figures are those runs', not this report's.\n")
    w("| change | what it did | measured |\n|---|---|---|")
    for change, what, measured in CHANGES:
        w(f"| {change} | {what} | {measured} |")
    w("")

    # ---- running
    w("## Running it\n")
    w("```bash\nbench/run            # the default preset (about 20 minutes on 2 cores)\n"
      "bench/run --quick    # smoke run, a few minutes; report in var/bench/report-quick.md\n"
      "bench/run --full     # 1,000 hosts x 100 pages (the issue's full size; hours)\n"
      "bench/run --help     # sizes, delay, concurrency, tools and steps\n```\n")
    w(f"This report: `{results.get('command')}`. `bench/run` installs the project "
      "(scripts/setup), nginx-light and wrk with apt-get when they are missing, Scrapy and "
      "py-spy into virtual environments under var/bench/; it generates the web once "
      "(kept in var/bench/web-*), runs nginx and the DNS responder on 127.0.0.1 as its "
      "own children and stops them by PID at the end. Cluster mode uses the local Kafka "
      "and Cassandra (`scripts/servers`), starting them when they do not answer and "
      "stopping them afterwards if it started them. The raw numbers: "
      f"`{results_file}`.\n")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- cluster cost

TARGET_PAGES_PER_SECOND = 25_000  # the design seed's crawl rate, for the projection

STORE_CALLS_WHY: dict[str, str] = {
    "put_url_and_host": "frontier: one single-partition batch with a URL's result and "
    "verdict (the URL's final state, the host's next allowed time and page count, and a "
    "unique page's near-duplicate index entries, which the fetcher sends in the "
    "verdict); a dispatch writes nothing (the row stays queued until its result), so "
    "politeness and nothing-lost hold across a crash with one write per page",
    "put_host": "frontier: the host's lease, which a new owner waits out after a crash: "
    "written for a period of requests and renewed when less than one request's span is "
    "left, not per dispatch (and a host's row on its own: a stale result's rest, an "
    "operator's change)",
    "put_url": "frontier: a URL closed on its own (a verdict arriving apart from its "
    "result, a URL refused at dispatch)",
    "content_holder": "fetcher: is this body stored already? (a copy becomes a revisit "
    "record that refers to the first; the look-ups of pages within the group wait are "
    "one read)",
    "record_content": "fetcher: a new body's first copy recorded (a write whose "
    "timestamp makes the earliest copy win, no Paxos; the records of pages within the "
    "group wait are one unlogged batch)",
    "simhash_candidates": "near-duplicate look-up: the page's SimHash block and sketch "
    "key partitions (the look-ups of pages within the group wait are one read)",
    "simhash_sketches": "near-duplicate verdict: the candidates' MinHash sketches (one "
    "read; only for a page with candidates within 20 SimHash bits)",
    "add_simhash": "near-duplicate index, where the page was judged apart from its "
    "fetcher (dedup or render service): one unlogged batch of the page's block and "
    "sketch key entries and its sketch",
    "add_urls": "frontier: new URLs, one batch per host of a discovered message (outlinks "
    "of many pages share a message) after one read of which of them the host knows",
    "due_urls": "frontier: a host's next queued URLs, read a head at a time",
    "next_due_time": "frontier: when a host with nothing due now has something due",
    "get_host": "frontier: a host's row, the first time it is scheduled",
    "get_url": "frontier: a URL's row when a verdict comes apart from its result, or a "
    "sitemap's lastmod names a known URL (answered from the owner's memory when it "
    "wrote the row, so mostly no statement)",
    "get_robots": "fetcher: robots.txt of an origin not in the fetcher's cache",
    "put_robots": "fetcher: robots.txt fetched, shared with the other fetchers",
    "add_seed_roots": "frontier: the seeds' roots, for the crawl scope",
}

TOPIC_WHY: dict[str, str] = {
    "fetch": "frontier -> fetchers: the task, keyed by host",
    "fetched": "fetcher -> frontier: the result with its verdict (the fetcher parsed "
    "and judged the page)",
    "discovered": "outlinks -> their frontier owners, the links of many pages bound for "
    "one partition in one message",
    "pages": "one record per stored page for indexers: the crawl's output, not consumed "
    "by the crawler",
    "parsed": "parser -> dedup (only with CRAWLER_FETCHER_PARSE_INLINE=false)",
    "status": "dedup -> frontier (only with CRAWLER_FETCHER_PARSE_INLINE=false)",
    "control": "operator changes to a host (none in a benchmark run)",
}


def _median_run(results: dict[str, Any], tool: str) -> dict[str, Any] | None:
    runs = [r for r in _completed_runs(results.get("runs", []), tool) if r.get("pages")]
    if not runs:
        return None
    runs.sort(key=lambda r: r["pages_per_second"])
    return runs[len(runs) // 2]


def _counter(run: dict[str, Any], name: str) -> dict[str, float]:
    """``name``'s samples per page, by their one label's value."""
    out: dict[str, float] = {}
    for key, value in (run.get("counters") or {}).items():
        if key.startswith(name + "{"):
            label = key[len(name) + 1:-1].partition("=")[2]
            out[label] = out.get(label, 0.0) + value / run["pages"]
    return out


def cluster_cost(results: dict[str, Any]) -> dict[str, Any] | None:
    """CPU, statements and messages per page of the median cluster run, beside the
    median embedded and Scrapy runs' CPU per page."""
    run = _median_run(results, "cluster")
    if run is None or not run.get("service_cpu"):
        return None
    pages = run["pages"]
    services = {name: 1000 * cpu / pages for name, cpu in run["service_cpu"].items()
                if name != "seed"}
    servers = {name: 1000 * cpu / pages
               for name, cpu in (run.get("infra_cpu_by_server") or {}).items()}
    python = sum(services.values())
    jvm = sum(servers.values()) if servers else None
    emb = _median_run(results, "embedded")
    scr = _median_run(results, "scrapy")
    statements = _counter(run, "crawler_store_statements_sent_total")
    produced = _counter(run, "crawler_bus_messages_published_total")
    consumed = _counter(run, "crawler_bus_messages_consumed_total")
    return {
        "run": run["run"], "pages": pages, "pages_per_second": run["pages_per_second"],
        "services_ms": services, "servers_ms": servers, "python_ms": python,
        "jvm_ms": jvm, "total_ms": python + (jvm or 0.0),
        "embedded_ms": emb["cpu_seconds_per_1000_pages"] if emb else None,
        "scrapy_ms": scr["cpu_seconds_per_1000_pages"] if scr else None,
        "statements": statements, "statements_total": sum(statements.values()),
        "batch_rows": _counter(run, "crawler_store_batch_rows_total").get("", 0.0),
        "store_calls": _counter(run, "crawler_store_request_duration_seconds_count"),
        "produced": produced, "consumed": consumed,
        "produced_total": sum(produced.values()), "consumed_total": sum(consumed.values()),
    }


def cluster_cost_lines(results: dict[str, Any]) -> list[str]:
    c = cluster_cost(results)
    if c is None:
        return []
    lines: list[str] = []
    w = lines.append
    w("## Cluster mode: where each page's cost goes\n")
    w(f"From the median cluster run (run {c['run']}, {c['pages']:,} pages, "
      f"{_f(c['pages_per_second'])} pages/s): CPU of every service process (`wait4`) and "
      "of the Kafka and Cassandra JVMs (from /proc over the run, so it includes their own "
      "background work), and the services' own counters, read from each one's /metrics "
      "just before it stopped: statements sent to Cassandra by kind, store calls by "
      "operation and Kafka messages by topic. The embedded and Scrapy figures are their "
      "median runs'.\n")
    w("| process | CPU ms per page |")
    w("|---|---|")
    for name, ms in sorted(c["services_ms"].items()):
        w(f"| {name} (Python) | {_f(ms, 2)} |")
    for name, ms in sorted(c["servers_ms"].items()):
        w(f"| {name.capitalize()} (JVM) | {_f(ms, 2)} |")
    w(f"| **Python, all services** | **{_f(c['python_ms'], 2)}** |")
    w(f"| **JVMs** | **{_f(c['jvm_ms'], 2)}** |")
    w(f"| **cluster mode in all** | **{_f(c['total_ms'], 2)}** |")
    if c["embedded_ms"]:
        w(f"| embedded mode (one process) | {_f(c['embedded_ms'], 2)} |")
    if c["scrapy_ms"]:
        w(f"| Scrapy | {_f(c['scrapy_ms'], 2)} |")
    w("")
    if c["embedded_ms"]:
        w(f"Cluster mode costs **{c['total_ms'] / c['embedded_ms']:.2f}x** embedded mode's "
          f"CPU per page in all (Python alone {c['python_ms'] / c['embedded_ms']:.2f}x; "
          "goal at most 2x).\n")
    st = c["statements"]
    w(f"**Cassandra statements per page: {_f(c['statements_total'], 2)}** (goal at most 4): "
      + ", ".join(f"{kind} {_f(st.get(kind, 0.0), 2)}" for kind in
                  ("read", "write", "batch", "lwt"))
      + f"; the batches carry {_f(c['batch_rows'], 1)} rows per page. Lightweight "
      f"transactions (Paxos rounds) per page: **{_f(st.get('lwt', 0.0), 2)}**. "
      "Store calls per page (a call is one or more statements, or none when the "
      "frontier's memory of its hosts' rows answers it), and why each is there:\n")
    w("| store call | per page | why |")
    w("|---|---|---|")
    for op, n in sorted(c["store_calls"].items(), key=lambda kv: -kv[1]):
        if n >= 0.005:
            w(f"| `{op}` | {_f(n, 2)} | {STORE_CALLS_WHY.get(op, '')} |")
    w("")
    w(f"**Kafka messages per page: {_f(c['produced_total'], 2)} produced, "
      f"{_f(c['consumed_total'], 2)} consumed** (goal at most 6):\n")
    w("| topic | produced | consumed | why |")
    w("|---|---|---|---|")
    for topic in sorted(set(c["produced"]) | set(c["consumed"])):
        p, q = c["produced"].get(topic, 0.0), c["consumed"].get(topic, 0.0)
        if p or q:
            w(f"| {topic} | {_f(p, 2)} | {_f(q, 2)} | {TOPIC_WHY.get(topic, '')} |")
    w("")
    rate = TARGET_PAGES_PER_SECOND
    w(f"### Projection: {rate:,} pages per second\n")
    w("**A projection, not a measurement**: cores = CPU seconds per page x pages per "
      "second, from the figures above, as if cost per page stayed what it is on this "
      "machine at this size. It leaves out what a real cluster adds: replication (Kafka "
      "and Cassandra with three replicas do about three times the writing), network "
      "between machines, head-room, and the fetch time of real servers, which costs "
      "waiting, not CPU.\n")
    w("| part | cores |")
    w("|---|---|")
    for name, ms in sorted(c["services_ms"].items()):
        w(f"| {name} | {_f(ms * rate / 1000, 0)} |")
    for name, ms in sorted(c["servers_ms"].items()):
        w(f"| {name.capitalize()} | {_f(ms * rate / 1000, 0)} |")
    w(f"| **cluster mode in all** | **{_f(c['total_ms'] * rate / 1000, 0)}** |")
    if c["embedded_ms"]:
        w(f"| embedded mode's cost per page, for comparison | "
          f"{_f(c['embedded_ms'] * rate / 1000, 0)} |")
    if c["scrapy_ms"]:
        w(f"| Scrapy's cost per page, for comparison | {_f(c['scrapy_ms'] * rate / 1000, 0)} |")
    w("")
    return lines


# Why each component of the cluster profile is there, by the start of its name.
CLUSTER_COMPONENT_WHY: tuple[tuple[str, str], ...] = (
    ("Cassandra driver", "every store call is a statement the driver (pure Python for "
     "the most part) binds, encodes and sends, and whose result rows it decodes; its own "
     "threads read the connections and run the callbacks. The store calls per page are "
     "in the section above."),
    ("Cassandra store adapter", "the crawler's side of each store call: rows to and "
     "from its records (rowcodec), statements and batches built, the driver's futures "
     "handed to the event loop."),
    ("Kafka client and bus", "the Python side of every message produced and consumed: "
     "confluent_kafka's calls, the bus's producer and polling threads handing messages "
     "to and from the event loop, and each partition's offsets (the offset tracker), so "
     "an offset is committed only once its message is handled. librdkafka's own work "
     "runs with the lock released or on threads of its own, out of the samples."),
    ("message encoding", "every Kafka message is msgspec JSON: encoded once by its "
     "producer, decoded by each consumer."),
    ("metrics", "each store call is timed and counted for /metrics."),
    ("thread hand-off", "results of page work and of the client threads wake the event "
     "loop (call_soon_threadsafe, futures)."),
    ("HTML parsing", "the fetcher parses each page itself (links, main text, signals), "
     "as embedded mode's page workers do."),
    ("SimHash", "each page's near-duplicate fingerprints, as in embedded mode."),
    ("WARC writing", "each response's WARC records, compressed, as in embedded mode."),
    ("URL parsing", "the canonical form of every outlink found and of every URL the "
     "frontier takes in."),
    ("HTTP client", "the fetch itself: aiohttp, DNS, the SSRF guard."),
    ("event loop", "asyncio's own scheduling of the services' many small tasks and "
     "callbacks."),
    ("frontier", "the frontier's own work: queues, politeness timers, leases, "
     "verdicts."),
    ("start-up", "importing each process's modules: once per process, spread over the "
     "run's pages."),
    ("other", "frames of no known part (the standard library and others); the hottest "
     "functions below show which."),
)


def _why(name: str) -> str:
    return next((why for prefix, why in CLUSTER_COMPONENT_WHY if name.startswith(prefix)),
                "")


def cluster_split(prof: dict[str, Any]) -> dict[str, float]:
    """Each process's factor from its sampled CPU to its CPU by the kernel's count
    (``wait4``; 1.0 where the kernel's count is not known): the samples give the split
    within a process, the kernel the process's total."""
    kernel = {SEED if k == "seed" else k: v
              for k, v in (prof.get("service_cpu") or {}).items()}
    return {r["name"]: (kernel[r["name"]] / r["cpu_seconds"]
                        if r["name"] in kernel and r["cpu_seconds"] else 1.0)
            for r in prof["services"]}


def cluster_profile_lines(results: dict[str, Any]) -> list[str]:
    """Where the cluster's Python CPU per page goes: the cluster-profile step's py-spy
    samples by service, component, thread and function, each process's samples scaled
    to its CPU by the kernel's count."""
    prof = results.get("cluster_profile")
    if not prof:
        return []
    lines: list[str] = []
    w = lines.append
    w("## Cluster mode: where the Python CPU goes (profiled)\n")
    if "components" not in prof:
        w(f"The cluster profile failed: `{str(prof.get('error', ''))[-300:]}`\n")
        return lines
    pages = max(1, int(prof.get("pages") or 0))
    rate = prof["rate_hz"]
    factor = cluster_split(prof)
    kernel_known = bool(prof.get("service_cpu"))
    kernel = sum(r["cpu_seconds"] * factor[r["name"]] for r in prof["services"])

    def ms(seconds: float, service: str) -> str:
        return _f(1000 * seconds * factor.get(service, 1.0) / pages, 2)

    w(f"py-spy (`record --subprocesses --gil --rate {rate}`) sampled every process of one "
      f"cluster crawl of the generated web, run as the cluster runs above are: "
      f"{prof.get('pages', 0):,} pages by the crawl's own count"
      + (f" (the server logged {prof['server_pages']:,} page requests)"
         if prof.get("server_pages") not in (None, prof.get("pages")) else "")
      + f" in {_f(prof.get('wall_seconds'))} s. Of "
      f"{prof['samples']:,} samples, {prof['idle_samples']:,} were threads waiting for "
      f"work and {prof.get('left_out_samples', 0):,} the benchmark's supervisor (its "
      "completion polls, left out as its CPU is), which leaves "
      f"**{prof['cpu_samples']:,} CPU samples ({_f(prof['cpu_seconds'])} s)**.\n")
    w("With `--gil` each sample is the thread that holds the interpreter lock, one per "
      "process at most: without it, threads blocked in C (the Cassandra driver's and the "
      "Kafka client's, page-work threads, threads waiting for the lock) were taken for "
      "running often enough to make several times the CPU the kernel counted. So C code "
      "that lets the lock go (zlib's compression, socket I/O, librdkafka's calls) is not "
      "in the samples, and librdkafka's own threads, which are not Python's, never are; "
      "a thread that holds the lock while it waits for a core is. The samples therefore "
      "give the split within each process, and each process's **CPU per page is its CPU "
      "by the kernel's count (`wait4`) split in its samples' proportions**"
      + (f": {_f(kernel)} CPU seconds, **{_f(1000 * kernel / pages, 2)} ms per page** "
         f"(the samples came to {_f(prof['cpu_seconds'] / kernel, 2)}x that)."
         if kernel_known and kernel else
         "; this run has no kernel's count, so the figures below are the samples' own.")
      + " Under the profiler the crawl runs slower than in the runs above. Raw stacks: `"
      + str(prof.get("raw_file", "")) + "` (not committed).\n")
    w("By process:\n")
    w("| process | CPU s sampled | CPU s, kernel's count | ms per page |")
    w("|---|---|---|---|")
    for row in prof["services"]:
        w(f"| {row['name']} | {_f(row['cpu_seconds'])} | "
          f"{_f(row['cpu_seconds'] * factor[row['name']])} | "
          f"{ms(row['cpu_seconds'], row['name'])} |")
    w("")
    comps: dict[str, float] = {}
    for service, rows in (prof.get("service_components") or {}).items():
        for row in rows:
            comps[row["name"]] = (comps.get(row["name"], 0.0)
                                  + 1000 * row["cpu_seconds"] * factor.get(service, 1.0)
                                  / pages)
    total_ms = sum(comps.values())
    ordered = sorted(comps.items(), key=lambda kv: -kv[1])
    if total_ms:
        store = sum(v for n, v in comps.items() if n.startswith("Cassandra"))
        bus = sum(v for n, v in comps.items()
                  if n.startswith(("Kafka", "message encoding")))
        w(f"The cluster's own parts: Cassandra (the store adapter and the driver) "
          f"**{_f(store, 2)} ms per page, {100 * store / total_ms:.0f}%** of the services' "
          f"Python CPU; Kafka (the client, the bus and message encoding) "
          f"**{_f(bus, 2)} ms per page, {100 * bus / total_ms:.0f}%**. The rest is the "
          "work embedded mode does too (fetching, parsing, fingerprints, WARC records) "
          "and the event loop that runs it.\n")
    w("By component (the driver's and the Kafka client's own threads are theirs; else "
      "the innermost frame that belongs to a known part):\n")
    w("| component | ms per page | share |\n|---|---|---|")
    for name, value in ordered:
        w(f"| {name} | {_f(value, 2)} | {100 * value / total_ms if total_ms else 0:.1f}% |")
    w("")
    large = [(n, v) for n, v in ordered if total_ms and v / total_ms >= 0.05 and _why(n)]
    if large:
        w("Why the large ones are there:\n")
        for name, value in large:
            w(f"- **{name.split(' (')[0]}** ({_f(value, 2)} ms per page): {_why(name)}")
        w("")
    w("By process and component (the components of 3% of a process or more):\n")
    w("| process | component | ms per page | share of the process |\n|---|---|---|---|")
    for service in (r["name"] for r in prof["services"]):
        rows = (prof.get("service_components") or {}).get(service, [])
        own = sum(r["samples"] for r in rows)
        for row in rows:
            if own and row["samples"] / own >= 0.03:
                w(f"| {service} | {row['name'].split(' (')[0]} | "
                  f"{ms(row['cpu_seconds'], service)} | {100 * row['samples'] / own:.0f}% |")
    w("")
    w("By thread:\n")
    w("| process: thread | ms per page | share of the samples |\n|---|---|---|")
    for row in sorted(prof["threads"], key=lambda r: -r["cpu_seconds"]
                      * factor.get(r["name"].rpartition(": ")[0], 1.0)):
        service = row["name"].rpartition(": ")[0]
        w(f"| {row['name']} | {ms(row['cpu_seconds'], service)} | "
          f"{100 * row['share']:.1f}% |")
    w("")
    w("Hottest functions (self time; C code shows as its Python caller):\n")
    w("| process | function | ms per page | share of the samples |\n|---|---|---|---|")
    hot = sorted(prof["hot_functions"],
                 key=lambda r: -r["cpu_seconds"] * factor.get(r["service"], 1.0))
    for row in hot[:15]:
        w(f"| {row['service']} | `{row['name']}` | {ms(row['cpu_seconds'], row['service'])} "
          f"| {100 * row['share']:.1f}% |")
    w("")
    return lines


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def real_ratios(results: dict[str, Any]) -> dict[str, float | None]:
    """Embedded against Scrapy on the real web: many hosts (pages/s over the whole run,
    CPU per page) and, per one-host crawl, pages/s while crawling."""
    real = results.get("real") or {}
    many = (real.get("many_hosts") or {}).get("summary") or {}
    out: dict[str, float | None] = {
        "many_pages_per_second": _ratio(_median(many.get("embedded"), "pages_per_second"),
                                        _median(many.get("scrapy"), "pages_per_second")),
        "many_cpu_per_page": _ratio(
            _median(many.get("embedded"), "cpu_seconds_per_1000_pages"),
            _median(many.get("scrapy"), "cpu_seconds_per_1000_pages")),
    }
    for host, found in (real.get("one_host") or {}).items():
        s = found.get("summary") or {}
        out[f"one_host:{host}"] = _ratio(
            _median(s.get("embedded"), "active_pages_per_second"),
            _median(s.get("scrapy"), "active_pages_per_second"))
    return out


def real_headline(results: dict[str, Any]) -> list[str]:
    if not results.get("real"):
        return []
    r = real_ratios(results)

    def x(v: float | None) -> str:
        return "–" if v is None else f"{v:.2f}x"

    lines = [f"real web, every host at once: embedded / Scrapy pages per second "
             f"{x(r['many_pages_per_second'])} (goal >= 3x), CPU per page "
             f"{x(r['many_cpu_per_page'])} (goal <= 0.6x)"]
    ones = [f"{k.split(':', 1)[1]} {x(v)}" for k, v in r.items() if k.startswith("one_host:")]
    if ones:
        lines.append("real web, one host at a time: embedded / Scrapy pages per second "
                     "while crawling: " + ", ".join(ones) + " (goal >= 1.5x)")
    return lines


def _tool_rows(summary: dict[str, Any], active: bool = False) -> list[str]:
    rows = []
    for tool in ("embedded", "scrapy"):
        s = summary.get(tool)
        if not s:
            continue
        rows.append(
            f"| {tool} | {s['completed']}/{s['runs']} | "
            f"{_spread(s, 'pages_per_second')} | "
            + (f"{_spread(s, 'active_pages_per_second')} | " if active else "")
            + f"{_spread(s, 'cpu_seconds_per_1000_pages', 1.0, 2)} | "
            f"{_spread(s, 'max_rss_bytes', MiB, 0)} | {_spread(s, 'max_processes', 1.0, 0)} | "
            f"{_spread(s, 'pages', 1.0, 0)} | "
            f"{_spread(s, 'missing', 1.0, 0)} / {_spread(s, 'extra', 1.0, 0)} / "
            f"{_spread(s, 'refetched', 1.0, 0)} |")
    return rows


def real_web_lines(results: dict[str, Any]) -> list[str]:
    """The real-HTML web: its sites, both shapes, and the profile on its pages."""
    real = results.get("real") or {}
    if not real:
        return []
    out: list[str] = []
    w = out.append
    web = real.get("web") or {}
    w("## The real-HTML web\n")
    w(f"**{web.get('hosts')} sites** from Debian's documentation packages "
      "(`bench/realweb.py`), each a host of its own served by the same nginx, with a "
      "robots.txt that disallows a part of the site that exists. Seeds are the start "
      "pages. The expected fetches come from a static walk over the files by the "
      "crawler's own link extraction, canonical form, robots.txt parser and trap rules "
      "(links kept to the page's host; both crawlers are limited to the seeds' hosts). "
      f"In all: **{_f(web.get('expected_fetches'), 0)} expected fetches**, "
      f"{_f(web.get('pages'), 0)} HTML pages of {_f(web.get('mean_page_bytes', 0) / 1024, 0)} "
      f"KiB on average with {web.get('links_per_page')} links each, "
      f"{_f(web.get('not_found'), 0)} links to files that are not there (404), "
      f"{_f(web.get('other_files'), 0)} links to files that are not pages, "
      f"{_f(web.get('robots_blocked'), 0)} URLs disallowed by robots.txt, "
      f"{_f(web.get('duplicates'), 0)} pages byte-identical to one fetched before (fetched, "
      "their links not followed: the crawler's exact-duplicate rule). Scrapy has no such "
      "rule and follows those links (its *extra*), and skips links whose extension names "
      "an image or archive (its *missing*).\n")
    w("| host | package (version) | start | disallowed | expected | HTML pages | 404 |")
    w("|---|---|---|---|---|---|---|")
    for host, site in (web.get("sites") or {}).items():
        w(f"| {host} | {site['package']} ({site.get('version')}) | {site['start']} | "
          f"{', '.join(site['disallow'])} | {site['expected']:,} | {site['html_pages']:,} | "
          f"{site['not_found']:,} |")
    w("")
    w("Both shapes run with **no delay and one request in flight per host** "
      "(`CRAWLER_POLITENESS_DEFAULT_DELAY=0`, `CRAWLER_POLITENESS_RESPONSE_TIME_FACTOR=0`; "
      "Scrapy `DOWNLOAD_DELAY=0`, `CONCURRENT_REQUESTS_PER_DOMAIN=1`), so each tool sets "
      "its own pace; robots.txt obeyed; links kept to the seeds' hosts "
      "(`CRAWLER_SCOPE_MODE=seed-hosts`; Scrapy `allowed_domains`). Figures are medians "
      "(min–max) of the runs, the tools alternating.\n")
    many = real.get("many_hosts") or {}
    if many.get("summary"):
        w("### Every host at once (throughput)\n")
        w("All sites crawled together, full depth. With one request in flight per host the "
          "end of the run is the largest sites alone, so this mixes throughput with the "
          "per-page latency of those sites.\n")
        w("| tool | runs ok | pages/s | pages/s while crawling | CPU s per 1000 pages | "
          "peak memory MiB | processes | pages | missing / extra / twice |")
        w("|---|---|---|---|---|---|---|---|---|")
        out.extend(_tool_rows(many["summary"], active=True))
        w("")
    one = real.get("one_host") or {}
    if one:
        w("### One host at a time (per-page latency)\n")
        w("One site alone, breadth-first to the depth limit: one request in flight and no "
          "delay, so the pace is the time a page takes through each tool. *Pages/s while "
          "crawling* runs from the first request to the last response at the server "
          "(start-up and shut-down left out); *pages/s* is over the whole process.\n")
        for host, found in one.items():
            w(f"**{host}** (depth {found.get('depth')}, "
              f"{_f(found.get('expected_fetches'), 0)} expected fetches)\n")
            w("| tool | runs ok | pages/s | pages/s while crawling | CPU s per 1000 pages | "
              "peak memory MiB | processes | pages | missing / extra / twice |")
            w("|---|---|---|---|---|---|---|---|---|")
            out.extend(_tool_rows(found.get("summary") or {}, active=True))
            w("")
    prof = real.get("profile")
    if prof and not prof.get("error"):
        pages = prof.get("pages") or 1
        w("### Profile on the real pages\n")
        w(f"An embedded crawl of {prof.get('pages'):,} pages of the real web under py-spy "
          f"({prof.get('rate_hz')} Hz, every thread and process): "
          f"{_f(prof.get('cpu_seconds'))} CPU seconds sampled busy, "
          f"{_f(1000 * prof.get('cpu_seconds', 0) / pages)} CPU ms per page. Steps are "
          "inclusive (a sample counts for every step on its stack), so they overlap: link "
          "extraction includes resolving hrefs, WARC records include their compression.\n")
        many = ((real.get("many_hosts") or {}).get("summary") or {}).get("embedded")
        measured = _median(many, "cpu_seconds_per_1000_pages")
        w("py-spy counts a thread that is ready to run as busy, so on a loaded machine the "
          "sampled CPU exceeds what the kernel measured; the last column scales each share "
          "to the CPU per page of the unprofiled runs above"
          + (f" ({_f(measured, 1)} ms)" if measured else " (not measured in this run)")
          + ".\n")
        w("| step | sampled CPU ms per page | share of busy samples | ms per page at the "
          "measured CPU |\n|---|---|---|---|")
        for row in prof.get("steps") or []:
            scaled = _f(row["share"] * measured, 2) if measured else "–"
            w(f"| {row['name']} | {_f(1000 * row['cpu_seconds'] / pages, 2)} | "
              f"{100 * row['share']:.1f}% | {scaled} |")
        w("")
        w("| component (first match from the leaf) | share |\n|---|---|")
        for row in (prof.get("components") or [])[:10]:
            w(f"| {row['name']} | {100 * row['share']:.1f}% |")
        w("")
        w("| hottest functions (leaf) | share |\n|---|---|")
        for row in (prof.get("hot_functions") or [])[:10]:
            w(f"| `{row['name']}` | {100 * row['share']:.1f}% |")
        w("")
    return out
