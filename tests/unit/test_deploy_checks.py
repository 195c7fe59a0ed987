"""The deployment checks of scripts/check-deploy, on the real files and on broken copies.

These need no tools: the Compose schema and helm are exercised in
tests/integration/test_deploy.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from common.settings import variable_names
from tests.deploy_support import load_check_deploy

ROOT = Path(__file__).resolve().parents[2]


cd = load_check_deploy()
TOKEN_ENV = {"CRAWLER_API_TOKEN": "t", "GRAFANA_ADMIN_PASSWORD": "p"}


def demo_env() -> dict[str, str]:
    """The demo's env file and the Grafana password it leaves to the user."""
    return {**cd.read_env_file(cd.DEMO_ENV), "GRAFANA_ADMIN_PASSWORD": "p"}


# --- interpolation ------------------------------------------------------------------

@pytest.mark.parametrize(("text", "env", "expected"), [
    ("${A:-d}", {}, "d"),
    ("${A:-d}", {"A": ""}, "d"),
    ("${A:-d}", {"A": "v"}, "v"),
    ("${A-d}", {"A": ""}, ""),
    ("${A-d}", {}, "d"),
    ("${A:+alt}", {"A": "v"}, "alt"),
    ("${A:+alt}", {"A": ""}, ""),
    ("${A+alt}", {"A": ""}, "alt"),
    ("$A/${B}", {"A": "x", "B": "y"}, "x/y"),
    ("cost $$5 ${A}", {"A": "1"}, "cost $5 1"),
    ("${A:?need A}", {"A": "v"}, "v"),
    ("no variables", {}, "no variables"),
])
def test_interpolation(text: str, env: dict[str, str], expected: str) -> None:
    assert cd.interpolate_text(text, env) == expected


