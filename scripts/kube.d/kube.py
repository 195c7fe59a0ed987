"""A real Kubernetes cluster on this machine: etcd, kube-apiserver, kube-controller-manager
on 127.0.0.1, and with KUBE_NODE=1 one node: Debian's containerd, kube-scheduler, kubelet.

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

The node (KUBE_NODE=1) is named ``crawler-node``: a bridge ``crawlerbr0`` holds its
address (the first of KUBE_POD_CIDR, 10.244.0.1) and the pods' (CNI bridge, host-local,
firewall, portmap and loopback plugins from Debian's containernetworking-plugins; no
masquerading, so pods reach nothing outside this machine); the kubelet runs on cgroup v1
(``failCgroupV1: false``), containerd with ``restrict_oom_score_adj`` (this machine
refuses a negative oom_score_adj, which the pod sandbox asks for). There is no registry:
the pause image is a static C program built here, and the images KUBE_NODE_IMAGES names
are copied from a local Docker engine (``docker save``) when it has them, and copied
again when Docker's image of that name changes (``node/imported-images.json``). No kube-proxy
and no cluster DNS: Services get addresses but nothing routes them; pods reach each other
by pod IP. ``stop`` ends the containers before containerd and unmounts what the kubelet
mounted.

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
  KUBE_NODE (0): 1 also builds and starts the node (containerd, kube-scheduler on
      127.0.0.1:10259, kubelet on 10.244.0.1:10250, its health on 127.0.0.1:10248)
  KUBE_POD_CIDR (10.244.0.0/24): the pods' addresses, on the bridge
  KUBE_NODE_IMAGES (polite-crawler:latest,apache/kafka:4.1.0,cassandra:5.0): images to
      copy from the local Docker engine into the node's containerd (once)
"""

from __future__ import annotations

import argparse
import base64
import calendar
import contextlib
import functools
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # scripts.lib, from any working directory

from scripts.lib import build as gobuild  # noqa: E402
from scripts.lib import cli  # noqa: E402
from scripts.lib.cli import env_str  # noqa: E402
from scripts.lib.probes import port_open  # noqa: E402
from scripts.lib.proc import (  # noqa: E402
    read_pid,
    rss_note,
    running_pid,
    size_of,
    spawn_logged,
    tail,
    wait_gone,
)

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
NODE_IMAGES = "polite-crawler:latest,apache/kafka:4.1.0,cassandra:5.0"
# Programs built from the Kubernetes module, by package.
KUBE_PROGRAMS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
}
# The node (KUBE_NODE=1): the scheduler and the kubelet, on Debian's containerd.
NODE_PROGRAMS = {
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
}


class KubeError(RuntimeError):
    """Something could not be built, started, checked or stopped."""


env_int = functools.partial(cli.env_int, error=KubeError)
env_port = functools.partial(cli.env_port, error=KubeError)
log = cli.sayer("kube: ")


# ------------------------------------------------------------------------------ build


def build_dir(version: str = KUBE_VERSION) -> Path:
    return CACHE / version


def bin_dir(version: str = KUBE_VERSION) -> Path:
    return build_dir(version) / "bin"


def stamp_file(version: str = KUBE_VERSION) -> Path:
    return bin_dir(version) / "build.json"


go_env = gobuild.go_env


def go_command() -> str:
    return gobuild.go_binary(KubeError,
                             "go not found: Go is needed to build the Kubernetes binaries")


def go_mod_of(module: str, version: str) -> str:
    """The go.mod text of ``module@version``, through ``go mod download``."""
    info = gobuild.go_mod_download(module, version, go=go_command(), error=KubeError,
                                   env=go_env())
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


