"""Install, start, check and stop one-node Apache Kafka and Apache Cassandra on 127.0.0.1.

The servers are the genuine Apache builds: their published jars and runtime dependencies are
fetched from Maven Central with ``mvn dependency:copy-dependencies`` into
``.cache/servers/<name>-<version>/lib`` and run with ``java -cp``. Configuration templates live
beside this file; runtime data, logs, rendered configuration and PID files go to
``var/<name>/``. Stopping only ever signals the PID written in ``var/<name>/<name>.pid``, and
only when that process's command line carries this repository's marker for that server.

Usage: scripts/servers install|start|stop|status|env [kafka|cassandra|s3|all ...]

s3 is SeaweedFS's S3 gateway (``weed mini``), built once from its Go module source into
``var/seaweedfs-<version>/``; it serves one bucket to one identity (other keys are
refused).

Environment:
  KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093), KAFKA_HEAP (512m), KAFKA_JVM_OPTS
  CASSANDRA_PORT (9042), CASSANDRA_STORAGE_PORT (7000), CASSANDRA_JVM_OPTS,
  CASSANDRA_HEAP (largest heap, 1g), CASSANDRA_HEAP_MIN (heap at start, 256m; Cassandra
      locks the memory it has at start with mlockall when it may, so this is what stays
      resident at least), CASSANDRA_JMX_PORT (unset: no JMX; set: local-only JMX there)
  KAFKA_BOOTSTRAP, CASSANDRA_HOSTS: existing servers to use; ``start`` then leaves that
      server alone and only checks that it answers
  S3_PORT (8333), S3_MASTER_PORT (9333), S3_VOLUME_PORT (9340), S3_FILER_PORT (8888),
      S3_ADMIN_PORT (12535):
      SeaweedFS's ports (each also uses its port + 10000 for gRPC); S3_BUCKET (crawl),
      S3_ACCESS_KEY, S3_SECRET_KEY: its bucket and its one identity's keys
  S3_ENDPOINT: an existing S3-compatible server to use instead (http://host:port)
  SERVERS_BUILD_TIMEOUT (3600 s): longest the one-time SeaweedFS build may take
  SERVERS_START_TIMEOUT (180 s), SERVERS_STOP_TIMEOUT (Kafka 30 s, Cassandra 60 s), JAVA_HOME
  SERVERS_VAR (var/): where data, logs, rendered configuration and PID files go; with
      other ports, a second pair of servers runs beside the first

Ready means that clients can do their work, not just that the port answers. For Kafka:
the broker answers metadata, a probe topic (``servers-ready-probe``, kept) takes a
message, a consumer group of its own joins, gets the topic's partition assigned, reads
the message and commits its offset, and the group coordinator of every partition of
``__consumer_offsets`` answers an offset fetch (right after a start, a coordinator
answers "Coordinator load in progress" until it has loaded its partition, and a group
that hashes there cannot join meanwhile). Each check takes at most 20 s; ``start`` checks
again until SERVERS_START_TIMEOUT and then fails naming the step that was not ready.
For Cassandra: a CQL session reads system.local.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import functools
import os
import re
import shutil
import signal
import string
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # scripts.lib, from any working directory

from scripts.lib import build, cli  # noqa: E402
from scripts.lib.cli import env_str  # noqa: E402
from scripts.lib.probes import (  # noqa: E402
    KAFKA_CHECK_SECONDS,
    NotReadyError,
    cassandra_release,
    kafka_ready,
    port_open,
)
from scripts.lib.proc import (  # noqa: E402
    read_pid,
    rss_note,
    running_pid,
    spawn_logged,
    tail,
    wait_gone,
)

CACHE = ROOT / ".cache" / "servers"
# SERVERS_VAR: another folder for data, logs and PID files, so a second pair of servers
# (other ports too) can run beside the usual one, e.g. for tests that kill them
VAR = Path(os.environ.get("SERVERS_VAR", "").strip() or ROOT / "var").resolve()

KAFKA_VERSION = "4.1.2"
CASSANDRA_VERSION = "5.0.9"
LOCALHOST = "127.0.0.1"


class ServerError(RuntimeError):
    """A server could not be installed, started, checked or stopped."""


env_int = functools.partial(cli.env_int, error=ServerError)
env_port = functools.partial(cli.env_port, error=ServerError)


log = cli.sayer("")


def render(template: str, **values: object) -> str:
    """The template file's text with ``${name}`` replaced by the given values."""
    text = (HERE / template).read_text(encoding="utf-8")
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})


