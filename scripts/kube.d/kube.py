"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager.

The binaries are built from source with Go's module tooling, once per version, into
``.cache/kube/<kubernetes version>/bin``: a generated module (``.cache/kube/<version>/src``)
requires ``k8s.io/kubernetes`` and points each of its staging modules (``k8s.io/api``,
``k8s.io/apiserver``, ... which its go.mod names at v0.0.0 and replaces with folders of its
own repository) at the published module of the same release (v0.N.P for Kubernetes 1.N.P).
etcd is built from ``go.etcd.io/etcd/server/v3`` at the version Kubernetes requires. Nothing
is downloaded but Go modules, and nothing is faked: this is the API server with its own
validation, admission, RBAC and storage, in front of a real etcd.

Runtime files go to ``var/kube/``: ``pki/`` (a CA made with openssl, the API server's
serving certificate, client certificates for the admin and the controller manager, the
service-account key pair), ``etcd/`` (data), ``logs/``, one PID file per component, and
``admin.kubeconfig`` (user ``kube-admin`` in group ``system:masters``). Stopping only ever
signals a PID from those files, and only when that process is the binary this script
started with this folder on its command line.

Usage: scripts/kube build|start|stop|status|env|wipe

Environment:
  KUBE_APISERVER_PORT (6443), KUBE_ETCD_PORT (12379), KUBE_ETCD_PEER_PORT (12380),
  KUBE_CONTROLLER_MANAGER_PORT (10257): ports on 127.0.0.1 (none of them is Kafka's
      9092/9093, Cassandra's 9042/7000 or Prometheus' 9090)
  KUBE_CONTROLLER_MANAGER (1): 0 starts no controller manager (then no ReplicaSet is made
      for a Deployment and a deleted namespace stays Terminating)
  KUBE_SERVICE_CIDR (10.96.0.0/16): the Services' virtual IP range (only allocated from:
      nothing here routes to it)
  KUBE_START_TIMEOUT (180 s): how long ``start`` waits for each component to be ready
  KUBE_STOP_TIMEOUT (30 s): SIGTERM, then SIGKILL after this long
  KUBE_BUILD_JOBS (the number of cores): ``go build -p``
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / ".cache" / "kube"
VAR = ROOT / "var" / "kube"
PKI = VAR / "pki"
LOGS = VAR / "logs"
KUBECONFIG = VAR / "admin.kubeconfig"

# The API server's release: helm's client libraries (k8s.io/client-go v0.37) speak 1.37.
KUBE_VERSION = "v1.37.2"
KUBE_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
LOCALHOST = "127.0.0.1"
# Programs built from the Kubernetes module, by package.
KUBE_PROGRAMS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
}


class KubeError(RuntimeError):
    """Something could not be built, started, checked or stopped."""


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def env_int(name: str, default: int) -> int:
    raw = env_str(name, str(default))
    try:
        return int(raw)
    except ValueError:
        raise KubeError(f"{name}={raw!r} is not a whole number") from None


def env_port(name: str, default: int) -> int:
    port = env_int(name, default)
    if not 0 < port < 65536:
        raise KubeError(f"{name}={port} is not a TCP port")
    return port


def log(message: str) -> None:
    print(f"kube: {message}", flush=True)


# ------------------------------------------------------------------------------ build


def build_dir(version: str = KUBE_VERSION) -> Path:
    return CACHE / version


def bin_dir(version: str = KUBE_VERSION) -> Path:
    return build_dir(version) / "bin"


def stamp_file(version: str = KUBE_VERSION) -> Path:
    return bin_dir(version) / "build.json"


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GOFLAGS"] = "-mod=mod"
    env.setdefault("GOTOOLCHAIN", "local")
    env["CGO_ENABLED"] = "0"
    return env


def go_command() -> str:
    go = shutil.which("go")
    if go is None:
        raise KubeError("go not found: Go is needed to build the Kubernetes binaries")
    return go


def go_mod_of(module: str, version: str) -> str:
    """The go.mod text of ``module@version``, through ``go mod download``."""
    go = go_command()
    with tempfile.TemporaryDirectory(prefix="kube-build-") as tmp:
        subprocess.run([go, "mod", "init", "kube.local/probe"], cwd=tmp, env=go_env(),
                       check=True, capture_output=True)
        proc = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"],
                              cwd=tmp, env=go_env(), capture_output=True, text=True)
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise KubeError(f"go mod download {module}@{version} failed: "
                        f"{(proc.stderr or proc.stdout).strip()}") from None
    if "GoMod" not in info:
        raise KubeError(f"go mod download {module}@{version}: "
                        f"{info.get('Error', proc.stderr.strip())}")
    return Path(info["GoMod"]).read_text(encoding="utf-8")


