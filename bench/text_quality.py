"""Main-text quality and cost: the article-extraction benchmark and documentation pages.

    .venv/bin/python -m bench.text_quality                 # ours and trafilatura
    .venv/bin/python -m bench.text_quality --tools ours    # ours only
    .venv/bin/python -m bench.text_quality --docs 300      # documentation pages too
    .venv/bin/python -m bench.text_quality --tools ours,markdown   # and the Markdown

1. **Article extraction** (``tests/conformance/article-extraction``: 181 news and
   blog pages with the article body a person marked, and the benchmark's own scorer,
   ``evaluate.py``): F1, precision and recall of ``parser.text.main_text`` and of
   trafilatura (``pip install -e ".[bench]"``; skipped when missing), with the median
   CPU time per page of each extractor (``time.process_time``, the page already
   decoded; ours includes the markup guard, ``parse_document``). The extractors run
   page by page, alternating, so load on the machine falls on both alike.
   ``markdown`` is ``parser.markdown.page_markdown`` (guard, main content and its
   Markdown), scored on its Markdown stripped back to plain text
   (``parser.markdown.markdown_text``, not timed).
2. **Parser cost per page**: the median CPU time of ``parser.jobs.analyse`` (what
   the parser stage does with a fetched body: decode, guard, links, main text, the
   text signals and the Markdown) on the same pages, and the median of each of those
   steps.
3. **Documentation pages** (``--docs N``, read from ``/usr/share/doc`` when Debian's
   ``python-django-doc`` and ``postgresql-doc-15`` are installed): the share of
   paragraph text kept, over ``N`` pages drawn with a fixed seed, plus the pages that
   lose most. A ``<p>`` of 40 characters or more counts as kept when its words
   (``\\w+`` tokens, so punctuation and markup spacing do not matter) appear in that
   order in the main text.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.util
import json
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "conformance" / "article-extraction"
DOC_TREES = (Path("/usr/share/doc/python-django-doc/html"),
             Path("/usr/share/doc/postgresql-doc-15/html"))
MIN_DOC_PARAGRAPH = 40

Extractor = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class Page:
    key: str
    url: str
    body: bytes
    html: str
    truth: str


@dataclass(frozen=True, slots=True)
class Score:
    f1: float
    precision: float
    recall: float
    cpu_ms_median: float
    pages: int


def data_dir() -> Path:
    """The benchmark's folder (``CONFORMANCE_DIR`` points at another copy of the
    conformance data, as for the tests)."""
    base = os.environ.get("CONFORMANCE_DIR")
    return Path(base) / "article-extraction" if base else DATA


def scorer(folder: Path | None = None) -> ModuleType:
    """The benchmark's own ``evaluate.py``, loaded from its folder."""
    path = (folder or data_dir()) / "evaluate.py"
    spec = importlib.util.spec_from_file_location("article_extraction_evaluate", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_pages(folder: Path | None = None) -> list[Page]:
    """Every page of the benchmark, decoded as the parser decodes a fetched body."""
    from parser.charset import decode_html

    folder = folder or data_dir()
    truth = json.loads((folder / "ground-truth.json").read_text(encoding="utf-8"))
    pages = []
    for key, record in truth.items():
        body = gzip.decompress((folder / "html" / f"{key}.html.gz").read_bytes())
        pages.append(Page(key=key, url=record.get("url", ""), body=body,
                          html=decode_html(body).text, truth=record.get("articleBody", "")))
    return pages


def score(pages: list[Page], predictions: dict[str, str], cpu: list[float],
          evaluate: ModuleType | None = None) -> Score:
    """F1, precision and recall by the benchmark's scorer (no bootstrap)."""
    evaluate = evaluate or scorer()
    matches = [evaluate.string_shingle_matching(true=page.truth, pred=predictions[page.key])
               for page in pages]
    metrics = evaluate.metrics_from_tp_fp_fns(matches)
    return Score(f1=metrics["f1"], precision=metrics["precision"], recall=metrics["recall"],
                 cpu_ms_median=statistics.median(cpu) * 1000 if cpu else 0.0,
                 pages=len(pages))


def ours() -> Extractor:
    from parser.text import main_text

    return main_text


def trafilatura_extractor() -> Extractor | None:
    try:
        import trafilatura  # type: ignore[import-not-found]
    except ImportError:
        return None

    def extract(html: str) -> str:
        return trafilatura.extract(html) or ""

    return extract


def markdown_extractor() -> Extractor:
    from parser.markdown import page_markdown

    def extract(html: str) -> str:
        return page_markdown(html, "https://example.com/")

    return extract


#: What is scored of an extractor's output, when not the output itself (not timed).
SCORED: dict[str, Callable[[str], str]] = {}


def run(pages: list[Page], extractors: dict[str, Extractor]) -> dict[str, Score]:
    """Run every extractor on every page (alternating), timing each call."""
    outputs: dict[str, dict[str, str]] = {name: {} for name in extractors}
    cpu: dict[str, list[float]] = {name: [] for name in extractors}
    for page in pages:
        for name, extract in extractors.items():
            start = time.process_time()
            out = extract(page.html)
            cpu[name].append(time.process_time() - start)
            outputs[name][page.key] = SCORED[name](out) if name in SCORED else out
    evaluate = scorer()
    return {name: score(pages, outputs[name], cpu[name], evaluate) for name in extractors}


PARSER_STEPS = ("decode", "guard", "links", "main text", "signals", "markdown")


def parser_cost(pages: list[Page]) -> tuple[float, dict[str, float]]:
    """Median CPU ms of ``parser.jobs.analyse`` on the pages' raw bodies, and the
    median of each of its steps, timed apart on the same pages (:data:`PARSER_STEPS`:
    charset decoding, the markup guard ``parse_document``, ``extract`` with the
    canonical followable links, ``main_content``, ``text_signals``,
    ``render_markdown``)."""
    from common import urls
    from parser.charset import decode_html
    from parser.html import extract, followable_links, parse_document
    from parser.jobs import analyse
    from parser.markdown import render_markdown
    from parser.signals import text_signals
    from parser.text import main_content

    tracking = urls.TrackingRules.from_patterns(["utm_*"])
    whole: list[float] = []
    steps: dict[str, list[float]] = {step: [] for step in PARSER_STEPS}
    for page in pages:
        url = page.url or "https://example.com/"
        start = time.process_time()
        analyse(page.body, "text/html", url, x_robots_tag=None,
                product_token="PoliteCrawler", tracking=tracking, markdown=True)
        whole.append(time.process_time() - start)
        marks = [time.process_time()]
        decoded = decode_html(page.body, "text/html")
        marks.append(time.process_time())
        doc = parse_document(decoded.text)
        marks.append(time.process_time())
        parsed = extract(doc, url, product_token="PoliteCrawler")
        for link in followable_links(parsed):
            with contextlib.suppress(urls.UrlError):
                urls.canonicalize(link, tracking=tracking)
        marks.append(time.process_time())
        main, root = main_content(doc)
        marks.append(time.process_time())
        text_signals(main)
        marks.append(time.process_time())
        render_markdown(main, root, parsed.base_url)
        marks.append(time.process_time())
        for step, begin, end in zip(PARSER_STEPS, marks, marks[1:], strict=False):
            steps[step].append(end - begin)
    return (statistics.median(whole) * 1000,
            {step: statistics.median(cpu) * 1000 for step, cpu in steps.items()})


def doc_pages(count: int, seed: int = 1) -> list[Path]:
    """``count`` documentation pages from :data:`DOC_TREES` (fixed seed)."""
    files = sorted(f for tree in DOC_TREES if tree.is_dir() for f in tree.rglob("*.html"))
    random.Random(seed).shuffle(files)
    return files[:count]


_WORD = re.compile(r"\w+")


def paragraph_share(html: str, text: str) -> tuple[int, int]:
    """(kept, total) characters of the page's paragraphs (see the module)."""
    from selectolax.lexbor import LexborHTMLParser

    page = LexborHTMLParser(html)
    found = " ".join(_WORD.findall(text))
    total = kept = 0
    for node in page.css("body p"):
        words = " ".join(_WORD.findall(node.text(deep=True)))
        if len(words) < MIN_DOC_PARAGRAPH:
            continue
        total += len(words)
        if words in found:
            kept += len(words)
    return kept, total


def docs_share(files: list[Path], extract: Extractor) -> tuple[float, list[tuple[float, str]]]:
    """Share of paragraph text kept over ``files``, and each page's share (worst
    first)."""
    kept_all = total_all = 0
    per_page = []
    for path in files:
        html = path.read_text(encoding="utf-8", errors="replace")
        kept, total = paragraph_share(html, extract(html))
        kept_all += kept
        total_all += total
        if total:
            per_page.append((kept / total, str(path)))
    per_page.sort()
    return (kept_all / total_all if total_all else 1.0), per_page


def _rows(scores: dict[str, Score]) -> Iterator[str]:
    yield f"{'extractor':<12} {'F1':>6} {'prec.':>6} {'recall':>6} {'CPU ms/page (median)':>21}"
    for name, s in scores.items():
        yield (f"{name:<12} {s.f1:6.3f} {s.precision:6.3f} {s.recall:6.3f} "
               f"{s.cpu_ms_median:21.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--tools", default="ours,markdown,trafilatura",
                        help="comma-separated: ours, markdown, trafilatura")
    parser.add_argument("--docs", type=int, default=0,
                        help="also measure this many documentation pages")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)

    pages = load_pages()
    extractors: dict[str, Extractor] = {}
    for tool in args.tools.split(","):
        if tool == "ours":
            extractors["ours"] = ours()
        elif tool == "markdown":
            from parser.markdown import markdown_text

            extractors["markdown"] = markdown_extractor()
            SCORED["markdown"] = markdown_text
        elif tool == "trafilatura":
            found = trafilatura_extractor()
            if found is None:
                print("trafilatura is not installed (pip install -e '.[bench]'): skipped")
            else:
                extractors["trafilatura"] = found
        else:
            parser.error(f"unknown tool {tool}")
    scores = run(pages, extractors)
    print(f"article-extraction benchmark, {len(pages)} pages")
    for row in _rows(scores):
        print(row)
    figures: dict[str, object] = {name: vars_of(s) for name, s in scores.items()}
    if "ours" in scores and "trafilatura" in scores:
        ratio = scores["ours"].cpu_ms_median / scores["trafilatura"].cpu_ms_median
        print(f"ours / trafilatura CPU: {ratio:.2f}")
    cost, steps = parser_cost(pages)
    print(f"parser stage (decode, guard, links, main text, signals, markdown): "
          f"{cost:.2f} CPU ms per page (median)")
    print("  by step (medians, timed apart): "
          + ", ".join(f"{step} {ms:.2f}" for step, ms in steps.items()))
    figures["parser_cost_ms_median"] = cost
    figures["parser_steps_ms_median"] = steps
    if args.docs:
        files = doc_pages(args.docs)
        if not files:
            print("no documentation pages under /usr/share/doc "
                  "(apt-get install python-django-doc postgresql-doc-15)")
        else:
            share, per_page = docs_share(files, ours())
            print(f"documentation pages: {len(files)}, paragraph text kept {share:.4f}")
            for page_share, path in per_page[:8]:
                print(f"  {page_share:.2f}  {path}")
            figures["docs"] = {"pages": len(files), "paragraph_share_kept": share,
                               "worst": per_page[:8]}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


def vars_of(s: Score) -> dict[str, float]:
    return {"f1": s.f1, "precision": s.precision, "recall": s.recall,
            "cpu_ms_median": s.cpu_ms_median, "pages": s.pages}


if __name__ == "__main__":
    sys.exit(main())
