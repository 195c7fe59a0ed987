"""What the simulated web answers, checked on the pure responder (no sockets)."""

from __future__ import annotations

import datetime as dt
import email.utils
import html
import itertools
import re
import zlib

import pytest
from protego import Protego
from simhash import Simhash

from simweb.model import Host, Page, Scenario
from simweb.scenarios import build_features, build_seed
from simweb.site import Reply, SimRequest, Site, gzip_bomb

PORT = 8123
NEAR_DUPLICATE_BITS = 3  # the crawler's default SimHash threshold


@pytest.fixture
def lab() -> Site:
    return Site(build_features(), PORT)


@pytest.fixture
def news() -> Site:
    return Site(build_seed(), PORT)


def get(site: Site, host: str, target: str, **headers: str) -> Reply:
    return site.respond(SimRequest(host, target, "GET", headers))


def visible_text(body: bytes) -> str:
    return re.sub(r"<[^>]+>", " ", body.decode("utf-8", "replace"))


def hrefs(body: bytes) -> list[str]:
    found = re.findall(r'href="([^"]+)"', body.decode("utf-8", "replace"))
    return [html.unescape(h) for h in found]


# --- seed scenario ------------------------------------------------------------------

def test_every_seed_page_is_utf8_html(news: Site) -> None:
    for host in news.scenario.hosts:
        for page in host.pages:
            reply = news.render(host.name, page.path)
            assert reply.status == 200, page.path
            assert reply.header("Content-Type") == "text/html; charset=utf-8"
            reply.body.decode("utf-8")
            assert b"<title>" in reply.body


def test_print_copy_is_byte_identical_to_story(news: Site) -> None:
    for n in (1, 17, 30):
        story = news.render("news.test", f"/story/{n}")
        copy = news.render("news.test", f"/print/{n}")
        assert story.body == copy.body
        assert f"/print/{n}" in hrefs(story.body)


def test_stories_are_hundreds_of_words_and_far_apart(news: Site) -> None:
    texts = [visible_text(news.render("news.test", f"/story/{n}").body) for n in range(1, 31)]
    texts += [visible_text(news.render("shop.test", f"/item/{n}").body) for n in range(1, 21)]
    assert all(len(t.split()) >= 200 for t in texts)
    hashes = [Simhash(t) for t in texts]
    closest = min(a.distance(b) for a, b in itertools.combinations(hashes, 2))
    assert closest > 2 * NEAR_DUPLICATE_BITS


def test_home_links_stories_tracking_copies_and_private_page(news: Site) -> None:
    links = hrefs(news.render("news.test", "/").body)
    stories = {h for h in links if re.fullmatch(r"/story/\d+", h)}
    assert len(stories) == 30
    assert any("utm_source=x" in h for h in links)
    assert "/private/secret" in links
    assert f"http://shop.test:{PORT}/" in links


def test_tracking_copy_serves_the_same_page(news: Site) -> None:
    plain = news.render("news.test", "/story/5")
    tracked = news.render("news.test", "/story/5?utm_source=x")
    assert plain.body == tracked.body


def test_seed_robots(news: Site) -> None:
    robots = news.render("news.test", "/robots.txt")
    assert robots.status == 200
    assert robots.body == b"User-agent: *\nDisallow: /private/\n"
    rules = Protego.parse(robots.body.decode())
    assert not rules.can_fetch(f"http://news.test:{PORT}/private/secret", "PoliteCrawler")
    assert rules.can_fetch(f"http://news.test:{PORT}/story/1", "PoliteCrawler")
    assert news.render("shop.test", "/robots.txt").status == 404


def test_calendar_trap_is_an_endless_next_day_chain(news: Site) -> None:
    assert hrefs(news.render("trap.test", "/").body) == ["/day/2026-01-01"]
    target = "/day/2026-12-30"
    for expected in ("/day/2026-12-31", "/day/2027-01-01", "/day/2027-01-02"):
        reply = news.render("trap.test", target)
        assert reply.status == 200
        assert hrefs(reply.body) == [expected]
        target = expected
    assert news.render("trap.test", "/day/2026-02-30").status == 404


def test_determinism_same_seed_same_bytes() -> None:
    a, b = Site(build_seed(), PORT), Site(build_seed(), PORT)
    for host, target in [("news.test", "/"), ("news.test", "/story/7"),
                         ("trap.test", "/day/2030-05-05"), ("shop.test", "/item/20")]:
        assert a.render(host, target).body == b.render(host, target).body
        assert a.render(host, target).headers == b.render(host, target).headers


