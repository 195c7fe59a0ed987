"""A Docker engine, Compose v2 and every image of docker-compose.yml, on this machine.

    scripts/docker prepare   start, compose, images, build (what scripts/test runs)
    scripts/docker start     the engine: Debian's docker.io if dockerd is missing, then
                             dockerd in the background, its PID in var/docker/dockerd.pid
    scripts/docker compose   Compose v2: built from its Go module when `docker compose`
                             is missing, installed as $DOCKER_CONFIG/cli-plugins/docker-compose
    scripts/docker images    the third-party images of the stack: pulled when a registry
                             answers; otherwise a Debian base image (debootstrap) and
                             stand-ins built on it, tagged with the upstream names
    scripts/docker build     the project's image, polite-crawler:<version of pyproject.toml>
                             (the tag docker-compose.yml names), also tagged latest
    scripts/docker status    what answers and what is built (exit 0 when all is ready)
    scripts/docker stop      stop the dockerd that `start` started (SIGTERM, then SIGKILL)

Nothing is built twice: the base image's root file system is kept in .cache/docker, the
Compose binary and the server jars in ~/.cache/polite-crawler (so every clone of the
project reuses them), and the images in the engine's own store (/var/lib/docker). A
stand-in is rebuilt only when its recipe (the files under scripts/docker.d/images/<name>/,
its jars, its base image) changes.

`prepare` writes var/docker/status.json: ``{"ready": true|false, "reason": ...}``; the
compose smoke test (tests/integration/test_compose.py) reads it and skips, naming the
reason, when the engine could not be had.

Stand-ins (only when no registry answers; `docker pull` is tried first):

| upstream image           | stand-in                                                      |
|--------------------------|---------------------------------------------------------------|
| python:3.11-slim         | Debian 12's python3 (3.11) and venv                           |
| apache/kafka:<v>         | Apache Kafka <v> from Maven Central on Debian's OpenJDK 17,   |
|                          | configured by KAFKA_* variables as the upstream image is      |
| cassandra:5.0            | Apache Cassandra 5.0.x (scripts/servers' version) from Maven  |
|                          | Central on OpenJDK 17, with cqlsh from PyPI; the upstream     |
|                          | image's CASSANDRA_* / MAX_HEAP_SIZE variables                 |
| prom/prometheus:<v>      | Debian 12's prometheus package (2.42) with wget               |
| chrislusf/seaweedfs:<v>  | scripts/servers' SeaweedFS build (from its Go module; built   |
|                          | first when missing) with wget, for the compose profile s3     |
| grafana/grafana:<v>      | none: no Debian package, AGPL source not served here          |

Environment:
  CRAWLER_DOCKER_IMAGES      auto (default: pull, else build stand-ins), upstream, local
  CRAWLER_IMAGE              the project's image name (polite-crawler:<version>)
  DOCKER_HOST                an engine to use; `start` then only checks that it answers
  DOCKER_CONFIG              where the Compose plugin goes (~/.docker)
  DOCKERD_START_TIMEOUT      seconds to wait for a started dockerd (60)
  DEBIAN_MIRROR              debootstrap's mirror (the one apt uses here)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # scripts.lib, from any working directory

from scripts.lib import build, cli  # noqa: E402
from scripts.lib.proc import (  # noqa: E402
    read_pid,
    running_pid,
    size_of,
    spawn_logged,
    tail,
    terminate,
)

CACHE = ROOT / ".cache" / "docker"
VAR = ROOT / "var" / "docker"
SHARED = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "polite-crawler"
STATUS = VAR / "status.json"
PID_FILE = VAR / "dockerd.pid"
DOCKERD_LOG = VAR / "dockerd.log"
SOCKET = "/var/run/docker.sock"

COMPOSE_MODULE = "github.com/docker/compose/v2"
COMPOSE_VERSION = "v2.40.3"
SUITE = "bookworm"
BASE_IMAGE = f"polite-crawler/debian:{SUITE}"
LABEL = "org.polite-crawler.stand-in"  # on every image built here: the recipe's hash


def project_version() -> str:
    """The project version of pyproject.toml: the tag of the project's image, which
    docker-compose.yml names."""
    import tomllib

    with (ROOT / "pyproject.toml").open("rb") as f:
        version: str = tomllib.load(f)["project"]["version"]
    return version


PROJECT_IMAGE = (os.environ.get("CRAWLER_IMAGE", "").strip()
                 or f"polite-crawler:{project_version()}")
# also tagged latest when it is the default name: scripts/kube loads that one
LATEST_IMAGE = "polite-crawler:latest"


class DockerError(RuntimeError):
    """A step could not be done; the message says why."""


say = cli.sayer("docker: ")
step = functools.partial(cli.timed, say)


def run(cmd: Sequence[str], *, timeout: float | None = None, check: bool = True,
        env: dict[str, str] | None = None, cwd: Path | None = None,
        stdin: Any = subprocess.DEVNULL, quiet: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command; with ``quiet`` its output is kept and shown only when it fails."""
    try:
        proc = subprocess.run(list(cmd), capture_output=quiet, text=True, timeout=timeout,
                              env=env, cwd=cwd, stdin=stdin, check=False)
    except subprocess.TimeoutExpired:
        raise DockerError(f"{' '.join(cmd[:4])} ... did not finish within {timeout:.0f} s"
                          ) from None
    except FileNotFoundError:
        raise DockerError(f"{cmd[0]} not found") from None
    if check and proc.returncode != 0:
        out = ((proc.stdout or "") + (proc.stderr or "")).strip()
        raise DockerError(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}):\n"
                          f"{out[-4000:]}")
    return proc


