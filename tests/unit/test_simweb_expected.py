"""What a correct crawler fetches, computed from the scenario."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from simweb.expected import canonical, expected_crawl, expected_urls
from simweb.scenarios import build_features, build_seed, generated

PORT = 8080


def test_seed_expectation_with_a_cap_of_80() -> None:
    result = expected_crawl(build_seed(), port=PORT, max_pages_per_host=80)
    assert result.per_host() == {"news.test": 61, "shop.test": 21, "trap.test": 80}
    assert result.blocked_by_robots == {f"http://news.test:{PORT}/private/secret"}
    assert len(result.duplicates) == 30
    assert all("/print/" in u for u in result.duplicates)
    assert not result.near_duplicates
    assert all(urlsplit(u).hostname == "trap.test" for u in result.capped)
    assert not result.truncated
    assert not any("utm_" in u for u in result.fetched)
    assert f"http://trap.test:{PORT}/day/2026-03-20" in result.fetched  # home + 79 days


def test_seed_without_cap_runs_into_the_trap() -> None:
    result = expected_crawl(build_seed(), port=PORT, max_urls=500)
    assert result.truncated
    assert result.per_host()["trap.test"] > 400


@pytest.mark.parametrize(("hosts", "pages", "seed"), [(1, 1, 1), (3, 40, 2), (5, 200, 3)])
def test_generated_every_page_is_reachable(hosts: int, pages: int, seed: int) -> None:
    scenario = generated(hosts, pages, seed, duplicate_ratio=0.1, near_duplicate_ratio=0.05)
    result = expected_crawl(scenario, port=PORT)
    every_page = {f"http://{h.name}:{PORT}{p.path}" for h in scenario.hosts for p in h.pages
                  if not p.path.startswith("/private/")}
    assert result.fetched == every_page
    assert result.blocked_by_robots == {f"http://{h.name}:{PORT}/private/1"
                                        for h in scenario.hosts}
    dup_pages = {f"http://{h.name}:{PORT}{p.path}" for h in scenario.hosts for p in h.pages
                 if p.same_as}
    assert result.duplicates <= every_page
    assert len(result.duplicates) >= len(dup_pages)  # each copy, maybe the original too


def test_generated_depth_is_small() -> None:
    scenario = generated(2, 1000, 4, links_per_page=6)
    host = scenario.hosts[0]
    children = {p.path: [link for link in p.links if link.startswith("/p/")]
                for p in host.pages}
    depth = {"/": 0}
    frontier = ["/"]
    while frontier:
        nxt = []
        for path in frontier:
            for child in children.get(path, []):
                if child not in depth:
                    depth[child] = depth[path] + 1
                    nxt.append(child)
        frontier = nxt
    assert max(depth.values()) <= 12


def test_generated_has_cross_host_and_tracking_links() -> None:
    scenario = generated(4, 100, 8)
    links = [link for h in scenario.hosts for p in h.pages for link in p.links]
    assert any(link.startswith("http://site") for link in links)
    assert any("utm_source=x" in link for link in links)


def test_features_expectation() -> None:
    result = expected_crawl(build_features(), port=PORT, max_pages_per_host=30)
    fetched = result.fetched
    lab = f"http://lab.test:{PORT}"
    assert f"{lab}/dup/b" in result.duplicates or f"{lab}/dup/a" in result.duplicates
    assert {f"{lab}/near/a", f"{lab}/near/b"} & result.near_duplicates
    assert f"http://other.test:{PORT}/" in fetched  # cross-host redirect target
    assert f"http://internal.test:{PORT}/secret" in fetched
    assert not any(u.startswith(f"http://robots500.test:{PORT}") for u in fetched)
    assert f"http://robots404.test:{PORT}/a" in fetched
    assert f"http://delay.test:{PORT}/private/x" in result.blocked_by_robots
    assert f"http://delay.test:{PORT}/private/ok" in fetched
    assert f"http://robots-big.test:{PORT}/a" in fetched


@pytest.mark.parametrize(("url", "expected"), [
    ("HTTP://News.Test:80/a?utm_source=x&b=2#frag", "http://news.test/a?b=2"),
    ("http://news.test:8080", "http://news.test:8080/"),
    ("http://news.test/a?gclid=1&utm_medium=m", "http://news.test/a"),
    ("http://news.test/a?z=1&a=2", "http://news.test/a?z=1&a=2"),
])
def test_canonical(url: str, expected: str) -> None:
    assert canonical(url) == expected


def test_expected_urls_is_the_fetched_set() -> None:
    scenario = generated(2, 10, 1)
    assert expected_urls(scenario, port=PORT) == set(expected_crawl(scenario, port=PORT).fetched)
