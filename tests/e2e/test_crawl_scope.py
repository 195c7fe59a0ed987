"""Crawl scope end to end: an embedded crawl of the simulated web, whose pages link to
other hosts, keeps to its scope; the hosts outside it receive no request at all (not
even for robots.txt), as the server's own request log shows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common.messages import Reason
from crawler import cli
from simweb import Page, SimWeb
from tests.e2e.crawl_support import DELAY, hits, host, key, run, scenario, settings_for

SITE = scenario(
    host("docs.test",
         Page(path="/", links=("/guide/", "/blog/", "http://www.docs.test/",
                               "http://other.test/", "http://docs.other.test/guide/"),
              words=40),
         Page(path="/guide/", links=("/guide/a", "http://other.test/x"), words=40),
         Page(path="/guide/a", links=("/", "/blog/", "http://www.docs.test/w"), words=40),
         Page(path="/blog/", links=("/blog/1",), words=40),
         Page(path="/blog/1", words=40)),
    host("www.docs.test",
         Page(path="/", links=("/w",), words=40),
         Page(path="/w", links=("http://other.test/",), words=40)),
    host("other.test",
         Page(path="/", links=("/x",), words=40),
         Page(path="/x", words=40)),
    host("docs.other.test",
         Page(path="/guide/", words=40)),
    name="scope",
)


@pytest.mark.timeout(60)
async def test_seed_hosts_send_no_request_outside_the_seeds_hosts(tmp_path: Path) -> None:
    async with SimWeb(SITE, dns=True) as web:
        out = await run(web, tmp_path, ["docs.test/"], scope={"mode": "seed-hosts"})
        log = {name: hits(web, name, robots=True)
               for name in ("docs.test", "www.docs.test", "other.test", "docs.other.test")}

    assert sorted(r.path for r in log["docs.test"]) == [
        "/", "/blog/", "/blog/1", "/guide/", "/guide/a", "/robots.txt"]
    assert log["www.docs.test"] == [] and log["other.test"] == []
    assert log["docs.other.test"] == []
    cut = {r.url for r in out.with_reason(Reason.OUT_OF_SCOPE)}
    assert cut == {key(web, "www.docs.test/"), key(web, "www.docs.test/w"),
                   key(web, "other.test/"), key(web, "other.test/x"),
                   key(web, "docs.other.test/guide/")}
    assert out.stats.out_of_scope == len(cut) and out.stats.fetched == 5
    assert out.stats.queued == 0


@pytest.mark.timeout(60)
async def test_the_default_scope_follows_every_host(tmp_path: Path) -> None:
    async with SimWeb(SITE, dns=True) as web:
        out = await run(web, tmp_path, ["docs.test/"])
        counts = {name: len(hits(web, name)) for name in
                  ("docs.test", "www.docs.test", "other.test", "docs.other.test")}

    assert counts == {"docs.test": 5, "www.docs.test": 2, "other.test": 2,
                      "docs.other.test": 1}
    assert out.stats.out_of_scope == 0


@pytest.mark.timeout(60)
async def test_seed_domains_with_no_parent_from_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with SimWeb(SITE, dns=True) as web:
        settings = settings_for(web, tmp_path)
        code = await asyncio.to_thread(cli.main, [
            "crawl", web.url("docs.test", "/guide/"), "--out", str(tmp_path), "--no-progress",
            "--delay", str(DELAY), "--allow-network", "127.0.0.1/32",
            *[arg for server in settings.fetcher.dns_servers for arg in ("--dns", server)],
            "--scope", "seed-domains", "--no-parent", "--deny-domain", "other.test"])
        output = capsys.readouterr().out
        paths = {name: sorted(r.path for r in hits(web, name)) for name in
                 ("docs.test", "www.docs.test", "other.test", "docs.other.test")}

    assert code == 0, output
    # docs.test stays under its seed's folder; www.docs.test, in the seed's registered
    # domain, has no seed of its own and is crawled whole; other.test is denied
    assert paths == {"docs.test": ["/guide/", "/guide/a"], "www.docs.test": ["/w"],
                     "other.test": [], "docs.other.test": []}
    out_of_scope = next(line for line in output.splitlines()
                        if line.startswith("out of scope"))
    assert out_of_scope.split()[-1] == "4"  # docs.test/ and /blog/, other.test/ and /x


@pytest.mark.timeout(60)
async def test_the_operator_sets_the_scope_through_the_api(tmp_path: Path) -> None:
    import json

    import aiohttp

    from crawler.embedded import EmbeddedCrawler

    token = "scope-token"
    headers = {"Authorization": f"Bearer {token}"}
    async with SimWeb(SITE, dns=True) as web, aiohttp.ClientSession() as session:
        settings = settings_for(web, tmp_path, api={"token": token},
                                scope={"deny_domains": ("docs.other.test",)})
        crawler = EmbeddedCrawler(settings, serve_api=True)
        await crawler.start()
        assert crawler.api is not None
        base = f"http://127.0.0.1:{crawler.api.port}/v1"

        async def call(method: str, path: str, body: object = None) -> tuple[int, object]:
            async with session.request(method, base + path, headers=headers,
                                       data=None if body is None else json.dumps(body)) as r:
                return r.status, await r.json()

        try:
            assert await call("GET", "/scope") == (200, {
                "mode": "any", "allowDomains": [], "denyDomains": ["docs.other.test"],
                "pathPrefixes": [], "noParent": False, "source": "settings"})
            status, bad = await call("PUT", "/scope", {"denyDomains": ["http://x.test/"]})
            assert status == 422 and "denyDomains" in str(bad)
            assert await call("PUT", "/scope", {"mode": "seed-hosts",
                                                "allowDomains": ["WWW.docs.test"]}) == (
                200, {"mode": "seed-hosts", "allowDomains": ["www.docs.test"],
                      "denyDomains": ["docs.other.test"], "pathPrefixes": [],
                      "noParent": False, "source": "operator"})
            status, _ = await call("POST", "/seeds", {"urls": [web.url("docs.test")]})
            assert status == 202
            await asyncio.wait_for(crawler.wait(), 30)
            status, stats = await call("GET", "/stats")
            assert (await crawler.store.get_control()).scope is not None
            reset = await call("DELETE", "/scope")
        finally:
            await crawler.close()
        counts = {name: len(hits(web, name, robots=True)) for name in
                  ("docs.test", "www.docs.test", "other.test", "docs.other.test")}

    assert counts["other.test"] == 0 and counts["docs.other.test"] == 0
    assert counts["www.docs.test"] == 3  # robots.txt, / and /w: allowed by the operator
    assert isinstance(stats, dict) and stats["out_of_scope"] == 3
    assert reset == (200, {"mode": "any", "allowDomains": [],
                           "denyDomains": ["docs.other.test"], "pathPrefixes": [],
                           "noParent": False, "source": "settings"})
