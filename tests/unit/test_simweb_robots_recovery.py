"""A failing robots.txt that comes back after some visits (Robots.recover_after)."""

from __future__ import annotations

import pytest

from simweb.model import Host, Page, Robots, Scenario, ScenarioError
from simweb.site import SimRequest, Site


def site(robots: Robots) -> Site:
    host = Host(name="r.test", robots=robots, pages=(Page(path="/"),))
    return Site(Scenario(name="r", hosts=(host,)), 8123)


def robots(s: Site) -> tuple[int, bytes, float]:
    reply = s.respond(SimRequest("r.test", "/robots.txt"))
    return reply.status, reply.body, reply.delay


def test_error_robots_recovers_after_n_visits() -> None:
    s = site(Robots(kind="error", status=503, disallow=("/p/",), recover_after=2))
    first, second, third = robots(s), robots(s), robots(s)
    assert first[0] == second[0] == 503
    assert third[0] == 200 and b"Disallow: /p/" in third[1]


def test_timeout_robots_answers_at_once_after_recovery() -> None:
    s = site(Robots(kind="timeout", delay=30.0, recover_after=1))
    assert robots(s)[2] == 30.0
    status, body, delay = robots(s)
    assert (status, delay) == (200, 0.0) and body.startswith(b"User-agent: *")


def test_without_recover_after_the_error_stays() -> None:
    s = site(Robots(kind="error"))
    assert {robots(s)[0] for _ in range(4)} == {500}


def test_negative_recover_after_is_refused() -> None:
    with pytest.raises(ScenarioError, match="recover_after"):
        Robots(kind="error", recover_after=-1)
