"""CPU per page of the parser's page analysis, and a digest of everything it returns.

    .venv/bin/python -m bench.page_analysis                  # timings, 5 rounds
    .venv/bin/python -m bench.page_analysis --profile        # and a cProfile top list
    .venv/bin/python -m bench.page_analysis --digest out.txt # one line per page

Two fixed corpora:

- ``articles``: the 181 real news and blog pages of
  ``tests/conformance/article-extraction`` (``html/<key>.html.gz``), each at the URL
  its ground truth gives;
- ``generated``: pages of the simulated web's ``generated`` scenario
  (:func:`simweb.scenarios.generated`, the shape the crawl benchmarks use: 40 links and
  500 words per page), each with the inline style sheet and script of
  :func:`bench.web.boilerplate` (about 20 KiB a page), rendered in memory.

Each page goes through what the parse job does to an HTML page: ``parser.jobs.analyse``
(with the Markdown) and ``parser.jobs.fingerprints`` of its text. Every round runs all
pages of a corpus; per page, the median over rounds of its CPU time
(``time.process_time``) is taken, and the figure reported is the mean of those medians
over the corpus's pages (ms per page), with the spread over rounds.

``--digest FILE`` writes, per page, a SHA-256 of the whole result (every field of the
analysis, the signals, the Markdown, the SimHash and the sketch), to compare outputs of
two versions of the code line by line.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gzip
import hashlib
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARTICLES = ROOT / "tests" / "conformance" / "article-extraction"

Page = tuple[str, str, bytes]  # (name, url, body)


def article_pages() -> list[Page]:
    """The article-extraction benchmark's pages, in key order."""
    truth = json.loads((ARTICLES / "ground-truth.json").read_text(encoding="utf-8"))
    pages = []
    for path in sorted((ARTICLES / "html").glob("*.html.gz")):
        key = path.name.removesuffix(".html.gz")
        url = (truth.get(key) or {}).get("url") or "https://example.com/"
        pages.append((f"articles/{key}", url, gzip.decompress(path.read_bytes())))
    return pages


def generated_pages(hosts: int, pages_per_host: int, *, seed: int = 7, links: int = 40,
                    words: int = 500) -> list[Page]:
    """The HTML pages of a generated web, with the benchmark's boilerplate."""
    from bench.web import boilerplate
    from simweb.scenarios import generated
    from simweb.site import Site

    scenario = generated(hosts, pages_per_host, seed, links_per_page=links, words=words)
    site = Site(scenario, 8080)
    pages = []
    for host in scenario.hosts:
        head, tail = boilerplate(host.name)
        for page in host.pages:
            reply = site.render(host.name, page.path)
            if reply.status != 200 or not (reply.header("Content-Type") or "").startswith(
                    "text/html"):
                continue
            text = reply.body.decode("utf-8")
            text = text.replace("<head>\n", "<head>\n" + head, 1)
            text = text.replace("</body>", tail + "</body>", 1)
            url = f"http://{host.name}:8080{page.path}"
            pages.append((f"generated/{host.name}{page.path}", url, text.encode("utf-8")))
    return pages


def analyser() -> Callable[[Page], tuple[Any, int | None, bytes | None]]:
    from common import urls
    from parser.jobs import analyse, fingerprints

    tracking = urls.TrackingRules.from_patterns(["utm_*"])

    def run(page: Page) -> tuple[Any, int | None, bytes | None]:
        _name, url, body = page
        found = analyse(body, "text/html; charset=utf-8", url, x_robots_tag=None,
                        product_token="PoliteCrawler", tracking=tracking, markdown=True)
        simhash, sketch = fingerprints(found.text)
        return found, simhash, sketch

    return run


def digest(result: tuple[Any, int | None, bytes | None]) -> str:
    """A stable hash of everything one page's analysis returned."""
    found, simhash, sketch = result
    fields = dataclasses.asdict(found)
    fields["simhash"] = simhash
    fields["sketch"] = sketch.hex() if sketch is not None else None
    fields["signals"]["language_confidence"] = repr(found.signals.language_confidence)
    fields["signals"]["boilerplate_ratio"] = repr(found.signals.boilerplate_ratio)
    raw = json.dumps(fields, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rounds", type=int, default=5, help="runs over every corpus")
    p.add_argument("--hosts", type=int, default=30, help="hosts of the generated web")
    p.add_argument("--pages", type=int, default=10, help="pages per generated host")
    p.add_argument("--corpus", choices=("all", "articles", "generated"), default="all")
    p.add_argument("--digest", metavar="FILE", help="write a digest of every output")
    p.add_argument("--profile", action="store_true", help="print a cProfile top list")
    p.add_argument("--top", type=int, default=30, help="functions in the top list")
    args = p.parse_args(argv)

    from parser.jobs import warm_up

    warm_up()
    corpora: dict[str, list[Page]] = {}
    if args.corpus in ("all", "articles"):
        corpora["articles"] = article_pages()
    if args.corpus in ("all", "generated"):
        corpora["generated"] = generated_pages(args.hosts, args.pages)
    run = analyser()

    if args.digest:
        with open(args.digest, "w", encoding="utf-8") as out:
            for pages in corpora.values():
                for page in pages:
                    out.write(f"{page[0]} {digest(run(page))}\n")
        print(f"digests of {sum(map(len, corpora.values()))} pages in {args.digest}",
              file=sys.stderr)

    for name, pages in corpora.items():
        for page in pages[:20]:  # warm caches before timing
            run(page)
        per_page: list[list[float]] = [[] for _ in pages]
        rounds: list[float] = []
        for _ in range(args.rounds):
            started = time.process_time()
            for i, page in enumerate(pages):
                t0 = time.process_time()
                run(page)
                per_page[i].append(time.process_time() - t0)
            rounds.append((time.process_time() - started) / len(pages))
        medians = [statistics.median(times) for times in per_page]
        size = sum(len(body) for _, _, body in pages) / len(pages)
        print(f"{name}: {len(pages)} pages, {size / 1024:.1f} KiB mean; "
              f"{1000 * statistics.fmean(medians):.3f} ms/page (mean of per-page medians), "
              f"rounds {1000 * statistics.median(rounds):.3f} median "
              f"[{1000 * min(rounds):.3f}-{1000 * max(rounds):.3f}] ms/page")

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for pages in corpora.values():
            for page in pages:
                run(page)
        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
