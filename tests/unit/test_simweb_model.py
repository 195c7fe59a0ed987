"""Scenario model: JSON round trips, shipped files, validation errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simweb.model import (
    Host,
    Page,
    Robots,
    Scenario,
    ScenarioError,
    Trap,
    dump_scenario,
    load_scenario,
    scenario_from_json,
)
from simweb.scenarios import build_features, build_seed, features, generated, load, seed


def test_shipped_seed_json_matches_its_builder() -> None:
    assert seed() == build_seed()


def test_shipped_features_json_matches_its_builder() -> None:
    assert features() == build_features()


@pytest.mark.parametrize("scenario", [build_seed(), build_features(), generated(3, 20, 5)],
                         ids=["seed", "features", "generated"])
def test_dump_and_load_round_trip(scenario: Scenario) -> None:
    assert scenario_from_json(dump_scenario(scenario)) == scenario


def test_dump_leaves_out_defaults() -> None:
    data = json.loads(dump_scenario(Scenario(name="x", hosts=(Host(name="a.test"),))))
    assert data == {"name": "x", "hosts": [{"name": "a.test"}]}


def test_load_scenario_from_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(dump_scenario(build_seed()))
    assert load_scenario(path) == build_seed()
    assert load(str(path)) == build_seed()


def test_load_by_name() -> None:
    assert load("seed").name == "seed"
    assert load("features").name == "features"
    web = load("generated:2:10:3")
    assert [h.name for h in web.hosts] == ["site0.test", "site1.test"]
    assert all(len([p for p in h.pages if not p.path.startswith("/private/")]) == 10
               for h in web.hosts)


@pytest.mark.parametrize("name", ["nothing-here", "generated:x:1", "generated:1"])
def test_load_rejects_unknown_names(name: str) -> None:
    with pytest.raises(ScenarioError):
        load(name)


def test_unknown_field_is_named() -> None:
    doc = {"name": "x", "hosts": [{"name": "a.test", "pages": [{"path": "/", "tilte": "t"}]}]}
    with pytest.raises(ScenarioError, match=r"tilte"):
        scenario_from_json(json.dumps(doc))


def test_wrong_type_is_named() -> None:
    doc = {"name": "x", "hosts": [{"name": "a.test", "pages": [{"path": "/", "words": "many"}]}]}
    with pytest.raises(ScenarioError, match=r"words"):
        scenario_from_json(json.dumps(doc))


def test_not_json_is_a_clear_error() -> None:
    with pytest.raises(ScenarioError, match="not valid JSON"):
        scenario_from_json(b"{nope")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"path": "no-slash"}, "start with '/'"),
    ({"path": "/", "status": 700}, "out of range"),
    ({"path": "/", "redirect": "/x"}, "3xx"),
    ({"path": "/", "status": 301}, "redirect target"),
    ({"path": "/", "same_as": "/a", "near_duplicate_of": "/b"}, "exclude"),
    ({"path": "/", "body": "x", "links": ("/a",)}, "verbatim"),
    ({"path": "/", "encoding": "no-such-codec"}, "encoding"),
    ({"path": "/", "delay": -1.0}, "delay"),
    ({"path": "/", "drip_chunks": 0}, "drip_chunks"),
])
def test_page_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        Page(**kwargs)  # type: ignore[arg-type]


def test_host_validation() -> None:
    with pytest.raises(ScenarioError, match="host name"):
        Host(name="Not_A_Host")
    with pytest.raises(ScenarioError, match="address"):
        Host(name="a.test", address="localhost")
    with pytest.raises(ScenarioError, match="duplicate page"):
        Host(name="a.test", pages=(Page(path="/"), Page(path="/")))
    with pytest.raises(ScenarioError, match="unknown page"):
        Host(name="a.test", pages=(Page(path="/", same_as="/missing"),))
    with pytest.raises(ScenarioError, match="cycle"):
        Host(name="a.test", pages=(Page(path="/a", same_as="/b"), Page(path="/b", same_as="/a")))


def test_scenario_validation() -> None:
    with pytest.raises(ScenarioError, match="duplicate hosts"):
        Scenario(name="x", hosts=(Host(name="a.test"), Host(name="a.test")))
    with pytest.raises(ScenarioError, match="seed"):
        Scenario(name="x", hosts=(Host(name="a.test"),), seeds=("http://b.test/",))


def test_robots_and_trap_validation() -> None:
    with pytest.raises(ScenarioError, match="5xx"):
        Robots(kind="error", status=404)
    with pytest.raises(ScenarioError, match="YYYY-MM-DD"):
        Trap(kind="calendar", prefix="/day/", start="tomorrow")
    with pytest.raises(ScenarioError, match="prefix"):
        Trap(kind="session", prefix="s/")


def test_robots_text_from_fields() -> None:
    robots = Robots(disallow=("/private/",), allow=("/private/ok",), crawl_delay=2.5,
                    sitemaps=("http://a.test/sitemap.xml",))
    assert robots.text() == ("User-agent: *\nAllow: /private/ok\nDisallow: /private/\n"
                             "Crawl-delay: 2.5\nSitemap: http://a.test/sitemap.xml\n")
    assert Robots().text() == "User-agent: *\nDisallow:\n"
    assert Robots(body="User-agent: x\n").text() == "User-agent: x\n"


def test_generated_is_deterministic_and_sized() -> None:
    a = generated(4, 50, 9)
    assert a == generated(4, 50, 9)
    assert a != generated(4, 50, 10)
    assert len(a.hosts) == 4
    assert a.seeds == tuple(f"http://site{i}.test/" for i in range(4))
    dups = [p for h in a.hosts for p in h.pages if p.same_as]
    assert dups, "the default duplicate ratio yields some duplicates at this size"


def test_generated_rejects_bad_arguments() -> None:
    with pytest.raises(ScenarioError):
        generated(0, 10, 1)
    with pytest.raises(ScenarioError):
        generated(1, 10, 1, duplicate_ratio=0.9)
    with pytest.raises(ScenarioError):
        generated(1, 10, 1, links_per_page=1)
