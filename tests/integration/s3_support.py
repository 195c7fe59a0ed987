"""The S3-compatible server of the S3 tests: scripts/servers' SeaweedFS (``scripts/servers
start s3``) or the one ``CRAWLER_BLOB_S3_ENDPOINT`` names (loopback only), with the keys
of ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (else scripts/servers' local keys).

A test that needs it skips when it does not answer, and fails under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import socket
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

from common.adapters.s3_blobs import S3Config, open_bucket
from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]


def servers_module() -> ModuleType:
    """scripts/servers.d/servers.py as a module (its S3 server and readiness check)."""
    name = "servers_for_s3_tests"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "scripts" / "servers.d" / "servers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True, slots=True)
class S3Server:
    endpoint: str
    bucket: str
    access_key: str
    secret_key: str

    def config(self, **changes: object) -> S3Config:
        """A config on a key prefix of its own (a fresh part of the bucket per test)."""
        base = S3Config(bucket=self.bucket, endpoint=self.endpoint, path_style=True,
                        key_prefix=f"test-{uuid.uuid4().hex[:12]}", upload_wait=60.0,
                        credentials_file="")
        return replace(base, **changes)  # type: ignore[arg-type]

    def credentials_file(self, folder: Path, *, key: str | None = None,
                         secret: str | None = None) -> str:
        path = folder / "credentials"
        path.write_text(f"[default]\naws_access_key_id = {key or self.access_key}\n"
                        f"aws_secret_access_key = {secret or self.secret_key}\n")
        return str(path)

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key}


def s3_server() -> S3Server:
    """The server the tests use, checked to answer (else skipped, or failed under CI)."""
    servers = servers_module()
    endpoint = (os.environ.get("CRAWLER_BLOB_S3_ENDPOINT", "").strip()
                or f"http://127.0.0.1:{os.environ.get('S3_PORT', '').strip() or 8333}")
    host, port = urlsplit(endpoint).hostname or "", urlsplit(endpoint).port or 80
    try:
        loopback = all(ipaddress.ip_address(info[4][0]).is_loopback
                       for info in socket.getaddrinfo(host, port))
    except OSError as exc:
        unavailable(f"cannot resolve the S3 endpoint {endpoint}: {exc}")
    if not loopback:
        unavailable(f"the S3 endpoint {endpoint} is not on loopback; tests only talk to "
                    "loopback")
    server = S3Server(
        endpoint=endpoint,
        bucket=os.environ.get("CRAWLER_BLOB_S3_BUCKET", "").strip() or servers.S3_BUCKET,
        access_key=os.environ.get("AWS_ACCESS_KEY_ID", "").strip() or servers.S3_ACCESS_KEY,
        secret_key=(os.environ.get("AWS_SECRET_ACCESS_KEY", "").strip()
                    or servers.S3_SECRET_KEY))
    probe = servers.S3()
    probe.bucket, probe.access_key, probe.secret_key = (server.bucket, server.access_key,
                                                        server.secret_key)
    if probe.ready(host, port) is None:
        unavailable(f"no S3 server answers at {endpoint} with bucket {server.bucket} "
                    f"(scripts/servers start s3): {probe.problem}")
    return server


def object_bytes(config: S3Config, key: str) -> bytes:
    import obstore

    return bytes(obstore.get(open_bucket(config), key).bytes())


def object_keys(config: S3Config) -> list[str]:
    import obstore

    return sorted(meta["path"] for batch in obstore.list(open_bucket(config))
                  for meta in batch)