def read_stamp(version: str = KUBE_VERSION) -> dict[str, Any]:
    try:
        stamp: dict[str, Any] = json.loads(stamp_file(version).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return stamp if stamp.get("kubernetes") == version else {}


def wanted(node: bool) -> list[str]:
    return [*KUBE_PROGRAMS, "etcd", *(NODE_PROGRAMS if node else {})]


def built(version: str = KUBE_VERSION, *, node: bool = False) -> dict[str, Any] | None:
    """The build record, when every binary wanted is there."""
    stamp = read_stamp(version)
    if not stamp or any(not (bin_dir(version) / name).is_file() for name in wanted(node)):
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


def build(version: str = KUBE_VERSION, *, node: bool = False) -> dict[str, Any]:
    """Build the binaries that are missing; later calls return the record of the builds."""
    stamp = built(version, node=node)
    if stamp is not None:
        return stamp
    go = go_command()
    go_version = subprocess.run([go, "version"], capture_output=True, text=True,
                                env=go_env()).stdout.strip()
    out = bin_dir(version)
    missing = [name for name in wanted(node) if not (out / name).is_file()]
    log(f"building {', '.join(missing)} ({version}) from the Go modules' source into "
        f"{out.relative_to(ROOT)} (once; the first time takes many minutes on 2 cores) ...")
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
    programs = {**KUBE_PROGRAMS, **NODE_PROGRAMS}
    packages = [programs[name] for name in missing if name in programs]
    if "etcd" in missing:
        packages.append(ETCD_MODULE)
    # Listing the programs' packages downloads the modules they need, and only those.
    fetch_s = run_go(["list", "-deps", *packages], src, "go list (module download)")
    fetched = dir_bytes(modcache / "cache" / "download") - before
    log(f"modules: {fetched / 1e6:.0f} MB downloaded in {fetch_s:.0f} s")
    jobs = str(env_int("KUBE_BUILD_JOBS", os.cpu_count() or 2))
    tmp = build_dir(version) / "bin.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    compile_s = 0.0
    kube_packages = [programs[name] for name in missing if name in programs]
    if kube_packages:
        compile_s += run_go(["build", "-p", jobs, "-trimpath", "-ldflags",
                             version_ldflags(version), "-o", f"{tmp}/", *kube_packages], src,
                            f"building {', '.join(n for n in missing if n in programs)}")
    if "etcd" in missing:
        compile_s += run_go(["build", "-p", jobs, "-trimpath", "-ldflags", "-s -w",
                             "-o", str(tmp / "etcd"), ETCD_MODULE], src, "building etcd")
    out.mkdir(parents=True, exist_ok=True)
    for binary in tmp.iterdir():
        binary.replace(out / binary.name)
    tmp.rmdir()
    record = read_stamp(version) or {"kubernetes": version, "etcd": etcd_version,
                                     "builds": []}
    record.setdefault("builds", [])
    record["go"] = go_version
    record["binaries"] = sorted(p.name for p in out.iterdir() if p.name != "build.json")
    record["builds"].append({
        "built": missing, "modules_downloaded_mb": round(fetched / 1e6, 1),
        "download_seconds": round(fetch_s, 1), "compile_seconds": round(compile_s, 1),
        "total_seconds": round(time.monotonic() - total, 1)})
    stamp_file(version).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    log(f"built {', '.join(missing)} in {time.monotonic() - total:.0f} s "
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


def https_get(port: int, path: str, *, client: bool = True,
              timeout: float = 5.0) -> tuple[int, str]:
    """GET https://127.0.0.1:port/path: with the admin certificate, verified by the cluster
    CA; or (``client=False``) anonymously and unverified, for a component's own health."""
    if client:
        ctx = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
        ctx.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    else:
        ctx = ssl._create_unverified_context()
    return _get(http.client.HTTPSConnection(LOCALHOST, port, context=ctx, timeout=timeout),
                path)


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    return _get(http.client.HTTPConnection(LOCALHOST, port, timeout=timeout), path)


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, str]:
    """GET ``path`` on the connection: the status and the body as text; then closes it."""
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
    node: bool = False
    pod_cidr: str = "10.244.0.0/24"
    node_images: str = NODE_IMAGES

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
            node=env_str("KUBE_NODE", "0") in ("1", "yes", "true"),
            pod_cidr=env_str("KUBE_POD_CIDR", "10.244.0.0/24"),
            node_images=env_str("KUBE_NODE_IMAGES", NODE_IMAGES),
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
    program: str = ""  # the binary, when it is not one built here
    prepare: Callable[[], None] | None = None  # before it starts
    before_stop: Callable[[], None] | None = None
    after_stop: Callable[[], None] | None = None

    @property
    def binary(self) -> Path:
        return Path(self.program) if self.program else bin_dir() / self.name

    @property
    def pid_file(self) -> Path:
        return VAR / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return LOGS / f"{self.name}.log"

    def running_pid(self) -> int | None:
        """The PID from the PID file, if that process is alive and is this component of
        this folder's cluster."""
        def ours(cmd: list[str]) -> bool:  # this component's binary, with this folder
            return bool(cmd) and Path(cmd[0]).name == self.name and any(
                str(VAR) in arg for arg in cmd)

        return running_pid(self.pid_file, ours)

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
        if self.port and port_open(LOCALHOST, self.port):
            raise KubeError(f"{self.name}: port {self.port} on {LOCALHOST} is taken by "
                            "another process; choose another port (see scripts/kube.d/"
                            "kube.py)")
        LOGS.mkdir(parents=True, exist_ok=True)
        if self.prepare is not None:
            self.prepare()
        self.offset = size_of(self.log_file)
        cmd = [str(self.binary), *self.args()]
        proc = spawn_logged(cmd, self.log_file, self.pid_file, cwd=VAR)
        log(f"{self.name}: started pid {proc.pid}, log {self.log_file.relative_to(ROOT)}")
        return proc

    def wait_ready(self, proc: subprocess.Popen[bytes] | None, timeout: float) -> float:
        started = time.monotonic()
        problem: str | None = "not checked yet"
        while True:
            if proc is not None and proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise KubeError(f"{self.name}: exited with code {proc.returncode} before it "
                                f"was ready.\n{tail(self.log_file, 25, self.offset)}")
            problem = self.ready()
            if problem is None:
                took = time.monotonic() - started
                pid = proc.pid if proc is not None else self.running_pid()
                log(f"{self.name}: ready after {took:.1f} s{rss_note(pid)}")
                return took
            if time.monotonic() - started > timeout:
                raise KubeError(f"{self.name}: not ready within {timeout:.0f} s (last check: "
                                f"{problem}).\n{tail(self.log_file, 25, self.offset)}")
            time.sleep(0.5)

    def signal_stop(self) -> int | None:
        pid = read_pid(self.pid_file)
        if pid is None:
            return None
        if self.running_pid() is None:
            log(f"{self.name}: not running (pid {pid} is gone or is not this component)")
            self.pid_file.unlink(missing_ok=True)
            return None
        if self.before_stop is not None:
            self.before_stop()
        log(f"{self.name}: stopping pid {pid}")
        os.kill(pid, signal.SIGTERM)
        return pid

    def wait_stopped(self, pid: int, timeout: float) -> None:
        wait_gone(pid, timeout, lambda: log(
            f"{self.name}: still running after {timeout:.0f} s, sending SIGKILL"))
        self.pid_file.unlink(missing_ok=True)
        if self.after_stop is not None:
            self.after_stop()
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
            # the node's name is not in any DNS: reach its kubelet by its address
            "--kubelet-preferred-address-types", "InternalIP,Hostname",
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
    if s.node:
        comps += node_components(s)
    return comps


def all_components(s: Settings) -> list[Component]:
    """Every component, whether or not this start uses it (for stop and status)."""
    full = Settings(**{**s.__dict__, "controller_manager": True, "node": True})
    return components(full)


# ------------------------------------------------------------------------------ the node

NODE = VAR / "node"
NODE_NAME = "crawler-node"
BRIDGE = "crawlerbr0"
PAUSE_IMAGE = "crawler.local/pause:1"
PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction a = {0};
  a.sa_handler = stop; sigaction(SIGINT, &a, 0); sigaction(SIGTERM, &a, 0);
  a.sa_handler = reap; a.sa_flags = SA_NOCLDSTOP; sigaction(SIGCHLD, &a, 0);
  for (;;) pause();
}
"""


def run_dir() -> Path:
    """Sockets and runtime state of this folder's containerd (short paths, on /run)."""
    import hashlib

    return Path("/run") / f"crawler-kube-{hashlib.sha1(str(VAR).encode()).hexdigest()[:8]}"


