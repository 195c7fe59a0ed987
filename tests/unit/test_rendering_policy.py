"""The render rules (which pages) and the browser's request rule (what it may fetch)."""

from __future__ import annotations

import pytest

from common.rendering import (
    RenderRules,
    RenderWhy,
    ShellSignal,
    Verdict,
    count_scripts,
    host_listed,
    looks_like_shell,
    render_decision,
    subresource_verdict,
)
from common.settings import RenderSettings, Settings, SettingsError

PAGE = "http://spa.test:8080/app"
SHELL = ShellSignal(text_chars=12, links=0, scripts=2)
ARTICLE = ShellSignal(text_chars=2400, links=30, scripts=6)


def rules(**kw: object) -> RenderRules:
    return RenderRules.from_settings(RenderSettings(**kw))  # type: ignore[arg-type]


def test_the_automatic_signal_takes_shells_only() -> None:
    r = rules()
    assert looks_like_shell(SHELL, r)
    assert not looks_like_shell(ARTICLE, r)
    assert not looks_like_shell(ShellSignal(text_chars=12, links=0, scripts=0), r)  # no script
    assert not looks_like_shell(ShellSignal(text_chars=12, links=3, scripts=1), r)  # links
    assert not looks_like_shell(ShellSignal(text_chars=201, links=0, scripts=1), r)  # text
    assert render_decision(PAGE, SHELL, r) is RenderWhy.SHELL
    assert render_decision(PAGE, SHELL, rules(auto=False)) is RenderWhy.NO


def test_operator_rules_render_whatever_the_page_looks_like() -> None:
    assert render_decision(PAGE, ARTICLE, rules(hosts=("spa.test",))) is RenderWhy.HOST
    assert render_decision("http://a.spa.test/", ARTICLE,
                           rules(hosts=(".spa.test",))) is RenderWhy.HOST
    assert render_decision("http://notspa.test/", ARTICLE,
                           rules(hosts=(".spa.test",))) is RenderWhy.NO
    by_path = rules(patterns=(r"^/app\b",), auto=False)
    assert render_decision(PAGE, ARTICLE, by_path) is RenderWhy.PATTERN
    assert render_decision("http://spa.test/application", ARTICLE, by_path) is RenderWhy.NO
    assert render_decision("http://spa.test/x?view=app", ARTICLE,
                           rules(patterns=(r"view=app",))) is RenderWhy.PATTERN


def test_host_lists() -> None:
    assert host_listed("SPA.test.", ("spa.test",))
    assert host_listed("spa.test", (".spa.test",))
    assert not host_listed("evilspa.test", (".spa.test",))


def test_script_tags_are_counted() -> None:
    assert count_scripts(b"<SCRIPT src=a></script><script>1</script><scripts>") == 2
    assert count_scripts(b"<p>no script here</p>") == 0


def test_render_patterns_are_checked_at_start() -> None:
    with pytest.raises(SettingsError, match="CRAWLER_RENDER_PATTERNS"):
        Settings().replace(render={"patterns": ("(a)\\1",)})


@pytest.mark.parametrize(("url", "kind", "nav", "verdict"), [
    (PAGE, "document", True, Verdict.PAGE),
    (PAGE + "#top", "document", True, Verdict.PAGE),
    ("http://spa.test:8080/other", "document", True, Verdict.BLOCKED_TYPE),  # navigation
    ("http://spa.test:8080/app.js", "script", False, Verdict.FETCH),
    ("http://spa.test:8080/api", "xhr", False, Verdict.FETCH),
    ("http://spa.test:8080/api", "fetch", False, Verdict.FETCH),
    ("http://spa.test:8080/a.css", "stylesheet", False, Verdict.BLOCKED_TYPE),
    ("http://spa.test:8080/a.png", "image", False, Verdict.BLOCKED_TYPE),
    ("http://spa.test:8080/a.woff", "font", False, Verdict.BLOCKED_TYPE),
    ("http://spa.test:8080/a.mp4", "media", False, Verdict.BLOCKED_TYPE),
    ("http://spa.test:8080/ws", "websocket", False, Verdict.BLOCKED_TYPE),
    ("http://cdn.test/lib.js", "script", False, Verdict.BLOCKED_THIRD_PARTY),
    ("http://spa.test:9090/lib.js", "script", False, Verdict.BLOCKED_THIRD_PARTY),  # port
    ("https://spa.test:8080/lib.js", "script", False, Verdict.BLOCKED_THIRD_PARTY),  # scheme
    ("data:text/javascript,1", "script", False, Verdict.BLOCKED_SCHEME),
])
def test_what_the_browser_may_fetch(url: str, kind: str, nav: bool, verdict: Verdict) -> None:
    assert subresource_verdict(PAGE, url, kind, is_navigation=nav, sent=0,
                               budget=20) is verdict


def test_the_request_budget_and_third_parties() -> None:
    js = "http://spa.test:8080/app.js"
    assert subresource_verdict(PAGE, js, "script", is_navigation=False, sent=20,
                               budget=20) is Verdict.BLOCKED_BUDGET
    assert subresource_verdict(PAGE, "http://cdn.test/lib.js", "script", is_navigation=False,
                               sent=0, budget=20, third_party=True) is Verdict.FETCH
