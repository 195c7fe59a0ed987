"""Compare PDF text libraries: speed on text PDFs, and what hostile PDFs do to them.

Each (library, file) pair runs in a child process of its own with its address space
capped (``--memory``, MiB) and a wall-time limit (``--timeout``); the child reports its
CPU seconds (``time.process_time``), its peak resident memory and what it read (pages,
characters) or the exception it raised. A child killed by the time limit is reported as
``timeout``, one that died otherwise as ``died`` with its exit status.

    python -m bench.pdf_libs [--libs pypdfium2,pypdf,pdfminer] [--json FILE]

The files come from :mod:`tests.pdf_support` (generated in memory, small on disk).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

LIBS = ("pypdfium2", "pypdf", "pdfminer")


def _extract(lib: str, data: bytes) -> tuple[int, int]:
    """Pages and characters of text ``lib`` reads from ``data``."""
    if lib == "pypdfium2":
        import pypdfium2 as pdfium  # type: ignore[import-not-found, unused-ignore]

        doc = pdfium.PdfDocument(data)
        chars = 0
        for i in range(len(doc)):
            page = doc[i]
            textpage = page.get_textpage()
            chars += len(textpage.get_text_range())
            textpage.close()
            page.close()
        pages = len(doc)
        doc.close()
        return pages, chars
    if lib == "pypdf":
        from pypdf import PdfReader

        reader = PdfReader(io.BytesIO(data))
        return len(reader.pages), sum(len(p.extract_text() or "") for p in reader.pages)
    if lib == "pdfminer":
        from pdfminer.high_level import (  # type: ignore[import-not-found, unused-ignore]
            extract_pages,
            extract_text,
        )

        pages = sum(1 for _ in extract_pages(io.BytesIO(data)))
        return pages, len(extract_text(io.BytesIO(data)))
    raise ValueError(lib)


def child(lib: str, path: str, memory_mib: int) -> None:
    """Run in the child: cap the address space, read the file, print one JSON line."""
    limit = memory_mib * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with open(path, "rb") as f:
        data = f.read()
    started = time.process_time()
    report: dict[str, Any] = {}
    try:
        report["pages"], report["chars"] = _extract(lib, data)
        report["outcome"] = "ok"
    except BaseException as exc:
        report["outcome"] = "error"
        report["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    report["cpu"] = round(time.process_time() - started, 3)
    report["maxrss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(report), flush=True)


def run_one(lib: str, data: bytes, *, memory_mib: int, timeout: float) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".pdf") as f:
        f.write(data)
        f.flush()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "bench.pdf_libs", "--child", lib, f.name,
                 str(memory_mib)], capture_output=True, timeout=timeout, text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        except subprocess.TimeoutExpired:
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            return {"outcome": "timeout", "cpu": round(
                after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3)}
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            return {"outcome": "died", "status": done.returncode,
                    "stderr": done.stderr.strip()[-160:]}
        result: dict[str, Any] = json.loads(lines[-1])
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--libs", default=",".join(LIBS))
    parser.add_argument("--memory", type=int, default=1024, help="MiB per child")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    from tests.pdf_support import HOSTILE, text_pdf

    files = {"text-50x400": text_pdf(pages=50, words=400)}
    files.update({name: make() for name, make in HOSTILE.items()})
    results: dict[str, dict[str, Any]] = {}
    for name, data in files.items():
        for lib in args.libs.split(","):
            r = run_one(lib, data, memory_mib=args.memory, timeout=args.timeout)
            r["bytes"] = len(data)
            if r.get("outcome") == "ok" and r.get("cpu"):
                r["pages_per_cpu_s"] = round(r["pages"] / max(r["cpu"], 1e-3), 1)
            results[f"{name}/{lib}"] = r
            print(f"{name:12} {lib:10} {json.dumps(r)}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