def split_hostport(address: str, default_port: int) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep:
        return address.strip(), default_port
    return host.strip("[]"), int(port)


def options_file(name: str) -> list[str]:
    """The flags in a JVM options file beside this script: lines that start with '-'."""
    lines = (HERE / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip().startswith("-")]


def java_command() -> str:
    home = os.environ.get("JAVA_HOME", "").strip()
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ServerError("java not found: install a JDK 17 or set JAVA_HOME")
    return java


def java_major(java: str) -> int:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise ServerError(f"cannot tell the Java version from: {out.strip()}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def sizes(paths: list[Path]) -> dict[Path, int]:
    return {p: p.stat().st_size for p in paths if p.exists()}


# ------------------------------------------------------------------------------------ servers


@dataclass
class Server:
    """One local server: how to fetch it, configure it, run it and tell that it is ready."""

    name: str
    version: str
    main_class: str
    port: int
    external_var: str  # names existing servers to use instead of starting one
    default_stop_timeout: float
    # where each log file ended before this start: failures show only what follows
    log_offsets: dict[Path, int] = field(default_factory=dict)
    # why the last readiness check said "not ready" (None: it did not say)
    problem: str | None = None
    # when wait_ready gives up (time.monotonic()); a readiness check stops by then
    deadline: float | None = None

    # -- paths
    @property
    def home(self) -> Path:
        return CACHE / f"{self.name}-{self.version}"

    @property
    def lib(self) -> Path:
        return self.home / "lib"

    @property
    def var(self) -> Path:
        return VAR / self.name

    @property
    def pid_file(self) -> Path:
        return self.var / f"{self.name}.pid"

    @property
    def console_log(self) -> Path:
        return self.var / "console.log"

    @property
    def marker(self) -> str:
        """A JVM flag that marks this repository's process for this server."""
        return f"-Dlocal.servers.home={self.var}"

    # -- subclass hooks
    def command(self) -> list[str]:
        """The command line that runs the server (a JVM with ``marker``, by default)."""
        java = java_command()
        self.check_java(java_major(java))
        return [java, self.marker, *self.prepare(java), "-cp", f"{self.lib}/*",
                self.main_class, *self.program_args()]

    def prepare(self, java: str) -> list[str]:
        """Write the configuration and return the JVM arguments before the main class."""
        raise NotImplementedError

    def program_args(self) -> list[str]:
        return []

    def ready(self, host: str, port: int) -> str | None:
        """A short description of the running server, or None while it is not ready (then
        ``problem`` may say why)."""
        raise NotImplementedError

    def ports(self) -> str:
        """The local ports this server listens on, as recorded beside its PID file."""
        return str(self.port)

    def check_java(self, major: int) -> None:
        if major < 17:
            raise ServerError(f"{self.name} needs Java 17 or newer, found Java {major}")

    def env_lines(self) -> list[str]:
        raise NotImplementedError

    # -- install
    def installed(self) -> bool:
        return build.jars_installed(self.home)

    def install(self, *, quiet: bool = False) -> None:
        if self.installed():
            if not quiet:
                log(f"{self.name} {self.version}: installed in {self.lib}")
            return
        started = time.monotonic()

        def mvn(cmd: list[str]) -> None:
            nonlocal started
            log(f"{self.name} {self.version}: fetching jars from Maven Central ...")
            started = time.monotonic()
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise ServerError(f"mvn failed for {self.name} {self.version}:\n"
                                  f"{result.stdout[-4000:]}{result.stderr[-4000:]}")

        jars = build.fetch_jars(self.home, render(f"{self.name}-pom.xml", version=self.version),
                                f"{self.name} {self.version}", run=mvn, error=ServerError)
        log(f"{self.name} {self.version}: {len(jars)} jars in {self.lib} "
            f"({time.monotonic() - started:.1f} s)")

    # -- run state
    def running_pid(self) -> int | None:
        """The PID from the PID file, if that process is alive and is ours."""
        return running_pid(self.pid_file, lambda cmd: self.marker in cmd)

    def external(self) -> str | None:
        return os.environ.get(self.external_var, "").strip() or None

    def endpoint(self) -> tuple[str, int]:
        ext = self.external()
        if ext:
            return split_hostport(ext.split(",")[0], self.port)
        return LOCALHOST, self.port

    # -- start
    def spawn(self) -> subprocess.Popen[bytes] | None:
        """Start the server in the background; None when there is nothing to start."""
        ext = self.external()
        if ext:
            log(f"{self.name}: using the existing server {self.external_var}={ext}")
            return None
        pid = self.running_pid()
        if pid:
            ports_file = self.var / "ports"
            running = ports_file.read_text().strip() if ports_file.exists() else ""
            if running != self.ports():
                raise ServerError(f"{self.name}: already running (pid {pid}) with ports "
                                  f"{running or '?'}, not {self.ports()}; stop it first")
            log(f"{self.name}: already running (pid {pid})")
            return None
        if port_open(LOCALHOST, self.port):
            raise ServerError(
                f"{self.name}: port {self.port} on {LOCALHOST} is taken by another process; "
                f"set {self.external_var} to use that server, or choose another port")
        self.install(quiet=True)
        for sub in ("conf", "data", "logs"):
            (self.var / sub).mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        self.log_offsets = sizes([self.console_log, *self.log_files()])
        proc = spawn_logged(cmd, self.console_log, self.pid_file, cwd=self.var)
        (self.var / "ports").write_text(self.ports() + "\n")
        log(f"{self.name}: started pid {proc.pid}, logs in {self.var / 'logs'}")
        return proc

    def wait_ready(self, proc: subprocess.Popen[bytes] | None, timeout: float,
                   started: float) -> None:
        host, port = self.endpoint()
        deadline = started + timeout
        self.deadline = deadline
        self.problem = None
        while True:
            if proc is not None and proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise ServerError(
                    f"{self.name}: exited with code {proc.returncode} before it was ready.\n"
                    f"{self.log_tail()}")
            if port_open(host, port):
                info = self.ready(host, port)
            else:
                info, self.problem = None, f"nothing listens on {host}:{port}"
            if info:
                pid = proc.pid if proc is not None else (
                    None if self.external() else self.running_pid())
                log(f"{self.name}: ready on {host}:{port} after "
                    f"{time.monotonic() - started:.1f} s ({info}{rss_note(pid)})")
                return
            if time.monotonic() > deadline:
                if proc is not None:
                    self.stop()
                last = f" (last check: {self.problem})" if self.problem else ""
                raise ServerError(f"{self.name}: not ready on {host}:{port} within "
                                  f"{timeout:.0f} s{last}.\n{self.log_tail()}")
            time.sleep(0.5)

    def log_files(self) -> list[Path]:
        return sorted((self.var / "logs").glob("*.log"))

    def log_tail(self) -> str:
        """What the server wrote since it was started here: console, then its logs."""
        return "\n".join(f"--- {path}\n{tail(path, offset=self.log_offsets.get(path, 0))}"
                         for path in [self.console_log, *self.log_files()])

    # -- stop
    def signal_stop(self) -> int | None:
        pid = read_pid(self.pid_file)
        if pid is None:
            log(f"{self.name}: not running (no PID file)")
            return None
        if self.running_pid() is None:
            log(f"{self.name}: not running (pid {pid} is gone or is not this server)")
            self.pid_file.unlink(missing_ok=True)
            return None
        log(f"{self.name}: stopping pid {pid}")
        os.kill(pid, signal.SIGTERM)
        return pid

    def wait_stopped(self, pid: int, timeout: float) -> None:
        wait_gone(pid, timeout, lambda: log(
            f"{self.name}: still running after {timeout:.0f} s, sending SIGKILL"))
        self.pid_file.unlink(missing_ok=True)
        log(f"{self.name}: stopped")

    def stop(self) -> None:
        pid = self.signal_stop()
        if pid is not None:
            self.wait_stopped(pid, stop_timeout(self))

    # -- status
    def status(self) -> bool:
        ext = self.external()
        host, port = self.endpoint()
        pid = None if ext else self.running_pid()
        info = self.ready(host, port) if port_open(host, port) else None
        where = f"existing server {self.external_var}={ext}" if ext else (
            f"pid {pid}" if pid else "not started here")
        if info:
            state = f"ready on {host}:{port} ({info})"
        elif self.problem and port_open(host, port):
            state = f"not ready on {host}:{port} ({self.problem})"
        else:
            state = f"not answering on {host}:{port}"
        log(f"{self.name}: {state}; {where}{rss_note(pid)}")
        return info is not None


def stop_timeout(server: Server) -> float:
    return float(env_int("SERVERS_STOP_TIMEOUT", int(server.default_stop_timeout)))


class Kafka(Server):
    def __init__(self) -> None:
        super().__init__(name="kafka", version=KAFKA_VERSION, main_class="kafka.Kafka",
                         port=env_port("KAFKA_PORT", 9092), external_var="KAFKA_BOOTSTRAP",
                         default_stop_timeout=30)
        self.controller_port = env_port("KAFKA_CONTROLLER_PORT", 9093)

    def ports(self) -> str:
        return f"{self.port} {self.controller_port}"

    @property
    def config(self) -> Path:
        return self.var / "conf" / "server.properties"

    def jvm_options(self) -> list[str]:
        heap = env_str("KAFKA_HEAP", "512m")
        return [f"-Xms{heap}", f"-Xmx{heap}", *options_file("kafka-jvm.options"),
                f"-Dlog4j2.configurationFile={HERE / 'kafka-log4j2.xml'}",
                f"-Dkafka.logs.dir={self.var / 'logs'}",
                *os.environ.get("KAFKA_JVM_OPTS", "").split()]

    def prepare(self, java: str) -> list[str]:
        if port_open(LOCALHOST, self.controller_port):
            raise ServerError(f"kafka: controller port {self.controller_port} is taken; "
                              "set KAFKA_CONTROLLER_PORT")
        data = self.var / "data"
        self.config.write_text(render("kafka-server.properties", port=self.port,
                                      controller_port=self.controller_port, data_dir=data))
        jvm = self.jvm_options()
        if not (data / "meta.properties").exists():
            cluster_id = new_cluster_id()
            log(f"kafka: formatting {data} (cluster id {cluster_id})")
            cmd = [java, *jvm, "-cp", f"{self.lib}/*", "kafka.tools.StorageTool", "format",
                   "--config", str(self.config), "--cluster-id", cluster_id]
            result = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                    timeout=120)
            if result.returncode != 0:
                raise ServerError(f"kafka storage format failed:\n{result.stdout}{result.stderr}")
        return jvm

    def program_args(self) -> list[str]:
        return [str(self.config)]

    def ready(self, host: str, port: int) -> str | None:
        budget = KAFKA_CHECK_SECONDS
        if self.deadline is not None:
            budget = max(1.0, min(budget, self.deadline - time.monotonic()))
        try:
            info = kafka_ready(f"{host}:{port}", budget)
        except NotReadyError as exc:
            self.problem = str(exc)
            return None
        except Exception as exc:  # any client error: not ready yet, check again
            self.problem = f"{type(exc).__name__}: {exc}"
            return None
        self.problem = None
        return info

    def env_lines(self) -> list[str]:
        bootstrap = self.external() or f"{LOCALHOST}:{self.port}"
        return [f"CRAWLER_BUS_KAFKA_BOOTSTRAP={bootstrap}"]


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64 without padding."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):  # Kafka avoids ids that look like a flag
            return cid