def docker_env() -> dict[str, str]:
    # No buildx plugin here: the classic builder, as Docker 20.10 itself uses.
    return {**os.environ, "DOCKER_BUILDKIT": "0", "DOCKER_CLI_HINTS": "false"}


def docker(*args: str, timeout: float | None = 120, check: bool = True,
           quiet: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["docker", *args], timeout=timeout, check=check, env=docker_env(),
               quiet=quiet)


# ------------------------------------------------------------------------------- engine


def engine_version(timeout: float = 15) -> str | None:
    """The engine's version when one answers (DOCKER_HOST or the local socket)."""
    if shutil.which("docker") is None:
        return None
    try:
        proc = docker("version", "--format", "{{.Server.Version}}", timeout=timeout,
                      check=False)
    except DockerError:
        return None
    version = proc.stdout.strip()
    return version if proc.returncode == 0 and version else None


def marker() -> str:
    """An engine label that marks the dockerd this checkout started."""
    return f"--label=org.polite-crawler.started-by={VAR}"


def our_dockerd() -> int | None:
    return running_pid(PID_FILE, lambda cmd: marker() in cmd)


def install_docker_io() -> None:
    if os.geteuid() != 0:
        raise DockerError("dockerd is not installed and installing Debian's docker.io needs "
                          "root")
    with step("installed Debian's docker.io (apt)"):
        run([str(ROOT / "scripts" / "apt-install"), "docker.io"], timeout=900)
    if shutil.which("dockerd") is None:
        raise DockerError("docker.io installed but dockerd is not on PATH")


