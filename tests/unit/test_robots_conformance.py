"""common.robots against recorded robots.txt test suites.

- google/robotstxt's allow/deny checks (RFC 9309 behaviour and Google's documented
  extensions): every one must agree.
- The same suite's helper checks (valid product tokens, parse statistics, path
  extraction, pattern escaping): every one must agree.
- seomoz/reppy's older cases (pre-RFC semantics in places): the agreeing ones must keep
  agreeing; each disagreement is listed below with the reason we differ.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from typing import Any

from common.robots import (
    RobotsPolicy,
    escape_pattern,
    is_valid_product_token,
    path_params_query,
)
from tests.conftest import conformance_path

GOOGLE_CASES = 145
REPPY_CASES = 66


@cache
def _google() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        conformance_path("robots", "robots_cases.json").read_text("utf-8"))
    return data


@cache
def _reppy() -> list[dict[str, Any]]:
    data = json.loads(conformance_path("robots", "reppy_robots_cases.json").read_text("utf-8"))
    cases: list[dict[str, Any]] = data["cases"]
    return cases


def _body(case: dict[str, Any]) -> bytes:
    if case.get("robotstxt") is None:
        return bytes.fromhex(case["robotstxt_hex"])
    text: str = case["robotstxt"]
    return text.encode("utf-8")


def _short(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)")


def test_google_allow_cases_all_agree() -> None:
    cases = _google()["allowed"]
    assert len(cases) == GOOGLE_CASES
    agree: Counter[str] = Counter()
    disagreements = []
    for case in cases:
        policy = RobotsPolicy.parse(_body(case))
        got = policy.allowed(case["url"], case["user_agent"])
        if got == case["expected_allowed"]:
            agree[case["rfc_or_google"]] += 1
        else:
            disagreements.append(
                f"{case['test']} (robots_test.cc:{case['line']}, {case['rfc_or_google']}): "
                f"agent {case['user_agent']!r} url {_short(case['url'])} expected "
                f"{case['expected_allowed']} got {got}; robots.txt {_short(case['robotstxt'])}")
    total = sum(agree.values())
    print(f"google/robotstxt allow cases: {total}/{len(cases)} agree ({dict(agree)})")
    assert total == GOOGLE_CASES, (
        f"{total}/{len(cases)} agree; disagreements:\n" + "\n".join(disagreements))


def test_google_valid_product_tokens() -> None:
    cases = _google()["valid_user_agent"]
    assert cases
    wrong = [c for c in cases if is_valid_product_token(c["user_agent"]) != c["expected_valid"]]
    assert not wrong, wrong


def test_google_parse_stats() -> None:
    cases = _google()["parse_stats"]
    assert cases
    wrong = []
    for case in cases:
        policy = RobotsPolicy.parse(_body(case))
        got = {
            "valid_directives": policy.stats.directives,
            "unknown_directives": policy.stats.unknown_directives,
            "last_line_seen": policy.stats.last_directive_line,
            "sitemap": "".join(policy.sitemaps()),
        }[case["stat"]]
        if got != case["expected"]:
            wrong.append((case["test"], case["line"], case["stat"], case["expected"], got))
    assert not wrong, wrong


def test_google_path_params_query() -> None:
    cases = _google()["path_params_query"]
    assert cases
    wrong = [(c["url"], c["expected_path"], path_params_query(c["url"])) for c in cases
             if path_params_query(c["url"]) != c["expected_path"]]
    assert not wrong, wrong


def test_google_escape_pattern() -> None:
    cases = _google()["escape_pattern"]
    assert cases
    wrong = [(c["pattern"], c["expected_escaped"], escape_pattern(c["pattern"])) for c in cases
             if escape_pattern(c["pattern"]) != c["expected_escaped"]]
    assert not wrong, wrong


# (test name, index among that test's cases) -> why our answer differs from reppy's.
REPPY_DIFFERENCES = {
    ("test_allow", 1): (
        "reppy's test answers from a mocked fetch: the recorded robots.txt is only the "
        "file's URL, recorded once expecting allowed and once disallowed, so no parser "
        "can agree with both"),
    ("test_grouping_unknown_keys", 0): (
        "RFC 9309 2.2.4: lines the protocol does not define (Noindex) must not interfere "
        "with parsing, so 'User-agent: ia_archiver' joins the 'User-agent: *' group "
        "before it and 'Disallow: /' applies to '*' too (google/robotstxt agrees: "
        "ID_LineSyntax_Groups_OtherRules); reppy lets the unknown lines end the group"),
    ("test_no_leading_user_agent", 1): (
        "rules before any User-agent line belong to no group (RFC 9309 2.2.1) and are "
        "ignored; reppy applies them to every agent"),
    ("test_rfc_example", 43): (
        "the 1996 draft decoded %7E to ~ before comparing; RFC 9309 2.2.2 compares "
        "escapes as written, so 'Allow: /~mak' does not match '/%7Emak/mak.html'. The "
        "crawler asks with its canonical URLs, which decode %7E, so in a crawl the URL "
        "is '/~mak/mak.html' and the rule applies"),
    ("test_skip_malformed_line", 0): (
        "'Disallow /no/colon/in/this/line' (two words, no colon) is read as a rule, as "
        "google/robotstxt reads it; reppy skips the line. Obeying it is the more polite "
        "reading"),
}


def test_reppy_cases() -> None:
    cases = _reppy()
    assert len(cases) == REPPY_CASES
    seen: Counter[str] = Counter()
    agree = 0
    unexpected = []
    differing = set()
    for case in cases:
        key = (case["test"], seen[case["test"]])
        seen[case["test"]] += 1
        got = RobotsPolicy.parse(_body(case)).allowed(case["path"], case["user_agent"])
        if got == case["expected_allowed"]:
            agree += 1
            if key in REPPY_DIFFERENCES:
                unexpected.append(f"{key}: now agrees; drop it from REPPY_DIFFERENCES")
        else:
            differing.add(key)
            if key not in REPPY_DIFFERENCES:
                unexpected.append(
                    f"{key}: agent {case['user_agent']!r} path {case['path']!r} expected "
                    f"{case['expected_allowed']} got {got}; robots.txt "
                    f"{_short(case['robotstxt'])}")
    print(f"reppy cases: {agree}/{len(cases)} agree; documented differences:")
    for key in sorted(differing):
        print(f"  {key}: {REPPY_DIFFERENCES.get(key, '(undocumented)')}")
    assert not unexpected, "\n".join(unexpected)
    assert agree == len(cases) - len(REPPY_DIFFERENCES)
