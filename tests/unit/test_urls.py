"""URL rules: resolution, the canonical form, host keys, registered domains, helpers."""

from __future__ import annotations

import socket
import urllib.parse
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from common import urls
from common.settings import SettingsError, UrlSettings
from common.urls import (
    DEFAULT_TRACKING,
    TrackingRules,
    UrlError,
    canonicalize,
    host_key,
    is_http_url,
    origin,
    parse,
    path_and_query,
    registered_domain,
    resolve,
    robots_url,
)

# --------------------------------------------------------------------------------------
# resolve and parse


@pytest.mark.parametrize(("href", "base", "expected"), [
    ("../g?x#y", "http://a/b/c/d;p?q", "http://a/b/g?x#y"),
    ("//other.test/p", "https://a.test/x", "https://other.test/p"),
    ("  /p q\t", "http://a.test/x/y", "http://a.test/p%20q"),
    ("\\x\\y", "http://a.test/", "http://a.test/x/y"),
    ("https://B\u00fccher.DE/\u00e9", "http://a.test/", "https://xn--bcher-kva.de/%C3%A9"),
    ("mailto:someone@example.com", "http://a.test/", "mailto:someone@example.com"),
    ("#frag", "http://a.test/p?q", "http://a.test/p?q#frag"),
])
def test_resolve_follows_the_url_standard(href: str, base: str, expected: str) -> None:
    assert resolve(href, base) == expected


@pytest.mark.parametrize(("href", "base"), [
    ("http://[::1", "http://a.test/"),
    ("http://a b/", "http://a.test/"),
    ("x", "not a url"),
    ("relative/only", None),
    ("", None),
])
def test_resolve_gives_none_when_no_valid_url_results(href: str, base: str | None) -> None:
    assert resolve(href, base) is None


def test_resolve_replaces_lone_surrogates_like_the_url_standard() -> None:
    assert resolve("/a\ud800b", "http://a.test/") == "http://a.test/a%EF%BF%BDb"
    assert resolve("x", "http://a.test/\udfff/") == "http://a.test/%EF%BF%BD/x"


def test_resolve_of_something_that_is_not_text_is_none() -> None:
    bad: Any = b"http://a.test/"
    assert resolve(bad) is None
    assert resolve("x", bad) is None


def test_parse_gives_the_parts() -> None:
    p = parse("HTTP://u:p@Ex.TEST:8080/a/../b?q=1#f")
    assert p == urls.ParsedUrl(href="http://u:p@ex.test:8080/b?q=1#f", scheme="http",
                               username="u", password="p", host="ex.test", port=8080,
                               path="/b", query="q=1", fragment="f")


def test_parse_tells_an_empty_query_and_fragment_from_none() -> None:
    assert parse("http://a.test/b?#").query == ""
    assert parse("http://a.test/b?#").fragment == ""
    assert parse("http://a.test/b").query is None
    assert parse("http://a.test/b").fragment is None
    assert parse("http://a.test:80/").port is None


def test_parse_resolves_against_a_base_and_rejects_garbage() -> None:
    assert parse("c?d", "http://a.test/b/").href == "http://a.test/b/c?d"
    with pytest.raises(UrlError, match="not a valid URL"):
        parse("no scheme here")


# --------------------------------------------------------------------------------------
# canonicalize: one test per rule