def cmd_start() -> str:
    """Make an engine answer; returns its version."""
    version = engine_version()
    if version:
        pid = our_dockerd()
        say(f"engine {version} answers" + (f" (dockerd pid {pid}, started here)" if pid
                                          else " (not started by this checkout)"))
        return version
    host = os.environ.get("DOCKER_HOST", "").strip()
    if host and host != f"unix://{SOCKET}":
        raise DockerError(f"DOCKER_HOST={host} does not answer")
    if os.geteuid() != 0:
        raise DockerError("no Docker engine answers and starting dockerd needs root")
    if shutil.which("dockerd") is None:
        install_docker_io()
    if shutil.which("docker") is None:
        raise DockerError("the docker command line is not installed")
    dockerd = shutil.which("dockerd")
    assert dockerd is not None
    VAR.mkdir(parents=True, exist_ok=True)
    timeout = float(os.environ.get("DOCKERD_START_TIMEOUT", "").strip() or 60)
    started = time.monotonic()
    offset = size_of(DOCKERD_LOG)
    proc = spawn_logged([dockerd, f"--host=unix://{SOCKET}", marker()], DOCKERD_LOG, PID_FILE)
    while True:
        if proc.poll() is not None:
            PID_FILE.unlink(missing_ok=True)
            raise DockerError(f"dockerd exited with code {proc.returncode}:\n"
                              f"{log_tail(offset)}")
        version = engine_version(timeout=5)
        if version:
            say(f"dockerd {version} started, pid {proc.pid}, log {rel(DOCKERD_LOG)} "
                f"({time.monotonic() - started:.1f} s)")
            return version
        if time.monotonic() - started > timeout:
            stop_pid(proc.pid, 30)
            raise DockerError(f"dockerd did not answer within {timeout:.0f} s:\n"
                              f"{log_tail(offset)}")
        time.sleep(0.5)


def log_tail(offset: int, lines: int = 25) -> str:
    return tail(DOCKERD_LOG, lines, offset, missing="(no log)")


def stop_pid(pid: int, timeout: float) -> None:
    terminate(pid, timeout, lambda: say(
        f"dockerd pid {pid} still running after {timeout:.0f} s: SIGKILL"))


def cmd_stop() -> None:
    pid = our_dockerd()
    if pid is None:
        stale = read_pid(PID_FILE)
        say("no dockerd started by this checkout is running" +
            (f" (pid {stale} is gone)" if stale else ""))
        PID_FILE.unlink(missing_ok=True)
        return
    with step(f"stopped dockerd pid {pid}"):
        stop_pid(pid, 90)  # dockerd first stops its containers (10 s each at most)
    PID_FILE.unlink(missing_ok=True)


# ------------------------------------------------------------------------------ compose


def compose_version() -> str | None:
    try:
        proc = docker("compose", "version", "--short", timeout=30, check=False)
    except DockerError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def plugin_dir() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "cli-plugins"


def go_env() -> dict[str, str]:
    return build.go_env(GOTOOLCHAIN="local")


def build_compose(target: Path) -> None:
    """`go build ./cmd` in a copy of the module's source: `go install module@version` is
    refused because the module's go.mod has exclude and replace directives, which count
    only in the main module."""
    go = build.go_binary(DockerError, "go not found: Go builds Compose v2 from its module")
    say(f"building Compose {COMPOSE_VERSION} from {COMPOSE_MODULE} with Go "
        "(several minutes the first time) ...")
    info = build.go_mod_download(COMPOSE_MODULE, COMPOSE_VERSION, go=go, error=DockerError,
                                 env=go_env(), need=("Dir",), timeout=900)
    with tempfile.TemporaryDirectory(prefix="compose-src-") as tmp:
        src = Path(tmp) / "compose"
        build.copy_module_source(info["Dir"], src)
        ldflags = f"-s -w -X {COMPOSE_MODULE}/internal.Version={COMPOSE_VERSION}"
        out = Path(tmp) / "docker-compose"
        run([go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out), "./cmd"],
            cwd=src, env=go_env(), timeout=3600)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp_target = target.with_suffix(".partial")
        shutil.copy2(out, tmp_target)
        tmp_target.replace(target)


def cmd_compose() -> str:
    version = compose_version()
    if version:
        say(f"docker compose {version} is installed")
        return version
    shared = SHARED / f"docker-compose-{COMPOSE_VERSION}"
    local = CACHE / "bin" / "docker-compose"
    if not shared.is_file():
        if local.is_file() and local_version(local) == COMPOSE_VERSION.lstrip("v"):
            shared.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(local, shared)
        else:
            with step(f"built Compose {COMPOSE_VERSION} into {shared}"):
                build_compose(shared)
    if not local.is_file():
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(shared, local)
    target = plugin_dir() / "docker-compose"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    shutil.copy2(shared, partial)
    partial.chmod(0o755)
    partial.replace(target)
    version = compose_version()
    if not version:
        raise DockerError(f"{target} installed but `docker compose version` fails")
    say(f"docker compose {version} installed as {target}")
    return version


