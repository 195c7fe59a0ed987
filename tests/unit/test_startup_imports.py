"""What a crawl's main process loads before its first request, and how page work is
named so that it need not load more.

Embedded mode parses in worker processes, so its main process has no use for the
parsing libraries (selectolax, resiliparse, the language model), numpy (fingerprints,
imported with the first near-duplicate check) or the XML parser of sitemaps (imported
with the first sitemap): importing them cost start-up time before the first request.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

from common.pagework import JobRef, WorkContext

ROOT = Path(__file__).resolve().parents[2]
LATER = ("numpy", "selectolax", "resiliparse", "defusedxml", "pypdf", "parser.jobs",
         "parser.html", "parser.text", "parser.markdown", "parser.signals",
         "parser.langid", "common.minhash")


def test_the_crawl_command_imports_no_parsing_library() -> None:
    code = ("import json, sys; import crawler.cli, crawler.embedded; "
            f"print(json.dumps([m for m in {list(LATER)!r} if m in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    assert json.loads(proc.stdout) == []


def test_a_job_reference_pickles_as_its_name_and_runs_the_named_function() -> None:
    ref = JobRef("tests.unit.test_startup_imports", "_double")
    data = pickle.dumps(ref)
    assert b"_double" in data and b"tests.unit.test_startup_imports" in data
    again = pickle.loads(data)
    assert isinstance(again, JobRef) and (again.module, again.name) == (ref.module, ref.name)
    context = WorkContext.__new__(WorkContext)  # the job below does not read it
    assert again(context, 21, plus=1) == 43


def test_the_parser_stage_names_its_jobs_in_parser_jobs() -> None:
    import parser.jobs
    import parser.service

    for name in ("parse_job", "pdf_body_job", "rendered_job", "sitemap_body_job",
                 "sitemap_job"):
        ref = getattr(parser.service, name)
        assert isinstance(ref, JobRef), name
        assert callable(getattr(parser.jobs, ref.name)) and ref.module == "parser.jobs"


def _double(context: WorkContext, value: int, *, plus: int = 0) -> int:
    return 2 * value + plus


def test_registered_domains_load_no_http_library() -> None:
    """A crawl's seeds are grouped by registered domain before the first request: the
    suffix list's reader must not bring an HTTP client library with it."""
    code = ("import json, sys; from common import urls; "
            "assert urls.registered_domain('a.b.bbc.co.uk', private=True) == 'bbc.co.uk'; "
            "print(json.dumps([m for m in ('requests', 'urllib3', 'tldextract') "
            "if m in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    assert json.loads(proc.stdout) == []


def test_writers_load_the_index_library_when_warmed_up_not_at_import() -> None:
    """The SURT library every record's index line needs is not imported with the
    archive (the crawl command's start-up), and is imported by the warm-up of the
    modules whose jobs write records (a page worker's preload, a service before ready),
    so a crawl's first records do not wait for it."""
    code = ("import json, sys; import fetcher.archiving, parser.jobs; "
            "before = 'surt' in sys.modules; fetcher.archiving.warm_up(); "
            "after_fetcher = 'surt' in sys.modules; del sys.modules['surt']; "
            "parser.jobs.warm_up(); "
            "print(json.dumps([before, after_fetcher, 'surt' in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    assert json.loads(proc.stdout) == [False, True, True]