@pytest.mark.parametrize(("url", "expected"), [
    # scheme and host in lower case, default port dropped, other ports kept
    ("HTTP://WWW.Example.COM:80/", "http://www.example.com/"),
    ("https://example.com:443/x", "https://example.com/x"),
    ("https://example.com:80/x", "https://example.com:80/x"),
    ("http://example.com:0081/", "http://example.com:81/"),
    # IDNA to punycode, IPv4 and IPv6 forms, root dot
    ("http://B\u00fccher.de/", "http://xn--bcher-kva.de/"),
    ("https://fa\u00df.de/", "https://xn--fa-hia.de/"),
    ("http://0x7f.1/", "http://127.0.0.1/"),
    ("http://[0:0::1]:8080/", "http://[::1]:8080/"),
    ("http://example.com./a", "http://example.com/a"),
    ("http://0x7f.1../", "http://127.0.0.1/"),
    # empty path, dot segments
    ("http://example.com", "http://example.com/"),
    ("http://example.com/a/./b/../c/", "http://example.com/a/c/"),
    ("http://example.com/a/%2e%2E/b/%2e/c", "http://example.com/b/c"),
    ("http://example.com/../../x", "http://example.com/x"),
    # percent-encoding: unreserved decoded, hex upper-cased, reserved escapes kept
    ("http://example.com/%7euser/%41%62%2D%5f", "http://example.com/~user/Ab-_"),
    ("http://example.com/caf%e9/%c3%a9", "http://example.com/caf%E9/%C3%A9"),
    ("http://example.com/a%2fb%3F%23", "http://example.com/a%2Fb%3F%23"),
    ("http://example.com/a%2Cb?x=%2c%3d", "http://example.com/a%2Cb?x=%2C%3D"),
    # percent-encoding: characters that must be encoded are encoded
    ("http://example.com/a b|c[d]^e", "http://example.com/a%20b%7Cc%5Bd%5D%5Ee"),
    ("http://example.com/r\u00e9sum\u00e9?q=\u00e9", "http://example.com/r%C3%A9sum%C3%A9?q=%C3%A9"),
    ("http://example.com/?q={x}|`y`", "http://example.com/?q=%7Bx%7D%7C%60y%60"),
    ("http://example.com/%zz/%4?a=%", "http://example.com/%25zz/%254?a=%25"),
    # user info kept, normalised
    ("http://User:P%61ss@Example.com/", "http://User:Pass@example.com/"),
    # fragment dropped
    ("http://example.com/a#top", "http://example.com/a"),
    ("http://example.com/a?b=1#", "http://example.com/a?b=1"),
    # empty query dropped, empty parameters dropped
    ("http://a/b?", "http://a/b"),
    ("http://example.com/b?&&", "http://example.com/b"),
    ("http://example.com/?&a=1&&b=2&", "http://example.com/?a=1&b=2"),
    # tracking parameters removed
    ("http://example.com/?utm_source=x&id=7&gclid=1&fbclid=2", "http://example.com/?id=7"),
    ("http://example.com/?UTM_Medium=x&Fbclid=2", "http://example.com/"),
    ("http://example.com/?utm%5Fcampaign=x&a", "http://example.com/?a"),
    ("http://example.com/?utm=keep&xutm_source=keep", "http://example.com/?utm=keep&xutm_source=keep"),
    # parameters sorted by name, stably; spelling of each kept
    ("http://example.com/?c=3&a=1&b=2", "http://example.com/?a=1&b=2&c=3"),
    ("http://example.com/?b=5&a=0&b=2&b=9", "http://example.com/?a=0&b=5&b=2&b=9"),
    ("http://example.com/?b=&a&c=1", "http://example.com/?a&b=&c=1"),
    ("http://example.com/?q=a+b&r=a%20b&s=a b", "http://example.com/?q=a+b&r=a%20b&s=a%20b"),
    ("http://example.com/?a=1=2&b=x?y", "http://example.com/?a=1=2&b=x?y"),
    ("http://example.com/?'x'=\"1\"", "http://example.com/?%27x%27=%221%22"),
])
def test_canonical_form(url: str, expected: str) -> None:
    assert canonicalize(url) == expected


@pytest.mark.parametrize(("url", "reason"), [
    ("ftp://example.com/", "not an http or https URL"),
    ("mailto:a@example.com", "not an http or https URL"),
    ("ws://example.com/", "not an http or https URL"),
    ("/relative/path", "not a valid URL"),
    ("example.com/no-scheme", "not a valid URL"),
    ("", "not a valid URL"),
    ("http://", "not a valid URL"),
    ("http://exa mple.com/", "not a valid URL"),
    ("http://[::1/", "not a valid URL"),
    ("http://./", "URL has no host"),
    ("http://1.2.3.999../", "host is not valid without its trailing dot"),
])
def test_canonicalize_rejects_with_a_clear_error(url: str, reason: str) -> None:
    with pytest.raises(UrlError, match=reason) as info:
        canonicalize(url)
    assert isinstance(info.value, ValueError)
    assert repr(url) in str(info.value)


def test_canonicalize_rejects_something_that_is_not_text() -> None:
    bad: Any = 42
    with pytest.raises(UrlError, match="must be a string"):
        canonicalize(bad)