def containerd_socket() -> Path:
    return run_dir() / "containerd.sock"


def ctr(*args: str, stdin: Any = None, check: bool = True) -> str:
    proc = subprocess.run(["ctr", "-a", str(containerd_socket()), "-n", "k8s.io", *args],
                          stdin=stdin, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise KubeError(f"ctr {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def gateway(pod_cidr: str) -> str:
    return service_ip(pod_cidr)


def ensure_bridge(pod_cidr: str) -> None:
    """The pods' bridge with the node's address (the CNI bridge plugin reuses it)."""
    import ipaddress

    net = ipaddress.ip_network(pod_cidr, strict=False)
    address = f"{gateway(pod_cidr)}/{net.prefixlen}"
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode != 0:
        subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    shown = subprocess.run(["ip", "-4", "addr", "show", BRIDGE], capture_output=True,
                           text=True).stdout
    if address not in shown:
        subprocess.run(["ip", "addr", "add", address, "dev", BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)


def oci_archive(name: str, binary: Path, out: Path) -> None:
    """A one-layer OCI image archive whose entrypoint is ``binary`` (as /pause)."""
    import gzip
    import hashlib
    import io
    import tarfile

    def digest(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("pause")
        info.size, info.mode = binary.stat().st_size, 0o755
        with binary.open("rb") as f:
            tar.addfile(info, f)
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
                         "rootfs": {"type": "layers",
                                    "diff_ids": [digest(raw.getvalue())]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest(layer), "size": len(layer)}]}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": digest(manifest), "size": len(manifest),
        "annotations": {"io.containerd.image.name": name}}]}).encode()
    with tarfile.open(out, "w") as tar:
        for path, data in [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                           ("index.json", index),
                           *((f"blobs/sha256/{digest(b)[7:]}", b)
                             for b in (config, layer, manifest))]:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


