"""docker-compose.yml against the Compose specification's schema, and the Helm chart
through the real helm: lint, template, and the checks of scripts/check-deploy on the
rendered manifests (and on broken copies, so each check is seen to fire).

Needs the tools scripts/check-deploy puts in .cache/ (the Compose schema and helm);
skipped with a hint when they are not there yet.
"""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.settings import Settings
from tests.conftest import unavailable
from tests.deploy_support import load_check_deploy

pytestmark = pytest.mark.integration

cd = load_check_deploy()
Docs = list[dict[str, Any]]


@pytest.fixture(scope="module")
def compose_schema() -> dict[str, Any]:
    if not cd.COMPOSE_SCHEMA.is_file():
        unavailable("Compose schema not fetched yet: run scripts/check-deploy tools")
    import json

    schema: dict[str, Any] = json.loads(cd.COMPOSE_SCHEMA.read_text(encoding="utf-8"))
    return schema


@pytest.fixture(scope="module")
def helm() -> Path:
    if not cd.HELM.is_file() or not cd._helm_stamp().is_file():
        unavailable("helm not built yet: run scripts/check-deploy tools")
    path: Path = cd.HELM
    return path


@pytest.fixture(scope="module")
def kube() -> str:
    version: str = cd.helm_kube_version()
    return version


def _values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def _render(helm: Path, kube: str, files: list[Path] | None = None) -> Docs:
    docs: Docs = cd.render(helm, files or [], kube_version=kube)
    return docs


def _one(docs: Docs, kind: str, suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, [d["metadata"]["name"] for d in found]
    return found[0]


def _container(dep: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
    return c


# --- compose ------------------------------------------------------------------------

def test_compose_file_is_valid_compose(compose_schema: dict[str, Any]) -> None:
    # compose requires a Grafana admin password: the demo's env file names none
    for env in ({"CRAWLER_API_TOKEN": "t", "GRAFANA_ADMIN_PASSWORD": "p"},
                {**cd.read_env_file(cd.DEMO_ENV), "GRAFANA_ADMIN_PASSWORD": "p"}):
        assert cd.compose_schema_problems(cd.load_compose(env), compose_schema) == []


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: d.update(servcies={}), "servcies"),
    (lambda d: d["services"]["api"].update(ports="127.0.0.1:8080:8080"), "services.api.ports"),
    (lambda d: d["services"]["kafka"]["healthcheck"].update(test=5),
     "services.kafka.healthcheck.test"),
    (lambda d: d["services"]["cassandra"]["healthcheck"].update(every="10s"), "every"),
    (lambda d: d["services"]["fetcher-1"].update(restart=5), "services.fetcher-1.restart"),
    (lambda d: d["services"]["frontier"].update(command={"role": "frontier"}),
     "services.frontier.command"),
    (lambda d: d["services"]["parser"].update(profiles="separate-parse"),
     "services.parser.profiles"),
])
def test_compose_schema_catches_breakage(compose_schema: dict[str, Any],
                                         change: Callable[[dict[str, Any]], None],
                                         expected: str) -> None:
    doc = cd.load_compose({"CRAWLER_API_TOKEN": "t", "GRAFANA_ADMIN_PASSWORD": "p"})
    change(doc)
    problems = cd.compose_schema_problems(doc, compose_schema)
    assert any(expected in p for p in problems), problems


# --- helm lint and values -----------------------------------------------------------

def test_chart_lints_under_every_values_file(helm: Path) -> None:
    for _, files in cd.chart_cases():
        args = ["lint", "--strict", str(cd.CHART)]
        for f in files:
            args += ["--values", str(f)]
        assert "0 chart(s) failed" in cd.run_helm(helm, args)