def test_other_seed_other_text() -> None:
    base = build_seed()
    other = Scenario(name=base.name, seed=base.seed + 1, hosts=base.hosts, seeds=base.seeds)
    a, b = Site(base, PORT), Site(other, PORT)
    assert a.render("news.test", "/story/1").body != b.render("news.test", "/story/1").body


def test_unknown_host_and_path(news: Site) -> None:
    assert get(news, "nowhere.test", "/").status == 404
    assert get(news, "news.test", "/nothing").status == 404
    index = get(news, "127.0.0.1", "/")
    assert index.status == 200
    assert f"http://news.test:{PORT}/" in hrefs(index.body)


def test_port_is_left_out_on_port_80() -> None:
    site = Site(build_seed(), 80)
    assert "http://shop.test/" in hrefs(site.render("news.test", "/").body)
    assert site.base_url("news.test") == "http://news.test"
    assert site.absolutize("http://elsewhere.example/") == "http://elsewhere.example/"


# --- errors, redirects ----------------------------------------------------------------

def test_429_with_retry_after_then_recovers(lab: Site) -> None:
    first = get(lab, "lab.test", "/busy")
    assert first.status == 429
    assert first.header("Retry-After") == "2"
    second = get(lab, "lab.test", "/busy")
    assert second.status == 200
    assert second.header("Retry-After") is None
    assert lab.visits("lab.test", "/busy") == 2


