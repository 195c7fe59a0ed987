"""The chart installed, upgraded and uninstalled by the real helm against a real Kubernetes
API server: scripts/kube's etcd + kube-apiserver + kube-controller-manager, built from the
Kubernetes source (no kubelet: pods are created but never run).

What the server does here is its own: every object helm sends passes the API server's
validation and admission (or the install fails), the controller manager turns each
Deployment into a ReplicaSet and Pods, and deletes a namespace's objects with it. Each
rendered object is then read back through the API and compared with what was rendered.

Needs ``scripts/kube start`` (or ``CRAWLER_TEST_KUBECONFIG``) and helm from
``scripts/check-deploy tools``; marked ``kube``: ``scripts/test`` starts the cluster and
runs these on their own before the other servers start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import unavailable
from tests.deploy_support import load_check_deploy
from tests.kube_support import (
    KubeApi,
    KubeApiError,
    kubeconfig_path,
    new_workdir,
    subset_problems,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.kube]

cd = load_check_deploy()
CI_VALUES = cd.CHART / "ci"
# The Prometheus Operator's own ServiceMonitor CRD, from its Go module (as check-deploy
# takes the Compose schema from compose-go's), for the values that turn the monitor on.
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
SERVICEMONITOR_CRD = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
HELM_TIMEOUT = "120s"
Docs = list[dict[str, Any]]


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = new_workdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def api(workdir: Path) -> KubeApi:
    config = kubeconfig_path()
    if not config.is_file():
        unavailable(f"no Kubernetes API server: {config} is missing (scripts/kube start)")
    kube = KubeApi.from_kubeconfig(config, workdir)
    problem = kube.ready()
    if problem:
        unavailable(f"Kubernetes API server {kube.server} is not ready: {problem} "
                    "(scripts/kube start)")
    return kube


@pytest.fixture(scope="module")
def helm(workdir: Path) -> Path:
    if not cd.HELM.is_file() or not cd._helm_stamp().is_file():
        unavailable("helm not built yet: run scripts/check-deploy tools")
    path: Path = cd.HELM
    return path


class Helm:
    """The built helm against the test cluster, with its own config and cache folders."""

    def __init__(self, binary: Path, workdir: Path) -> None:
        self.binary = binary
        self.env = dict(os.environ)
        for var in ("HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME"):
            self.env[var] = str(workdir / var.lower())
        self.env["KUBECONFIG"] = str(kubeconfig_path())

    def __call__(self, *args: str) -> str:
        proc = subprocess.run([str(self.binary), "--kubeconfig", str(kubeconfig_path()),
                               *args], env=self.env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
        return proc.stdout

    def manifest(self, release: str, namespace: str) -> Docs:
        out = self("get", "manifest", release, "--namespace", namespace)
        return [d for d in yaml.safe_load_all(out) if d]

    def hooks(self, release: str, namespace: str) -> Docs:
        out = self("get", "hooks", release, "--namespace", namespace)
        return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def run_helm(helm: Path, workdir: Path) -> Helm:
    return Helm(helm, workdir)


@pytest.fixture
def namespace(api: KubeApi) -> Iterator[str]:
    """A fresh namespace, deleted afterwards (the controller manager empties it)."""
    name = f"crawler-test-{uuid.uuid4().hex[:8]}"
    api.create_namespace(name, {"polite-crawler/test": "helm-install"})
    yield name
    api.delete(f"/api/v1/namespaces/{name}")
    wait_for(f"namespace {name} to be deleted",
             lambda: not api.exists(f"/api/v1/namespaces/{name}"), timeout=120)


@pytest.fixture(scope="module")
def servicemonitor_crd(api: KubeApi) -> Iterator[None]:
    """The Prometheus Operator's ServiceMonitor CRD, installed for the module's tests."""
    try:
        info = cd.go_mod_download(PROMETHEUS_OPERATOR_MODULE, PROMETHEUS_OPERATOR_VERSION)
        crd = yaml.safe_load(cd._module_file(info, SERVICEMONITOR_CRD))
    except cd.DeployError as exc:
        unavailable(f"the ServiceMonitor CRD could not be fetched: {exc}")
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
    created = False
    if api.exists(path) and api.get(path)["metadata"].get("deletionTimestamp"):
        wait_for("the old ServiceMonitor CRD to go", lambda: not api.exists(path), timeout=60)
    if not api.exists(path):
        status, body = api.request("POST", "/apis/apiextensions.k8s.io/v1/"
                                   "customresourcedefinitions", crd)
        assert status == 201, body
        created = True

    def established() -> bool:
        conds = (api.get(path).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    wait_for("the ServiceMonitor CRD to be established", established, timeout=60)
    yield
    if created:
        api.delete(path)
        wait_for("the ServiceMonitor CRD to go", lambda: not api.exists(path), timeout=60)


# --------------------------------------------------------------------------- checks


def check_objects_stored(api: KubeApi, docs: Docs, release: str, namespace: str) -> None:
    """Every rendered object exists, belongs to the release and holds what was rendered."""
    assert docs, "helm get manifest returned nothing"
    problems: list[str] = []
    for doc in docs:
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        stored = api.get_object(doc, namespace)
        annotations = stored["metadata"].get("annotations", {})
        if annotations.get("meta.helm.sh/release-name") != release:
            problems.append(f"{what}: not annotated as release {release}")
        if stored["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") != "Helm":
            problems.append(f"{what}: no managed-by Helm label")
        for key in ("spec", "data", "type", "rules", "subjects", "roleRef"):
            if key in doc:
                problems += [f"{what}: {p}" for p in subset_problems(doc[key], stored.get(key),
                                                                    key)]
        problems += [f"{what}: {p}" for p in subset_problems(
            doc["metadata"].get("labels", {}), stored["metadata"].get("labels", {}),
            "metadata.labels")]
    assert problems == []


def check_hooks_accepted(api: KubeApi, hooks: Docs, namespace: str) -> None:
    """The hooks (the `helm test` Pod) pass the server's validation and admission: a
    server-side dry run creates nothing but runs every check a create runs."""
    assert hooks, "the chart has a test hook"
    for doc in hooks:
        res = api.resource(doc["apiVersion"], doc["kind"])
        path = res.path(namespace=namespace if res.namespaced else None) + "?dryRun=All"
        status, body = api.request("POST", path, doc)
        assert status == 201, f"{doc['kind']}/{doc['metadata']['name']}: {status} {body}"


def deployment(api: KubeApi, docs: Docs, namespace: str, role: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == "Deployment"
             and d["metadata"]["name"].endswith(f"-{role}")]
    return api.get_object(doc, namespace)


def replica_sets(api: KubeApi, namespace: str, dep: dict[str, Any]) -> list[dict[str, Any]]:
    selector = ",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items())
    return [rs for rs in api.list("apps/v1", "ReplicaSet", namespace, selector)
            if any(o.get("uid") == dep["metadata"]["uid"]
                   for o in rs["metadata"].get("ownerReferences", []))]


def config_value(api: KubeApi, docs: Docs, namespace: str, name: str) -> str | None:
    [doc] = [d for d in docs if d["kind"] == "ConfigMap"]
    value: str | None = api.get_object(doc, namespace).get("data", {}).get(name)
    return value


def api_token(api: KubeApi, docs: Docs, namespace: str) -> str:
    [doc] = [d for d in docs if d["kind"] == "Secret"]
    token: str = api.get_object(doc, namespace)["data"]["token"]
    return token


def check_gone(api: KubeApi, docs: Docs, namespace: str, *, kept: set[str]) -> None:
    """After uninstall: every object is gone but those the chart keeps (by kind)."""
    def leftovers() -> list[str]:
        return [f"{d['kind']}/{d['metadata']['name']}" for d in docs
                if d["kind"] not in kept and api.exists(api.object_path(d, namespace))]

    wait_for("the release's objects to be deleted", lambda: not leftovers(), timeout=60)
    for doc in docs:
        if doc["kind"] in kept:
            assert api.exists(api.object_path(doc, namespace)), f"{doc['kind']} not kept"


def release_secrets(api: KubeApi, namespace: str, release: str) -> list[dict[str, Any]]:
    return api.list("v1", "Secret", namespace, f"owner=helm,name={release}")


# ----------------------------------------------------------------------------- tests


def test_api_server_is_real(api: KubeApi) -> None:
    """What answers is a Kubernetes API server: version, discovery, and its validation."""
    version = api.get("/version")
    assert version["gitVersion"].startswith("v1.")
    groups = {g["name"] for g in api.get("/apis")["groups"]}
    assert {"apps", "autoscaling", "apiextensions.k8s.io"} <= groups
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_Name"}}
    status, body = api.request("POST", "/api/v1/namespaces/default/configmaps?dryRun=All",
                               bad)
    assert status == 422, body
    assert "RFC 1123" in json.dumps(body)


def test_install_upgrade_uninstall(api: KubeApi, run_helm: Helm, namespace: str,
                                   workdir: Path) -> None:
    """Default values: install, read every object back, upgrade with changed values and
    see the change (and the random API token kept), uninstall and see everything go."""
    release = "crawl"
    out = run_helm("install", release, str(cd.CHART), "--namespace", namespace,
                   "--wait=false", "--timeout", HELM_TIMEOUT)
    assert "STATUS: deployed" in out
    docs = run_helm.manifest(release, namespace)
    kinds = {d["kind"] for d in docs}
    assert {"ServiceAccount", "Secret", "ConfigMap", "PersistentVolumeClaim", "Service",
            "Deployment", "HorizontalPodAutoscaler"} <= kinds, kinds
    check_objects_stored(api, docs, release, namespace)
    check_hooks_accepted(api, run_helm.hooks(release, namespace), namespace)
    status = json.loads(run_helm("status", release, "--namespace", namespace,
                                 "--output", "json"))
    assert status["info"]["status"] == "deployed" and status["version"] == 1

    # The controller manager makes a ReplicaSet and its Pods for each Deployment (they
    # stay Pending: no node runs them).
    frontier = deployment(api, docs, namespace, "frontier")
    [rs1] = wait_for("the frontier's ReplicaSet", lambda: replica_sets(api, namespace,
                                                                       frontier), timeout=60)
    wait_for("the frontier's Pod", lambda: api.list(
        "v1", "Pod", namespace, "app.kubernetes.io/component=frontier"), timeout=60)
    token = api_token(api, docs, namespace)
    checksum = frontier["spec"]["template"]["metadata"]["annotations"]
    delay_var = "CRAWLER_POLITENESS_DEFAULT_DELAY"
    assert config_value(api, docs, namespace, delay_var) != "3.5"

    changed = workdir / "upgrade-values.yaml"  # a file: --set makes 3.5 a string
    changed.write_text(yaml.safe_dump({"services": {"frontier": {"replicas": 2}},
                                       "settings": {"politeness": {"default_delay": 3.5}}}),
                       encoding="utf-8")
    out = run_helm("upgrade", release, str(cd.CHART), "--namespace", namespace,
                   "--values", str(changed), "--wait=false", "--timeout", HELM_TIMEOUT)
    assert "has been upgraded" in out
    docs2 = run_helm.manifest(release, namespace)
    check_objects_stored(api, docs2, release, namespace)
    frontier2 = deployment(api, docs2, namespace, "frontier")
    assert frontier2["spec"]["replicas"] == 2
    assert frontier2["metadata"]["generation"] > frontier["metadata"]["generation"]
    assert config_value(api, docs2, namespace, delay_var) == "3.5"
    # the token was generated at install and read back through `lookup` at upgrade
    assert api_token(api, docs2, namespace) == token
    # a config change rolls the pods: new template annotations, a second ReplicaSet
    assert frontier2["spec"]["template"]["metadata"]["annotations"] != checksum
    wait_for("a new frontier ReplicaSet", lambda: [
        rs for rs in replica_sets(api, namespace, frontier2)
        if rs["metadata"]["uid"] != rs1["metadata"]["uid"]], timeout=60)
    history = json.loads(run_helm("history", release, "--namespace", namespace,
                                  "--output", "json"))
    assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"),
                                                               (2, "deployed")]
    assert len(release_secrets(api, namespace, release)) == 2

    out = run_helm("uninstall", release, "--namespace", namespace, "--wait",
                   "--timeout", HELM_TIMEOUT)
    assert "uninstalled" in out
    # the WARC claim carries helm.sh/resource-policy: keep
    check_gone(api, docs2, namespace, kept={"PersistentVolumeClaim"})
    assert release_secrets(api, namespace, release) == []
    wait_for("the Deployments' Pods to be deleted", lambda: not api.list(
        "v1", "Pod", namespace, "app.kubernetes.io/instance=crawl"), timeout=60)


@pytest.mark.parametrize("values", ["fixed-replicas-values.yaml", "production-values.yaml",
                                    "separate-parse-values.yaml"])
def test_install_ci_values(api: KubeApi, run_helm: Helm, namespace: str, values: str,
                           servicemonitor_crd: None) -> None:
    """Each CI values file installs: every object accepted and stored as rendered (the
    production values' ServiceMonitor against the Prometheus Operator's own CRD)."""
    release = "crawl-ci"
    run_helm("install", release, str(cd.CHART), "--namespace", namespace,
             "--values", str(CI_VALUES / values), "--wait=false", "--timeout", HELM_TIMEOUT)
    docs = run_helm.manifest(release, namespace)
    check_objects_stored(api, docs, release, namespace)
    check_hooks_accepted(api, run_helm.hooks(release, namespace), namespace)
    if values == "production-values.yaml":
        assert "ServiceMonitor" in {d["kind"] for d in docs}
        with pytest.raises(KubeApiError):  # the values name a Secret they do not create
            api.get(f"/api/v1/namespaces/{namespace}/secrets/crawler-api-token")
    run_helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout",
             HELM_TIMEOUT)
    check_gone(api, docs, namespace, kept={"PersistentVolumeClaim"})


def test_server_validation_refuses_what_the_schemas_pass(api: KubeApi, run_helm: Helm,
                                                         namespace: str,
                                                         workdir: Path) -> None:
    """A CPU request above its limit passes the chart's values schema, the Kubernetes
    JSON schemas and every check of scripts/check-deploy; only the API server's own
    validation refuses it, and the install fails with the server's message."""
    bad = workdir / "bad-values.yaml"
    bad.write_text(yaml.safe_dump({"services": {"frontier": {"resources": {
        "requests": {"cpu": "2"}, "limits": {"cpu": "1", "memory": "1Gi"}}}}}),
        encoding="utf-8")
    kube = cd.helm_kube_version()
    docs = cd.render(run_helm.binary, [bad], kube_version=kube)
    assert cd.manifest_problems(docs, kube_version=kube,
                                expect_autoscaled=("fetcher",)) == []
    proc = subprocess.run([str(run_helm.binary), "--kubeconfig", str(kubeconfig_path()),
                           "install", "bad", str(cd.CHART), "--namespace", namespace,
                           "--values", str(bad), "--wait=false"],
                          env=run_helm.env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "must be less than or equal to cpu limit" in proc.stderr, proc.stderr
    assert "crawler-frontier" in proc.stderr