def staging_version(kube_version: str) -> str:
    """Kubernetes v1.N.P publishes its staging modules as v0.N.P."""
    match = re.fullmatch(r"v1\.(\d+)\.(\d+)", kube_version)
    if not match:
        raise KubeError(f"not a Kubernetes release: {kube_version}")
    return f"v0.{match.group(1)}.{match.group(2)}"


def build_go_mod(kube_go_mod: str, kube_version: str) -> tuple[str, str]:
    """The build module's go.mod, and the etcd version Kubernetes requires."""
    go_line = re.search(r"^go (\S+)", kube_go_mod, re.MULTILINE)
    staging = sorted(set(re.findall(r"^\s*(k8s\.io/[A-Za-z0-9._-]+) v0\.0\.0\s*$",
                                    kube_go_mod, re.MULTILINE)))
    etcd = re.search(r"^\s*go\.etcd\.io/etcd/server/v3 (v\S+)", kube_go_mod, re.MULTILINE)
    if not go_line or not staging or not etcd:
        raise KubeError(f"unexpected go.mod in {KUBE_MODULE}@{kube_version}")
    pub = staging_version(kube_version)
    lines = ["// Generated by scripts/kube.d/kube.py: builds Kubernetes from its module,",
             "// with its staging modules taken from their published releases.",
             "module kube.local/build", "", f"go {go_line.group(1)}", "",
             "require (", f"\t{KUBE_MODULE} {kube_version}",
             f"\t{ETCD_MODULE} {etcd.group(1)}", ")", "", "replace ("]
    lines += [f"\t{name} => {name} {pub}" for name in staging]
    lines += [")", ""]
    return "\n".join(lines), etcd.group(1)


def version_ldflags(kube_version: str) -> str:
    """The link flags Kubernetes' own build sets, so that /version tells the release."""
    major, minor = re.findall(r"\d+", kube_version)[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={kube_version}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean",
                  f"-X {pkg}.buildDate=1970-01-01T00:00:00Z"]
    return " ".join(flags)