def test_503_recovers_after_two_visits(lab: Site) -> None:
    statuses = [get(lab, "lab.test", "/down").status for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert get(lab, "lab.test", "/down-forever").status == 503
    assert get(lab, "lab.test", "/down-forever").header("Retry-After") == "120"
    date = get(lab, "lab.test", "/maintenance").header("Retry-After")
    assert date is not None and email.utils.parsedate_to_datetime(date).year == 2026


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_redirect_statuses(lab: Site, code: int) -> None:
    reply = get(lab, "lab.test", f"/redirect/{code}")
    assert reply.status == code
    assert reply.header("Location") == "/dup/a"


def test_cross_host_redirect_carries_the_port(lab: Site) -> None:
    reply = get(lab, "lab.test", "/redirect/cross")
    assert reply.status == 301
    assert reply.header("Location") == f"http://other.test:{PORT}/"


def test_redirect_loop_and_long_chain(lab: Site) -> None:
    assert get(lab, "lab.test", "/loop/a").header("Location") == "/loop/b"
    assert get(lab, "lab.test", "/loop/b").header("Location") == "/loop/a"
    hops, target = 0, "/chain/1"
    while (reply := get(lab, "lab.test", target)).status in (301, 302):
        target = reply.header("Location") or ""
        hops += 1
    assert (hops, target, reply.status) == (6, "/chain/7", 200)


def test_redirect_to_private_address_host(lab: Site) -> None:
    reply = get(lab, "lab.test", "/redirect/internal")
    assert reply.header("Location") == f"http://internal.test:{PORT}/secret"
    assert lab.scenario.host("internal.test").address == "127.0.0.2"


# --- bodies ---------------------------------------------------------------------------

def test_exact_and_near_duplicates(lab: Site) -> None:
    a, b = lab.render("lab.test", "/dup/a"), lab.render("lab.test", "/dup/b")
    assert a.body == b.body
    na, nb = lab.render("lab.test", "/near/a"), lab.render("lab.test", "/near/b")
    assert na.body != nb.body
    distance = Simhash(visible_text(na.body)).distance(Simhash(visible_text(nb.body)))
    assert distance <= NEAR_DUPLICATE_BITS


def test_oversize_body(lab: Site) -> None:
    reply = lab.render("lab.test", "/big")
    assert len(reply.body) >= 6_000_000
    assert reply.body.rstrip().endswith(b"</html>")


def test_compression_bomb_is_small_on_the_wire(lab: Site) -> None:
    reply = lab.render("lab.test", "/bomb")
    assert reply.header("Content-Encoding") == "gzip"
    assert len(reply.body) < 100_000
    inflated = zlib.decompressobj(31).decompress(reply.body)
    assert len(inflated) == 50_000_000
    assert len(inflated) / len(reply.body) > 500
    assert gzip_bomb(50_000_000) is gzip_bomb(50_000_000)  # computed once


def test_content_types(lab: Site) -> None:
    assert lab.render("lab.test", "/no-type").header("Content-Type") is None
    assert lab.render("lab.test", "/wrong-type").header("Content-Type") == "image/png"
    assert b"<html" in lab.render("lab.test", "/wrong-type").body
    plain = lab.render("lab.test", "/plain")
    assert plain.header("Content-Type") == "text/plain; charset=utf-8"
    assert plain.body == b"Just text, no markup.\n"


def test_bad_charsets(lab: Site) -> None:
    lying = lab.render("lab.test", "/charset/latin1-declared-utf8")
    assert lying.header("Content-Type") == "text/html; charset=utf-8"
    with pytest.raises(UnicodeDecodeError):
        lying.body.decode("utf-8")
    assert "Café" in lying.body.decode("latin-1")
    meta = lab.render("lab.test", "/charset/meta-only")
    assert meta.header("Content-Type") == "text/html"
    assert b'<meta charset="iso-8859-1">' in meta.body
    assert "Zürich" in meta.body.decode("latin-1")
    bare = lab.render("lab.test", "/charset/utf8-no-charset")
    assert bare.header("Content-Type") == "text/html"
    assert "Zürich" in bare.body.decode("utf-8")


def test_drip_and_delay_are_described(lab: Site) -> None:
    drip = lab.render("lab.test", "/drip")
    assert (drip.drip_seconds, drip.drip_chunks) == (3.0, 30)
    assert lab.render("lab.test", "/hang").delay == 60.0
    assert lab.render("lab.test", "/slow").delay == 2.0
    assert get(lab, "latency.test", "/").delay == pytest.approx(0.3)


# --- validators and change --------------------------------------------------------

def test_etag_if_none_match_gives_304(lab: Site) -> None:
    first = get(lab, "lab.test", "/cached")
    etag = first.header("ETag")
    assert etag is not None and etag.startswith('"')
    again = get(lab, "lab.test", "/cached", **{"If-None-Match": etag})
    assert again.status == 304
    assert again.body == b""
    assert again.header("ETag") == etag
    weak = get(lab, "lab.test", "/cached", **{"If-None-Match": f'"x", W/{etag}'})
    assert weak.status == 304
    assert get(lab, "lab.test", "/cached", **{"If-None-Match": "*"}).status == 304
    assert get(lab, "lab.test", "/cached", **{"If-None-Match": '"other"'}).status == 200


def test_last_modified_if_modified_since(lab: Site) -> None:
    first = get(lab, "lab.test", "/cached")
    modified = first.header("Last-Modified")
    assert modified is not None
    assert get(lab, "lab.test", "/cached", **{"If-Modified-Since": modified}).status == 304
    stamp = email.utils.parsedate_to_datetime(modified)
    older = email.utils.format_datetime(stamp - dt.timedelta(days=1), usegmt=True)
    assert get(lab, "lab.test", "/cached", **{"If-Modified-Since": older}).status == 200
    assert get(lab, "lab.test", "/cached", **{"If-Modified-Since": "garbage"}).status == 200
    # If-None-Match wins over If-Modified-Since.
    both = {"If-None-Match": '"other"', "If-Modified-Since": modified}
    assert get(lab, "lab.test", "/cached", **both).status == 200


def test_pages_without_validators(lab: Site) -> None:
    reply = get(lab, "lab.test", "/no-validators")
    assert reply.header("ETag") is None and reply.header("Last-Modified") is None
    assert get(lab, "lab.test", "/no-validators", **{"If-None-Match": "*"}).status == 200


def test_changing_page_differs_per_visit_and_defeats_validators(lab: Site) -> None:
    first = get(lab, "lab.test", "/changing")
    second = get(lab, "lab.test", "/changing", **{"If-None-Match": first.header("ETag") or ""})
    assert second.status == 200
    assert first.body != second.body
    distance = Simhash(visible_text(first.body)).distance(Simhash(visible_text(second.body)))
    assert distance > NEAR_DUPLICATE_BITS
    minor0 = lab.render("lab.test", "/counter", visit=0)
    minor1 = lab.render("lab.test", "/counter", visit=1)
    assert minor0.body != minor1.body
    assert b"visit number 1" in minor1.body
    close = Simhash(visible_text(minor0.body)).distance(Simhash(visible_text(minor1.body)))
    assert close <= NEAR_DUPLICATE_BITS


# --- robots variants ------------------------------------------------------------------

def test_robots_variants(lab: Site) -> None:
    delay = lab.render("delay.test", "/robots.txt").body.decode()
    assert "Crawl-delay: 2" in delay
    assert f"Sitemap: http://delay.test:{PORT}/sitemap.xml" in delay
    rules = Protego.parse(delay)
    assert rules.crawl_delay("PoliteCrawler") == 2.0
    assert not rules.can_fetch("http://delay.test/private/x", "PoliteCrawler")
    assert rules.can_fetch("http://delay.test/private/ok", "PoliteCrawler")
    assert lab.render("robots404.test", "/robots.txt").status == 404
    assert lab.render("robots500.test", "/robots.txt").status == 500
    assert lab.render("robots503.test", "/robots.txt").status == 503
    slow = lab.render("robots-slow.test", "/robots.txt")
    assert (slow.status, slow.delay) == (200, 60.0)


def test_oversize_robots_hides_a_rule_past_500_kib(lab: Site) -> None:
    body = lab.render("robots-big.test", "/robots.txt").body
    assert len(body) > 512_000
    assert body.rstrip().endswith(b"Disallow: /beyond-limit/")
    assert b"beyond-limit" not in body[:512_000]
    head = Protego.parse(body[:512_000].decode())
    assert not head.can_fetch("http://robots-big.test/private/x", "PoliteCrawler")
    assert head.can_fetch("http://robots-big.test/beyond-limit/x", "PoliteCrawler")


# --- traps ----------------------------------------------------------------------------

def test_session_trap_links_fresh_session_ids(lab: Site) -> None:
    seen: set[str] = set()
    frontier = ["/s/page1?sid=start"]
    for _ in range(4):
        nxt = []
        for target in frontier:
            reply = lab.render("traps.test", target)
            assert reply.status == 200
            links = hrefs(reply.body)
            assert len(links) == 3 and all("sid=" in h for h in links)
            nxt += [h for h in links if h not in seen]
            seen.update(links)
        frontier = nxt
    assert len(seen) == 3 + 9 + 27 + 81  # every link is new: the trap never closes


def test_repeat_trap_grows_the_path(lab: Site) -> None:
    reply = lab.render("traps.test", "/r/more/more/more/")
    assert reply.status == 200
    assert hrefs(reply.body) == ["more/"]


def test_params_trap_explodes(lab: Site) -> None:
    targets = {"/search?q=shoes"}
    for _ in range(3):
        targets |= {h for t in list(targets) for h in hrefs(lab.render("traps.test", t).body)}
    assert len(targets) > 20
    assert any("page=4" in t for t in targets)
    assert any("colour=" in t or "size=" in t or "brand=" in t or "sort=" in t for t in targets)


def test_trap_pages_are_not_near_duplicates(news: Site) -> None:
    days = [f"/day/2026-03-{d:02d}" for d in range(1, 21)]
    hashes = [Simhash(visible_text(news.render("trap.test", d).body)) for d in days]
    assert min(a.distance(b) for a, b in itertools.combinations(hashes, 2)) > \
        NEAR_DUPLICATE_BITS


def test_links_helper_matches_rendered_links(news: Site) -> None:
    for target in ("/", "/story/3", "/day/2026-01-05"):
        host = "trap.test" if target.startswith("/day/") else "news.test"
        assert news.links(host, target) == hrefs(news.render(host, target).body)


def test_small_custom_scenario() -> None:
    scenario = Scenario(name="t", seed=1, hosts=(Host(name="a.test", pages=(
        Page(path="/", links=("/x",), title="Home", words=10),
        Page(path="/x?only=1", body="exact query", content_type="text/plain"),
    )),))
    site = Site(scenario)
    assert site.render("a.test", "/x?only=1").body == b"exact query"
    assert site.render("a.test", "/x").status == 404
    assert b"<title>Home</title>" in site.render("a.test", "/").body


def test_the_command_line_prints_seed_urls_for_a_port(
        capsys: pytest.CaptureFixture[str]) -> None:
    from simweb.__main__ import main

    assert main(["seeds", "--scenario", "seed", "--port", "8081"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [u.replace(".test/", ".test:8081/", 1) for u in build_seed().seeds]


def test_pages_change_on_their_own_schedule_of_the_clock() -> None:
    now = [1_800_000_000.0]
    hosts = (Host(name="clock.test", pages=(Page(path="/hourly", change_every=3600.0),
                                             Page(path="/never"))),)
    site = Site(Scenario(name="c", hosts=hosts), PORT, clock=lambda: now[0])
    first = get(site, "clock.test", "/hourly")
    stable = get(site, "clock.test", "/never")
    assert get(site, "clock.test", "/hourly").body == first.body  # the same hour
    etag = first.header("ETag") or ""
    assert get(site, "clock.test", "/hourly", **{"If-None-Match": etag}).status == 304
    now[0] += 3600.0
    later = get(site, "clock.test", "/hourly", **{"If-None-Match": etag})
    assert later.status == 200 and later.body != first.body
    assert later.header("Last-Modified") == "Fri, 15 Jan 2027 09:00:00 GMT"  # its hour
    assert get(site, "clock.test", "/never").body == stable.body
    with pytest.raises(ValueError, match="change_every"):
        Page(path="/x", change_every=60.0, changes="major")
