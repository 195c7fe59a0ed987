"""Crawl scope: the rules' entries, the pure verdict (hosts, registered domains, ports,
IDN, public suffixes, path prefixes) and the frontier that records seeds and applies
the verdict to discovered and queued URLs, in embedded and cluster mode."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from common.adapters.memory_bus import MemoryBus
from common.adapters.sqlite_store import SqliteStateStore
from common.messages import Discovered, FetchTask, Link, LinkKind, Reason, Topic, UrlStatus
from common.ports import CrawlControl, Delivery, ScopeRules, SeedRoot
from common.scope import (
    SCOPE_MODES,
    checked_rules,
    domain_entry,
    path_prefix_entry,
    rules_from_settings,
    seed_root,
)
from common.settings import ScopeSettings, Settings, SettingsError
from crawler.api import ApiError, parse_scope_update, scope_json
from frontier.scope import RECORDED_ROOTS, SeedRegistry, scope_verdict, under_prefix
from frontier.service import Frontier
from frontier.stats import stats_from_counts


def roots(*urls: str) -> list[SeedRoot]:
    return [seed_root(u) for u in urls]


def verdict(url: str, rules: ScopeRules, seeds: list[SeedRoot] | None = None) -> str | None:
    from urllib.parse import urlsplit

    from common import urls

    canonical = urls.canonicalize(url)
    return scope_verdict(urls.host_key(canonical), urlsplit(canonical).path, rules,
                         seeds or [])


# ------------------------------------------------------------------ entries


@pytest.mark.parametrize(("entry", "normal"), [
    ("Example.ORG", "example.org"),
    (".example.org", "example.org"),
    ("*.example.org", "example.org"),
    ("example.org.", "example.org"),
    ("bücher.example", "xn--bcher-kva.example"),
    ("BÜCHER.example", "xn--bcher-kva.example"),
    ("127.0.0.1", "127.0.0.1"),
    ("[::1]", "[::1]"),
    ("co.uk", "co.uk"),
    ("under_score.test", "under_score.test"),
])
def test_domain_entries_are_normalised(entry: str, normal: str) -> None:
    assert domain_entry(entry) == normal


@pytest.mark.parametrize("entry", ["", ".", "http://example.org/", "example.org/docs",
                                   "example.org:8080", "exa mple.org", "-bad.org",
                                   "a" * 64 + ".org", "[nope]", "a..b"])
def test_bad_domain_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match=r"domain|IPv6|port|URL"):
        domain_entry(entry)


@pytest.mark.parametrize(("entry", "normal"), [
    ("/docs", "/docs"),
    ("/docs/", "/docs"),
    ("/", "/"),
    ("/a/./b/../c/", "/a/c"),
    ("/%7Euser", "/~user"),
    ("/ünï", "/%C3%BCn%C3%AF"),
])
def test_path_prefixes_are_normalised_like_canonical_paths(entry: str, normal: str) -> None:
    assert path_prefix_entry(entry) == normal


@pytest.mark.parametrize("entry", ["docs", "/docs?x=1", "/docs#top", "/a b", "/" + "x" * 1000])
def test_bad_path_prefixes_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="path prefix"):
        path_prefix_entry(entry)


def test_settings_name_the_variable_at_fault() -> None:
    assert ScopeSettings.__dataclass_fields__["mode"].metadata["choices"] == SCOPE_MODES
    s = Settings.from_env({"CRAWLER_SCOPE_MODE": "seed-domains",
                           "CRAWLER_SCOPE_ALLOW_DOMAINS": ".Example.org,bücher.example",
                           "CRAWLER_SCOPE_PATH_PREFIXES": "/docs/",
                           "CRAWLER_SCOPE_NO_PARENT": "yes"})
    assert rules_from_settings(s.scope) == ScopeRules(
        mode="seed-domains", allow_domains=("example.org", "xn--bcher-kva.example"),
        path_prefixes=("/docs",), no_parent=True)
    for variable, value in (("CRAWLER_SCOPE_MODE", "hosts"),
                            ("CRAWLER_SCOPE_ALLOW_DOMAINS", "http://a.org/"),
                            ("CRAWLER_SCOPE_DENY_DOMAINS", "a.org:80"),
                            ("CRAWLER_SCOPE_PATH_PREFIXES", "docs")):
        with pytest.raises(SettingsError, match=variable):
            Settings.from_env({variable: value})


# ------------------------------------------------------------------ verdicts

SEEDS = roots("https://docs.example.co.uk/guide/index.html", "http://blog.test:8080/")


@pytest.mark.parametrize(("url", "expected"), [
    ("https://docs.example.co.uk/guide/x", None),
    ("http://docs.example.co.uk:8443/x", None),  # the port does not matter
    ("https://DOCS.Example.co.uk/", None),
    ("https://www.example.co.uk/", "not a seed host"),  # another host of the domain
    ("https://example.co.uk/", "not a seed host"),
    ("http://blog.test/", None),  # seed on :8080, link on :80
    ("http://www.blog.test:8080/", "not a seed host"),
    ("https://other.org/", "not a seed host"),
])
def test_seed_hosts(url: str, expected: str | None) -> None:
    assert verdict(url, ScopeRules(mode="seed-hosts"), SEEDS) == expected


@pytest.mark.parametrize(("url", "expected"), [
    ("https://www.example.co.uk/", None),  # co.uk is a public suffix: example.co.uk
    ("https://example.co.uk/", None),
    ("https://a.b.docs.example.co.uk:9000/", None),
    ("https://other.co.uk/", "not under a seed's domain"),  # not all of co.uk
    ("https://example.com/", "not under a seed's domain"),
    ("http://www.blog.test:8080/", None),  # a suffix not on the list: last two labels
])
def test_seed_domains_use_the_public_suffix_list(url: str, expected: str | None) -> None:
    assert verdict(url, ScopeRules(mode="seed-domains"), SEEDS) == expected


def test_seed_domains_respect_private_suffixes() -> None:
    seeds = roots("https://alice.github.io/")
    rules = ScopeRules(mode="seed-domains")
    assert verdict("https://www.alice.github.io/x", rules, seeds) is None
    assert verdict("https://bob.github.io/", rules, seeds) == "not under a seed's domain"
    assert verdict("https://github.io/", rules, seeds) == "not under a seed's domain"


def test_idn_hosts_match_their_unicode_entries() -> None:
    rules = checked_rules(allow_domains=["bücher.example"])
    assert verdict("http://www.bücher.example/", rules) is None
    assert verdict("http://xn--bcher-kva.example/", rules) is None
    assert verdict("http://bucher.example/", rules) == "not an allowed domain"
    seeds = roots("http://BÜCHER.example/a/")
    assert verdict("http://bücher.example/b", ScopeRules(mode="seed-hosts"), seeds) is None


def test_allow_and_deny_cover_subdomains_not_lookalikes() -> None:
    rules = checked_rules(allow_domains=["example.org"], deny_domains=["ads.example.org"])
    assert verdict("http://example.org/", rules) is None
    assert verdict("http://a.b.example.org:8080/", rules) is None
    assert verdict("http://badexample.org/", rules) == "not an allowed domain"
    assert verdict("http://example.org.evil.test/", rules) == "not an allowed domain"
    assert verdict("http://ads.example.org/", rules) == "denied domain"
    assert verdict("http://x.ads.example.org/", rules) == "denied domain"
    # an allowed domain widens seed-hosts; a deny wins over a seed host
    seeds = roots("http://docs.test/")
    widened = checked_rules(mode="seed-hosts", allow_domains=["cdn.test"],
                            deny_domains=["docs.test"])
    assert verdict("http://img.cdn.test/", widened, seeds) is None
    assert verdict("http://docs.test/x", widened, seeds) == "denied domain"
    assert verdict("http://other.test/", widened, seeds) == "not a seed host"


def test_mode_any_follows_everything_by_default() -> None:
    assert verdict("http://anything.test/x", ScopeRules()) is None
    assert verdict("http://anything.test/x", ScopeRules(mode="any"), SEEDS) is None


@pytest.mark.parametrize(("path", "prefix", "under"), [
    ("/docs", "/docs", True),
    ("/docs/", "/docs", True),
    ("/docs/a/b", "/docs", True),
    ("/docsx", "/docs", False),
    ("/docs-old/a", "/docs", False),
    ("/doc", "/docs", False),
    ("/", "/docs", False),
    ("/anything", "/", True),
])
def test_path_prefixes_end_at_a_segment_boundary(path: str, prefix: str, under: bool) -> None:
    assert under_prefix(path, prefix) is under
    rules = checked_rules(path_prefixes=[prefix])
    assert (verdict(f"http://a.test{path}", rules) is None) is under


def test_no_parent_keeps_a_seed_host_under_its_seeds_folders() -> None:
    seeds = roots("https://a.test/docs/guide/index.html", "https://a.test/api/v2/",
                  "https://b.test/start")
    rules = ScopeRules(mode="seed-domains", no_parent=True)
    assert verdict("https://a.test/docs/guide/", rules, seeds) is None
    assert verdict("https://a.test/docs/guide", rules, seeds) is None
    assert verdict("https://a.test/docs/guide/deep/x.html", rules, seeds) is None
    assert verdict("https://a.test/api/v2/users", rules, seeds) is None
    assert verdict("https://a.test/docs/", rules, seeds) == "above its seeds' folders"
    assert verdict("https://a.test/docs/guidex", rules, seeds) == "above its seeds' folders"
    assert verdict("https://a.test/", rules, seeds) == "above its seeds' folders"
    assert verdict("https://b.test/anything", rules, seeds) is None  # seed in /
    # a host of the domain without seeds of its own is not limited by them
    assert verdict("https://www.a.test/x", rules, seeds) is None


def test_seed_roots_record_host_and_folder() -> None:
    assert seed_root("https://Docs.Example.co.uk:8443/guide/index.html?x=1") == SeedRoot(
        domain="example.co.uk", host="docs.example.co.uk", path="/guide/")
    assert seed_root("http://[::1]:8080/a") == SeedRoot(domain="[::1]", host="[::1]",
                                                       path="/")
    assert seed_root("http://127.0.0.1/x/") == SeedRoot(domain="127.0.0.1",
                                                       host="127.0.0.1", path="/x/")


def test_out_of_scope_urls_are_counted() -> None:
    stats = stats_from_counts({("rejected", "out_of_scope"): 5, ("rejected", "blocked"): 1},
                              fetched=0, hosts=1, hosts_capped=0)
    assert stats.out_of_scope == 5 and stats.blocked == 1


# ------------------------------------------------------------------ API body


def test_scope_updates_merge_and_are_checked() -> None:
    base = ScopeRules(mode="seed-hosts", deny_domains=("ads.test",))
    got = parse_scope_update(b'{"allowDomains": ["CDN.test", "cdn.test"], "noParent": true}',
                             base)
    assert got == ScopeRules(mode="seed-hosts", allow_domains=("cdn.test",),
                             deny_domains=("ads.test",), no_parent=True)
    assert scope_json(got, "operator") == {
        "mode": "seed-hosts", "allowDomains": ["cdn.test"], "denyDomains": ["ads.test"],
        "pathPrefixes": [], "noParent": True, "source": "operator"}
    assert parse_scope_update(b'{"mode": "any", "denyDomains": []}', base) == ScopeRules()
    for body, status, text in ((b"{}", 422, "at least one"),
                               (b'{"mode": "hosts"}', 422, "mode"),
                               (b'{"allowDomains": ["http://x.test/"]}', 422,
                                "allowDomains: expected a domain name"),
                               (b'{"pathPrefixes": ["docs"]}', 422, "pathPrefixes"),
                               (b'{"scope": "any"}', 422, "unknown field"),
                               (b'{"mode": ', 400, "JSON")):
        with pytest.raises(ApiError) as err:
            parse_scope_update(body, base)
        assert err.value.status == status and text in err.value.message, err.value.message


# ------------------------------------------------------------------ the frontier


def _settings(**scope: object) -> Settings:
    return Settings().replace(politeness={"default_delay": 0.0,
                                          "max_in_flight_per_host": 8}, scope=scope)


async def _offer(frontier: Frontier, host: str, *links: Link) -> None:
    await frontier.handle(Delivery(topic=Topic.DISCOVERED, key=host,
                                   message=Discovered(host=host, links=list(links))))


def _seed(url: str) -> Link:
    return Link(url=url, depth=0, kind=LinkKind.SEED)


def _link(url: str) -> Link:
    return Link(url=url, depth=1, source="http://seed.test/")


async def _row_reason(store: SqliteStateStore, url: str) -> Reason | None:
    from common import urls

    row = await store.get_url(urls.host_key(url), url)
    assert row is not None, url
    return row.reason


async def test_seeds_are_recorded_and_links_judged(store: SqliteStateStore) -> None:
    frontier = Frontier(_settings(mode="seed-hosts"), MemoryBus(), store)
    await _offer(frontier, "seed.test", _seed("http://seed.test/docs/"))
    assert await store.seed_roots("seed.test") == [
        SeedRoot(domain="seed.test", host="seed.test", path="/docs/")]
    await _offer(frontier, "seed.test", _link("http://seed.test/a"))
    await _offer(frontier, "out.test", _link("http://out.test/a"))
    # a seed is always in scope, and its redirect target becomes a seed root
    await _offer(frontier, "www.seed2.test", _seed("http://www.seed2.test/x"))
    await _offer(frontier, "moved.test", Link(url="http://moved.test/new/", depth=0,
                                              kind=LinkKind.REDIRECT, hops=1))
    await _offer(frontier, "moved.test", _link("http://moved.test/b"))
    assert await _row_reason(store, "http://seed.test/a") is None
    assert await _row_reason(store, "http://www.seed2.test/x") is None
    assert await _row_reason(store, "http://moved.test/b") is None
    assert await _row_reason(store, "http://out.test/a") is Reason.OUT_OF_SCOPE
    row = await store.get_url("out.test", "http://out.test/a")
    assert row is not None and row.status is UrlStatus.REJECTED
    assert row.detail == "out of scope: not a seed host"
    assert frontier.counters.rejected["out_of_scope"] == 1


async def test_the_scope_default_keeps_todays_behaviour(store: SqliteStateStore) -> None:
    frontier = Frontier(_settings(), MemoryBus(), store)
    await _offer(frontier, "seed.test", _seed("http://seed.test/"))
    await _offer(frontier, "out.test", _link("http://out.test/a"))
    assert await _row_reason(store, "http://out.test/a") is None


async def test_a_resumed_crawl_remembers_its_seeds(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    async with SqliteStateStore(path) as first:
        await _offer(Frontier(_settings(mode="seed-domains"), MemoryBus(), first),
                     "docs.example.co.uk", _seed("https://docs.example.co.uk/"))
    async with SqliteStateStore(path) as second:
        frontier = Frontier(_settings(mode="seed-domains"), MemoryBus(), second)
        await _offer(frontier, "www.example.co.uk", _link("https://www.example.co.uk/a"))
        await _offer(frontier, "other.co.uk", _link("https://other.co.uk/a"))
        assert await _row_reason(second, "https://www.example.co.uk/a") is None
        assert await _row_reason(second, "https://other.co.uk/a") is Reason.OUT_OF_SCOPE


async def test_cluster_frontiers_see_seeds_another_one_recorded(
        store: SqliteStateStore) -> None:
    # two frontiers over one store, each owning different partitions: the owner of
    # docs.example.org records the seed; the owner of www.example.org, which read the
    # domain's seed roots before that, reads them again before rejecting a link
    bus = MemoryBus(Settings().bus, partitions=8)
    settings = _settings(mode="seed-domains")
    a = Frontier(settings, bus, store, embedded=False)
    b = Frontier(settings, bus, store, embedded=False)
    part_docs = bus.partition_of(Topic.DISCOVERED, "docs.example.org")
    part_www = bus.partition_of(Topic.DISCOVERED, "www.example.org")
    assert part_docs != part_www
    await a.assign(frozenset({part_docs}))
    await b.assign(frozenset({part_www}))
    await _offer(b, "www.example.org", _link("http://www.example.org/early"))
    assert await _row_reason(store, "http://www.example.org/early") is Reason.OUT_OF_SCOPE
    await _offer(a, "docs.example.org", _seed("http://docs.example.org/"))
    await _offer(b, "www.example.org", _link("http://www.example.org/late"))
    assert await _row_reason(store, "http://www.example.org/late") is None


async def test_seed_registry_in_cluster_mode_reads_again_once_per_batch(
        store: SqliteStateStore) -> None:
    registry = SeedRegistry(store, complete=False)
    rules = ScopeRules(mode="seed-hosts")
    reread: set[str] = set()
    assert await registry.verdict("http://x.a.test/", "x.a.test", rules, reread) == (
        "not a seed host")
    assert reread == {"a.test"}
    await store.add_seed_roots(roots("http://x.a.test/"))  # by another frontier
    # the same batch does not read again; the next one does
    assert await registry.verdict("http://x.a.test/", "x.a.test", rules, reread) == (
        "not a seed host")
    assert await registry.verdict("http://x.a.test/", "x.a.test", rules, set()) is None


async def test_the_operator_scope_applies_to_queued_urls_at_dispatch(
        store: SqliteStateStore) -> None:
    bus = MemoryBus()
    bus.declare_group("fetcher", (Topic.FETCH,))
    frontier = Frontier(_settings(), bus, store)
    await _offer(frontier, "seed.test", _seed("http://seed.test/"))
    await _offer(frontier, "seed.test", _link("http://seed.test/docs/a"),
                 _link("http://seed.test/blog/a"))
    await _offer(frontier, "out.test", _link("http://out.test/a"))
    frontier.apply_control(CrawlControl(scope=checked_rules(mode="seed-hosts",
                                                            path_prefixes=["/docs"])))
    assert frontier.scope.path_prefixes == ("/docs",)

    got: list[FetchTask] = []
    enough = asyncio.Event()

    async def collect(delivery: Delivery) -> None:
        assert isinstance(delivery.message, FetchTask)
        got.append(delivery.message)
        if len(got) >= 2:
            enough.set()

    consumer = asyncio.create_task(bus.consume("fetcher", (Topic.FETCH,), collect))
    runner = asyncio.create_task(frontier.run())
    try:
        await asyncio.wait_for(enough.wait(), 10)
        await asyncio.sleep(0.2)  # room for a task that should not come
    finally:
        await frontier.stop()
        await bus.stop()
        await asyncio.wait_for(asyncio.gather(consumer, runner), 10)
    # the seed itself is always in scope, even outside the path prefixes
    assert sorted(t.url for t in got) == ["http://seed.test/", "http://seed.test/docs/a"]
    assert await _row_reason(store, "http://seed.test/blog/a") is Reason.OUT_OF_SCOPE
    assert await _row_reason(store, "http://out.test/a") is Reason.OUT_OF_SCOPE
    # back to the settings' scope
    frontier.apply_control(CrawlControl(scope=None))
    assert frontier.scope == ScopeRules()


def test_scope_rules_survive_the_control_row() -> None:
    from common.ports import decode_control, encode_control

    control = CrawlControl(scope=checked_rules(mode="seed-domains", deny_domains=["a.b"]))
    assert decode_control(encode_control(control)) == control
    assert decode_control('{"paused": true}').scope is None  # a row of an older version
    assert msgspec.json.decode(encode_control(control))["scope"]["mode"] == "seed-domains"


async def test_a_stored_scope_that_does_not_check_is_ignored(
        store: SqliteStateStore, caplog: pytest.LogCaptureFixture) -> None:
    frontier = Frontier(_settings(mode="seed-hosts"), MemoryBus(), store)
    frontier.apply_control(CrawlControl(scope=ScopeRules(mode="everything")))
    assert "crawl scope ignored" in caplog.text
    assert frontier.scope == ScopeRules(mode="seed-hosts")
    frontier.apply_control(CrawlControl(scope=ScopeRules(allow_domains=("A.test",))))
    assert frontier.scope == ScopeRules(allow_domains=("a.test",))  # normalised


async def test_the_memory_of_recorded_roots_is_bounded(store: SqliteStateStore) -> None:
    """A crawl may have millions of seeds: the roots a registry remembers writing stay
    within its capacity, while the store keeps every one."""
    registry = SeedRegistry(store, complete=True)
    roots = [SeedRoot(domain="many.test", host="many.test", path=f"/item/{i}/")
             for i in range(RECORDED_ROOTS + 100)]
    await registry.add(roots)
    assert len(registry._recorded) == RECORDED_ROOTS
    assert len(await store.seed_roots("many.test")) == len(roots)
    await registry.add(roots[:5])  # forgotten, so written again: harmless
    assert len(await store.seed_roots("many.test")) == len(roots)
