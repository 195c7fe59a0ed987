"""The benchmark web: a generated scenario written out as static files for nginx.

The pages come from the simulated web's ``generated`` scenario (so the expected crawl is
computed by :func:`simweb.expected.expected_crawl` from the same scenario), rendered once
and written to ``<root>/<host>/<path>``; ``/`` is stored as ``index.html``. Each HTML
page gets the same non-text boilerplate a real site carries (meta tags, an inline style
sheet and an inline script), which adds bytes without adding links or text, so both the
expected URL set and the duplicate structure stay those of the scenario.

A finished web has a ``web.json`` manifest (parameters, seeds, expected URLs, sizes);
a folder with a manifest for the same parameters is reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MANIFEST = "web.json"
FORMAT_VERSION = 2


@dataclass(frozen=True, slots=True)
class WebSpec:
    """What to generate; everything in the files is a function of these fields."""

    hosts: int
    pages_per_host: int
    links_per_page: int
    words: int
    seed: int
    port: int
    duplicate_ratio: float = 0.05
    boilerplate: bool = True

    def key(self) -> str:
        raw = json.dumps({**asdict(self), "v": FORMAT_VERSION}, sort_keys=True)
        return (f"{self.hosts}x{self.pages_per_host}-l{self.links_per_page}-w{self.words}"
                f"-s{self.seed}-p{self.port}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}")


@dataclass(slots=True)
class Web:
    """A generated web on disk."""

    spec: WebSpec
    root: Path
    seeds: list[str]
    expected: list[str]
    pages: int
    bytes: int
    duplicates: int
    robots_blocked: int
    generation_seconds: float

    @property
    def host_names(self) -> list[str]:
        return [f"site{i}.test" for i in range(self.spec.hosts)]

    def summary(self) -> dict[str, Any]:
        return {"spec": asdict(self.spec), "root": str(self.root), "pages": self.pages,
                "bytes": self.bytes, "mean_page_bytes": round(self.bytes / max(1, self.pages)),
                "expected_fetches": len(self.expected), "duplicates": self.duplicates,
                "robots_blocked": self.robots_blocked,
                "generation_seconds": round(self.generation_seconds, 1)}


def _scenario(spec: WebSpec) -> Any:
    from simweb.scenarios import generated

    return generated(spec.hosts, spec.pages_per_host, spec.seed,
                     links_per_page=spec.links_per_page, words=spec.words,
                     duplicate_ratio=spec.duplicate_ratio)


def boilerplate(host: str) -> tuple[str, str]:
    """(head, tail) markup a real page carries around its content: meta tags, an inline
    style sheet and an inline script; no links, no visible text. The same for every
    page of a host, so byte-identical duplicates stay identical."""
    digest = hashlib.sha256(host.encode()).hexdigest()
    colours = [digest[i:i + 6] for i in range(0, 54, 6)]
    rules = []
    for i in range(120):
        c = colours[i % len(colours)]
        rules.append(f".c{i}{{margin:{i % 7}px {i % 5}px;padding:{i % 3}px;"
                     f"color:#{c};font-size:{12 + i % 6}px;line-height:1.{i % 9}}}")
    style = "<style>\n" + "\n".join(rules) + "\n</style>\n"
    head = ('<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<meta name="generator" content="bench-{digest[:8]}">\n'
            '<meta name="description" content="">\n' + style)
    funcs = []
    for i in range(60):
        funcs.append(f"function f{i}(a,b){{var x=a*{i + 1}+b;if(x>{i * 7})"
                     f"{{return x-{i};}}return window.s{i % 9}?x:0;}}")
    script = ("<script>\n(function(){\n" + "\n".join(funcs)
              + "\nwindow.addEventListener('load',function(){f0(1,2);});\n})();\n</script>\n")
    return head, script


def _write_hosts(args: tuple[WebSpec, str, Sequence[int]]) -> tuple[int, int]:
    """Render and write the hosts at ``indexes``; (files, bytes)."""
    from simweb.site import Site

    spec, root, indexes = args
    scenario = _scenario(spec)
    site = Site(scenario, spec.port)
    files = 0
    total = 0
    for i in indexes:
        host = scenario.hosts[i]
        base = Path(root) / host.name
        head, tail = boilerplate(host.name)
        targets = [p.path for p in host.pages] + ["/robots.txt"]
        for target in targets:
            reply = site.render(host.name, target)
            if reply.status != 200:
                continue
            body = reply.body
            ctype = reply.header("Content-Type") or ""
            if spec.boilerplate and ctype.startswith("text/html"):
                text = body.decode("utf-8")
                text = text.replace("<head>\n", "<head>\n" + head, 1)
                text = text.replace("</body>", tail + "</body>", 1)
                body = text.encode("utf-8")
            rel = "index.html" if target == "/" else target.lstrip("/")
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            files += 1
            total += len(body)
    return files, total


def _expected(spec: WebSpec) -> tuple[list[str], list[str], int, int]:
    from simweb.expected import expected_crawl
    from simweb.site import Site

    scenario = _scenario(spec)
    exp = expected_crawl(scenario, port=spec.port,
                         max_urls=spec.hosts * (spec.pages_per_host + 2) + 10)
    seeds = Site(scenario, spec.port).seed_urls()
    return seeds, sorted(exp.fetched), len(exp.duplicates), len(exp.blocked_by_robots)


def ensure_web(spec: WebSpec, parent: Path, *, workers: int = 2,
               log: Any = print) -> Web:
    """The web for ``spec`` under ``parent``, generated unless it is already there."""
    root = parent / f"web-{spec.key()}"
    manifest = root / MANIFEST
    if manifest.exists():
        data = json.loads(manifest.read_text())
        return Web(spec=spec, root=root, seeds=data["seeds"], expected=data["expected"],
                   pages=data["pages"], bytes=data["bytes"], duplicates=data["duplicates"],
                   robots_blocked=data["robots_blocked"],
                   generation_seconds=data["generation_seconds"])
    if root.exists():
        shutil.rmtree(root)
    tmp = parent / f"web-{spec.key()}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    log(f"generating the web: {spec.hosts} hosts x {spec.pages_per_host} pages "
        f"(once; kept in {root})")
    started = time.monotonic()
    workers = max(1, workers)
    chunks = [list(range(i, spec.hosts, workers * 4)) for i in range(workers * 4)]
    chunks = [c for c in chunks if c]
    files = 0
    total = 0
    with ProcessPoolExecutor(max_workers=workers) as pool:
        expected_future = pool.submit(_expected, spec)
        for f, b in pool.map(_write_hosts, [(spec, str(tmp), c) for c in chunks]):
            files += f
            total += b
        seeds, expected, dups, blocked = expected_future.result()
    pages = files - spec.hosts  # robots.txt files are not pages
    elapsed = time.monotonic() - started
    data = {"spec": asdict(spec), "seeds": seeds, "expected": expected, "pages": pages,
            "bytes": total, "duplicates": dups, "robots_blocked": blocked,
            "generation_seconds": elapsed}
    (tmp / MANIFEST).write_text(json.dumps(data))
    os.replace(tmp, root)
    log(f"  {pages} pages, {total / 1e6:.0f} MB, {len(expected)} expected fetches, "
        f"{elapsed:.0f} s")
    return Web(spec=spec, root=root, seeds=seeds, expected=expected, pages=pages,
               bytes=total, duplicates=dups, robots_blocked=blocked,
               generation_seconds=elapsed)
