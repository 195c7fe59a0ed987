# ruff: noqa: F811  (the fixtures imported from test_helm_install are parameters here)
"""A crawl on Kubernetes: the chart's pods run on scripts/kube's node (kubelet, containerd)
and crawl a small site through Kafka and Cassandra deployed beside the chart.

Needs ``KUBE_NODE=1 scripts/kube start`` with the images ``polite-crawler:latest``,
``apache/kafka:4.1.0`` and ``cassandra:5.0`` in the node's containerd (``scripts/kube``
imports them from a Docker engine that has them: ``scripts/docker prepare`` builds them,
``KUBE_NODE_IMAGES`` names them). Marked ``kube``, like the helm install tests.

There is no kube-proxy and no cluster DNS here, so the chart is given pod addresses:
Kafka advertises its pod IP, the crawler's settings name Kafka's and Cassandra's pod IPs,
and the site is crawled at its pod IP (the SSRF guard is told to let the pod network
through). All traffic stays on the node's bridge, inside this machine.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import unavailable
from tests.integration.test_helm_install import (  # noqa: F401 (fixtures)
    HELM_TIMEOUT,
    Helm,
    api,
    cd,
    helm,
    namespace,
    run_helm,
    workdir,
)
from tests.kube_support import KubeApi, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(1500)]

NODE = "crawler-node"
POD_CIDR = "10.244.0.0/24"
PAGES = 20
TOKEN = "kube-crawl-test-token"
# A site of PAGES + 1 pages: / links to every page, each page to the next and to /.
SITE = f"""
import http.server
N = {PAGES}
def page(n):
    links = "".join(f'<a href="/p{{i}}">p{{i}}</a> ' for i in range(1, N + 1)) if n == 0 \\
        else f'<a href="/">home</a> <a href="/p{{n % N + 1}}">next</a>'
    words = " ".join(f"word{{n}}x{{i}}" for i in range(200))
    return f"<html><head><title>page {{n}}</title></head><body><p>{{words}}</p>{{links}}" \\
        "</body></html>"
class Site(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?")[0]
        n = 0 if path == "/" else int(path[2:]) if path[2:].isdigit() and path[:2] == "/p" \\
            else None
        if n is None or n > N:
            self.send_error(404)
            return
        body = page(n).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), Site).serve_forever()
"""


def pod(name: str, image: str, env: dict[str, str], *, command: list[str] | None = None,
        memory: str = "512Mi") -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name, "image": image, "imagePullPolicy": "Never",
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                *({"name": k, "value": v} for k, v in env.items())],
        "resources": {"requests": {"cpu": "100m", "memory": memory},
                      "limits": {"memory": memory}}}
    if command:
        container["command"] = command
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"containers": [container], "enableServiceLinks": False}}


def port_open(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=2):
            return True
    except OSError:
        return False


def pod_ip(kube: KubeApi, ns: str, name: str) -> str | None:
    found: dict[str, Any] = kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    status = found.get("status", {})
    for cs in status.get("containerStatuses") or []:
        reason = (cs.get("state", {}).get("waiting") or {}).get("reason", "")
        if reason in ("ErrImageNeverPull", "InvalidImageName"):
            unavailable(f"pod {name}: image {cs.get('image')} is not on the node ({reason}); "
                        "scripts/docker prepare, then KUBE_NODE_IMAGES=... scripts/kube start")
    ip: str | None = status.get("podIP") if status.get("phase") == "Running" else None
    return ip


def api_call(ip: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(ip, 8080, timeout=10)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Authorization": f"Bearer {TOKEN}",
                              "Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


@pytest.fixture
def node(api: KubeApi) -> str:
    status, body = api.request("GET", f"/api/v1/nodes/{NODE}")
    if status != 200:
        unavailable(f"no node {NODE}: start it with KUBE_NODE=1 scripts/kube start")
    ready = [c for c in body["status"].get("conditions", []) if c["type"] == "Ready"]
    if not ready or ready[0]["status"] != "True":
        unavailable(f"node {NODE} is not Ready: {ready}")
    return NODE


@pytest.fixture
def warc_volume(api: KubeApi, workdir: Path) -> Iterator[str]:
    """A hostPath PersistentVolume for the chart's ReadWriteMany WARC claim."""
    folder = workdir / f"warc-{uuid.uuid4().hex[:6]}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o1777)
    name = f"crawler-test-{folder.name}"
    body = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteMany"],
                     "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": str(folder), "type": "Directory"}}}
    status, answer = api.request("POST", "/api/v1/persistentvolumes", body)
    assert status == 201, answer
    yield str(folder)
    api.delete(f"/api/v1/persistentvolumes/{name}")