IMPORTED = NODE / "imported-images.json"  # image name -> the Docker image ID imported


def docker_image_id(image: str) -> str | None:
    proc = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image],
                          capture_output=True, text=True)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def ensure_images(s: Settings) -> None:
    """The pause image (built here: a static C program), and the images named by
    KUBE_NODE_IMAGES taken from the local Docker engine when it has them: imported again
    when Docker's image of that name is another than the one imported (a rebuilt
    project image), kept when Docker is not running or lacks it."""
    have = set(ctr("images", "ls", "-q").split())
    if PAUSE_IMAGE not in have:
        src, binary, archive = NODE / "pause.c", NODE / "pause", NODE / "pause.tar"
        src.write_text(PAUSE_C, encoding="utf-8")
        subprocess.run(["gcc", "-Os", "-static", "-o", str(binary), str(src)], check=True)
        oci_archive(PAUSE_IMAGE, binary, archive)
        ctr("images", "import", str(archive))
        log(f"containerd: built and imported {PAUSE_IMAGE}")
    try:
        imported: dict[str, str] = json.loads(IMPORTED.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        imported = {}
    for image in filter(None, (i.strip() for i in s.node_images.split(","))):
        full = image if "/" in image.split(":")[0] else f"docker.io/library/{image}"
        present = full in have or (image.count("/") == 1 and f"docker.io/{image}" in have)
        docker_id = docker_image_id(image)
        if present and (docker_id is None or imported.get(image) == docker_id):
            continue
        if docker_id is None:
            log(f"containerd: {image} is not in a running Docker engine (scripts/docker "
                "prepare builds it); pods that need it cannot start")
            continue
        started = time.monotonic()
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        ctr("images", "import", "-", stdin=save.stdout)
        if save.wait() != 0:
            raise KubeError(f"docker save {image} failed (exit {save.returncode})")
        imported[image] = docker_id
        IMPORTED.write_text(json.dumps(imported, indent=1) + "\n", encoding="utf-8")
        log(f"containerd: imported {image} from Docker in {time.monotonic() - started:.0f} s"
            + (" (Docker's image changed)" if present else ""))


def write_node_files(s: Settings) -> None:
    NODE.mkdir(parents=True, exist_ok=True)
    (NODE / "cni").mkdir(exist_ok=True)
    run_dir().mkdir(parents=True, exist_ok=True)
    gw = gateway(s.pod_cidr)
    if not (PKI / "kubelet-serving.crt").exists() or gw not in subprocess.run(
            ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
             str(PKI / "kubelet-serving.crt")], capture_output=True, text=True).stdout:
        issue("kubelet-client", f"/O=system:nodes/CN=system:node:{NODE_NAME}", "clientAuth")
        issue("kubelet-serving", f"/O=system:nodes/CN=system:node:{NODE_NAME}", "serverAuth",
              [f"IP:{gw}", f"DNS:{NODE_NAME}"])
        issue("scheduler", "/CN=system:kube-scheduler", "clientAuth")
    write_kubeconfig(NODE / "kubelet.kubeconfig", f"system:node:{NODE_NAME}",
                     "kubelet-client", s.server)
    write_kubeconfig(NODE / "scheduler.kubeconfig", "system:kube-scheduler", "scheduler",
                     s.server)
    rd = run_dir()
    (NODE / "containerd.toml").write_text(f"""version = 2
root = "{NODE / 'containerd-root'}"
state = "{rd / 'containerd-state'}"
[grpc]
  address = "{containerd_socket()}"
[ttrpc]
  address = "{rd / 'containerd-ttrpc.sock'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # a negative oom_score_adj (kubelet's -998 for the pod sandbox) is refused on this
  # machine; this keeps it at containerd's own (0)
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{NODE / 'cni'}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
""", encoding="utf-8")
    (NODE / "cni" / "10-crawler.conflist").write_text(json.dumps({
        "cniVersion": "0.4.0", "name": "crawler-pods", "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": s.pod_cidr}]],
                      "dataDir": str(rd / "cni-ipam")}},
            # lets the pods' traffic through the FORWARD chain (a Docker engine on the
            # same machine sets its policy to DROP)
            {"type": "firewall"},
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"}]}, indent=1) + "\n", encoding="utf-8")
    (NODE / "kubelet.yaml").write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": gw, "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": LOCALHOST, "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(PKI / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(PKI / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(PKI / "kubelet-serving.key"),
        # this machine has cgroup v1, which the kubelet refuses unless told not to
        "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{containerd_socket()}",
        "clusterDomain": "cluster.local", "resolvConf": "/etc/resolv.conf",
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
    }, indent=1) + "\n", encoding="utf-8")