class Cassandra(Server):
    def __init__(self) -> None:
        super().__init__(name="cassandra", version=CASSANDRA_VERSION,
                         main_class="org.apache.cassandra.service.CassandraDaemon",
                         port=env_port("CASSANDRA_PORT", 9042), external_var="CASSANDRA_HOSTS",
                         default_stop_timeout=60)
        self.storage_port = env_port("CASSANDRA_STORAGE_PORT", 7000)

    def ports(self) -> str:
        jmx = os.environ.get("CASSANDRA_JMX_PORT", "").strip()
        return f"{self.port} {self.storage_port}" + (f" {jmx}" if jmx else "")

    def check_java(self, major: int) -> None:
        if major not in (11, 17):
            raise ServerError(f"Cassandra {self.version} runs on Java 11 or 17, found Java "
                              f"{major}: set JAVA_HOME to a JDK 17")

    def prepare(self, java: str) -> list[str]:
        if port_open(LOCALHOST, self.storage_port):
            raise ServerError(f"cassandra: storage port {self.storage_port} is taken; "
                              "set CASSANDRA_STORAGE_PORT")
        config = self.var / "conf" / "cassandra.yaml"
        data = self.var / "data"
        config.write_text(render("cassandra.yaml", port=self.port,
                                 storage_port=self.storage_port, data_dir=data))
        jamm = sorted(self.lib.glob("jamm-*.jar"))
        jmx_port = os.environ.get("CASSANDRA_JMX_PORT", "").strip()
        jmx = [f"-Dcassandra.jmx.local.port={env_port('CASSANDRA_JMX_PORT', 7199)}",
               "-Dcom.sun.management.jmxremote.authenticate=false"] if jmx_port else []
        heap_min = env_str("CASSANDRA_HEAP_MIN", "256m")
        heap_max = env_str("CASSANDRA_HEAP", "1g")
        return [f"-Xms{heap_min}", f"-Xmx{heap_max}", *options_file("cassandra-jvm17.options"),
                *([f"-javaagent:{jamm[-1]}"] if jamm else []),
                *jmx,
                f"-Dcassandra.config=file://{config}",
                f"-Dcassandra.storagedir={data}",
                f"-Dcassandra.logdir={self.var / 'logs'}",
                f"-Dlogback.configurationFile={HERE / 'cassandra-logback.xml'}",
                f"-XX:HeapDumpPath={self.var / 'logs'}",
                *os.environ.get("CASSANDRA_JVM_OPTS", "").split()]

    def ready(self, host: str, port: int) -> str | None:
        release = cassandra_release(host, port)
        return f"Cassandra {release}" if release is not None else None

    def endpoint(self) -> tuple[str, int]:
        ext = self.external()
        if ext:
            return ext.split(",")[0].strip(), self.port
        return LOCALHOST, self.port

    def env_lines(self) -> list[str]:
        hosts = self.external() or LOCALHOST
        return [f"CRAWLER_STORE_CASSANDRA_HOSTS={hosts}",
                f"CRAWLER_STORE_CASSANDRA_PORT={self.port}"]


SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
# the Go module proxy serves SeaweedFS by pseudo-version only (its tags are not semver)
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
S3_BUCKET = "crawl"
# keys of the local server's one identity; loopback only, for tests and development
S3_ACCESS_KEY = "crawler-local"
S3_SECRET_KEY = "crawler-local-secret"


class S3(Server):
    """SeaweedFS (``weed mini``: master, volume, filer and S3 gateway in one process) with
    one identity from an S3 config file, so requests with other keys are refused, and
    one bucket made at start. Built once from its Go module source with ``go build``
    into ``var/seaweedfs-<version>/weed`` (``go install module@version`` refuses a
    module whose go.mod has replace directives, as SeaweedFS's has)."""

    def __init__(self) -> None:
        super().__init__(name="s3", version=SEAWEEDFS_VERSION, main_class="",
                         port=env_port("S3_PORT", 8333), external_var="S3_ENDPOINT",
                         default_stop_timeout=20)
        self.master_port = env_port("S3_MASTER_PORT", 9333)
        self.volume_port = env_port("S3_VOLUME_PORT", 9340)
        self.filer_port = env_port("S3_FILER_PORT", 8888)
        self.admin_port = env_port("S3_ADMIN_PORT", 12535)  # its admin server and workers
        self.bucket = env_str("S3_BUCKET", S3_BUCKET)
        self.access_key = env_str("S3_ACCESS_KEY", S3_ACCESS_KEY)
        self.secret_key = env_str("S3_SECRET_KEY", S3_SECRET_KEY)

    @property
    def home(self) -> Path:
        return ROOT / "var" / f"seaweedfs-{self.version}"

    @property
    def binary(self) -> Path:
        return self.home / "weed"

    @property
    def marker(self) -> str:
        return f"-dir={self.var / 'data'}"

    def ports(self) -> str:
        return " ".join(str(p) for p in (self.port, self.master_port, self.volume_port,
                                         self.filer_port, self.admin_port))

    def installed(self) -> bool:
        return self.binary.exists()

    def install(self, *, quiet: bool = False) -> None:
        if self.installed():
            if not quiet:
                log(f"s3: SeaweedFS {self.version} in {self.binary}")
            return
        go = build.go_binary(ServerError, "go (the Go toolchain) not found: it builds SeaweedFS")
        timeout = env_int("SERVERS_BUILD_TIMEOUT", 3600)
        self.home.mkdir(parents=True, exist_ok=True)
        log(f"s3: building SeaweedFS {self.version} from its Go module (once; at most "
            f"{timeout} s, SERVERS_BUILD_TIMEOUT) ...")
        started = time.monotonic()
        found = build.go_mod_download(SEAWEEDFS_MODULE, self.version, go=go, error=ServerError,
                                      need=("Dir",), timeout=timeout)
        source = self.home / "src"
        build.copy_module_source(found["Dir"], source)
        partial = self.home / "weed.partial"
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}
        try:
            result = subprocess.run([go, "build", "-trimpath", "-o", str(partial), "./weed"],
                                    cwd=source, env=env, capture_output=True, text=True,
                                    check=False, timeout=max(1, timeout - (
                                        time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            raise ServerError(f"s3: building SeaweedFS took more than {timeout} s "
                              "(SERVERS_BUILD_TIMEOUT)") from None
        finally:
            shutil.rmtree(source, ignore_errors=True)
        if result.returncode != 0:
            raise ServerError(f"go build of SeaweedFS failed:\n{result.stderr[-4000:]}")
        partial.rename(self.binary)
        log(f"s3: SeaweedFS built in {self.binary} ({time.monotonic() - started:.0f} s)")

    def s3_config(self) -> Path:
        import json

        path = self.var / "conf" / "s3.json"
        identity = {"name": "crawler",
                    "credentials": [{"accessKey": self.access_key,
                                     "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "List", "Write", "Tagging"]}
        path.write_text(json.dumps({"identities": [identity]}, indent=2) + "\n")
        path.chmod(0o600)
        return path

    def command(self) -> list[str]:
        for port, what in ((self.master_port, "S3_MASTER_PORT"),
                           (self.volume_port, "S3_VOLUME_PORT"),
                           (self.filer_port, "S3_FILER_PORT"),
                           (self.admin_port, "S3_ADMIN_PORT")):
            for taken in (port, port + 10000):  # http and gRPC
                if port_open(LOCALHOST, taken):
                    raise ServerError(f"s3: port {taken} is taken; set {what}")
        return [str(self.binary), "mini", self.marker, f"-ip={LOCALHOST}",
                f"-ip.bind={LOCALHOST}",
                f"-master.port={self.master_port}",
                f"-master.port.grpc={self.master_port + 10000}",
                f"-volume.port={self.volume_port}",
                f"-volume.port.grpc={self.volume_port + 10000}",
                f"-filer.port={self.filer_port}",
                f"-filer.port.grpc={self.filer_port + 10000}",
                f"-s3.port={self.port}", f"-s3.port.grpc={self.port + 10000}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false",
                "-admin.ui=false", f"-admin.port={self.admin_port}",
                f"-admin.port.grpc={self.admin_port + 10000}", "-admin.port.legacy=0",
                "-master.telemetry=false",
                "-master.volumeSizeLimitMB=64", "-volume.max=20",
                f"-s3.config={self.s3_config()}", f"-bucket={self.bucket}"]

    def log_files(self) -> list[Path]:
        return []

    def endpoint(self) -> tuple[str, int]:
        ext = self.external()
        if ext:
            host_port = ext.split("://", 1)[-1].rstrip("/")
            return split_hostport(host_port, self.port)
        return LOCALHOST, self.port

    def url(self) -> str:
        return self.external() or f"http://{LOCALHOST}:{self.port}"

    def ready(self, host: str, port: int) -> str | None:
        """The bucket lists, takes a probe object and gives it back, with the keys."""
        try:
            import obstore
            from obstore.store import S3Store
        except ImportError:
            self.problem = "obstore is not installed (scripts/setup installs it)"
            return None
        store = S3Store(self.bucket, endpoint=f"http://{host}:{port}", region="us-east-1",
                        access_key_id=self.access_key, secret_access_key=self.secret_key,
                        virtual_hosted_style_request=False,
                        client_options={"allow_http": True, "timeout": "5s"},
                        retry_config={"max_retries": 0,
                                      "retry_timeout": datetime.timedelta(seconds=5)})
        probe = uuid.uuid4().hex.encode()
        try:
            for _ in obstore.list(store, chunk_size=1):
                break
            obstore.put(store, "servers-ready-probe", probe)
            if bytes(obstore.get(store, "servers-ready-probe").bytes()) != probe:
                self.problem = "the probe object came back changed"
                return None
        except Exception as exc:
            self.problem = " ".join(str(exc).split())[:300]
            return None
        self.problem = None
        return f"SeaweedFS, bucket {self.bucket}"

    def env_lines(self) -> list[str]:
        return [f"CRAWLER_BLOB_S3_ENDPOINT={self.url()}",
                f"CRAWLER_BLOB_S3_BUCKET={self.bucket}",
                "CRAWLER_BLOB_S3_PATH_STYLE=true",
                f"AWS_ACCESS_KEY_ID={self.access_key}",
                f"AWS_SECRET_ACCESS_KEY={self.secret_key}"]


# ----------------------------------------------------------------------------------- commands


def pick(names: list[str]) -> list[Server]:
    servers: dict[str, Callable[[], Server]] = {"kafka": Kafka, "cassandra": Cassandra,
                                                "s3": S3}
    if not names or "all" in names:
        return [make() for make in servers.values()]
    return [servers[name]() for name in dict.fromkeys(names)]


def cmd_start(servers: list[Server]) -> None:
    timeout = float(env_int("SERVERS_START_TIMEOUT", 180))
    for server in servers:  # fetch first, so that start-up times are not spent downloading
        if not server.external():
            server.install(quiet=True)
    launched: list[tuple[Server, subprocess.Popen[bytes] | None, float]] = []
    try:
        for server in servers:  # start all, then wait: the servers start side by side
            started = time.monotonic()
            launched.append((server, server.spawn(), started))
        for server, proc, started in launched:
            server.wait_ready(proc, timeout, started)
    except BaseException:
        for server, proc, _ in launched:  # leave nothing half-started behind
            if proc is not None and proc.poll() is None:
                server.stop()
        raise


def cmd_stop(servers: list[Server]) -> None:
    pending = [(server, server.signal_stop()) for server in servers]
    for server, pid in pending:
        if pid is not None:
            server.wait_stopped(pid, stop_timeout(server))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/servers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("install", "start", "stop", "status", "env"))
    parser.add_argument("which", nargs="*", metavar="kafka|cassandra|s3|all",
                        help="the servers (default: all)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.which if name not in ("kafka", "cassandra", "s3", "all")]
    if unknown:
        parser.error(f"unknown server {unknown[0]!r}: choose kafka, cassandra, s3 or all")
    try:
        servers = pick(args.which)
        if args.command == "install":
            for server in servers:
                server.install()
        elif args.command == "start":
            cmd_start(servers)
        elif args.command == "stop":
            cmd_stop(servers)
        elif args.command == "status":
            return 0 if all([server.status() for server in servers]) else 3
        else:
            for server in servers:
                print("\n".join(server.env_lines()))
    except ServerError as exc:
        print(f"scripts/servers: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
