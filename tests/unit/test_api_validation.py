"""Pure parts of the control API: the bearer check, body and host validation, the
host update, seed batching and the OpenAPI document's coverage of the routes."""

from __future__ import annotations

import json

import msgspec
import pytest

from common import urls
from common.messages import LinkKind
from common.ports import CrawlControl, HostState
from common.settings import ApiSettings, Settings, SettingsError
from crawler.api import (
    ApiError,
    ControlApi,
    HostUpdate,
    authorized,
    check_pattern,
    check_service_settings,
    host_control,
    parse_host,
    parse_host_update,
    parse_seed_request,
    require_token,
    with_pattern,
    without_pattern,
)
from crawler.openapi import MAX_PATTERNS, MAX_SEED_URLS, OPENAPI
from frontier.policy import apply_host_control
from frontier.seeds import seed_batch

TOKEN = "s3cret-token"


@pytest.mark.parametrize(("header", "ok"), [
    (f"Bearer {TOKEN}", True),
    (f"bearer {TOKEN}", True),
    (f"  Bearer   {TOKEN}  ", True),
    (None, False),
    ("", False),
    ("Bearer", False),
    ("Bearer ", False),
    (f"Basic {TOKEN}", False),
    (TOKEN, False),
    (f"Bearer {TOKEN}x", False),
    (f"Bearer {TOKEN[:-1]}", False),
    ("Bearer s3cret-tökén", False),
    ("Bearer \udcff", False),
])
def test_authorized(header: str | None, ok: bool) -> None:
    assert authorized(header, TOKEN) is ok


def test_an_empty_token_never_authorizes() -> None:
    assert not authorized("Bearer ", "")
    assert not authorized("Bearer x", "")


def test_require_token_names_the_variable() -> None:
    assert require_token(ApiSettings(token="t")) == "t"
    with pytest.raises(SettingsError, match="CRAWLER_API_TOKEN"):
        require_token(ApiSettings())


def test_control_api_refuses_to_be_built_without_a_token() -> None:
    with pytest.raises(SettingsError, match="CRAWLER_API_TOKEN"):
        ControlApi(Settings(), bus=None, store=None)  # type: ignore[arg-type]


def _status(body: bytes, parse: object) -> int:
    with pytest.raises(ApiError) as info:
        parse(body)  # type: ignore[operator]
    assert info.value.message
    return info.value.status


@pytest.mark.parametrize(("body", "status"), [
    (b"", 400),
    (b"{", 400),
    (b"nope", 400),
    (b"[]", 422),
    (b'{"urls": "http://a.test/"}', 422),
    (b'{"urls": []}', 422),
    (b'{"urls": [1]}', 422),
    (b'{"urls": ["http://a.test/"], "priority": "1"}', 422),
    (b'{"urls": ["http://a.test/"], "priority": -1}', 422),
    (b'{"urls": ["http://a.test/"], "priority": 4}', 422),  # 4 levels by default
    (b'{"urls": ["http://a.test/"], "other": true}', 422),
    (json.dumps({"urls": ["http://a.test/"] * (MAX_SEED_URLS + 1)}).encode(), 422),
    (json.dumps({"urls": ["http://a.test/" + "x" * 9000]}).encode(), 422),
])
def test_bad_seed_requests(body: bytes, status: int) -> None:
    assert _status(body, lambda b: parse_seed_request(b, Settings())) == status


def test_good_seed_requests() -> None:
    req = parse_seed_request(b'{"urls": ["http://a.test/"], "priority": 2}', Settings())
    assert req.urls == ["http://a.test/"] and req.priority == 2
    big = json.dumps({"urls": ["http://a.test/"] * MAX_SEED_URLS}).encode()
    assert len(parse_seed_request(big, Settings()).urls) == MAX_SEED_URLS
    assert parse_seed_request(b'{"urls": ["x"], "priority": null}', Settings()).priority is None


@pytest.mark.parametrize(("body", "status"), [
    (b"{}", 422),
    (b'{"blocked": 1}', 422),
    (b'{"blocked": null}', 422),
    (b'{"crawlDelaySeconds": "2"}', 422),
    (b'{"crawlDelaySeconds": -0.5}', 422),
    (b'{"crawlDelaySeconds": 1e999}', 422),
    (b'{"maxPages": -1}', 422),
    (b'{"maxPages": 2.5}', 422),
    (b'{"max_pages": 3}', 422),
    (b'{"blocked": tru', 400),
])
def test_bad_host_updates(body: bytes, status: int) -> None:
    assert _status(body, parse_host_update) == status


def _apply(state: HostState, body: bytes) -> HostState:
    return apply_host_control(state, host_control(state.host, parse_host_update(body), 1.0))


def test_host_update_applies_only_given_fields() -> None:
    state = HostState(host="a.test", crawl_delay=5.0, delay_override=1.0, blocked=True,
                      max_pages=10, capped=True, page_count=10)
    same = _apply(state, b'{"blocked": true}')
    assert same == state
    cleared = _apply(state, b'{"crawlDelaySeconds": null}')
    assert cleared.delay_override is None and cleared.blocked and cleared.max_pages == 10
    assert state.delay_override == 1.0  # the input row is not changed
    raised = _apply(state, b'{"maxPages": 20, "blocked": false}')
    assert raised.max_pages == 20 and not raised.capped and not raised.blocked
    assert raised.crawl_delay == 5.0 and raised.delay_override == 1.0
    delay = parse_host_update(b'{"crawlDelaySeconds": 2}')
    assert isinstance(delay.crawl_delay_seconds, float)
    assert delay.blocked is msgspec.UNSET and isinstance(delay, HostUpdate)
    message = host_control("a.test", delay, 7.0)
    assert (message.delay, message.clear_delay, message.blocked, message.max_pages,
            message.issued_at) == (2.0, False, None, None, 7.0)
    assert host_control("a.test", parse_host_update(b'{"crawlDelaySeconds": null}'),
                        0).clear_delay