def test_the_error_message_of_a_huge_url_is_short() -> None:
    with pytest.raises(UrlError) as info:
        canonicalize("ftp://example.com/" + "x" * 100_000)
    assert len(str(info.value)) < 300


# --------------------------------------------------------------------------------------
# tracking rules


def test_default_rules_come_from_the_default_settings() -> None:
    assert TrackingRules.from_settings(UrlSettings()) == DEFAULT_TRACKING
    for name in ("utm_source", "utm_anything", "gclid", "fbclid", "GCLID"):
        assert DEFAULT_TRACKING.matches(name), name
    for name in ("utm", "source", "page", "id", "xgclid", "gclid2"):
        assert not DEFAULT_TRACKING.matches(name), name


def test_extra_tracking_params_are_added_and_star_is_a_prefix() -> None:
    rules = TrackingRules.from_settings(UrlSettings(extra_tracking_params=("ref", "pk_*")))
    assert rules.matches("ref")
    assert not rules.matches("referrer")
    assert rules.matches("pk_campaign")
    assert rules.matches("utm_term")
    url = "http://example.com/?ref=a&pk_kwd=b&referrer=c&utm_id=d"
    assert canonicalize(url, tracking=rules) == "http://example.com/?referrer=c"
    assert canonicalize(url) == "http://example.com/?pk_kwd=b&ref=a&referrer=c"


def test_tracking_params_can_be_replaced_by_settings() -> None:
    rules = TrackingRules.from_settings(UrlSettings(tracking_params=("sid",)))
    url = "http://example.com/?sid=1&utm_source=x"
    assert canonicalize(url, tracking=rules) == "http://example.com/?utm_source=x"


@pytest.mark.parametrize("pattern", ["", " ", "*", "a*b", "**"])
def test_bad_tracking_patterns_are_settings_errors(pattern: str) -> None:
    with pytest.raises(SettingsError, match="CRAWLER_URLS_EXTRA_TRACKING_PARAMS"):
        TrackingRules.from_settings(UrlSettings(extra_tracking_params=(pattern,)))
    with pytest.raises(ValueError, match="bad tracking parameter pattern"):
        TrackingRules.from_patterns([pattern])


# --------------------------------------------------------------------------------------
# host key, origin and the other helpers


@pytest.mark.parametrize(("url", "key"), [
    ("http://News.Test:8080/a", "news.test:8080"),
    ("http://news.test:80/a", "news.test"),
    ("https://news.test:443/", "news.test"),
    ("https://news.test:80/", "news.test:80"),
    ("http://B\u00fccher.DE./x", "xn--bcher-kva.de"),
    ("http://[::1]:8080/", "[::1]:8080"),
    ("http://user:pw@127.0.0.1/", "127.0.0.1"),
    ("http://news.test/?utm_source=x#y", "news.test"),
])
def test_host_key(url: str, key: str) -> None:
    assert host_key(url) == key


def test_host_key_rejects_what_canonicalize_rejects() -> None:
    with pytest.raises(UrlError, match="not an http or https URL"):
        host_key("file:///etc/passwd")


@pytest.mark.parametrize(("url", "expected_origin"), [
    ("http://News.Test:8080/a/b?c#d", "http://news.test:8080"),
    ("https://news.test:443/a", "https://news.test"),
    ("https://u:p@[::1]:8443/", "https://[::1]:8443"),
    ("http://news.test./", "http://news.test"),
])
def test_origin_and_robots_url(url: str, expected_origin: str) -> None:
    assert origin(url) == expected_origin
    assert robots_url(url) == expected_origin + "/robots.txt"


@pytest.mark.parametrize(("url", "expected"), [
    ("http://a.test", "/"),
    ("http://a.test/p/../q?x=1&y#frag", "/q?x=1&y"),
    ("http://a.test/b?", "/b?"),
    ("http://a.test/a b?c d", "/a%20b?c%20d"),
    ("http://a.test/?utm_source=kept", "/?utm_source=kept"),
])
def test_path_and_query_is_the_request_target(url: str, expected: str) -> None:
    assert path_and_query(url) == expected


@pytest.mark.parametrize(("url", "expected"), [
    ("http://a.test/", True),
    ("HTTPS://a.test", True),
    ("https:a.test", True),
    ("ftp://a.test/", False),
    ("/relative", False),
    ("", False),
    ("http://./", False),
    ("javascript:alert(1)", False),
])
def test_is_http_url(url: str, expected: bool) -> None:
    assert is_http_url(url) is expected