def unmount_under(folder: Path) -> None:
    """Unmount what the kubelet left mounted under ``folder`` (deepest first)."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m == str(folder) or
                         m.startswith(str(folder) + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def remove_containers() -> None:
    """Before containerd stops: end its containers, so that no shim outlives it."""
    for task in ctr("tasks", "ls", "-q", check=False).split():
        ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        tasks = ctr("tasks", "ls", "-q", check=False).split()
        for task in tasks:
            ctr("tasks", "rm", "-f", task, check=False)
        if not tasks:
            break
        time.sleep(0.5)
    for container in ctr("containers", "ls", "-q", check=False).split():
        ctr("containers", "rm", container, check=False)


def node_components(s: Settings) -> list[Component]:
    """containerd (Debian's), kube-scheduler and the kubelet of one node, ``crawler-node``."""

    def containerd_prepare() -> None:
        missing = [tool for tool in ("containerd", "ctr", "runc", "gcc")
                   if shutil.which(tool) is None]
        if missing or not Path("/usr/lib/cni/bridge").exists():
            subprocess.run([str(ROOT / "scripts" / "apt-install"), "containerd", "runc",
                            "containernetworking-plugins", "gcc", "libc6-dev"], check=True)
        write_node_files(s)
        ensure_bridge(s.pod_cidr)

    def containerd_probe() -> str | None:
        if not containerd_socket().exists():
            return f"no socket {containerd_socket()}"
        proc = subprocess.run(["ctr", "-a", str(containerd_socket()), "version"],
                              capture_output=True, text=True, timeout=10)
        return None if proc.returncode == 0 else proc.stderr.strip()

    def scheduler_args() -> list[str]:
        cfg = str(NODE / "scheduler.kubeconfig")
        return ["--kubeconfig", cfg, "--authentication-kubeconfig", cfg,
                "--authorization-kubeconfig", cfg, "--bind-address", LOCALHOST,
                "--secure-port", "10259", "--leader-elect=false", "-v", "1"]

    def scheduler_probe() -> str | None:
        status, body = https_get(10259, "/healthz", client=False)
        return None if status == 200 else f"/healthz: {status} {body[-300:]}"

    started_wall: list[float] = []

    def kubelet_prepare() -> None:
        ensure_images(s)
        started_wall[:] = [time.time()]
        (NODE / "kubelet").mkdir(parents=True, exist_ok=True)

    def kubelet_args() -> list[str]:
        return ["--config", str(NODE / "kubelet.yaml"),
                "--kubeconfig", str(NODE / "kubelet.kubeconfig"),
                "--hostname-override", NODE_NAME, "--node-ip", gateway(s.pod_cidr),
                "--root-dir", str(NODE / "kubelet"), "-v", "1"]

    def kubelet_probe() -> str | None:
        status, body = http_get(10248, "/healthz")
        if status != 200:
            return f"/healthz: {status} {body[-200:]}"
        status, body = https_get(s.apiserver_port, f"/api/v1/nodes/{NODE_NAME}")
        if status != 200:
            return f"node {NODE_NAME}: {status}"
        conditions = json.loads(body).get("status", {}).get("conditions") or []
        ready = [c for c in conditions if c["type"] == "Ready"]
        if not ready or ready[0]["status"] != "True":
            return f"node {NODE_NAME} not Ready: {ready}"
        beat = ready[0].get("lastHeartbeatTime", "")
        if started_wall and calendar.timegm(time.strptime(beat, "%Y-%m-%dT%H:%M:%SZ")) \
                < started_wall[0] - 1:
            return f"node {NODE_NAME}: no heartbeat from this kubelet yet (last {beat})"
        return None

    def kubelet_after_stop() -> None:
        unmount_under(NODE / "kubelet")

    return [
        Component("containerd", 0, lambda: ["--config", str(NODE / "containerd.toml")],
                  containerd_probe, program=shutil.which("containerd") or "containerd",
                  prepare=containerd_prepare, before_stop=remove_containers),
        Component("kube-scheduler", 10259, scheduler_args, scheduler_probe),
        Component("kubelet", 10248, kubelet_args, kubelet_probe, prepare=kubelet_prepare,
                  after_stop=kubelet_after_stop),
    ]


# ------------------------------------------------------------------------- commands


def cmd_start(s: Settings) -> None:
    started = time.monotonic()
    build(node=s.node)
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
        if pid is None and comp.name in ("containerd", *NODE_PROGRAMS) and not s.node:
            continue
        problem = comp.ready() if (PKI / "done").exists() else "no certificates yet"
        where = f"pid {pid}{rss_note(pid)}" if pid else "not started here"
        state = "ready" if problem is None else f"not ready ({problem})"
        log(f"{comp.name}: {state}; {where}")
        if problem is not None and (comp.name == "kube-apiserver" or
                                    (s.node and comp.name == "kubelet")):
            ok = False
    return ok


def cmd_wipe(s: Settings) -> None:
    if any(comp.running_pid() for comp in all_components(s)):
        raise KubeError("still running: scripts/kube stop first")
    unmount_under(VAR)
    shutil.rmtree(run_dir(), ignore_errors=True)
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
            record = build(node=Settings.from_env().node)
            print(json.dumps(record, indent=1))
        elif args.command == "start":
            cmd_start(Settings.from_env())
        elif args.command == "stop":
            cmd_stop(saved_settings())
        elif args.command == "status":
            s = saved_settings()
            s.node = s.node or Settings.from_env().node  # KUBE_NODE=1: is the node up?
            return 0 if cmd_status(s) else 3
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
