"""The extraction hook: loading it, the view it gets, and every way its answer is
dropped while the page is kept (parser.hook, common.hooks, parser.jobs.parse_job)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from common.hooks import load_hook
from common.settings import Settings, SettingsError
from examples.hooks import title_and_description
from parser.hook import MAX_ABANDONED, PageView, call_hook, check_extra

HTML = ("<html><head><title> A  page\n title </title>"
        '<meta name="Description" content="What the page is about.">'
        "</head><body><p>Body text here.</p></body></html>")


def view(html: str | None = HTML, *, url: str = "http://a.test/p", text: str = "Body text",
         pages: int | None = None, title: str | None = None) -> PageView:
    return PageView(url=url, final_url=url, status=200,
                    headers=(("Content-Type", "text/html"), ("X-A", "1"), ("x-a", "2")),
                    content_type="text/html", html=html, text=text, title=title,
                    language="en", document_pages=pages)


def test_the_example_hook_takes_the_title_and_the_description() -> None:
    assert title_and_description(view()) == {"title": "A page title",
                                             "description": "What the page is about."}
    assert title_and_description(view("<html><body>no head</body></html>")) == {}
    pdf = view(None, title="Annual report", pages=12)
    assert title_and_description(pdf) == {"title": "Annual report", "pages": 12}


def test_the_view_answers_headers_and_selectors() -> None:
    v = view()
    assert v.header("x-a") == "1, 2" and v.header("missing") is None
    assert [n.text() for n in v.select("p")] == ["Body text here."]
    assert v.document() is v.document()  # parsed once
    assert view(None).select("p") == [] and view(None).document() is None


@pytest.mark.parametrize(("value", "problem"), [
    (["a"], "not_dict"),
    (None, "not_dict"),
    ({1: "a"}, "not_json"),
    ({"a": object()}, "not_json"),
    ({"a": "x" * 100}, "too_big"),
])
def test_answers_that_are_dropped(value: object, problem: str) -> None:
    answer = check_extra(value, 64)
    assert answer.extra is None and answer.problem == problem and answer.detail


def test_answers_that_are_kept_are_copies_of_json_values() -> None:
    given: dict[str, Any] = {"a": (1, 2), "b": {"c": None, "d": 1.5}, "e": True}
    answer = check_extra(given, 1_000)
    assert answer.problem is None
    assert answer.extra == {"a": [1, 2], "b": {"c": None, "d": 1.5}, "e": True}
    given["b"]["c"] = "changed later"
    assert answer.extra["b"]["c"] is None


def _raises(page: PageView) -> dict[str, Any]:
    raise ValueError("no")


def _sleeps(page: PageView) -> dict[str, Any]:
    time.sleep(30)
    return {}


def _spins(page: PageView) -> dict[str, Any]:
    while True:
        pass


def _swallows(page: PageView) -> dict[str, Any]:
    try:
        time.sleep(30)
    except Exception:
        return {"swallowed": True}
    return {}


@pytest.mark.parametrize("hook", [_sleeps, _spins, _swallows])
def test_a_slow_hook_is_stopped_on_the_main_thread(hook: Any) -> None:
    started = time.monotonic()
    answer = call_hook(hook, view(), timeout=0.3, max_bytes=100)
    assert answer.problem == "timeout" and answer.extra is None
    assert time.monotonic() - started < 5


def test_a_raising_hook_costs_its_answer() -> None:
    answer = call_hook(_raises, view(), timeout=1, max_bytes=100)
    assert answer.problem == "raised" and "ValueError: no" in (answer.detail or "")
    ok = call_hook(title_and_description, view(), timeout=1, max_bytes=1_000)
    assert ok.problem is None and ok.extra and ok.extra["title"] == "A page title"


def test_on_a_worker_thread_a_late_call_is_abandoned_and_enough_of_them_skip_it() -> None:
    release = threading.Event()

    def blocks(page: PageView) -> dict[str, Any]:
        release.wait(30)
        return {}

    answers: list[Any] = []

    def calls() -> None:
        for _ in range(MAX_ABANDONED + 1):
            answers.append(call_hook(blocks, view(), timeout=0.1, max_bytes=100))
        answers.append(call_hook(title_and_description, view(), timeout=1, max_bytes=1_000))

    worker = threading.Thread(target=calls)
    worker.start()
    worker.join(30)
    release.set()
    problems = [a.problem for a in answers]
    assert problems == ["timeout"] * MAX_ABANDONED + ["skipped", "skipped"], problems
    # once the late calls end, the hook is called again
    later: list[Any] = []

    def call_again() -> None:
        later.append(call_hook(title_and_description, view(), timeout=1, max_bytes=1_000))

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        t = threading.Thread(target=call_again)
        t.start()
        t.join()
        if later[-1].problem is None:
            break
        time.sleep(0.05)
    assert later[-1].extra == {"title": "A page title",
                              "description": "What the page is about."}


@pytest.mark.parametrize(("spec", "says"), [
    ("no_such_module_here:hook", "cannot import"),
    ("tests.hook_support:missing", "has no"),
    ("tests.hook_support:NOT_CALLABLE", "not callable"),
    ("tests.hook_support", "expected package.module:function"),
    ("tests.hook_support:by_path; rm", "expected package.module:function"),
])
def test_a_bad_hook_setting_is_refused_naming_the_variable(spec: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        load_hook(spec)
    with pytest.raises(SettingsError, match=f"CRAWLER_PARSER_HOOK: .*{says}"):
        Settings.from_env({"CRAWLER_PARSER_HOOK": spec})


def test_a_good_hook_setting_loads_once() -> None:
    settings = Settings.from_env({"CRAWLER_PARSER_HOOK": "examples.hooks:title_and_description"})
    assert load_hook(settings.parser.hook) is title_and_description


def test_parse_job_stores_the_page_when_the_hook_fails(tmp_path: Path) -> None:
    from common.adapters.local_blobs import LocalBlobStore
    from common.archive import ArchiveWriter
    from common.messages import FetchOutcome, FetchResult, FetchTask
    from common.pagework import WorkContext
    from parser.jobs import parse_job

    settings = Settings().replace(parser={"hook": "tests.hook_support:by_path",
                                          "hook_timeout": 0.3})
    blobs = LocalBlobStore(str(tmp_path), writer_id="t", fsync=False)
    archive = ArchiveWriter(blobs, software="test")
    ctx = WorkContext(settings, blobs, archive)
    try:
        for path, problem, extra in [
                ("/ok", None, {"title": "A page title",
                               "description": "What the page is about.",
                               "words": 3, "language": None}),
                ("/raise", "raised", None), ("/slow", "timeout", None),
                ("/spin", "timeout", None), ("/notdict", "not_dict", None),
                ("/notjson", "not_json", None), ("/big", "too_big", None)]:
            url = f"http://a.test{path}"
            written = archive.write_exchange(
                url=url, method="GET", request_headers=[], status=200, reason="OK",
                response_headers=[("Content-Type", "text/html")], body=HTML.encode(),
                fetched_at=time.time(), ip=None)
            task = FetchTask(task_id="t", url=url, host="a.test")
            result = FetchResult(task=task, outcome=FetchOutcome.OK, fetched_at=time.time(),
                                 record=written.pointer)
            found, text, simhash, _, _, _ = parse_job(ctx, result, written.pointer)
            assert text is not None and simhash is not None  # the page is stored anyway
            assert found.text == "Body text here."
            assert found.hook is not None
            assert (found.hook.problem, found.hook.extra) == (problem, extra), path
    finally:
        blobs.close()