@pytest.mark.parametrize(("values", "expected"), [
    ({"settings": {"fetcher": {"concurency": 3}}}, "concurency"),
    ({"settings": {"bus": {"backend": "memory"}}}, "backend"),
    ({"settings": {"api": {"token": "x"}}}, "api"),
    ({"settings": {"politeness": {"default_delay": -1}}}, "default_delay"),
    ({"settings": {"store": {"backend": "sqlite"}}}, "store"),
    ({"kafka": {"bootstrap": ""}}, "bootstrap"),
    ({"cassandra": {"keyspace": "bad-name"}}, "keyspace"),
    ({"services": {"fetcher": {"autoscaling": {"maxReplicas": 0}}}}, "maxReplicas"),
])
def test_lint_refuses_bad_values(helm: Path, tmp_path: Path, values: dict[str, Any],
                                 expected: str) -> None:
    path = _values_file(tmp_path, values)
    with pytest.raises(cd.DeployError, match=expected):
        cd.run_helm(helm, ["lint", "--strict", str(cd.CHART), "--values", str(path)])


def test_settings_values_reach_the_configmap_as_settings(helm: Path, kube: str,
                                                         tmp_path: Path) -> None:
    path = _values_file(tmp_path, {"settings": {
        "crawl": {"max_pages": 50000000, "user_agent_product": "TestBot"},
        "politeness": {"default_delay": 2.5, "backoff_base": 60},
        "fetcher": {"store_robots_in_warc": False, "allowed_content_types": ["text/html",
                                                                             "text/plain"]},
        "blob": {"warc_max_bytes": 2000000000},
    }})
    data = _one(_render(helm, kube, [path]), "ConfigMap")["data"]
    assert data["CRAWLER_CRAWL_MAX_PAGES"] == "50000000"
    assert data["CRAWLER_CRAWL_USER_AGENT_PRODUCT"] == "TestBot"
    assert data["CRAWLER_POLITENESS_DEFAULT_DELAY"] == "2.5"
    assert data["CRAWLER_POLITENESS_BACKOFF_BASE"] == "60"
    assert data["CRAWLER_FETCHER_STORE_ROBOTS_IN_WARC"] == "false"
    assert data["CRAWLER_FETCHER_ALLOWED_CONTENT_TYPES"] == "text/html,text/plain"
    assert data["CRAWLER_BLOB_WARC_MAX_BYTES"] == "2000000000"
    settings = Settings.from_env(dict(data, CRAWLER_API_TOKEN="t"))
    assert settings.crawl.max_pages == 50_000_000
    assert settings.politeness.default_delay == 2.5
    assert settings.fetcher.allowed_content_types == ("text/html", "text/plain")
    assert settings.blob.warc_max_bytes == 2_000_000_000
    assert settings.bus.backend == "kafka"
    assert settings.store.backend == "cassandra"
    assert settings.store.cassandra_hosts == ("cassandra",)
    assert settings.metrics.port == 9100


# --- rendered manifests -------------------------------------------------------------

@pytest.fixture(scope="module")
def default_docs(helm: Path, kube: str) -> Docs:
    return _render(helm, kube)


def test_every_values_file_renders_manifests_that_pass(helm: Path, kube: str) -> None:
    for label, files in cd.chart_cases():
        values = cd._values(files)
        problems = cd.manifest_problems(_render(helm, kube, files), kube_version=kube,
                                        external_secrets=cd.external_names(values))
        assert problems == [], label