def test_is_http_url_of_something_that_is_not_text_is_false() -> None:
    bad: Any = None
    assert is_http_url(bad) is False


# --------------------------------------------------------------------------------------
# registered domain


@pytest.mark.parametrize(("host", "domain"), [
    ("www.bbc.co.uk", "bbc.co.uk"),
    ("forums.news.cnn.com", "cnn.com"),
    ("example.com", "example.com"),
    ("WWW.Example.COM.", "example.com"),
    ("www.b\u00fccher.de", "xn--bcher-kva.de"),
    ("news.test:8080", "news.test"),
    ("user.github.io", "github.io"),
    # no public suffix: documented stand-ins
    ("news.test", "news.test"),
    ("a.b.news.test", "news.test"),
    ("localhost", "localhost"),
    ("co.uk", "co.uk"),
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.0.1:8080", "127.0.0.1"),
    ("[::1]:8080", "[::1]"),
    ("::1", "::1"),
])
def test_registered_domain(host: str, domain: str) -> None:
    assert registered_domain(host) == domain


@pytest.mark.parametrize("host", ["", "   ", ".", "[::1"])
def test_registered_domain_of_no_host_is_an_error(host: str) -> None:
    with pytest.raises(UrlError, match="not a host"):
        registered_domain(host)


def test_suffix_list_is_read_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[str] = []

    def refuse(*args: object, **kwargs: object) -> Any:
        attempts.append(repr(args[:2]))
        raise OSError("network is off in this test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    urls._suffix_list.cache_clear()
    icann, private = urls._suffix_list(False), urls._suffix_list(True)
    assert icann.privatesuffix("forums.bbc.co.uk") == "bbc.co.uk"
    assert icann.publicsuffix("a.b.example.com.au") == "com.au"
    assert icann.privatesuffix("alice.github.io") == "github.io"
    assert private.privatesuffix("alice.github.io") == "alice.github.io"
    assert attempts == []


@pytest.mark.parametrize(("host", "domain"), [
    ("alice.github.io", "alice.github.io"),
    ("www.bbc.co.uk", "bbc.co.uk"),
    ("x.city.kawasaki.jp", "city.kawasaki.jp"),  # an exception rule (!city.kawasaki.jp)
    ("a.b.c.kawasaki.jp", "b.c.kawasaki.jp"),  # a wildcard rule (*.kawasaki.jp)
    ("github.io", "github.io"),
])
def test_registered_domain_with_the_private_part(host: str, domain: str) -> None:
    assert registered_domain(host, private=True) == domain


# --------------------------------------------------------------------------------------
# properties (hypothesis)

_HEX = "0123456789abcdefABCDEF"
_PATH_CHARS = "aZ09-._~!$&'()*+,;=:@ |[]^{}`\"<>\\%\u00e9\u00df\u4f8b"


def _escapes() -> st.SearchStrategy[str]:
    return st.builds(lambda a, b: f"%{a}{b}", st.sampled_from(_HEX), st.sampled_from(_HEX))


def _segments() -> st.SearchStrategy[str]:
    token = st.one_of(st.text(alphabet=_PATH_CHARS, max_size=4), _escapes())
    return st.one_of(
        st.sampled_from([".", "..", "%2e", "%2E%2e", ".%2E", ""]),
        st.lists(token, max_size=4).map("".join),
    )


_TRACKING_NAMES = ["utm_source", "UTM_Medium", "utm_", "utm%5Fcampaign", "gclid", "GCLID",
                   "fbclid", "msclkid", "%67clid"]


def _param() -> st.SearchStrategy[str]:
    name = st.one_of(
        st.sampled_from(_TRACKING_NAMES),
        st.lists(st.one_of(st.text(alphabet="abAB9_-.~+ %;,/?:@\u00e9", max_size=3),
                           _escapes()), max_size=3).map("".join),
    )
    value = st.one_of(st.none(), st.lists(
        st.one_of(st.text(alphabet="xY1=+ ?/%'\u00e9", max_size=3), _escapes()),
        max_size=3).map("".join))
    return st.builds(lambda n, v: n if v is None else f"{n}={v}", name, value)


def _hosts() -> st.SearchStrategy[str]:
    label = st.text(alphabet="abcXYZ019-\u00e9\u00fc\u00df", min_size=1, max_size=8)
    domain = st.builds(lambda labels, dots: ".".join(labels) + dots,
                       st.lists(label, min_size=1, max_size=4),
                       st.sampled_from(["", "", ".", ".."]))
    ipv4 = st.ip_addresses(v=4).map(str)
    ipv4_odd = st.sampled_from(["0x7f.1", "127.1", "0177.0.0.1", "2130706433"])
    ipv6 = st.ip_addresses(v=6).map(lambda ip: f"[{ip}]")
    return st.one_of(domain, ipv4, ipv4_odd, ipv6)


@st.composite
def http_urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "hTtPs"]))
    userinfo = draw(st.sampled_from(["", "", "user@", "u%41:p%3a@", "a:b c@"]))
    host = draw(_hosts())
    port = draw(st.one_of(st.just(""), st.sampled_from([":80", ":443", ":8080", ":080"]),
                          st.integers(0, 65535).map(lambda p: f":{p}")))
    path = "/".join(draw(st.lists(_segments(), max_size=5)))
    params = draw(st.lists(_param(), max_size=6))
    query = draw(st.sampled_from(["", "?"])) if not params else "?" + "&".join(params)
    fragment = draw(st.sampled_from(["", "#", "#top", "#a?b=c"]))
    return f"{scheme}://{userinfo}{host}{port}/{path}{query}{fragment}"