def local_version(binary: Path) -> str | None:
    proc = run([str(binary), "version", "--short"], check=False, timeout=30)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


# ------------------------------------------------------------------------------- images


def image_labels(ref: str) -> dict[str, str] | None:
    """The image's labels, or None when the engine has no such image."""
    proc = docker("image", "inspect", "--format", "{{json .Config.Labels}}", ref,
                  check=False, timeout=60)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout.strip() or "null") or {}


def image_id(ref: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()


def digest(paths: Sequence[Path], *extra: str) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.name).encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"")
    for item in extra:
        h.update(item.encode() + b"\0")
    return h.hexdigest()[:16]


def debian_mirror() -> str:
    env = os.environ.get("DEBIAN_MIRROR", "").strip()
    if env:
        return env
    sources = [*Path("/etc/apt").glob("sources.list.d/*.sources"), Path("/etc/apt/sources.list")]
    for path in sources:
        with contextlib.suppress(OSError):
            for uri in re.findall(r"(?:URIs:|^deb)\s+(\S+/debian)\s*$",
                                  path.read_text(), re.MULTILINE):
                return str(uri)
    return "http://deb.debian.org/debian"


def ca_certificates() -> list[Path]:
    """This machine's own CA certificates: HTTPS to the package registries inside an
    image needs them as much as it does here."""
    return sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))


BASE_RECIPE = f"""\
debootstrap --variant=minbase --include=ca-certificates {SUITE}; this machine's CA
certificates; apt sources as this machine's; policy-rc.d; no docs; no recommends; v1
"""


def rootfs_tarball() -> Path:
    """The base image's root file system (debootstrap, a couple of minutes once)."""
    tarball = CACHE / "base" / f"{SUITE}-minbase.tar"
    stamp = tarball.with_suffix(".recipe")
    certs = ca_certificates()
    recipe = digest(certs, BASE_RECIPE, debian_mirror())
    if tarball.is_file() and stamp.is_file() and stamp.read_text().strip() == recipe:
        return tarball
    if os.geteuid() != 0:
        raise DockerError("debootstrap needs root")
    if shutil.which("debootstrap") is None:
        with step("installed debootstrap (apt)"):
            run([str(ROOT / "scripts" / "apt-install"), "debootstrap"], timeout=900)
    mirror = debian_mirror()
    with step(f"debootstrap {SUITE} (minbase) from {mirror}"):
        root = CACHE / "base" / "rootfs"
        if root.exists():
            run(["rm", "-rf", "--one-file-system", str(root)])
        root.mkdir(parents=True)
        run(["debootstrap", "--variant=minbase", "--include=ca-certificates", SUITE,
             str(root), mirror], timeout=1800)
        certs_dir = root / "usr/local/share/ca-certificates"
        certs_dir.mkdir(parents=True, exist_ok=True)
        for cert in certs:
            shutil.copy2(cert, certs_dir / cert.name)
        security = mirror.replace("/debian", "/debian-security")
        (root / "etc/apt/sources.list").unlink(missing_ok=True)
        (root / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
        (root / "etc/apt/sources.list.d/debian.sources").write_text(
            f"Types: deb\nURIs: {mirror}\nSuites: {SUITE} {SUITE}-updates\n"
            "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {security}\nSuites: {SUITE}-security\n"
            "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
        policy = root / "usr/sbin/policy-rc.d"  # no service starts inside a build
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        (root / "etc/dpkg/dpkg.cfg.d/docker-slim").write_text(
            "path-exclude /usr/share/doc/*\npath-include /usr/share/doc/*/copyright\n"
            "path-exclude /usr/share/man/*\npath-exclude /usr/share/info/*\n"
            "path-exclude /usr/share/locale/*\n")
        (root / "etc/apt/apt.conf.d/docker-slim").write_text(
            'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
            'Acquire::Languages "none";\n')
        run(["chroot", str(root), "update-ca-certificates"], timeout=300)
        run(["chroot", str(root), "apt-get", "clean"], timeout=300)
        for junk in ("var/lib/apt/lists", "var/cache/apt/archives", "var/log"):
            for path in (root / junk).glob("*"):
                if path.is_file():
                    path.unlink()
        partial = tarball.with_suffix(".partial")
        run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(partial), "."],
            timeout=900)
        partial.replace(tarball)
        stamp.write_text(recipe + "\n")
        run(["rm", "-rf", "--one-file-system", str(root)])
    return tarball