def built(version: str = KUBE_VERSION) -> dict[str, Any] | None:
    """The build record, when every binary is there."""
    try:
        stamp: dict[str, Any] = json.loads(stamp_file(version).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    names = [*KUBE_PROGRAMS, "etcd"]
    if stamp.get("kubernetes") != version or any(
            not (bin_dir(version) / name).is_file() for name in names):
        return None
    return stamp


def run_go(args: list[str], cwd: Path, what: str) -> float:
    start = time.monotonic()
    proc = subprocess.run([go_command(), *args], cwd=cwd, env=go_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise KubeError(f"{what} failed:\n{proc.stdout.strip()[-4000:]}")
    return time.monotonic() - start


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def build(version: str = KUBE_VERSION) -> dict[str, Any]:
    """Build the binaries once; later calls return the record of that build."""
    stamp = built(version)
    if stamp is not None:
        return stamp
    go = go_command()
    go_version = subprocess.run([go, "version"], capture_output=True, text=True,
                                env=go_env()).stdout.strip()
    log(f"building Kubernetes {version} and etcd from their Go modules into "
        f"{bin_dir(version).relative_to(ROOT)} (once; many minutes on 2 cores) ...")
    total = time.monotonic()
    src = build_dir(version) / "src"
    src.mkdir(parents=True, exist_ok=True)
    mod_text, etcd_version = build_go_mod(go_mod_of(KUBE_MODULE, version), version)
    (src / "go.mod").write_text(mod_text, encoding="utf-8")
    (src / "main.go").write_text("// The build module has no code of its own.\npackage build\n",
                                 encoding="utf-8")
    modcache = Path(subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True,
                                   env=go_env()).stdout.strip())
    before = dir_bytes(modcache / "cache" / "download")
    packages = [*KUBE_PROGRAMS.values(), ETCD_MODULE]
    # Listing the programs' packages downloads the modules they need, and only those.
    fetch_s = run_go(["list", "-deps", *packages], src, "go list (module download)")
    fetched = dir_bytes(modcache / "cache" / "download") - before
    log(f"modules: {fetched / 1e6:.0f} MB downloaded in {fetch_s:.0f} s")
    jobs = str(env_int("KUBE_BUILD_JOBS", os.cpu_count() or 2))
    out = build_dir(version) / "bin.tmp"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    compile_s = run_go(["build", "-p", jobs, "-trimpath", "-ldflags", version_ldflags(version),
                        "-o", f"{out}/", *KUBE_PROGRAMS.values()], src,
                       f"building {', '.join(KUBE_PROGRAMS)}")
    compile_s += run_go(["build", "-p", jobs, "-trimpath", "-ldflags", "-s -w",
                         "-o", str(out / "etcd"), ETCD_MODULE], src, "building etcd")
    binaries = sorted(p.name for p in out.iterdir())
    record: dict[str, Any] = {"kubernetes": version, "etcd": etcd_version, "go": go_version,
              "modules_downloaded_mb": round(fetched / 1e6, 1),
              "download_seconds": round(fetch_s, 1), "compile_seconds": round(compile_s, 1),
              "total_seconds": round(time.monotonic() - total, 1),
              "binaries": binaries}
    (out / "build.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(bin_dir(version), ignore_errors=True)
    out.rename(bin_dir(version))
    log(f"built {', '.join(binaries)} in {record['total_seconds']:.0f} s "
        f"(download {fetch_s:.0f} s, compile {compile_s:.0f} s)")
    return record


# ------------------------------------------------------------------------- certificates


def openssl(*args: str) -> None:
    tool = shutil.which("openssl")
    if tool is None:
        raise KubeError("openssl not found: it makes the cluster's certificates")
    proc = subprocess.run([tool, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise KubeError(f"openssl {' '.join(args[:2])} failed: {proc.stderr.strip()}")


def new_key(path: Path, *, rsa: bool = False) -> None:
    if rsa:
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                "-out", str(path))
    else:
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-out", str(path))
    path.chmod(0o600)


def service_ip(cidr: str) -> str:
    """The first address of the service range: the ``kubernetes`` Service's."""
    import ipaddress

    net = ipaddress.ip_network(cidr, strict=False)
    return str(net.network_address + 1)


def issue(name: str, subject: str, usage: str, sans: list[str] | None = None) -> None:
    """``pki/<name>.crt`` and ``.key``, signed by the cluster CA, valid ten years."""
    key, csr, crt = PKI / f"{name}.key", PKI / f"{name}.csr", PKI / f"{name}.crt"
    new_key(key)
    openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    ext = PKI / f"{name}.ext"
    lines = ["basicConstraints=critical,CA:FALSE",
             "keyUsage=critical,digitalSignature,keyEncipherment",
             f"extendedKeyUsage={usage}"]
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    ext.write_text("\n".join(lines) + "\n", encoding="utf-8")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(PKI / "ca.crt"),
            "-CAkey", str(PKI / "ca.key"), "-set_serial", str(int.from_bytes(os.urandom(8), "big")),
            "-days", "3650", "-sha256", "-extfile", str(ext), "-out", str(crt))
    csr.unlink()
    ext.unlink()


def ensure_pki(service_cidr: str) -> None:
    """The CA, the serving and client certificates and the service-account keys (once)."""
    done = PKI / "done"
    if done.is_file() and done.read_text(encoding="utf-8").strip() == service_cidr:
        return
    shutil.rmtree(PKI, ignore_errors=True)
    PKI.mkdir(parents=True)
    PKI.chmod(0o700)
    new_key(PKI / "ca.key")
    openssl("req", "-x509", "-new", "-key", str(PKI / "ca.key"), "-subj",
            "/CN=polite-crawler-kube-ca", "-days", "3650", "-sha256",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-out", str(PKI / "ca.crt"))
    issue("apiserver", "/CN=kube-apiserver", "serverAuth",
          [f"IP:{LOCALHOST}", f"IP:{service_ip(service_cidr)}", "DNS:localhost",
           "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
           "DNS:kubernetes.default.svc.cluster.local"])
    issue("admin", "/O=system:masters/CN=kube-admin", "clientAuth")
    issue("controller-manager", "/CN=system:kube-controller-manager", "clientAuth")
    issue("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
          "clientAuth")
    new_key(PKI / "sa.key", rsa=True)
    openssl("pkey", "-in", str(PKI / "sa.key"), "-pubout", "-out", str(PKI / "sa.pub"))
    done.write_text(service_cidr + "\n", encoding="utf-8")
    log(f"certificates and service-account keys made in {PKI.relative_to(ROOT)}")


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, user: str, cert: str, server: str) -> None:
    """A kubeconfig with the CA and the client certificate embedded (JSON is YAML)."""
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "crawler-local", "cluster": {
            "server": server, "certificate-authority-data": b64(PKI / "ca.crt")}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(PKI / f"{cert}.crt"),
            "client-key-data": b64(PKI / f"{cert}.key")}}],
        "contexts": [{"name": "crawler-local", "context": {
            "cluster": "crawler-local", "user": user}}],
        "current-context": "crawler-local",
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(path)