def _valid(url: str) -> str:
    assume(is_http_url(url))
    return url


@given(http_urls())
@settings(max_examples=250)
def test_canonicalising_twice_equals_once(url: str) -> None:
    once = canonicalize(_valid(url))
    assert canonicalize(once) == once


@given(http_urls())
@settings(max_examples=150)
def test_canonical_form_is_a_fixed_point_of_the_url_parser(url: str) -> None:
    once = canonicalize(_valid(url))
    assert once.isascii()
    assert "#" not in once
    assert parse(once).query != ""
    assert resolve(once) == once


@given(http_urls())
@settings(max_examples=200)
def test_host_key_never_changes_under_canonicalisation(url: str) -> None:
    url = _valid(url)
    key = host_key(url)
    assert host_key(canonicalize(url)) == key
    assert origin(canonicalize(url)) == origin(url)
    assert key == key.lower()
    assert key.isascii()


def _query_names(url: str) -> list[str]:
    query = urllib.parse.urlsplit(url).query
    return [p.partition("=")[0] for p in query.split("&") if p]


@given(http_urls())
@settings(max_examples=200)
def test_tracking_parameters_never_survive(url: str) -> None:
    names = _query_names(canonicalize(_valid(url)))
    assert not [n for n in names if DEFAULT_TRACKING.matches(n)]
    # ... also read as a server would, with escapes decoded
    assert not [n for n in names if DEFAULT_TRACKING.matches(urllib.parse.unquote(n))]


_PATTERN = st.text(alphabet="abz_", min_size=1, max_size=4)


@given(http_urls(), st.lists(_PATTERN, max_size=3), st.lists(_PATTERN, max_size=3))
@settings(max_examples=100)
def test_configured_tracking_parameters_never_survive(
        url: str, exact: list[str], prefixes: list[str]) -> None:
    rules = TrackingRules.from_patterns([*exact, *(p + "*" for p in prefixes)])
    base = canonicalize(_valid(url))
    marked = f"{base}{'&' if '?' in base else '?'}" + "&".join(
        [f"{n}=1" for n in exact] + [f"{p.upper()}x=2" for p in prefixes])
    names = _query_names(canonicalize(marked, tracking=rules))
    assert not [n for n in names if rules.matches(n)]


@given(http_urls())
@settings(max_examples=100)
def test_parameters_are_sorted_by_name(url: str) -> None:
    names = _query_names(canonicalize(_valid(url)))
    assert names == sorted(names)


@given(st.text(max_size=40))
@settings(max_examples=300)
def test_any_text_is_canonical_or_a_url_error(text: str) -> None:
    for candidate in (text, "http://" + text, "http://a.test/" + text):
        try:
            result = canonicalize(candidate)
        except UrlError:
            assert not is_http_url(candidate)
        else:
            assert is_http_url(candidate)
            assert canonicalize(result) == result