def ensure_base() -> str:
    """The Debian base image (imported from the debootstrap root file system)."""
    certs = ca_certificates()
    recipe = digest(certs, BASE_RECIPE, debian_mirror())
    labels = image_labels(BASE_IMAGE)
    if labels is not None and labels.get(LABEL) == recipe:
        return BASE_IMAGE
    tarball = rootfs_tarball()
    with step(f"imported {BASE_IMAGE}"):
        docker("import", "--change", f"LABEL {LABEL}={recipe}",
               "--change", "ENV LANG=C.UTF-8",
               "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "--change", 'CMD ["bash"]', str(tarball), BASE_IMAGE, timeout=900)
    return BASE_IMAGE


# Files a stand-in shares with scripts/servers, copied into its build context.
SHARED_FILES = {"cassandra": {"config/jvm17.options":
                              ROOT / "scripts" / "servers.d" / "cassandra-jvm17.options"}}


@dataclass(frozen=True)
class StandIn:
    """A local image tagged with an upstream name, built from scripts/docker.d/images/<kind>."""

    kind: str  # python, kafka, cassandra, prometheus, seaweedfs
    ref: str  # the upstream name it stands in for

    @property
    def folder(self) -> Path:
        return HERE / "images" / self.kind

    def version(self) -> str:
        """The server version the stand-in carries."""
        tag = self.ref.rpartition(":")[2]
        if self.kind == "kafka":
            return tag
        if self.kind == "cassandra":
            return cassandra_version(tag)
        if self.kind == "seaweedfs":
            return seaweedfs_binary().parent.name.removeprefix("seaweedfs-")
        return tag

    def jars(self) -> Path | None:
        if self.kind not in ("kafka", "cassandra"):
            return None
        return maven_jars(self.kind, self.version())

    def context(self) -> tuple[Path, str]:
        """The build context (assembled under .cache/docker/context) and its recipe hash."""
        ctx = CACHE / "context" / self.kind
        if ctx.exists():
            shutil.rmtree(ctx)
        shutil.copytree(self.folder, ctx)
        for inner, source in SHARED_FILES.get(self.kind, {}).items():
            shutil.copy2(source, ctx / inner)
        jars = self.jars()
        if jars is not None:
            shutil.copytree(jars, ctx / "libs")
        if self.kind == "seaweedfs":
            binary = seaweedfs_binary()
            shutil.copy2(binary, ctx / "weed")
            strip = shutil.which("strip")
            if strip is not None:  # debug symbols: about a third of the binary
                run([strip, "--strip-debug", str(ctx / "weed")], timeout=300)
        files = [p for p in ctx.rglob("*")
                 if p.is_file() and p.suffix != ".jar" and p.name != "weed"]
        jar_names = sorted(p.name for p in ctx.rglob("*.jar"))
        recipe = digest(files, self.ref, self.version(), image_id(BASE_IMAGE), *jar_names)
        return ctx, recipe

    def build(self) -> None:
        ctx, recipe = self.context()
        labels = image_labels(self.ref)
        if labels is not None and labels.get(LABEL) == recipe:
            say(f"{self.ref}: stand-in up to date")
            return
        with step(f"built stand-in {self.ref} ({self.kind} {self.version()})"):
            docker("build", "--pull=false", "--label", f"{LABEL}={recipe}",
                   "--build-arg", f"BASE={BASE_IMAGE}", "--build-arg",
                   f"VERSION={self.version()}", "-t", self.ref, str(ctx), timeout=3600)
        shutil.rmtree(ctx / "libs", ignore_errors=True)
        (ctx / "weed").unlink(missing_ok=True)


def seaweedfs_binary() -> Path:
    """scripts/servers' SeaweedFS binary (``var/seaweedfs-<version>/weed``), built there
    first when missing (from the Go module: minutes with a warm Go cache, about a
    quarter of an hour on 2 busy cores without)."""
    text = (ROOT / "scripts" / "servers.d" / "servers.py").read_text(encoding="utf-8")
    match = re.search(r'^SEAWEEDFS_VERSION = "([^"]+)"', text, re.MULTILINE)
    if match is None:
        raise DockerError("scripts/servers.d/servers.py names no SEAWEEDFS_VERSION")
    binary = ROOT / "var" / f"seaweedfs-{match.group(1)}" / "weed"
    if not binary.is_file():
        with step("built SeaweedFS (scripts/servers install s3)"):
            run([str(ROOT / "scripts" / "servers"), "install", "s3"], timeout=3900)
    if not binary.is_file():
        raise DockerError(f"scripts/servers install s3 left no {rel(binary)}")
    return binary


def cassandra_version(tag: str) -> str:
    """scripts/servers' Cassandra version, which a cassandra:<major.minor> tag must name."""
    text = (ROOT / "scripts" / "servers.d" / "servers.py").read_text(encoding="utf-8")
    match = re.search(r'^CASSANDRA_VERSION = "([^"]+)"', text, re.MULTILINE)
    version = match.group(1) if match else "5.0.9"
    if not version.startswith(tag.rstrip(".") + ".") and version != tag:
        raise DockerError(f"cassandra:{tag}: scripts/servers has Cassandra {version}")
    return version


def maven_jars(kind: str, version: str) -> Path:
    """The runtime jars of Kafka or Cassandra ``version``, from Maven Central (kept in
    ~/.cache/polite-crawler/jars, for every clone, and in Maven's local repository)."""
    home = SHARED / "jars" / f"{kind}-{version}"
    if build.jars_installed(home):
        return home / "lib"
    template = (HERE / "images" / kind / "pom.xml.in").read_text(encoding="utf-8")

    def mvn(cmd: list[str]) -> None:
        with step(f"fetched {kind} {version} jars from Maven Central"):
            run(cmd, timeout=1800)

    build.fetch_jars(home, string.Template(template).substitute(version=version),
                     f"{kind} {version}", run=mvn, error=DockerError)
    return home / "lib"


def stack_images() -> dict[str, str]:
    """kind -> image reference, as docker-compose.yml and the Dockerfile name them."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    services = compose["services"]
    froms = re.findall(r"^FROM\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    python = next(ref for ref in froms if ref.startswith("python:"))
    return {"python": python, "kafka": services["kafka"]["image"],
            "cassandra": services["cassandra"]["image"],
            "prometheus": services["prometheus"]["image"],
            "seaweedfs": services["s3"]["image"],
            "grafana": services["grafana"]["image"]}


def pull(ref: str) -> str | None:
    """None when pulled, else why not (in one line)."""
    proc = docker("pull", ref, timeout=900, check=False)
    if proc.returncode == 0:
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


def cmd_images() -> dict[str, str]:
    """Every third-party image the stack needs; returns ref -> where it came from."""
    mode = os.environ.get("CRAWLER_DOCKER_IMAGES", "").strip() or "auto"
    if mode not in ("auto", "upstream", "local"):
        raise DockerError(f"CRAWLER_DOCKER_IMAGES={mode!r}: expected auto, upstream or local")
    images = stack_images()
    origin: dict[str, str] = {}
    registry = "not tried (CRAWLER_DOCKER_IMAGES=local)" if mode == "local" else ""
    for kind, ref in images.items():
        labels = image_labels(ref)
        if labels is not None and LABEL not in labels:
            origin[ref] = "upstream (present)"
            continue
        if registry in ("", "ok"):  # not tried yet, or it answered
            why = pull(ref)
            if why is None:
                registry = "ok"
                origin[ref] = "upstream (pulled)"
                continue
            if mode == "upstream" or registry == "ok":
                raise DockerError(f"cannot pull {ref}: {why}")
            registry = why
            say(f"no registry answers ({why}): stand-ins, built here when missing or "
                "out of date")
        if kind == "grafana":
            origin[ref] = "unavailable (no registry; no stand-in)"
            continue
        ensure_base()
        StandIn(kind, ref).build()
        origin[ref] = "stand-in"
    return origin


def cmd_build() -> None:
    """The project's image; the engine's layer cache makes an unchanged build quick."""
    tags = ["-t", PROJECT_IMAGE]
    if PROJECT_IMAGE.startswith("polite-crawler:"):
        tags += ["-t", LATEST_IMAGE]
    with step(f"built {PROJECT_IMAGE}"):
        proc = run(["docker", "build", "--pull=false", *tags, str(ROOT)],
                   env=docker_env(), timeout=3600, check=False)
        if proc.returncode != 0:
            raise DockerError(f"docker build failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    size = docker("image", "inspect", "--format", "{{.Size}}", PROJECT_IMAGE).stdout.strip()
    say(f"{PROJECT_IMAGE}: {int(size) / 1e6:.0f} MB")


# ------------------------------------------------------------------------------ prepare


def write_status(ready: bool, reason: str, **extra: Any) -> None:
    VAR.mkdir(parents=True, exist_ok=True)
    data = {"ready": ready, "reason": reason, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **extra}
    tmp = STATUS.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(STATUS)


def cmd_prepare() -> int:
    started = time.monotonic()
    timings: dict[str, float] = {}
    current = "start"
    try:
        for name, action in (("start", cmd_start), ("compose", cmd_compose),
                             ("images", cmd_images), ("build", cmd_build)):
            current = name
            t0 = time.monotonic()
            result = action()
            timings[name] = round(time.monotonic() - t0, 1)
            if name == "images":
                images = result
    except DockerError as exc:
        write_status(False, f"scripts/docker {current}: {exc}", timings=timings)
        raise
    total = time.monotonic() - started
    write_status(True, "ready", engine=engine_version(), compose=compose_version(),
                 images=images, project_image=PROJECT_IMAGE, timings=timings,
                 started_dockerd=our_dockerd() is not None)
    say(f"ready in {total:.1f} s " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    return 0


def cmd_status() -> int:
    version = engine_version()
    pid = our_dockerd()
    say(f"engine: {version or 'not answering'}" + (f" (dockerd pid {pid})" if pid else ""))
    if not version:
        return 3
    say(f"compose: {compose_version() or 'missing'}")
    ok = True
    for kind, ref in [*stack_images().items(), ("project", PROJECT_IMAGE)]:
        labels = image_labels(ref)
        what = ("missing" if labels is None else "stand-in" if LABEL in labels
                else "present")
        ok = ok and (labels is not None or kind == "grafana")
        say(f"{ref}: {what}")
    return 0 if ok and compose_version() else 3


def rel(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(ROOT))
    return str(path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/docker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("prepare", "start", "compose", "images", "build",
                                            "status", "stop"))
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            return cmd_prepare()
        if args.command == "status":
            return cmd_status()
        if args.command == "stop":
            cmd_stop()
            return 0
        if args.command != "start" and not engine_version():
            raise DockerError("no Docker engine answers: scripts/docker start")
        {"start": cmd_start, "compose": cmd_compose, "images": cmd_images,
         "build": cmd_build}[args.command]()
    except DockerError as exc:
        print(f"scripts/docker: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
