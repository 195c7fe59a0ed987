"""common.robots: parsing, matching on the product token, the caps, the fetch-status
decisions, and hostile input."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.robots import (
    DEFAULT_MAX_BYTES,
    MAX_LINE_BYTES,
    RobotsBasis,
    RobotsPolicy,
    decide_from_status,
    product_token,
)
from common.settings import CrawlSettings

BOT = "PoliteCrawler"


def parse(text: str, **kw: int) -> RobotsPolicy:
    return RobotsPolicy.parse(text.encode("utf-8"), **kw)


# -- product token ------------------------------------------------------------------

@pytest.mark.parametrize(("user_agent", "token"), [
    ("PoliteCrawler/0.1 (+https://example.com/crawler-info)", "PoliteCrawler"),
    ("PoliteCrawler", "PoliteCrawler"),
    ("Polite_Crawler-x 2.0", "Polite_Crawler-x"),
    ("Mozilla/5.0 (compatible; Foo/1.0)", "Mozilla"),
])
def test_product_token(user_agent: str, token: str) -> None:
    assert product_token(user_agent) == token


def test_product_token_of_the_configured_user_agent() -> None:
    crawl = CrawlSettings()
    assert product_token(crawl.user_agent) == crawl.user_agent_product


@pytest.mark.parametrize("user_agent", ["", " PoliteCrawler", "/0.1", "ツbot"])
def test_product_token_missing_is_an_error(user_agent: str) -> None:
    with pytest.raises(ValueError, match="no product token"):
        product_token(user_agent)


# -- matching on the product token --------------------------------------------------

def test_group_of_the_product_token_applies_case_insensitively() -> None:
    policy = parse("User-agent: *\nDisallow: /\n\nUser-agent: politecrawler\nDisallow: /x\n")
    assert policy.allowed("https://a.example/page", BOT)
    assert not policy.allowed("https://a.example/x/1", BOT)
    assert policy.allowed("https://a.example/x/1", "POLITECRAWLER") is False
    assert not policy.allowed("https://a.example/page", "OtherBot")


def test_group_name_counts_up_to_the_first_non_token_character() -> None:
    policy = parse("User-agent: PoliteCrawler/2.0\nDisallow: /a\n"
                   "User-agent: *\nDisallow: /\n")
    assert not policy.allowed("/a", BOT)
    assert policy.allowed("/b", BOT)


@pytest.mark.parametrize("name", ["Polite", "Crawler", "PoliteCrawler-Images", "XPoliteCrawler"])
def test_other_names_sharing_letters_do_not_apply(name: str) -> None:
    policy = parse(f"User-agent: {name}\nDisallow: /\n")
    assert policy.allowed("/page", BOT)
    assert not policy.allowed("/page", name)


def test_specific_group_replaces_the_star_group() -> None:
    policy = parse("User-agent: *\nDisallow: /\n\nUser-agent: PoliteCrawler\nAllow: /\n")
    assert policy.allowed("/anything", BOT)
    empty_group = parse("User-agent: *\nDisallow: /private\n\n"
                        "User-agent: PoliteCrawler\nDisallow:\n")
    assert empty_group.allowed("/private", BOT)
    assert not empty_group.allowed("/private", "OtherBot")


def test_groups_for_the_same_agent_are_merged() -> None:
    policy = parse("User-agent: PoliteCrawler\nDisallow: /a\n\nUser-agent: other\n"
                   "Disallow: /\n\nUser-agent: politecrawler\nDisallow: /b\n")
    assert not policy.allowed("/a/1", BOT)
    assert not policy.allowed("/b/1", BOT)
    assert policy.allowed("/c/1", BOT)


def test_full_user_agent_string_is_not_a_product_token() -> None:
    policy = parse("User-agent: PoliteCrawler\nDisallow: /a\nUser-agent: *\nDisallow: /b\n")
    full = CrawlSettings().user_agent
    assert policy.allowed("/a", full)  # only '*' applies to a value that is no token
    assert not policy.allowed("/b", full)
    assert not policy.allowed("/a", product_token(full))


def test_blank_lines_do_not_split_a_group() -> None:
    policy = parse("User-agent: PoliteCrawler\n\nUser-agent: *\n\nDisallow: /private\n")
    assert not policy.allowed("/private", BOT)


def test_unknown_lines_do_not_split_a_group() -> None:
    policy = parse("User-agent: PoliteCrawler\nNoindex: /x\nUser-agent: OtherBot\n"
                   "Disallow: /private\n")
    assert not policy.allowed("/private", BOT)
    assert not policy.allowed("/private", "OtherBot")


# -- rules ---------------------------------------------------------------------------

def test_longest_match_wins_and_allow_wins_a_tie() -> None:
    policy = parse("User-agent: *\nDisallow: /shop\nAllow: /shop/public\n"
                   "Allow: /tie\nDisallow: /tie\nDisallow: /*.pdf$\n")
    assert not policy.allowed("/shop/cart", BOT)
    assert policy.allowed("/shop/public/list", BOT)
    assert policy.allowed("/tie", BOT)
    assert not policy.allowed("/docs/a.pdf", BOT)
    assert policy.allowed("/docs/a.pdf?download=1", BOT)


def test_escapes_are_compared_as_written() -> None:
    policy = parse("User-agent: *\nDisallow: /%62az\nDisallow: /caf\u00e9\n"
                   "Disallow: /x%aa\nDisallow: /a%2Fb\n")
    assert policy.allowed("/baz", BOT)
    assert not policy.allowed("/%62az", BOT)
    assert not policy.allowed("/caf%C3%A9/menu", BOT)  # the rule's UTF-8, escaped
    assert not policy.allowed("/caf%c3%a9/menu", BOT)  # hex case does not matter
    assert not policy.allowed("/x%AA", BOT)
    assert policy.allowed("/a/b", BOT)
    assert not policy.allowed("/a%2fb", BOT)


def test_spaces_in_rules_match_their_escape() -> None:
    policy = parse("User-agent: *\nDisallow: /my file\n")
    assert not policy.allowed("/my%20file.html", BOT)
    assert policy.allowed("/my-file.html", BOT)


def test_query_and_fragment() -> None:
    policy = parse("User-agent: *\nDisallow: /*?sort=\nDisallow: /page#top\n")
    assert not policy.allowed("https://a.example/list?sort=asc", BOT)
    assert policy.allowed("https://a.example/list?page=2#sort=", BOT)
    assert not policy.allowed("https://a.example/page-2", BOT)  # '#' started a comment


def test_robots_txt_itself_is_always_allowed() -> None:
    policy = parse("User-agent: *\nDisallow: /\nDisallow: /robots.txt\n")
    deny = RobotsPolicy.disallow_all()
    for url in ("https://a.example/robots.txt", "/robots.txt?x=1", "//a.example/robots.txt"):
        assert policy.allowed(url, BOT)
        assert deny.allowed(url, BOT)
    for url in ("https://a.example/robots.txt/x", "/robots.txt.bak", "/"):
        assert not policy.allowed(url, BOT)
        assert not deny.allowed(url, BOT)


def test_fixed_policies() -> None:
    allow, deny = RobotsPolicy.allow_all(), RobotsPolicy.disallow_all()
    for url in ("https://a.example/", "/x?y", ""):
        assert allow.allowed(url, BOT)
        assert not deny.allowed(url, BOT)
    assert allow.crawl_delay(BOT) is None
    assert deny.sitemaps() == []


def test_empty_file_allows_everything() -> None:
    policy = RobotsPolicy.parse(b"")
    assert policy.allowed("/anything", BOT)
    assert policy.stats.directives == 0


# -- Crawl-delay ---------------------------------------------------------------------

def test_crawl_delay_of_the_matching_group() -> None:
    policy = parse("User-agent: *\nCrawl-delay: 10\n\nUser-agent: PoliteCrawler\n"
                   "Crawl-delay: 2.5\nDisallow: /x\n\nUser-agent: NoDelayBot\nDisallow: /y\n")
    assert policy.crawl_delay(BOT) == 2.5
    assert policy.crawl_delay("SomeBot") == 10.0
    assert policy.crawl_delay("NoDelayBot") is None  # its own group has none


def test_crawl_delay_is_not_capped_here() -> None:
    assert parse("User-agent: *\nCrawl-delay: 86400\n").crawl_delay(BOT) == 86400.0


@pytest.mark.parametrize("value", ["abc", "-1", "inf", "nan", "1e3", "1_0", "", "5 s"])
def test_invalid_crawl_delay_is_ignored(value: str) -> None:
    policy = parse(f"User-agent: *\nCrawl-delay: {value}\nDisallow: /x\n")
    assert policy.crawl_delay(BOT) is None
    assert not policy.allowed("/x", BOT)


def test_crawl_delay_does_not_split_a_group_of_rules() -> None:
    # The common layout: a delay for everyone, then a group for one crawler. The rule
    # binds both agents (one group for RFC 9309); each delay stays with its own agents.
    policy = parse("User-agent: *\nCrawl-delay: 10\n\nUser-agent: OtherBot\n"
                   "Crawl-delay: 1\nDisallow: /private\n")
    assert not policy.allowed("/private", BOT)
    assert not policy.allowed("/private", "OtherBot")
    assert policy.crawl_delay(BOT) == 10.0
    assert policy.crawl_delay("OtherBot") == 1.0


def test_crawl_delay_for_several_agents_and_repeats() -> None:
    policy = parse("User-agent: PoliteCrawler\nUser-agent: OtherBot\nCrawl-delay: 3\n"
                   "Disallow: /x\nCrawl-delay: 2\n\nUser-agent: politecrawler\n"
                   "Crawl-delay: 5\n\nUser-agent: *\nCrawl-delay: 9\n")
    assert policy.crawl_delay(BOT) == 5.0  # the largest of its delays
    assert policy.crawl_delay("OtherBot") == 3.0
    assert policy.crawl_delay("ThirdBot") == 9.0
    assert policy.crawl_delay("PoliteCrawler/0.1") == 9.0  # not a token: '*'


def test_crawl_delay_before_any_user_agent_is_ignored() -> None:
    assert parse("Crawl-delay: 5\nUser-agent: *\nDisallow: /x\n").crawl_delay(BOT) is None


def test_crawl_delay_at_the_end_of_a_group_without_rules() -> None:
    assert parse("User-agent: PoliteCrawler\nCrawl-delay: 4").crawl_delay(BOT) == 4.0


# -- Sitemap -------------------------------------------------------------------------

def test_sitemaps_in_order_without_repeats_wherever_they_are() -> None:
    policy = parse(
        "Sitemap: https://a.example/s1.xml\n"
        "User-agent: PoliteCrawler\n"
        "Sitemap: https://a.example/s2.xml\n"
        "User-agent: OtherBot\n"
        "Disallow: /private\n"
        "site-map: https://a.example/s3.xml # comment\n"
        "Sitemap: https://a.example/s1.xml\n"
        "Sitemap:\n")
    assert policy.sitemaps() == ["https://a.example/s1.xml", "https://a.example/s2.xml",
                                 "https://a.example/s3.xml"]
    # The Sitemap line did not split the group.
    assert not policy.allowed("/private", BOT)


def test_sitemaps_returns_a_copy() -> None:
    policy = parse("Sitemap: https://a.example/s.xml\n")
    policy.sitemaps().append("https://evil.example/")
    assert policy.sitemaps() == ["https://a.example/s.xml"]


def test_no_sitemaps() -> None:
    assert parse("User-agent: *\nDisallow: /\n").sitemaps() == []


# -- caps ----------------------------------------------------------------------------

def _big_file(size: int) -> bytes:
    head = b"User-agent: *\nDisallow: /early\n"
    filler = b"".join(b"Disallow: /filler-%07d/\n" % i for i in range(size // 24 + 1))
    return head + filler


def test_file_over_500_kib_applies_rules_before_the_cap() -> None:
    body = _big_file(DEFAULT_MAX_BYTES) + b"Disallow: /late\nAllow: /early\n"
    assert len(body) > 500 * 1024
    policy = RobotsPolicy.parse(body)
    assert policy.stats.truncated
    assert policy.stats.bytes_parsed <= DEFAULT_MAX_BYTES
    assert not policy.allowed("/early/page", BOT)
    assert not policy.allowed("/filler-0000100/x", BOT)
    assert policy.allowed("/late", BOT)  # after the cap: not read


def test_cap_drops_the_partial_last_line() -> None:
    body = b"User-agent: *\nDisallow: /abcdef\nAllow: /abcdef/public\n"
    cut_inside_allow = body.index(b"/public") + 2
    policy = RobotsPolicy.parse(body, max_bytes=cut_inside_allow)
    assert policy.stats.truncated
    assert policy.stats.bytes_parsed == body.index(b"Allow")
    # Kept, the cut line would have read "Allow: /abcdef/p" and allowed more.
    assert not policy.allowed("/abcdef/pxyz", BOT)


def test_cap_without_any_line_break_keeps_the_head() -> None:
    policy = RobotsPolicy.parse(b"Disallow: /" + b"x" * 100, max_bytes=50)
    assert policy.stats.truncated
    assert policy.stats.bytes_parsed == 50


def test_body_under_the_cap_is_read_whole() -> None:
    body = b"User-agent: *\nDisallow: /a"
    policy = RobotsPolicy.parse(body, max_bytes=len(body))
    assert not policy.stats.truncated
    assert not policy.allowed("/a", BOT)


def test_max_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        RobotsPolicy.parse(b"", max_bytes=0)


def test_str_body_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="bytes"):
        RobotsPolicy.parse("User-agent: *")  # type: ignore[arg-type]


def test_long_line_is_cut_at_the_line_cap() -> None:
    keep = MAX_LINE_BYTES - 1 - len("Disallow: ")
    rule = "/" + "a" * 100_000
    policy = parse(f"User-agent: *\nDisallow: {rule}\nDisallow: /after\n")
    assert not policy.allowed(rule[:keep] + "zzz", BOT)  # the cut rule matches
    assert policy.allowed(rule[: keep - 1] + "zzz", BOT)
    assert not policy.allowed("/after", BOT)  # the next line is read


# -- status decisions ----------------------------------------------------------------

@pytest.mark.parametrize("status", [200, 203, 206, 299])
def test_2xx_uses_the_file(status: int) -> None:
    answer = decide_from_status(status, b"User-agent: *\nDisallow: /private\n")
    assert answer.basis is RobotsBasis.FILE
    assert answer.available
    assert not answer.policy.allowed("/private/a", BOT)
    assert answer.policy.allowed("/public", BOT)


def test_2xx_without_body_allows_all() -> None:
    answer = decide_from_status(204, None)
    assert answer.basis is RobotsBasis.FILE
    assert answer.policy.allowed("/anything", BOT)


def test_2xx_applies_max_bytes() -> None:
    answer = decide_from_status(200, b"User-agent: *\nDisallow: /a\nDisallow: /b\n",
                                max_bytes=27)
    assert not answer.policy.allowed("/a", BOT)
    assert answer.policy.allowed("/b", BOT)


@pytest.mark.parametrize("status", [300, 301, 302, 307, 308, 400, 401, 403, 404, 410, 451])
def test_redirects_exhausted_and_4xx_allow_all(status: int) -> None:
    answer = decide_from_status(status, b"User-agent: *\nDisallow: /\n")
    assert answer.basis is RobotsBasis.NO_FILE
    assert answer.available
    assert answer.policy.allowed("/anything", BOT)


@pytest.mark.parametrize("status", [None, 0, 429, 500, 502, 503, 504, 599, 100, 600, 99])
def test_unreachable_disallows_for_now(status: int | None) -> None:
    answer = decide_from_status(status, b"User-agent: *\nAllow: /\n")
    assert answer.basis is RobotsBasis.UNREACHABLE
    assert not answer.available
    assert not answer.policy.allowed("/anything", BOT)
    assert answer.policy.allowed("/robots.txt", BOT)


# -- hostile input -------------------------------------------------------------------

def _never_raises(body: bytes) -> RobotsPolicy:
    policy = RobotsPolicy.parse(body)
    for url in ("https://a.example/", "/x", "", "//a/b", "?q", "#f", "http://",
                "/caf\u00e9", "/\ud800", "/a%", "/%zz", "/a\x00b", "/\u2028/x"):
        assert isinstance(policy.allowed(url, BOT), bool)
    delay = policy.crawl_delay(BOT)
    assert delay is None or delay >= 0
    assert isinstance(policy.sitemaps(), list)
    return policy


@pytest.mark.parametrize("seed", range(5))
def test_binary_junk(seed: int) -> None:
    rng = random.Random(seed)
    _never_raises(rng.randbytes(rng.randrange(1, 200_000)))


def test_junk_around_valid_rules_keeps_the_rules() -> None:
    rng = random.Random(7)
    junk = rng.randbytes(5000).replace(b"\n", b"").replace(b"\r", b"")
    policy = _never_raises(b"User-agent: *\n" + junk + b"\nDisallow: /private\n" + junk)
    assert not policy.allowed("/private", BOT)


def test_huge_lines() -> None:
    policy = _never_raises(b"User-agent: *\nDisallow: /" + b"*a" * 100_000 + b"\n"
                           + b"x" * 200_000 + b"\nDisallow: /private\n")
    assert not policy.allowed("/private", BOT)


@pytest.mark.parametrize("bom", [b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"])
def test_byte_order_mark_is_skipped(bom: bytes) -> None:
    policy = _never_raises(bom + b"User-agent: *\nDisallow: /private\n")
    assert not policy.allowed("/private", BOT)
    assert policy.stats.unknown_directives == 0


@pytest.mark.parametrize("newline", [b"\r\n", b"\r", b"\n"])
def test_line_endings(newline: bytes) -> None:
    body = newline.join([b"User-agent: PoliteCrawler", b"Disallow: /a", b"",
                         b"User-agent: *", b"Disallow: /b", b"Crawl-delay: 2"]) + newline
    policy = _never_raises(body)
    assert not policy.allowed("/a", BOT)
    assert policy.allowed("/b", BOT)
    assert not policy.allowed("/b", "OtherBot")
    assert policy.crawl_delay("OtherBot") == 2.0
    assert policy.stats.last_directive_line == 6


def test_control_and_line_separator_characters_in_values() -> None:
    policy = _never_raises("User-agent: *\nDisallow: /a\x0bb\nDisallow: /c\u2028d\n"
                           "Disallow: /e\x1cf\nSitemap: https://a.example/\x0cs\n"
                           .encode("utf-8"))
    assert not policy.allowed("/a%0Bb", BOT)
    assert not policy.allowed("/c%E2%80%A8d", BOT)
    assert policy.allowed("/c", BOT)
    assert not policy.allowed("/e%1Cf", BOT)
    assert policy.allowed("/e", BOT)


def test_invalid_utf8_in_rules() -> None:
    policy = _never_raises(b"User-agent: *\nDisallow: /\xff\xfe\nSitemap: https://a.example/\xff\n")
    assert not policy.allowed("/%FF%FE/x", BOT)
    assert policy.allowed("/%FF", BOT)
    assert policy.sitemaps() == ["https://a.example/\ufffd"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_parse(body: bytes) -> None:
    _never_raises(body)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.text(max_size=40))
def test_any_url_and_agent_answer(url: str, agent: str) -> None:
    policy = parse("User-agent: *\nDisallow: /*%41$\nAllow: /a\nDisallow: /\n"
                   "User-agent: PoliteCrawler\nDisallow: /p\nCrawl-delay: 1\n")
    assert isinstance(policy.allowed(url, agent), bool)
    delay = policy.crawl_delay(agent)
    assert delay is None or delay >= 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["User-agent: PoliteCrawler", "User-agent: *", "Disallow: /",
                                 "Allow: /a", "Crawl-delay: 1", "Sitemap: /s", "Noindex: x",
                                 "", "# c", "Disallow:", "user agent politecrawler"]),
                max_size=30),
       st.sampled_from(["\n", "\r\n", "\r"]))
def test_line_endings_do_not_change_the_answer(lines: list[str], newline: str) -> None:
    unix = parse("\n".join(lines))
    other = parse(newline.join(lines))
    for url in ("/", "/a", "/b"):
        assert unix.allowed(url, BOT) == other.allowed(url, BOT)
    assert unix.crawl_delay(BOT) == other.crawl_delay(BOT)
