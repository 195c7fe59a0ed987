"""common.urls remembers recent answers; a remembered answer is always the computed one."""

from __future__ import annotations

import json
from typing import Any

from common import urls
from common.urls import _CANONICAL_MEMO, _PARTS_MEMO, _Memo, _parse_http, _split_href
from tests.conftest import conformance_path


def whatwg_inputs() -> list[str]:
    with conformance_path("url", "urltestdata.json").open(encoding="utf-8") as f:
        cases: list[Any] = json.load(f)
    found: list[str] = []
    for case in cases:
        if isinstance(case, dict) and case.get("href", "").startswith(("http:", "https:")):
            found.append(case["href"])
            found.append(case["input"])
    return found


def fresh(fn: Any, *args: Any, **kwargs: Any) -> Any:
    _CANONICAL_MEMO.clear()
    _PARTS_MEMO.clear()
    try:
        return fn(*args, **kwargs)
    except urls.UrlError as exc:
        return exc.__class__


def remembered(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except urls.UrlError as exc:
        return exc.__class__


def test_remembered_answers_are_the_computed_ones() -> None:
    inputs = whatwg_inputs()
    assert len(inputs) > 100
    rules = urls.TrackingRules.from_patterns(["utm_*", "ref"])
    for raw in inputs:
        for fn, kwargs in ((urls.canonicalize, {}), (urls.canonicalize, {"tracking": rules}),
                           (urls.host_key, {}), (urls.origin, {}),
                           (urls.path_and_query, {})):
            expected = fresh(fn, raw, **kwargs)
            remembered(urls.canonicalize, raw)  # fills the memos the way a crawl does
            assert remembered(fn, raw, **kwargs) == expected, (fn.__name__, raw)
            assert remembered(fn, raw, **kwargs) == expected, (fn.__name__, raw)


def test_a_canonical_form_splits_as_it_parses() -> None:
    # canonicalize() remembers the parts of the canonical form by splitting it (it is
    # its own WHATWG serialisation); parsing it must give the same parts
    for raw in whatwg_inputs():
        canonical = fresh(urls.canonicalize, raw)
        if not isinstance(canonical, str):
            continue
        assert _split_href(canonical, canonical) == _parse_http(canonical), raw
        assert fresh(urls.canonicalize, canonical) == canonical
        urls.canonicalize(raw)
        assert urls.canonicalize(canonical) == canonical  # now from the memo
        assert urls.host_key(canonical) == fresh(urls.host_key, raw)


def test_memo_keeps_recent_entries_and_stays_bounded() -> None:
    memo: _Memo[int, int] = _Memo(4)
    for i in range(100):
        memo.put(i, i * i)
        memo.get(0)  # used all along: never dropped
        assert len(memo._young) + len(memo._old) <= 8
    assert memo.get(0) == 0
    assert memo.get(99) == 99 * 99
    assert memo.get(50) is None  # long unused
