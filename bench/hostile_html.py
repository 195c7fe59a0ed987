"""Time the HTML parsers on adversarial page shapes, at two sizes, to see which grow
faster than the page.

    .venv/bin/python -m bench.hostile_html                 # every shape, n and 2n
    .venv/bin/python -m bench.hostile_html --shape attrs_one --n 40000 --stages raw
    .venv/bin/python -m bench.hostile_html --limit 20      # seconds per measurement

Stages, each timed in a fresh process (killed after ``--limit`` seconds):

- ``lexbor``: ``LexborHTMLParser(markup)`` on the raw page (no guard);
- ``resiliparse``: ``HTMLTree.parse(markup)`` on the raw page;
- ``maintext``: resiliparse's ``extract_plain_text(main_content=True)`` on a tree
  parsed beforehand (the parse is not counted);
- ``pipeline``: what the crawl runs: ``parse_document`` (the markup guard), ``extract``
  and ``main_text``.

Times are CPU seconds of the measuring process (less disturbed by other load than
wall time), the best of ``--repeat`` runs. A shape whose time doubles (x2) when its
size doubles is linear; x4 is quadratic. The findings are written down in the
:mod:`parser.html` docstring.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable

SHAPES: dict[str, tuple[Callable[[int], str], int]] = {}


def shape(default_n: int) -> Callable[[Callable[[int], str]], Callable[[int], str]]:
    def register(fn: Callable[[int], str]) -> Callable[[int], str]:
        SHAPES[fn.__name__] = (fn, default_n)
        return fn
    return register


@shape(20_000)
def attrs_one(n: int) -> str:
    """One <div> with n distinct attributes."""
    return "<body><div " + " ".join(f"a{i}=x" for i in range(n)) + ">t</div>"


@shape(20_000)
def attrs_dup(n: int) -> str:
    """One <div> with the same attribute n times."""
    return "<body><div " + "a=x " * n + ">t</div>"


@shape(20_000)
def attrs_svg(n: int) -> str:
    """An <svg> element (foreign content: names adjusted) with n attributes."""
    return "<body><svg " + " ".join(f"a{i}=x" for i in range(n)) + "></svg>"


@shape(2_000)
def attrs_spread(n: int) -> str:
    """n elements with 50 distinct attributes each."""
    one = "<div " + " ".join(f"a{i}=x" for i in range(50)) + ">t</div>"
    return "<body>" + one * n


@shape(10_000)
def body_merge(n: int) -> str:
    """n <body> tags with a new attribute each (merged into the one body element)."""
    return "<body>" + "".join(f"<body b{i}=x>" for i in range(n)) + "t"


@shape(10_000)
def html_merge(n: int) -> str:
    """n <html> tags with a new attribute each (merged into the root)."""
    return "".join(f"<html h{i}=x>" for i in range(n)) + "<body>t"


@shape(20_000)
def end_tag_attrs(n: int) -> str:
    """An end tag with n distinct attributes (the tree builder drops them)."""
    return "<body><div>t</div " + " ".join(f"a{i}=x" for i in range(n)) + ">"


@shape(20_000)
def attr_names(n: int) -> str:
    """n elements with one attribute each, every name different."""
    return "<body>" + "".join(f"<span a{i}=x></span>" for i in range(n))


@shape(20_000)
def tag_names(n: int) -> str:
    """n elements, every tag name different."""
    return "<body>" + "".join(f"<x{i}></x{i}>" for i in range(n))


@shape(10_000)
def select_options(n: int) -> str:
    """n <option> in one <select>."""
    return "<body><select>" + "<option>o" * n + "</select>"


@shape(10_000)
def option_pairs(n: int) -> str:
    """n pairs of unclosed <option> in one <select>."""
    return "<body><select>" + "<option><option>" * n


@shape(5_000)
def attrs_quoted_gt(n: int) -> str:
    """One <div> with n attributes whose values hold '>'."""
    return "<body><div " + " ".join(f'a{i}=">"' for i in range(n)) + ">t</div>"


@shape(4_000_000)
def long_value(n: int) -> str:
    """One attribute value of n characters."""
    return '<body><div title="' + "y" * n + '">t</div>'


@shape(1_000_000)
def long_name(n: int) -> str:
    """One attribute name of n characters."""
    return "<body><div " + "y" * n + "=1>t</div>"


@shape(20_000)
def deep(n: int) -> str:
    """n nested <div> (the guard flattens it)."""
    return "<body>" + "<div>" * n + "t" + "</div>" * n


@shape(1_000)
def formatting(n: int) -> str:
    """n unclosed <font> with distinct attributes, then n paragraphs (the guard flattens)."""
    return "<body>" + "".join(f'<font color="#{i:06x}"><p>x{i}' for i in range(n))


@shape(20_000)
def anchors_unclosed(n: int) -> str:
    """n unclosed <a> (each new one runs the adoption agency on the last)."""
    return "<body>" + "".join(f"<a href=/p{i}>x" for i in range(n))


@shape(20_000)
def stray_p_end(n: int) -> str:
    """n stray </p> (each makes an empty p)."""
    return "<body>" + "</p>" * n


@shape(20_000)
def tables_nested(n: int) -> str:
    """n nested <table><tr><td>."""
    return "<body>" + "<table><tr><td>" * n + "t"


@shape(20_000)
def table_foster(n: int) -> str:
    """n <div> foster-parented out of a table."""
    return "<body><table>" + "<div>x" * n + "</table>"


@shape(20_000)
def li_nested(n: int) -> str:
    """n <li> inside nested lists (each <li> closes the open ones)."""
    return "<body>" + "<ul><li>x" * n


@shape(1_000_000)
def entities(n: int) -> str:
    """n named character references."""
    return "<body><p>" + "&amp;" * n


@shape(1_000_000)
def entities_unterminated(n: int) -> str:
    """n named references without the semicolon (the longest-match search)."""
    return "<body><p>" + "&notinx" * n


@shape(1_000_000)
def entities_numeric(n: int) -> str:
    return "<body><p>" + "&#x1F600;" * n


@shape(4_000_000)
def long_comment(n: int) -> str:
    return "<body><!--" + "x" * n + "-->t"


@shape(200_000)
def many_comments(n: int) -> str:
    return "<body>" + "<!--x-->" * n


@shape(4_000_000)
def huge_text(n: int) -> str:
    """One text node of n characters (words)."""
    return "<body><p>" + "word " * (n // 5)


@shape(100_000)
def many_scripts(n: int) -> str:
    return "<body>" + "<script>var x=1;</script><style>p{}</style>" * n


@shape(100_000)
def many_paragraphs(n: int) -> str:
    return "<body>" + "<p>some words here</p>" * n


@shape(100_000)
def many_links(n: int) -> str:
    return "<body>" + "".join(f'<a href="/p{i}">{i}</a> ' for i in range(n))


@shape(1_000_000)
def lt_soup(n: int) -> str:
    """n bare '<' in text."""
    return "<body>" + "< " * n


@shape(200_000)
def unclosed_tag(n: int) -> str:
    """A tag never closed: n attribute-like tokens after '<div'."""
    return "<body><div " + "x " * n


@shape(20_000)
def main_text_wide(n: int) -> str:
    """n sibling <div> blocks of text (main-content heuristics)."""
    return "<body>" + "<div><p>words words words</p></div>" * n


STAGES = ("lexbor", "resiliparse", "maintext", "pipeline")


def _measure(name: str, n: int, stage: str) -> float:
    """In this process: build the page, time one stage, return seconds."""
    markup = SHAPES[name][0](n)
    if stage == "lexbor":
        from selectolax.lexbor import LexborHTMLParser
        started = time.process_time()
        LexborHTMLParser(markup)
        return time.process_time() - started
    if stage == "resiliparse":
        from resiliparse.parse.html import HTMLTree
        started = time.process_time()
        HTMLTree.parse(markup)
        return time.process_time() - started
    if stage == "maintext":
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree
        tree = HTMLTree.parse(markup)
        started = time.process_time()
        extract_plain_text(tree, preserve_formatting=True, main_content=True,
                           alt_texts=False, noscript=False, form_fields=False, links=False)
        return time.process_time() - started
    from parser.html import extract, parse_document
    from parser.text import main_text
    started = time.process_time()
    doc = parse_document(markup)
    extract(doc, "http://example.com/")
    main_text(doc)
    return time.process_time() - started


def measure(name: str, n: int, stage: str, limit: float, repeat: int = 1) -> float | None:
    """CPU seconds for one stage in a fresh process, the best of ``repeat`` runs; None
    when it ran past ``limit`` (wall seconds)."""
    best: float | None = None
    for _ in range(repeat):
        try:
            out = subprocess.run(
                [sys.executable, "-m", "bench.hostile_html", "--child", name, str(n), stage],
                capture_output=True, text=True, timeout=limit, check=True)
        except subprocess.TimeoutExpired:
            return None
        seconds = float(json.loads(out.stdout)["seconds"])
        best = seconds if best is None else min(best, seconds)
    return best


def _fmt(seconds: float | None, limit: float) -> str:
    return f">{limit:.0f} s" if seconds is None else f"{seconds * 1000:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--n", type=int, help="size (default: the shape's own)")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--limit", type=float, default=30.0, help="seconds per measurement")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement (best)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        name, n, stage = args.child
        print(json.dumps({"seconds": _measure(name, int(n), stage)}))
        return 0
    stages = [s for s in args.stages.split(",") if s]
    rows = []
    print(f"{'shape':<22} {'n':>9} {'bytes':>10} " + " ".join(
        f"{s + ' n':>13} {s + ' 2n':>13} {'x':>5}" for s in stages))
    for name in args.shape or sorted(SHAPES):
        n = args.n or SHAPES[name][1]
        size = len(SHAPES[name][0](n))
        cells = []
        row: dict[str, object] = {"shape": name, "n": n, "bytes": size}
        for stage in stages:
            one = measure(name, n, stage, args.limit, args.repeat)
            two = (measure(name, 2 * n, stage, args.limit, args.repeat)
                   if one is not None else None)
            ratio = f"{two / one:5.1f}" if one and two else "    -"
            cells.append(f"{_fmt(one, args.limit):>13} {_fmt(two, args.limit):>13} {ratio}")
            row[stage] = [one, two]
        rows.append(row)
        print(f"{name:<22} {n:>9} {size:>10} " + " ".join(cells), flush=True)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