@pytest.mark.parametrize(("text", "env", "message"), [
    ("${A:?set A please}", {}, "set A please"),
    ("${A:?set A please}", {"A": ""}, "set A please"),
    ("${A?must exist}", {}, "must exist"),
    ("${1BAD}", {}, "invalid interpolation"),
    ("${A:-${B}}", {}, "nested"),
])
def test_interpolation_errors(text: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(cd.InterpolationError, match=message):
        cd.interpolate_text(text, env)


def test_interpolate_walks_lists_and_mappings_but_not_keys() -> None:
    doc = {"${K}": ["${A:-x}", 3, {"b": "${A:-y}"}], "n": None}
    assert cd.interpolate(doc, {}) == {"${K}": ["x", 3, {"b": "y"}], "n": None}


def test_env_file(tmp_path: Path) -> None:
    path = tmp_path / "x.env"
    path.write_text("# comment\n\nA=1\nB = 'two words'\nC=\"q\"\nD=\n", encoding="utf-8")
    assert cd.read_env_file(path) == {"A": "1", "B": "two words", "C": "q", "D": ""}
    path.write_text("NOT A PAIR\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"x\.env:1"):
        cd.read_env_file(path)


def test_the_token_is_required() -> None:
    with pytest.raises(cd.InterpolationError, match="CRAWLER_API_TOKEN"):
        cd.load_compose({})


# --- the compose contract -----------------------------------------------------------

@pytest.fixture
def compose() -> dict[str, Any]:
    doc: dict[str, Any] = cd.load_compose(TOKEN_ENV)
    return doc


@pytest.fixture
def demo_compose() -> dict[str, Any]:
    doc: dict[str, Any] = cd.load_compose(demo_env())
    return doc


SEPARATE_ENV = {"CRAWLER_FETCHER_PARSE_INLINE": "false"}


def test_the_compose_file_keeps_the_contract(compose: dict[str, Any],
                                             demo_compose: dict[str, Any]) -> None:
    assert cd.compose_problems(compose) == []
    assert cd.compose_problems(demo_compose, demo=True) == []
    separate = cd.load_compose(dict(TOKEN_ENV, **SEPARATE_ENV))
    assert cd.compose_problems(separate, profiles=["separate-parse"]) == []
    demo_separate = cd.load_compose(dict(demo_env(), **SEPARATE_ENV))
    assert cd.compose_problems(demo_separate, demo=True, profiles=["separate-parse"]) == []


def test_by_default_the_fetchers_parse(compose: dict[str, Any]) -> None:
    services = compose["services"]
    default = cd.active_services(services, ())
    roles = sorted(cd._role_of(services[n]) or "" for n in default if cd._role_of(services[n]))
    assert roles == ["api", "fetcher", "fetcher", "frontier"]
    assert cd.parse_inline(services["fetcher-1"]["environment"]) is True
    for name in ("parser", "dedup"):
        assert services[name]["profiles"] == ["separate-parse"]
    assert {"parser", "dedup"} <= cd.active_services(services, ["separate-parse"])
    assert cd.parse_inline({"CRAWLER_FETCHER_PARSE_INLINE": "Off"}) is False
    assert cd.parse_inline({}) is True


def test_prometheus_has_no_fixed_target_that_does_not_run(
        compose: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = cd.yaml.safe_load(cd.PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    static = {t for job in jobs.values() for s in job.get("static_configs", [])
              for t in s["targets"]}
    assert static == {"frontier:9100", "fetcher-1:9100", "fetcher-2:9100", "api:9100",
                      "127.0.0.1:9090"}
    assert jobs["parser"]["dns_sd_configs"] == [{"names": ["parser"], "type": "A",
                                                 "port": 9100}]
    # the former fixed targets of parser and dedup are refused
    jobs["parser"] = {"job_name": "parser", "static_configs": [{"targets": ["parser:9100"]}]}
    config["scrape_configs"] = list(jobs.values())
    path = tmp_path / "prometheus.yml"
    path.write_text(cd.yaml.safe_dump(config), encoding="utf-8")
    monkeypatch.setattr(cd, "PROMETHEUS_CONFIG", path)
    problems = cd.compose_problems(compose)
    assert any("target parser:9100 is not a service that always runs" in p
               for p in problems), problems


def test_demo_env_turns_on_the_demo(compose: dict[str, Any]) -> None:
    env = cd.read_env_file(cd.DEMO_ENV)
    assert env["COMPOSE_PROFILES"] == "demo"
    # Outside the demo, the fetchers lack what the simulated web needs.
    problems = cd.compose_problems(compose, demo=True)
    assert any("CRAWLER_FETCHER_ALLOW_NETWORKS" in p for p in problems)
    assert any("CRAWLER_FETCHER_DNS_SERVERS" in p for p in problems)


def test_every_crawler_service_shares_one_environment(compose: dict[str, Any]) -> None:
    roles = {name: cd._role_of(svc) for name, svc in compose["services"].items()}
    crawler = [n for n, r in roles.items() if r]
    assert sorted(r for r in roles.values() if r) == sorted(
        ["frontier", "fetcher", "fetcher", "parser", "dedup", "api", "render"])
    envs = [compose["services"][n]["environment"] for n in crawler if roles[n] != "render"]
    assert all(e == envs[0] for e in envs)
    # the render service: the same settings, with rendering on and Chromium's own
    # sandbox off (the container's stands in for it)
    render = compose["services"]["render"]["environment"]
    assert {k: v for k, v in render.items() if k not in ("CRAWLER_RENDER_ENABLED",
                                                        "CRAWLER_RENDER_SANDBOX")} == {
        k: v for k, v in envs[0].items() if k != "CRAWLER_RENDER_ENABLED"}
    assert render["CRAWLER_RENDER_ENABLED"] == "true"
    assert render["CRAWLER_RENDER_SANDBOX"] == "false"
    # settings, and the object store's keys (read by its client, not a setting)
    credentials = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert set(envs[0]) - credentials <= set(variable_names())


def _problems_after(doc: dict[str, Any], change: Any, *, demo: bool = False,
                    profiles: tuple[str, ...] = ()) -> list[str]:
    broken = copy.deepcopy(doc)
    change(broken)
    result: list[str] = cd.compose_problems(broken, demo=demo, profiles=profiles)
    return result


def _env(service: str, **values: str) -> Any:
    def change(doc: dict[str, Any]) -> None:
        doc["services"][service]["environment"] = dict(
            doc["services"][service]["environment"], **values)
    return change


@pytest.mark.parametrize(("change", "expected"), [
    (_env("parser", CRAWLER_PARSER_THREADS="4"), "CRAWLER_PARSER_THREADS is not a setting"),
    (_env("dedup", CRAWLER_METRICS_PORT="ninety"), "expected a whole number"),
    (_env("frontier", CRAWLER_BUS_BACKEND="memory"), "CRAWLER_BUS_BACKEND must be kafka"),
    (_env("api", CRAWLER_STORE_BACKEND="sqlite"), "must be cassandra"),
    (_env("fetcher-1", CRAWLER_METRICS_HOST="127.0.0.1"), "cannot be reached"),
    (_env("fetcher-2", CRAWLER_STORE_KEYSPACE=""), "CRAWLER_STORE_KEYSPACE is not set"),
    (_env("fetcher-2", CRAWLER_BLOB_ROOT="/elsewhere"), "is not a mounted volume"),
    (_env("fetcher-1", CRAWLER_FETCHER_ALLOW_NETWORKS="127.0.0.1/32"),
     "must allow nothing"),
    (lambda d: d["services"].pop("fetcher-2"), "at least two fetchers"),
    (lambda d: d["services"].pop("dedup"), "no service runs `crawler dedup`"),
    (lambda d: d["services"]["kafka"].pop("healthcheck"), "kafka has no health check"),
    (lambda d: d["services"]["cassandra"].update(image="cassandra:4.1"), "cassandra:5"),
    (lambda d: d["services"]["parser"]["depends_on"].pop("cassandra"),
     "must wait for cassandra"),
    (lambda d: d["services"]["api"].update(image="other:1"), "different images"),
    (lambda d: d["services"]["dedup"].update(volumes=["other:/data/warc"]),
     "not shared"),
    (lambda d: d["services"]["grafana"].update(volumes=["./deploy/nothing-here:/x"]),
     "does not exist"),
    (lambda d: d["services"]["simweb-1"].pop("profiles"), "profile demo"),
    (lambda d: d["services"]["simweb-2"].update(network_mode="service:parser"),
     "share a fetcher's network"),
    (lambda d: d["services"].update({"frontier-2": d["services"]["frontier"]}),
     "not scraped: ['frontier-2:9100']"),
    (lambda d: d["services"]["parser"].pop("profiles"),
     "parser: must be in profile separate-parse only"),
    (lambda d: d["services"]["dedup"].update(profiles=["demo"]),
     "dedup: must be in profile separate-parse only"),
    (lambda d: d["services"]["api"].update(profiles=["separate-parse"]),
     "api: must run in every profile"),
    (_env("fetcher-1", CRAWLER_FETCHER_PARSE_INLINE="false"), "fetchers disagree"),
    (lambda d: [_env(f, CRAWLER_FETCHER_PARSE_INLINE="false")(d)
                for f in ("fetcher-1", "fetcher-2")],
     "PARSE_INLINE=false but no `crawler parser` runs"),
    (lambda d: d["services"]["prometheus"].update(volumes=[]), "does not mount"),
    (lambda d: d["services"]["kafka"]["healthcheck"].update(interval="10 seconds"),
     "is not a duration"),
    (lambda d: d["services"]["api"].update(stop_grace_period="1m30"), "is not a duration"),
])
def test_compose_checks_catch_breakage(compose: dict[str, Any], change: Any,
                                       expected: str) -> None:
    problems = _problems_after(compose, change)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: d["services"].pop("dedup"), "no `crawler dedup` runs"),
    (lambda d: d["services"].update({"parser-2": d["services"]["parser"]}),
     "not scraped: ['parser-2:9100']"),
    (lambda d: d["services"]["parser"]["depends_on"].pop("kafka"), "must wait for kafka"),
])
def test_separate_parse_checks_catch_breakage(change: Any, expected: str) -> None:
    separate = cd.load_compose(dict(TOKEN_ENV, **SEPARATE_ENV))
    problems = _problems_after(separate, change, profiles=("separate-parse",))
    assert any(expected in p for p in problems), problems


# --- Dockerfile and build context ---------------------------------------------------

def test_dockerignore_semantics() -> None:
    patterns = cd.dockerignore_patterns("**\n!common/\n!README.md\n**/__pycache__\n# c\n")
    assert cd.dockerignored(".venv/bin/python", patterns)
    assert cd.dockerignored("tests/unit/test_x.py", patterns)
    assert not cd.dockerignored("common/metrics.py", patterns)
    assert not cd.dockerignored("README.md", patterns)
    assert cd.dockerignored("common/__pycache__/x.pyc", patterns)
    assert cd.dockerignored("commonx/a.py", patterns)


def test_build_context_holds_the_packages_only() -> None:
    patterns = cd.dockerignore_patterns(cd.DOCKERIGNORE.read_text(encoding="utf-8"))
    context = cd.build_context(patterns)
    assert "pyproject.toml" in context
    assert "common/settings.py" in context
    assert any(f.startswith("simweb/scenarios/") for f in context)
    assert not any(f.startswith(("tests/", ".git/", "deploy/", "scripts/")) for f in context)
    assert not any("__pycache__" in f for f in context)


def test_dockerfile_rules() -> None:
    text = cd.DOCKERFILE.read_text(encoding="utf-8")
    assert "FROM python:3.11-slim AS build" in text
    assert "USER 10001:10001" in text
    assert 'ENTRYPOINT ["crawler"]' in text


# --- chart values schema ------------------------------------------------------------

def test_settings_schema_matches_the_settings() -> None:
    schema = cd.settings_schema()
    chart_set = {cd.env_name(sec, key) for sec, props in schema["properties"].items()
                 for key in props["properties"]}
    managed = {"CRAWLER_BUS_BACKEND", "CRAWLER_BUS_KAFKA_BOOTSTRAP", "CRAWLER_API_TOKEN",
               "CRAWLER_METRICS_PORT", "CRAWLER_BLOB_ROOT", "CRAWLER_STORE_KEYSPACE"}
    assert chart_set <= set(variable_names())
    assert not chart_set & managed
    assert "CRAWLER_POLITENESS_DEFAULT_DELAY" in chart_set
    fetcher = schema["properties"]["fetcher"]["properties"]
    assert fetcher["concurrency"]["type"] == "integer"
    assert fetcher["concurrency"]["minimum"] == 1
    assert fetcher["allowed_content_types"]["type"] == "array"
    assert fetcher["store_robots_in_warc"]["type"] == "boolean"
    assert schema["properties"]["politeness"]["properties"]["default_delay"]["type"] == "number"


def test_values_schema_is_in_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cd.values_schema_problems() == []
    stale = json.loads(cd.VALUES_SCHEMA.read_text(encoding="utf-8"))
    del stale["properties"]["settings"]["properties"]["fetcher"]["properties"]["concurrency"]
    path = tmp_path / "values.schema.json"
    path.write_text(json.dumps(stale), encoding="utf-8")
    monkeypatch.setattr(cd, "VALUES_SCHEMA", path)
    assert any("out of date" in p for p in cd.values_schema_problems())
    cd.write_values_schema()
    assert cd.values_schema_problems() == []