@pytest.mark.parametrize("pattern", ["", "(", "[a-", "x" * 1001, "a{2,1}"])
def test_bad_path_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ApiError) as err:
        check_pattern(pattern)
    assert err.value.status == 422 and "pattern" in err.value.message


def test_path_patterns_are_added_once_and_removed() -> None:
    empty = CrawlControl(paused=True)
    one = with_pattern(empty, r"^/private/", 5.0)
    assert one.blocked_paths == [r"^/private/"] and one.paused and one.updated_at == 5.0
    assert empty.blocked_paths == []
    assert with_pattern(one, r"^/private/", 6.0) is one
    two = with_pattern(one, r"\?sort=", 6.0)
    assert two.blocked_paths == [r"^/private/", r"\?sort="]
    assert without_pattern(two, r"^/private/", 7.0).blocked_paths == [r"\?sort="]
    with pytest.raises(ApiError) as err:
        without_pattern(two, "/nope", 7.0)
    assert err.value.status == 404
    full = CrawlControl(blocked_paths=[f"/p{i}" for i in range(MAX_PATTERNS)])
    with pytest.raises(ApiError) as err:
        with_pattern(full, "/one-more", 8.0)
    assert err.value.status == 409


@pytest.mark.parametrize(("raw", "key"), [
    ("news.test", "news.test"),
    ("NEWS.Test", "news.test"),
    ("news.test:80", "news.test"),
    ("news.test:8080", "news.test:8080"),
    ("bücher.de", "xn--bcher-kva.de"),
])
def test_parse_host(raw: str, key: str) -> None:
    assert parse_host(raw) == key


@pytest.mark.parametrize("raw", ["", "a b", "a/b", "user@host", "a.test?x", "x" * 400,
                                 "a.test:99999", "[::1", "\x00"])
def test_parse_host_rejects(raw: str) -> None:
    assert _status(raw.encode(), lambda b: parse_host(b.decode())) == 400


def test_seed_batch_groups_by_host_and_keeps_invalid_inputs() -> None:
    tracking = urls.TrackingRules.from_settings(Settings().urls)
    batch = seed_batch(["http://A.test/x?utm_source=1", "https://a.test/y", "http://b.test/",
                        "ftp://c.test/", "not a url"], 1, tracking)
    assert sorted(batch.by_host) == ["a.test", "b.test"]
    assert [link.url for link in batch.by_host["a.test"].links] == [
        "http://a.test/x", "https://a.test/y"]
    assert all(link.kind is LinkKind.SEED and link.priority == 1 and link.depth == 0
               for d in batch.by_host.values() for link in d.links)
    assert batch.invalid == ["ftp://c.test/", "not a url"]
    assert batch.count == 3


def test_openapi_document_lists_exactly_the_routes() -> None:
    from aiohttp import web

    api = ControlApi(Settings().replace(api={"token": "t"}), bus=None,  # type: ignore[arg-type]
                     store=None)  # type: ignore[arg-type]
    served = {(r.method, r.resource.canonical) for r in api.app().router.routes()
              if r.method != "HEAD" and isinstance(r.resource, web.Resource)}
    documented = {(m.upper(), p) for p, item in OPENAPI["paths"].items()
                  for m in item if m != "parameters"}
    assert served == documented
    for path, item in OPENAPI["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            public = path in ("/v1/health", "/v1/openapi.json")
            assert (op.get("security") == []) is public, path
            assert ("401" in op["responses"]) is not public, path


def test_the_api_service_needs_a_port_and_a_token() -> None:
    with pytest.raises(SettingsError, match="CRAWLER_API_PORT"):
        check_service_settings(Settings().replace(api={"token": "t"}))
    with pytest.raises(SettingsError, match="CRAWLER_API_TOKEN"):
        check_service_settings(Settings().replace(api={"port": 8080}))
    check_service_settings(Settings().replace(api={"port": 8080, "token": "t"}))


def test_render_rules_are_checked_and_normalised() -> None:
    from crawler.api import ApiError, with_render_rules

    control = with_render_rules(CrawlControl(), b'{"hosts": ["Spa.Test.", ".cdn.test", '
                                b'"spa.test"], "patterns": ["^/app", "^/app"]}', 5.0)
    assert control.render_hosts == ["spa.test", ".cdn.test"]
    assert control.render_patterns == ["^/app"]
    assert control.updated_at == 5.0
    for body, status in ((b'{"hosts": ["a b"], "patterns": []}', 422),
                         (b'{"hosts": ["http://x/"], "patterns": []}', 422),
                         (b'{"hosts": [], "patterns": ["(a)\\\\1"]}', 422),
                         (b'{"hosts": []}', 422),
                         (b'{"hosts": [], "patterns": [], "x": 1}', 422),
                         (b'not json', 400)):
        with pytest.raises(ApiError) as info:
            with_render_rules(CrawlControl(), body, 0.0)
        assert info.value.status == status, body
