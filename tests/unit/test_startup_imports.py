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
from typing import Any

from common.pagework import JobRef, WorkContext

ROOT = Path(__file__).resolve().parents[2]
LATER = ("numpy", "selectolax", "resiliparse", "defusedxml", "pypdf", "parser.jobs",
         "parser.html", "parser.text", "parser.markdown", "parser.signals",
         "parser.langid", "common.minhash")


def _python_json(code: str) -> Any:
    """What ``code``, run in a fresh interpreter from the repository, prints as JSON."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


def test_the_crawl_command_imports_no_parsing_library() -> None:
    code = ("import json, sys; import crawler.cli, crawler.embedded; "
            f"print(json.dumps([m for m in {list(LATER)!r} if m in sys.modules]))")
    assert _python_json(code) == []


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
    assert _python_json(code) == []


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
    assert _python_json(code) == [False, True, True]


def test_judging_near_duplicates_imports_no_numpy() -> None:
    """The dedup side compares sketches the page workers made; it runs in the crawl's
    main process (and a cluster fetcher's), which then need not load numpy (about
    15 MiB resident) for it."""
    code = ("import json, sys; from common.minhash import closest, index_keys, plausible, "
            "similarity; a = bytes(range(0, 64)); b = bytes(range(4, 68)); "
            "keys = index_keys(a); near = closest(5, a, [('u', 7, b)], k=3, threshold=0.5); "
            "far = plausible(5, [('v', (2 ** 64 - 1) ^ 5)], 3); "
            "print(json.dumps([similarity(a, b), len(keys), near, far, "
            "'numpy' in sys.modules]))")
    score, keys, near, far, numpy_loaded = _python_json(code)
    assert 0.0 < score < 1.0 and keys == 4 and near == ["u", 7] and far == []
    assert numpy_loaded is False


def test_a_page_workers_answer_reads_back_without_the_parsing_libraries(
        tmp_path: Path) -> None:
    """The crawl's main process unpickles each parse answer, and unpickling imports the
    module of every class in it: those classes live in parser.results, so the main
    process does not load the parsing libraries, numpy and the language model there."""
    import parser.jobs
    from common import urls
    from common.settings import Settings

    html = (b"<html><head><title>T</title></head><body><article><h1>Title</h1>"
            + b"<p>Some words of main text for the page, enough of them.</p>" * 20
            + b"<a href='/next'>next</a></article></body></html>")
    found = parser.jobs.analyse(html, "text/html", "http://a.test/", x_robots_tag=None,
                                product_token="crawler",
                                tracking=urls.TrackingRules.from_settings(Settings().urls),
                                markdown=True)
    simhash, sketch = parser.jobs.fingerprints(found.text)
    answer = tmp_path / "answer.pickle"
    answer.write_bytes(pickle.dumps((found, None, simhash, sketch, 0.001, None)))
    code = ("import json, pickle, sys; "
            f"found = pickle.loads(open({str(answer)!r}, 'rb').read())[0]; "
            f"print(json.dumps([found.links, [m for m in {list(LATER)!r} "
            "if m in sys.modules]]))")
    links, loaded = _python_json(code)
    assert links == ["http://a.test/next"]
    assert loaded == []
