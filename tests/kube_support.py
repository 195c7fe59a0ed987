"""A small client of a Kubernetes API server, for the tests against scripts/kube's cluster.

Plain HTTPS with the kubeconfig's client certificate (the standard library only), and the
API's own discovery documents to find each kind's resource. Only a kubeconfig this project
made is used: ``CRAWLER_TEST_KUBECONFIG``, else ``var/kube/admin.kubeconfig`` (written by
``scripts/kube start``); never ``~/.kube/config`` or ``KUBECONFIG``, so that a test never
installs into a cluster somebody else runs.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_KUBECONFIG = ROOT / "var" / "kube" / "admin.kubeconfig"


def kubeconfig_path() -> Path:
    return Path(os.environ.get("CRAWLER_TEST_KUBECONFIG", "").strip() or DEFAULT_KUBECONFIG)


class KubeApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


@dataclass
class Resource:
    """Where a kind lives in the API: ``/api/v1/namespaces/<ns>/<plural>/<name>``."""

    group_version: str
    plural: str
    namespaced: bool

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced:
            assert namespace, f"{self.plural} is namespaced"
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return base + (f"/{name}" if name else "")


@dataclass
class KubeApi:
    """The API server of a kubeconfig's current context (client certificate or token)."""

    server: str
    ssl_context: ssl.SSLContext
    token: str | None = None
    _resources: dict[tuple[str, str], Resource] = field(default_factory=dict)

    @classmethod
    def from_kubeconfig(cls, path: Path, workdir: Path) -> KubeApi:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        current = config.get("current-context")
        ctx = next(c["context"] for c in config["contexts"] if c["name"] == current)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == ctx["user"])

        def material(key: str) -> str | None:
            """A file path for ``key`` (``<key>`` names one, ``<key>-data`` embeds it)."""
            if user.get(key) or cluster.get(key):
                return str(user.get(key) or cluster.get(key))
            data = user.get(f"{key}-data") or cluster.get(f"{key}-data")
            if not data:
                return None
            out = workdir / key
            out.write_bytes(base64.b64decode(data))
            out.chmod(0o600)
            return str(out)

        ctx_ssl = ssl.create_default_context(cafile=material("certificate-authority"))
        cert, key = material("client-certificate"), material("client-key")
        if cert and key:
            ctx_ssl.load_cert_chain(cert, key)
        return cls(server=cluster["server"], ssl_context=ctx_ssl, token=user.get("token"))

    # -- HTTP
    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json",
                timeout: float = 30.0) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(self.server)
        conn = http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port or 443,
                                           context=self.ssl_context, timeout=timeout)
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            conn.request(method, url.path.rstrip("/") + path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            parsed = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            parsed = raw.decode(errors="replace")
        return resp.status, parsed

    def get(self, path: str) -> Any:
        status, body = self.request("GET", path)
        if status != 200:
            message = body.get("message", body) if isinstance(body, dict) else body
            raise KubeApiError(status, f"GET {path}: {message}")
        return body

    def exists(self, path: str) -> bool:
        status, body = self.request("GET", path)
        if status == 404:
            return False
        if status != 200:
            raise KubeApiError(status, f"GET {path}: {body}")
        return True

    def ready(self) -> str | None:
        """None when /readyz answers 200, else why not."""
        try:
            status, body = self.request("GET", "/readyz", timeout=5)
        except (OSError, http.client.HTTPException) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None if status == 200 else f"/readyz answered {status}: {body}"

    # -- discovery
    def resource(self, api_version: str, kind: str) -> Resource:
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for res in self.get(base)["resources"]:
                if "/" not in res["name"]:
                    self._resources[(api_version, res["kind"])] = Resource(
                        api_version, res["name"], res["namespaced"])
        if key not in self._resources:
            raise KubeApiError(404, f"the server has no kind {kind} in {api_version}")
        return self._resources[key]

    def object_path(self, doc: dict[str, Any], namespace: str) -> str:
        res = self.resource(doc["apiVersion"], doc["kind"])
        ns = doc["metadata"].get("namespace") or namespace
        return res.path(doc["metadata"]["name"], ns if res.namespaced else None)

    def get_object(self, doc: dict[str, Any], namespace: str) -> dict[str, Any]:
        found: dict[str, Any] = self.get(self.object_path(doc, namespace))
        return found

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             selector: str | None = None) -> list[dict[str, Any]]:
        res = self.resource(api_version, kind)
        path = res.path(namespace=namespace)
        if selector:
            path += "?" + urllib.parse.urlencode({"labelSelector": selector})
        items: list[dict[str, Any]] = self.get(path)["items"]
        return items

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": labels or {}}}
        status, answer = self.request("POST", "/api/v1/namespaces", body)
        if status != 201:
            raise KubeApiError(status, f"create namespace {name}: {answer}")

    def delete(self, path: str) -> int:
        status, _ = self.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1",
                                                  "propagationPolicy": "Background"})
        return status


def wait_for(what: str, check: Callable[[], Any], timeout: float,
             interval: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def subset_problems(rendered: Any, stored: Any, where: str = "") -> Iterator[str]:
    """Where the server's object differs from what was rendered: every rendered field must
    be stored as rendered (the server may add defaults, which are ignored)."""
    if isinstance(rendered, dict):
        if not isinstance(stored, dict):
            yield f"{where or '.'}: rendered a mapping, stored {stored!r}"
            return
        for key, value in rendered.items():
            if key not in stored:
                if value in (None, {}, []):  # empty values are dropped by the server
                    continue
                yield f"{where}.{key}: rendered {value!r}, not stored"
            else:
                yield from subset_problems(value, stored[key], f"{where}.{key}")
    elif isinstance(rendered, list):
        if not isinstance(stored, list) or len(stored) != len(rendered):
            yield f"{where}: rendered {rendered!r}, stored {stored!r}"
            return
        for i, (r, s) in enumerate(zip(rendered, stored, strict=True)):
            yield from subset_problems(r, s, f"{where}[{i}]")
    elif rendered != stored and str(rendered) != str(stored):
        yield f"{where}: rendered {rendered!r}, stored {stored!r}"


def new_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="kube-test-"))