def test_crawl_through_kafka_and_cassandra(api: KubeApi, run_helm: Helm,
                                           namespace: str, node: str, warc_volume: str,
                                           workdir: Path) -> None:
    ns = namespace
    for manifest in (
        pod("kafka", "apache/kafka:4.1.0", {
            "KAFKA_NODE_ID": "1", "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://$(POD_IP):9092",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
            "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
            "KAFKA_LOG_DIRS": "/var/lib/kafka/data", "KAFKA_HEAP_OPTS": "-Xms512m -Xmx512m"},
            memory="1Gi"),
        pod("cassandra", "cassandra:5.0", {
            "CASSANDRA_CLUSTER_NAME": "crawler", "MAX_HEAP_SIZE": "1G",
            "HEAP_NEWSIZE": "200M"}, memory="2Gi"),
        pod("site", "polite-crawler:latest", {}, command=["python", "-c", SITE]),
    ):
        status, body = api.request("POST", f"/api/v1/namespaces/{ns}/pods", manifest)
        assert status == 201, body
    ips = {name: wait_for(f"pod {name} to run", lambda n=name: pod_ip(api, ns, n),  # type: ignore[misc]
                          timeout=180)
           for name in ("kafka", "cassandra", "site")}
    for name, port in (("site", 8000), ("kafka", 9092), ("cassandra", 9042)):
        wait_for(f"{name} on {ips[name]}:{port}", lambda n=name, p=port: port_open(ips[n], p),  # type: ignore[misc]
                 timeout=300, interval=2)

    values = workdir / "crawl-values.yaml"
    values.write_text(yaml.safe_dump({
        "image": {"repository": "polite-crawler", "tag": "latest", "pullPolicy": "Never"},
        "kafka": {"bootstrap": f"{ips['kafka']}:9092", "partitions": 4,
                  "replicationFactor": 1},
        "cassandra": {"hosts": [ips["cassandra"]], "replicationFactor": 1,
                      "keyspace": "crawl_kube"},
        "api": {"token": TOKEN},
        "settings": {"politeness": {"default_delay": 0.05, "response_time_factor": 0},
                     "fetcher": {"allow_networks": [POD_CIDR]}},
        # the default topology: the fetcher parses and judges the pages (no parser or
        # dedup Deployment)
        "services": {"fetcher": {"replicas": 1, "autoscaling": {"enabled": False}}},
    }), encoding="utf-8")
    started = time.monotonic()
    run_helm("install", "crawl", str(cd.CHART), "--namespace", ns, "--values", str(values),
             "--wait", "--timeout", "600s")
    ready_s = time.monotonic() - started

    [api_pod] = api.list("v1", "Pod", ns, "app.kubernetes.io/component=api")
    api_ip = api_pod["status"]["podIP"]
    site = f"http://{ips['site']}:8000/"
    status, answer = api_call(api_ip, "POST", "/v1/seeds", {"urls": [site]})
    assert status == 202, answer

    def finished() -> dict[str, Any] | None:
        code, stats = api_call(api_ip, "GET", "/v1/stats")
        if code == 200 and stats["fetched"] >= PAGES + 1 and stats["queued"] == 0 \
                and stats["in_flight"] == 0 and stats.get("awaiting_parse", 0) == 0:
            return dict(stats)
        return None

    stats = wait_for("the crawl to finish", finished, timeout=300, interval=2)
    crawl_s = time.monotonic() - started - ready_s
    print(f"pods ready (helm install --wait) in {ready_s:.0f} s; crawl in {crawl_s:.0f} s; "
          f"stats {stats}")
    assert stats["fetched"] == PAGES + 1
    assert stats["kept"] == PAGES + 1
    assert stats["dead"] == 0 and not stats["errors"]
    warcs = list(Path(warc_volume).rglob("*.warc.gz"))
    assert warcs, f"no WARC files in {warc_volume}"
    with contextlib.suppress(Exception):
        run_helm("uninstall", "crawl", "--namespace", ns, "--wait", "--timeout", HELM_TIMEOUT)