# ------------------------------------------------------------------------ processes


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def process_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def process_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def tail(path: Path, lines: int = 25, offset: int = 0) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return f"(no {path})"
    return "\n".join(text.splitlines()[-lines:])


def https_get(port: int, path: str, *, client: bool = True,
              timeout: float = 5.0) -> tuple[int, str]:
    """GET https://127.0.0.1:port/path: with the admin certificate, verified by the cluster
    CA; or (``client=False``) anonymously and unverified, for a component's own health."""
    if client:
        ctx = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
        ctx.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    else:
        ctx = ssl._create_unverified_context()
    conn = http.client.HTTPSConnection(LOCALHOST, port, context=ctx, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    conn = http.client.HTTPConnection(LOCALHOST, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


@dataclass
class Settings:
    apiserver_port: int
    etcd_port: int
    etcd_peer_port: int
    controller_manager_port: int
    controller_manager: bool
    service_cidr: str
    start_timeout: float
    stop_timeout: float

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            apiserver_port=env_port("KUBE_APISERVER_PORT", 6443),
            etcd_port=env_port("KUBE_ETCD_PORT", 12379),
            etcd_peer_port=env_port("KUBE_ETCD_PEER_PORT", 12380),
            controller_manager_port=env_port("KUBE_CONTROLLER_MANAGER_PORT", 10257),
            controller_manager=env_str("KUBE_CONTROLLER_MANAGER", "1") not in ("0", "no",
                                                                             "false"),
            service_cidr=env_str("KUBE_SERVICE_CIDR", "10.96.0.0/16"),
            start_timeout=float(env_int("KUBE_START_TIMEOUT", 180)),
            stop_timeout=float(env_int("KUBE_STOP_TIMEOUT", 30)),
        )

    @property
    def server(self) -> str:
        return f"https://{LOCALHOST}:{self.apiserver_port}"


@dataclass
class Component:
    """One process of the control plane: how to start it and tell that it is ready."""

    name: str
    port: int
    args: Callable[[], list[str]]
    probe: Callable[[], str | None]  # None when ready, else what is not
    offset: int = 0  # where the log ended before this start: failures show what follows

    @property
    def binary(self) -> Path:
        return bin_dir() / self.name

    @property
    def pid_file(self) -> Path:
        return VAR / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return LOGS / f"{self.name}.log"

    def running_pid(self) -> int | None:
        """The PID from the PID file, if that process is alive and is this component of
        this folder's cluster."""
        pid = read_pid(self.pid_file)
        if pid is None or not process_alive(pid):
            return None
        cmd = process_cmdline(pid)
        if not cmd or Path(cmd[0]).name != self.name or not any(str(VAR) in a for a in cmd):
            return None
        return pid

    def ready(self) -> str | None:
        """None when ready, else what is not."""
        try:
            return self.probe()
        except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
            return f"{type(exc).__name__}: {exc}"

    def spawn(self) -> subprocess.Popen[bytes] | None:
        pid = self.running_pid()
        if pid:
            log(f"{self.name}: already running (pid {pid})")
            return None
        with contextlib.closing(socket.socket()) as sock:
            if sock.connect_ex((LOCALHOST, self.port)) == 0:
                raise KubeError(f"{self.name}: port {self.port} on {LOCALHOST} is taken by "
                                "another process; choose another port (see scripts/kube.d/"
                                "kube.py)")
        LOGS.mkdir(parents=True, exist_ok=True)
        self.offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        cmd = [str(self.binary), *self.args()]
        with self.log_file.open("ab") as out:
            out.write(f"\n--- start {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            out.flush()
            proc = subprocess.Popen(cmd, cwd=VAR, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.pid_file.write_text(f"{proc.pid}\n")
        log(f"{self.name}: started pid {proc.pid}, log {self.log_file.relative_to(ROOT)}")
        return proc

    def wait_ready(self, proc: subprocess.Popen[bytes] | None, timeout: float) -> float:
        started = time.monotonic()
        problem: str | None = "not checked yet"
        while True:
            if proc is not None and proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise KubeError(f"{self.name}: exited with code {proc.returncode} before it "
                                f"was ready.\n{tail(self.log_file, offset=self.offset)}")
            problem = self.ready()
            if problem is None:
                took = time.monotonic() - started
                pid = proc.pid if proc is not None else self.running_pid()
                rss = rss_mib(pid) if pid else None
                mem = f", rss {rss:.0f} MiB" if rss is not None else ""
                log(f"{self.name}: ready on {LOCALHOST}:{self.port} after {took:.1f} s{mem}")
                return took
            if time.monotonic() - started > timeout:
                raise KubeError(f"{self.name}: not ready within {timeout:.0f} s (last check: "
                                f"{problem}).\n{tail(self.log_file, offset=self.offset)}")
            time.sleep(0.5)

    def signal_stop(self) -> int | None:
        pid = read_pid(self.pid_file)
        if pid is None:
            return None
        if self.running_pid() is None:
            log(f"{self.name}: not running (pid {pid} is gone or is not this component)")
            self.pid_file.unlink(missing_ok=True)
            return None
        log(f"{self.name}: stopping pid {pid}")
        os.kill(pid, signal.SIGTERM)
        return pid

    def wait_stopped(self, pid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if process_alive(pid):
            log(f"{self.name}: still running after {timeout:.0f} s, sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while process_alive(pid):
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        log(f"{self.name}: stopped")


def components(s: Settings) -> list[Component]:
    """etcd, kube-apiserver and (unless turned off) kube-controller-manager, in start order."""
    etcd_url = f"http://{LOCALHOST}:{s.etcd_port}"
    peer_url = f"http://{LOCALHOST}:{s.etcd_peer_port}"

    def etcd_args() -> list[str]:
        return [
            "--name", "crawler-local", "--data-dir", str(VAR / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"crawler-local={peer_url}",
            "--initial-cluster-state", "new",
            # a throw-away cluster on a shared test machine: no fsync per write
            "--unsafe-no-fsync", "--log-level", "warn",
        ]

    def etcd_probe() -> str | None:
        status, body = http_get(s.etcd_port, "/health")
        return None if status == 200 and '"true"' in body else f"/health: {status} {body}"

    def apiserver_args() -> list[str]:
        p = PKI
        return [
            "--bind-address", LOCALHOST, "--secure-port", str(s.apiserver_port),
            "--advertise-address", LOCALHOST,
            # the master endpoints reconciler would write 127.0.0.1 into the `kubernetes`
            # Service's endpoints, which validation refuses (a loopback address)
            "--endpoint-reconciler-type", "none",
            "--etcd-servers", etcd_url,
            "--tls-cert-file", str(p / "apiserver.crt"),
            "--tls-private-key-file", str(p / "apiserver.key"),
            "--client-ca-file", str(p / "ca.crt"),
            "--kubelet-client-certificate", str(p / "apiserver-kubelet-client.crt"),
            "--kubelet-client-key", str(p / "apiserver-kubelet-client.key"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(p / "sa.pub"),
            "--service-account-signing-key-file", str(p / "sa.key"),
            "--service-cluster-ip-range", s.service_cidr,
            "--authorization-mode", "Node,RBAC",
            "--allow-privileged=true",
            "--profiling=false",
            "--cert-dir", str(VAR / "apiserver-certs"),
            "-v", "1",
        ]

    def apiserver_probe() -> str | None:
        status, body = https_get(s.apiserver_port, "/readyz")
        return None if status == 200 else f"/readyz: {status} {body[-300:]}"

    def controller_manager_args() -> list[str]:
        cfg = str(VAR / "controller-manager.kubeconfig")
        return [
            "--kubeconfig", cfg, "--authentication-kubeconfig", cfg,
            "--authorization-kubeconfig", cfg,
            "--bind-address", LOCALHOST, "--secure-port", str(s.controller_manager_port),
            "--cert-dir", str(VAR / "controller-manager-certs"),
            "--leader-elect=false", "--use-service-account-credentials=true",
            "--service-account-private-key-file", str(PKI / "sa.key"),
            "--root-ca-file", str(PKI / "ca.crt"),
            "--cluster-signing-cert-file", str(PKI / "ca.crt"),
            "--cluster-signing-key-file", str(PKI / "ca.key"),
            "--service-cluster-ip-range", s.service_cidr,
            "--profiling=false", "-v", "1",
        ]

    def controller_manager_probe() -> str | None:
        status, body = https_get(s.controller_manager_port, "/healthz", client=False)
        return None if status == 200 else f"/healthz: {status} {body[-300:]}"

    comps = [
        Component("etcd", s.etcd_port, etcd_args, etcd_probe),
        Component("kube-apiserver", s.apiserver_port, apiserver_args, apiserver_probe),
    ]
    if s.controller_manager:
        comps.append(Component("kube-controller-manager", s.controller_manager_port,
                               controller_manager_args, controller_manager_probe))
    return comps


def all_components(s: Settings) -> list[Component]:
    """Every component, whether or not this start uses it (for stop and status)."""
    full = Settings(**{**s.__dict__, "controller_manager": True})
    return components(full)


# ------------------------------------------------------------------------- commands


def cmd_start(s: Settings) -> None:
    started = time.monotonic()
    build()
    VAR.mkdir(parents=True, exist_ok=True)
    ensure_pki(s.service_cidr)
    write_kubeconfig(KUBECONFIG, "kube-admin", "admin", s.server)
    write_kubeconfig(VAR / "controller-manager.kubeconfig", "system:kube-controller-manager",
                     "controller-manager", s.server)
    (VAR / "settings.json").write_text(json.dumps(s.__dict__) + "\n", encoding="utf-8")
    launched: list[tuple[Component, subprocess.Popen[bytes] | None]] = []
    try:
        for comp in components(s):  # each waits for the one before it
            proc = comp.spawn()
            launched.append((comp, proc))
            comp.wait_ready(proc, s.start_timeout)
    except BaseException:
        for comp, proc in reversed(launched):  # leave nothing half-started behind
            if proc is not None and proc.poll() is None:
                pid = comp.signal_stop()
                if pid is not None:
                    comp.wait_stopped(pid, s.stop_timeout)
        raise
    status, body = https_get(s.apiserver_port, "/version")
    version = json.loads(body).get("gitVersion", "?") if status == 200 else "?"
    log(f"Kubernetes {version} API server ready at {s.server} after "
        f"{time.monotonic() - started:.1f} s; KUBECONFIG={KUBECONFIG}")


def cmd_stop(s: Settings) -> None:
    for comp in reversed(all_components(s)):
        pid = comp.signal_stop()
        if pid is not None:
            comp.wait_stopped(pid, s.stop_timeout)


def cmd_status(s: Settings) -> bool:
    record = built()
    if record:
        log(f"built: Kubernetes {record['kubernetes']}, etcd {record['etcd']} in "
            f"{bin_dir().relative_to(ROOT)}")
    else:
        log(f"not built yet ({bin_dir().relative_to(ROOT)}): scripts/kube build")
    ok = True
    for comp in all_components(s):
        pid = comp.running_pid()
        problem = comp.ready() if (PKI / "done").exists() else "no certificates yet"
        rss = rss_mib(pid) if pid else None
        where = f"pid {pid}" + (f", rss {rss:.0f} MiB" if rss is not None else "") if pid \
            else "not started here"
        state = f"ready on {LOCALHOST}:{comp.port}" if problem is None else \
            f"not ready on {LOCALHOST}:{comp.port} ({problem})"
        log(f"{comp.name}: {state}; {where}")
        if comp.name == "kube-apiserver" and problem is not None:
            ok = False
    return ok


def cmd_wipe(s: Settings) -> None:
    if any(comp.running_pid() for comp in all_components(s)):
        raise KubeError("still running: scripts/kube stop first")
    shutil.rmtree(VAR, ignore_errors=True)
    log(f"deleted {VAR.relative_to(ROOT)}")


def saved_settings() -> Settings:
    """The settings of the running cluster (ports), else the environment's."""
    s = Settings.from_env()
    with contextlib.suppress(OSError, json.JSONDecodeError, TypeError):
        saved = json.loads((VAR / "settings.json").read_text(encoding="utf-8"))
        if any(comp.running_pid() for comp in all_components(Settings(**saved))):
            return Settings(**saved)
    return s


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/kube", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("build", "start", "stop", "status", "env", "wipe"))
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            record = build()
            print(json.dumps(record, indent=1))
        elif args.command == "start":
            cmd_start(Settings.from_env())
        elif args.command == "stop":
            cmd_stop(saved_settings())
        elif args.command == "status":
            return 0 if cmd_status(saved_settings()) else 3
        elif args.command == "env":
            print(f"KUBECONFIG={KUBECONFIG}")
        else:
            cmd_wipe(saved_settings())
    except KubeError as exc:
        print(f"scripts/kube: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
