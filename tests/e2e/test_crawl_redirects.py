"""Redirects and the SSRF guard end to end: every hop goes back through the frontier
(robots.txt and politeness apply to it), chains are capped, loops end, and no link or
redirect reaches an address outside the allowed networks."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from common.messages import Reason, UrlStatus
from simweb import Host, Page, SimWeb
from simweb.model import Robots
from simweb.scenarios import features
from tests.e2e.crawl_support import DELAY, hits, host, key, paths, run, scenario


def lab_pages(prefix: str) -> list[Page]:
    return [p for p in features().host("lab.test").pages if p.path.startswith(prefix)]


@pytest.mark.timeout(60)
async def test_redirect_chain_is_followed_hop_by_hop(tmp_path: Path) -> None:
    site = host("hops.test",
                Page(path="/start", status=301, redirect="/h1"),
                Page(path="/h1", status=302, redirect="/h2"),
                Page(path="/h2", status=307, redirect="/h3"),
                Page(path="/h3", status=308, redirect="/end"),
                Page(path="/end", words=100))
    async with SimWeb(scenario(site), dns=True) as web:
        out = await run(web, tmp_path, ["hops.test/start"])
        log = hits(web, "hops.test")
        gaps = web.log.gaps("hops.test")

    assert [(r.path, r.status) for r in log] == [
        ("/start", 301), ("/h1", 302), ("/h2", 307), ("/h3", 308), ("/end", 200)]
    assert min(gaps) >= DELAY, gaps  # politeness between hops
    chain = ["/start", "/h1", "/h2", "/h3", "/end"]
    for hop, (path, nxt) in enumerate(itertools.pairwise(chain)):
        row = out.row(key(web, "hops.test" + path))
        assert (row.status, row.reason) == (UrlStatus.DONE, Reason.REDIRECTED)
        assert row.detail == key(web, "hops.test" + nxt) and row.hops == hop
    end = out.row(key(web, "hops.test/end"))
    assert (end.status, end.reason, end.hops) == (UrlStatus.DONE, None, 4)
    assert end.record is not None and end.source == key(web, "hops.test/h3")
    assert [p["url"] for p in out.pages()] == [end.url]
    assert out.stats.redirects == 4 and out.stats.kept == 1


@pytest.mark.timeout(60)
async def test_redirect_chain_longer_than_the_cap_ends(tmp_path: Path) -> None:
    # lab.test's /chain/1 needs six hops to reach /chain/7
    hops = 3
    async with SimWeb(scenario(host("lab.test", *lab_pages("/chain/"))), dns=True) as web:
        out = await run(web, tmp_path, ["lab.test/chain/1"],
                        traps={"max_redirect_hops": hops})
        log = hits(web, "lab.test")

    assert paths(log) == [f"/chain/{n}" for n in range(1, hops + 2)]
    last = out.row(key(web, f"lab.test/chain/{hops + 1}"))
    assert (last.status, last.reason) == (UrlStatus.REJECTED, Reason.REDIRECT_CAP)
    assert last.detail == key(web, f"lab.test/chain/{hops + 2}")
    assert key(web, f"lab.test/chain/{hops + 2}") not in out.rows
    assert out.stats.trap_cut == 1 and out.stats.kept == 0


@pytest.mark.timeout(60)
async def test_redirect_loop_ends_at_the_known_url(tmp_path: Path) -> None:
    async with SimWeb(scenario(host("lab.test", *lab_pages("/loop/"))), dns=True) as web:
        out = await run(web, tmp_path, ["lab.test/loop/a"])
        log = hits(web, "lab.test")

    assert paths(log) == ["/loop/a", "/loop/b"]  # /loop/a again is already known
    for path in ("/loop/a", "/loop/b"):
        row = out.row(key(web, "lab.test" + path))
        assert (row.status, row.reason) == (UrlStatus.DONE, Reason.REDIRECTED)
    assert out.stats.queued == 0 and out.stats.known_urls == 2


@pytest.mark.timeout(60)
async def test_cross_host_redirect_obeys_the_target_robots(tmp_path: Path) -> None:
    source = host("from.test",
                  Page(path="/go", status=301, redirect="http://to.test/private/x"),
                  Page(path="/go2", status=302, redirect="http://to.test/ok"))
    target = host("to.test", Page(path="/private/x", words=80), Page(path="/ok", words=80),
                  robots=Robots(disallow=("/private/",)))
    async with SimWeb(scenario(source, target), dns=True) as web:
        out = await run(web, tmp_path, ["from.test/go", "from.test/go2"])
        to_log = web.log.records("to.test")

    assert paths(to_log) == ["/robots.txt", "/ok"]
    blocked = out.row(key(web, "to.test/private/x"))
    assert (blocked.status, blocked.reason) == (UrlStatus.REJECTED, Reason.ROBOTS)
    assert blocked.source == key(web, "from.test/go") and blocked.hops == 1
    ok = out.row(key(web, "to.test/ok"))
    assert (ok.status, ok.reason, ok.hops) == (UrlStatus.DONE, None, 1)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(60)
async def test_ssrf_links_and_redirects_are_refused(tmp_path: Path) -> None:
    port = free_port()
    literal = f"http://127.0.0.2:{port}/literal"
    lab = host("lab.test",
               Page(path="/", words=80, links=("http://internal.test/", literal,
                                               "/redirect/internal", "/fine")),
               Page(path="/redirect/internal", status=302,
                    redirect="http://internal.test/secret"),
               Page(path="/fine", words=80))
    internal = Host(name="internal.test", address="127.0.0.2",
                    pages=(Page(path="/", words=80), Page(path="/secret", words=80)))
    async with SimWeb(scenario(lab, internal), dns=True, port=port) as web:
        out = await run(web, tmp_path, ["lab.test/"])
        everything = web.log.records()
        asked = {q.name for q in web.dns.queries()}

    refused = {key(web, "internal.test/"), key(web, "internal.test/secret"), literal}
    for url in refused:
        row = out.row(url)
        assert (row.status, row.reason) == (UrlStatus.REJECTED, Reason.SSRF), url
    # nothing reached the server for them; a connection to 127.0.0.2 would have been
    # refused by the kernel (the server listens on 127.0.0.1 only) and ended as a
    # network error, not 'ssrf': the guard stopped it before any connection
    assert {r.host for r in everything} == {"lab.test"}
    assert {r.remote.split(":")[0] for r in everything} == {"127.0.0.1"}
    assert sorted(paths(hits(web, "lab.test"))) == ["/", "/fine", "/redirect/internal"]
    assert "internal.test" in asked  # resolved once, then its address was refused
    assert out.stats.errors == {"ssrf": 3}
    assert out.row(key(web, "lab.test/fine")).status is UrlStatus.DONE