def test_default_render_shape(default_docs: Docs) -> None:
    kinds = sorted(d["kind"] for d in default_docs)
    # the fetchers parse and judge the pages (parse_inline): no parser or dedup
    deployments = sorted(_container(d)["args"][0] for d in default_docs
                         if d["kind"] == "Deployment")
    assert deployments == ["api", "fetcher", "frontier"]
    assert kinds.count("Service") == 3
    assert kinds.count("HorizontalPodAutoscaler") == 1
    assert "ServiceMonitor" not in kinds
    assert "CRAWLER_FETCHER_PARSE_INLINE" not in _one(default_docs, "ConfigMap")["data"]
    fetcher = _one(default_docs, "Deployment", "-fetcher")
    assert "replicas" not in fetcher["spec"]
    assert _container(fetcher)["resources"]["requests"] == {"cpu": "1", "memory": "768Mi"}
    hpa = _one(default_docs, "HorizontalPodAutoscaler", "-fetcher")
    assert hpa["spec"]["scaleTargetRef"]["name"].endswith("-fetcher")
    frontier = _container(_one(default_docs, "Deployment", "-frontier"))
    assert frontier["args"] == ["frontier"]
    assert frontier["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert frontier["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    secret = _one(default_docs, "Secret")
    assert len(base64.b64decode(secret["data"]["token"])) == 40  # generated


def test_given_token_and_existing_secret(helm: Path, kube: str, tmp_path: Path) -> None:
    path = _values_file(tmp_path, {"api": {"token": "s3cret"}})
    docs = _render(helm, kube, [path])
    assert base64.b64decode(_one(docs, "Secret")["data"]["token"]) == b"s3cret"

    path = _values_file(tmp_path, {"api": {"existingSecret": "mine", "existingSecretKey": "k"}})
    docs = _render(helm, kube, [path])
    assert not [d for d in docs if d["kind"] == "Secret"]
    ref = next(e for e in _container(_one(docs, "Deployment", "-api"))["env"]
               if e["name"] == "CRAWLER_API_TOKEN")["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "mine", "key": "k"}
    assert any("Secret mine is not in the chart" in p
               for p in cd.manifest_problems(docs, kube_version=kube))
    assert cd.manifest_problems(docs, kube_version=kube, external_secrets=["mine"]) == []


def test_service_monitor_when_enabled(helm: Path, kube: str, tmp_path: Path) -> None:
    path = _values_file(tmp_path, {"metrics": {"port": 9300,
                                               "serviceMonitor": {"enabled": True}}})
    docs = _render(helm, kube, [path])
    sm = _one(docs, "ServiceMonitor")
    assert sm["spec"]["jobLabel"] == "app.kubernetes.io/component"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert _one(docs, "ConfigMap")["data"]["CRAWLER_METRICS_PORT"] == "9300"
    assert cd.manifest_problems(docs, kube_version=kube) == []
    broken = copy.deepcopy(docs)
    _one(broken, "ServiceMonitor")["spec"]["endpoints"][0]["port"] = "http-metrics"
    assert any("has no port http-metrics" in p
               for p in cd.manifest_problems(broken, kube_version=kube))


def _break_deployment(role: str, change: Callable[[dict[str, Any]], None]
                      ) -> Callable[[Docs], None]:
    def apply(docs: Docs) -> None:
        change(_one(docs, "Deployment", f"-{role}"))
    return apply


def _set_probe(dep: dict[str, Any]) -> None:
    _container(dep)["readinessProbe"]["httpGet"]["path"] = "/ready"


def _add_env(dep: dict[str, Any]) -> None:
    _container(dep)["env"].append({"name": "CRAWLER_FETCHER_CONCURENCY", "value": "9"})


def _literal_token(dep: dict[str, Any]) -> None:
    _container(dep)["env"][0] = {"name": "CRAWLER_API_TOKEN", "value": "plain"}


def _unknown_field(dep: dict[str, Any]) -> None:
    _container(dep)["imagePullPolicyy"] = "Always"


def _fixed_replicas(dep: dict[str, Any]) -> None:
    dep["spec"]["replicas"] = 3


def _no_requests(dep: dict[str, Any]) -> None:
    _container(dep)["resources"] = {}


def _other_image(dep: dict[str, Any]) -> None:
    _container(dep)["image"] = "polite-crawler:old"


def _same_role(dep: dict[str, Any]) -> None:
    _container(dep)["args"] = ["fetcher"]


def _metrics_port(dep: dict[str, Any]) -> None:
    _container(dep)["ports"][0]["containerPort"] = 9999


def _bad_setting(docs: Docs) -> None:
    _one(docs, "ConfigMap")["data"]["CRAWLER_STORE_CASSANDRA_PORT"] = "ninety"


def _service_port(docs: Docs) -> None:
    _one(docs, "Service", "-api")["spec"]["ports"][1]["targetPort"] = "https"


def _drop_bootstrap(docs: Docs) -> None:
    del _one(docs, "ConfigMap")["data"]["CRAWLER_BUS_KAFKA_BOOTSTRAP"]


@pytest.mark.parametrize(("change", "expected"), [
    (_break_deployment("fetcher", _set_probe), "readinessProbe must GET /readyz"),
    (_break_deployment("fetcher", _add_env), "CRAWLER_FETCHER_CONCURENCY is not a setting"),
    (_break_deployment("api", _literal_token), "must come from a Secret"),
    (_break_deployment("api", _unknown_field), "imagePullPolicyy"),
    (_break_deployment("fetcher", _fixed_replicas), "fight its autoscaler"),
    (_break_deployment("frontier", _no_requests), "cpu and memory requests"),
    (_break_deployment("api", _other_image), "different images"),
    (_break_deployment("api", _same_role), "role fetcher also runs"),
    (_break_deployment("frontier", _metrics_port), "is not CRAWLER_METRICS_PORT"),
    (_bad_setting, "CRAWLER_STORE_CASSANDRA_PORT: expected a whole number"),
    (_service_port, "targets https"),
    (_drop_bootstrap, "CRAWLER_BUS_KAFKA_BOOTSTRAP is not set"),
    (lambda docs: docs.remove(_one(docs, "HorizontalPodAutoscaler", "-fetcher")),
     "no HorizontalPodAutoscaler for the fetcher"),
    (lambda docs: docs.remove(_one(docs, "Deployment", "-api")), "no Deployment for ['api']"),
    (lambda docs: docs.remove(_one(docs, "PersistentVolumeClaim")),
     "PersistentVolumeClaim crawl-crawler-warc is not in the chart"),
    (lambda docs: docs.remove(_one(docs, "Service", "-frontier")),
     "no Service exposes its metrics port"),
    (lambda docs: _one(docs, "ConfigMap")["data"].update(
        CRAWLER_FETCHER_PARSE_INLINE="false"),
     "CRAWLER_FETCHER_PARSE_INLINE=false but no Deployment for parser"),
])
def test_manifest_checks_catch_breakage(default_docs: Docs, kube: str,
                                        change: Callable[[Docs], None], expected: str) -> None:
    docs = copy.deepcopy(default_docs)
    change(docs)
    problems = cd.manifest_problems(docs, kube_version=kube, expect_autoscaled=["fetcher"])
    assert any(expected in p for p in problems), problems


# --- the separate topology: parse_inline false, parser and dedup Deployments ----------

SEPARATE_VALUES = cd.CHART / "ci" / "separate-parse-values.yaml"


@pytest.fixture(scope="module")
def separate_docs(helm: Path, kube: str) -> Docs:
    return _render(helm, kube, [SEPARATE_VALUES])


def test_separate_parse_render(separate_docs: Docs, kube: str) -> None:
    deployments = sorted(_container(d)["args"][0] for d in separate_docs
                         if d["kind"] == "Deployment")
    assert deployments == ["api", "dedup", "fetcher", "frontier", "parser"]
    assert _one(separate_docs, "ConfigMap")["data"]["CRAWLER_FETCHER_PARSE_INLINE"] == "false"
    for role in ("fetcher", "parser"):
        assert "replicas" not in _one(separate_docs, "Deployment", f"-{role}")["spec"]
        _one(separate_docs, "HorizontalPodAutoscaler", f"-{role}")
    assert _one(separate_docs, "Deployment", "-dedup")["spec"]["replicas"] == 1
    assert cd.manifest_problems(separate_docs, kube_version=kube,
                                expect_autoscaled=["fetcher", "parser"]) == []


@pytest.mark.parametrize(("change", "expected"), [
    (lambda docs: docs.remove(_one(docs, "Deployment", "-dedup")),
     "CRAWLER_FETCHER_PARSE_INLINE=false but no Deployment for dedup"),
    (lambda docs: docs.remove(_one(docs, "HorizontalPodAutoscaler", "-parser")),
     "no HorizontalPodAutoscaler for the parser"),
    (_break_deployment("dedup", _same_role), "role fetcher also runs"),
    (_break_deployment("parser", _metrics_port), "is not CRAWLER_METRICS_PORT"),
    (lambda docs: docs.remove(_one(docs, "Service", "-dedup")),
     "no Service exposes its metrics port"),
])
def test_separate_parse_checks_catch_breakage(separate_docs: Docs, kube: str,
                                              change: Callable[[Docs], None],
                                              expected: str) -> None:
    docs = copy.deepcopy(separate_docs)
    change(docs)
    problems = cd.manifest_problems(docs, kube_version=kube,
                                    expect_autoscaled=["fetcher", "parser"])
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("values", [
    {"settings": {"fetcher": {"parse_inline": False}}},
    {"settings": {"fetcher": {"parse_inline": False}}, "services": {"parser": {"enabled": True}}},
    {"settings": {"fetcher": {"parse_inline": False}}, "services": {"dedup": {"enabled": True}}},
    {"services": {"fetcher": {"extraEnv": [{"name": "CRAWLER_FETCHER_PARSE_INLINE",
                                            "value": " Off "}]}}},
    {"settings": {"fetcher": {"parse_inline": True}},  # the fetcher's variable wins
     "services": {"fetcher": {"extraEnv": [{"name": "CRAWLER_FETCHER_PARSE_INLINE",
                                            "value": "0"}]},
                  "parser": {"enabled": True}}},
])
def test_chart_refuses_parse_inline_false_without_parser_and_dedup(
        helm: Path, kube: str, tmp_path: Path, values: dict[str, Any]) -> None:
    path = _values_file(tmp_path, values)
    with pytest.raises(cd.DeployError, match=re.escape("set services.parser.enabled and "
                                                       "services.dedup.enabled to true")):
        _render(helm, kube, [path])


def test_chart_renders_parse_inline_true_with_either(helm: Path, kube: str,
                                                     tmp_path: Path) -> None:
    # the variable in the fetcher's extraEnv wins over settings; an idle parser is allowed
    path = _values_file(tmp_path, {
        "settings": {"fetcher": {"parse_inline": False}},
        "services": {"fetcher": {"extraEnv": [{"name": "CRAWLER_FETCHER_PARSE_INLINE",
                                               "value": "true"}]},
                     "parser": {"enabled": True}}})
    docs = _render(helm, kube, [path])
    assert cd.manifest_problems(docs, kube_version=kube) == []


@pytest.mark.parametrize(("values", "message"), [
    ({"settings": {"render": {"enabled": True}}}, "set services.render.enabled to true"),
    ({"services": {"render": {"enabled": True}}}, "set settings.render.enabled to true"),
])
def test_chart_refuses_render_on_one_side_only(helm: Path, kube: str, tmp_path: Path,
                                               values: dict[str, Any], message: str) -> None:
    with pytest.raises(cd.DeployError, match=re.escape(message)):
        _render(helm, kube, [_values_file(tmp_path, values)])


def test_chart_renders_the_render_role_with_its_browser_image(helm: Path, kube: str,
                                                              tmp_path: Path) -> None:
    path = _values_file(tmp_path, {"settings": {"render": {"enabled": True}},
                                   "services": {"render": {"enabled": True}}})
    docs = _render(helm, kube, [path])
    assert cd.manifest_problems(docs, kube_version=kube) == []
    pod = _one(docs, "Deployment", "-render")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"].startswith("polite-crawler-render:")
    assert container["args"] == ["render"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CRAWLER_RENDER_SANDBOX"] == "false"
    fetcher = _one(docs, "Deployment", "-fetcher")["spec"]["template"]["spec"]
    assert fetcher["containers"][0]["image"].startswith("polite-crawler:")


def test_fixed_replicas_values(helm: Path, kube: str) -> None:
    docs = _render(helm, kube, [cd.CHART / "ci" / "fixed-replicas-values.yaml"])
    assert not [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    assert _one(docs, "Deployment", "-fetcher")["spec"]["replicas"] == 3
    assert all(d["metadata"]["name"].startswith("webcrawler")
               for d in docs if d["kind"] in ("Deployment", "Service"))
    pod = _one(docs, "Deployment", "-api")["spec"]["template"]["metadata"]
    assert "prometheus.io/scrape" not in pod["annotations"]


def test_check_deploy_passes() -> None:
    assert cd.main(["helm"]) == 0
    assert cd.main(["compose"]) == 0
