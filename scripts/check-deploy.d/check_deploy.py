"""Check the deployment files: docker-compose.yml and the Helm chart.

    scripts/check-deploy                 every check (what scripts/test runs)
    scripts/check-deploy docker          the Dockerfile and its build context only
    scripts/check-deploy compose         docker-compose.yml only
    scripts/check-deploy helm            the Helm chart only
    scripts/check-deploy tools           fetch the Compose schema and build helm, nothing else
    scripts/check-deploy write-schema    regenerate the settings part of values.schema.json

Tools, fetched once into .cache/ with Go's module tooling (later runs reuse them):
- the Compose specification's JSON schema, from the compose-go module;
- helm, built from its module with the same link flags as its release builds (so its
  default Kubernetes version is the one its client libraries speak).

docker-compose.yml is interpolated as Compose does (``${VAR:-default}`` and friends),
validated against the schema, then checked against the services' contract: every
CRAWLER_* variable is a real setting and the whole environment passes the settings
validation, the cluster settings are there, the Prometheus targets are the services'
metrics ports. It is checked as each topology runs it: the default one (the fetchers
parse; no parser or dedup service), the demo, and the profile separate-parse with
CRAWLER_FETCHER_PARSE_INLINE=false (separate parser and dedup). The chart is linted
and rendered under its default values and every deploy/helm/crawler/ci/*.yaml, each
rendering is validated against the Kubernetes schemas (kubernetes-validate) and checked
the same way: settings, probe paths the services serve, ports and images that agree
between Deployments and Services, parser and dedup Deployments whenever the fetchers
do not parse (none by default).

Exit status 0 when everything passes, 1 on any problem (each is printed).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import hashlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from common.settings import (  # noqa: E402
    Settings,
    SettingsError,
    env_name,
    variable_names,
)
from scripts.lib import build, cli  # noqa: E402

CACHE = ROOT / ".cache"
BIN = CACHE / "bin"
HELM = BIN / "helm"
HELM_MODULE = "helm.sh/helm/v3"
HELM_VERSION = "v3.22.0"
COMPOSE_GO_MODULE = "github.com/compose-spec/compose-go/v2"
COMPOSE_GO_VERSION = "v2.16.2"
COMPOSE_SCHEMA = CACHE / "deploy" / f"compose-spec-{COMPOSE_GO_VERSION}.json"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DEMO_ENV = ROOT / "deploy" / "compose" / "demo.env"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
CHART = ROOT / "deploy" / "helm" / "crawler"
VALUES_SCHEMA = CHART / "values.schema.json"

ROLES = ("frontier", "fetcher", "parser", "dedup", "api", "render")
# The fetchers parse and judge the pages by default (CRAWLER_FETCHER_PARSE_INLINE); the
# parser and dedup roles run only with it false: in compose in this profile, in the
# chart with services.parser/dedup.enabled.
SEPARATE_PARSE_ROLES = ("parser", "dedup")
# The render role runs only with CRAWLER_RENDER_ENABLED (compose profile render, chart
# services.render.enabled), from the image with a browser (Dockerfile target render).
RENDER_ROLE = "render"
RENDER_PROFILE = "render"
DEFAULT_ROLES = tuple(r for r in ROLES if r not in SEPARATE_PARSE_ROLES and r != RENDER_ROLE)
SEPARATE_PARSE_PROFILE = "separate-parse"
PARSE_INLINE = "CRAWLER_FETCHER_PARSE_INLINE"
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
# What every service needs in cluster mode (the contract with the services).
CLUSTER_SETTINGS = (
    "CRAWLER_BUS_BACKEND", "CRAWLER_BUS_KAFKA_BOOTSTRAP", "CRAWLER_STORE_BACKEND",
    "CRAWLER_STORE_CASSANDRA_HOSTS", "CRAWLER_STORE_CASSANDRA_PORT", "CRAWLER_STORE_KEYSPACE",
    "CRAWLER_BLOB_ROOT", "CRAWLER_API_TOKEN", "CRAWLER_API_PORT", "CRAWLER_METRICS_PORT",
)
# Settings the chart sets from its own values (kafka, cassandra, api, metrics, storage,
# objectStorage);
# the free-form ``settings`` value may not set them.
CHART_MANAGED: dict[str, frozenset[str] | None] = {
    "bus": frozenset({"backend", "kafka_bootstrap", "partitions", "replication_factor",
                      "topic_prefix"}),
    "store": None,  # the whole section
    "blob": frozenset({"root", "backend", "s3_bucket", "s3_endpoint", "s3_region",
                       "s3_prefix", "s3_path_style"}),
    "metrics": None,
    "api": None,
}
# Kinds the rendered chart may contain, and which the Kubernetes schemas cannot check.
CUSTOM_KINDS = frozenset({"ServiceMonitor"})

Problems = list[str]


class DeployError(Exception):
    """A tool could not be fetched, built or run."""


say = cli.sayer("check-deploy: ")
step = functools.partial(cli.timed, say, unit="s")


# --------------------------------------------------------------------------- tools


def go_mod_download(module: str, version: str) -> dict[str, Any]:
    """``go mod download -json module@version`` in a throw-away module folder."""
    go = build.go_binary(DeployError, "go not found: Go is needed to fetch the Compose "
                         "schema and build helm")
    return build.go_mod_download(module, version, go=go, error=DeployError,
                                 env=build.go_env())


def _module_file(info: Mapping[str, Any], inner: str) -> bytes:
    """A file of a downloaded module: from its extracted folder, or else its zip."""
    folder = info.get("Dir")
    if folder and (Path(folder) / inner).is_file():
        return (Path(folder) / inner).read_bytes()
    import zipfile

    with zipfile.ZipFile(info["Zip"]) as zf:
        return zf.read(f"{info['Path']}@{info['Version']}/{inner}")


def ensure_compose_schema() -> Path:
    if COMPOSE_SCHEMA.is_file():
        return COMPOSE_SCHEMA
    with step(f"fetched the Compose schema from {COMPOSE_GO_MODULE}@{COMPOSE_GO_VERSION}"):
        info = go_mod_download(COMPOSE_GO_MODULE, COMPOSE_GO_VERSION)
        data = _module_file(info, "schema/compose-spec.json")
        json.loads(data)  # must be JSON
        COMPOSE_SCHEMA.parent.mkdir(parents=True, exist_ok=True)
        tmp = COMPOSE_SCHEMA.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(COMPOSE_SCHEMA)
    return COMPOSE_SCHEMA


def _helm_stamp() -> Path:
    return BIN / "helm.version.json"


def helm_kube_minor(info: Mapping[str, Any]) -> str:
    """The Kubernetes minor version helm's client libraries speak (k8s.io/client-go
    v0.N.x is Kubernetes 1.N), read from helm's go.mod as its Makefile does."""
    text = Path(info["GoMod"]).read_text(encoding="utf-8")
    match = re.search(r"^\s*k8s\.io/client-go v0\.(\d+)\.", text, re.MULTILINE)
    if not match:
        raise DeployError("cannot find k8s.io/client-go in helm's go.mod")
    return match.group(1)


def ensure_helm() -> Path:
    stamp = _helm_stamp()
    if HELM.is_file() and stamp.is_file():
        try:
            if json.loads(stamp.read_text(encoding="utf-8")).get("helm") == HELM_VERSION:
                return HELM
        except json.JSONDecodeError:
            pass
    go = build.go_binary(DeployError, "go not found: Go is needed to build helm")
    with step(f"built helm {HELM_VERSION} into {HELM.relative_to(ROOT)}"):
        say(f"building helm {HELM_VERSION} with Go (a few minutes the first time) ...")
        info = go_mod_download(HELM_MODULE, HELM_VERSION)
        minor = helm_kube_minor(info)
        flags = [f"-X {HELM_MODULE}/internal/version.version={HELM_VERSION}"]
        for pkg in ("pkg/lint/rules", "pkg/chartutil"):
            flags += [f"-X {HELM_MODULE}/{pkg}.k8sVersionMajor=1",
                      f"-X {HELM_MODULE}/{pkg}.k8sVersionMinor={minor}"]
        BIN.mkdir(parents=True, exist_ok=True)
        env = build.go_env(GOBIN=str(BIN))
        proc = subprocess.run(
            [go, "install", "-trimpath", "-ldflags", " ".join(["-s", "-w", *flags]),
             f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}"],
            env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not HELM.is_file():
            raise DeployError(f"building helm failed:\n{proc.stderr.strip()}")
        stamp.write_text(json.dumps({"helm": HELM_VERSION, "kube": f"1.{minor}.0"}) + "\n",
                         encoding="utf-8")
    return HELM


def helm_kube_version() -> str:
    """The Kubernetes version the built helm renders for (recorded when it was built)."""
    stamp = json.loads(_helm_stamp().read_text(encoding="utf-8"))
    return str(stamp["kube"])


def run_helm(helm: Path, args: list[str]) -> str:
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise DeployError(f"helm {' '.join(args)} failed:\n"
                          f"{(proc.stdout + proc.stderr).strip()}")
    return proc.stdout


# --------------------------------------------------------------------------- compose

_VAR = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>.*))?$",
                     re.DOTALL)


class InterpolationError(ValueError):
    """A ``${VAR:?message}`` whose variable is missing, or a malformed reference."""


def interpolate_text(text: str, env: Mapping[str, str]) -> str:
    """Compose-style interpolation of one string."""

    def sub(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        if m.group("named"):
            return env.get(m.group("named"), "")
        braced = _BRACED.match(m.group("braced"))
        if braced is None:
            raise InterpolationError(f"invalid interpolation format: ${{{m.group('braced')}}}")
        name, op, arg = braced.group("name"), braced.group("op"), braced.group("arg") or ""
        if "${" in arg:
            raise InterpolationError(f"nested interpolation is not supported here: "
                                     f"${{{m.group('braced')}}}")
        value = env.get(name)
        is_set = value is not None
        non_empty = bool(value)
        if op is None:
            return value or ""
        present = non_empty if op.startswith(":") else is_set
        kind = op[-1]
        if kind == "-":
            return value if present and value is not None else interpolate_text(arg, env)
        if kind == "+":
            return interpolate_text(arg, env) if present else ""
        if not present:  # "?"
            raise InterpolationError(f"required variable {name} is missing a value: {arg}")
        return value or ""

    return _VAR.sub(sub, text)


def interpolate(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate_text(node, env)
    if isinstance(node, list):
        return [interpolate(v, env) for v in node]
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    return node


def read_env_file(path: Path) -> dict[str, str]:
    """A Compose ``--env-file``: KEY=VALUE lines, # comments, optional quotes."""
    env: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()):
            raise ValueError(f"{path.name}:{number}: expected KEY=VALUE, got {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$|^0$")


def compose_schema_problems(doc: Mapping[str, Any], schema: Mapping[str, Any]) -> Problems:
    """Validate an interpolated Compose document against the specification's schema."""
    checker = jsonschema.FormatChecker()

    @checker.checks("duration")
    def _duration(value: object) -> bool:
        return not isinstance(value, str) or bool(_DURATION.match(value))

    del _duration
    plain = json.loads(json.dumps(doc, default=str))  # YAML-only types become strings
    validator_cls = jsonschema.validators.validator_for(schema)
    validator = validator_cls(schema, format_checker=checker)
    problems = []
    for error in sorted(validator.iter_errors(plain), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in error.absolute_path) or "(top)"
        problems.append(f"compose schema: {where}: {error.message}")
    return problems


def _mapping_env(environment: Any) -> dict[str, str]:
    if environment is None:
        return {}
    if isinstance(environment, dict):
        return {str(k): "" if v is None else str(v) for k, v in environment.items()}
    out = {}
    for item in environment:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def _role_of(service: Mapping[str, Any]) -> str | None:
    """The crawler role a Compose service runs (``command: [role]``), if any."""
    if "entrypoint" in service:
        return None
    command = service.get("command")
    if isinstance(command, str):
        command = command.split()
    if isinstance(command, list) and command and command[0] in ROLES:
        return str(command[0])
    return None


def parse_inline(env: Mapping[str, str]) -> bool:
    """Whether fetchers with this environment parse and judge the pages themselves
    (an invalid value counts as the default; settings_problems reports it)."""
    raw = env.get(PARSE_INLINE)
    if raw is None:
        return Settings().fetcher.parse_inline
    try:
        return Settings.from_env({PARSE_INLINE: raw}).fetcher.parse_inline
    except SettingsError:
        return Settings().fetcher.parse_inline


def _profiles_of(service: Mapping[str, Any]) -> list[str]:
    return [str(p) for p in service.get("profiles") or []]


def active_services(services: Mapping[str, Any], profiles: Iterable[str]) -> set[str]:
    """The services ``docker compose up`` starts with these profiles on (those in no
    profile, and those in one of them)."""
    on = set(profiles)
    return {name for name, svc in services.items()
            if not _profiles_of(svc) or on & set(_profiles_of(svc))}


def settings_problems(where: str, env: Mapping[str, str], *,
                      placeholders: Iterable[str] = ()) -> Problems:
    """Names that are not settings, and values the settings validation refuses."""
    problems = []
    known = set(variable_names())
    crawler_env = {k: v for k, v in env.items() if k.startswith("CRAWLER_")}
    for name in sorted(crawler_env):
        if name not in known:
            problems.append(f"{where}: {name} is not a setting (common/settings.py)")
    for name in CLUSTER_SETTINGS:
        if name not in crawler_env or (name not in placeholders and not crawler_env[name]):
            problems.append(f"{where}: cluster setting {name} is not set")
    values = {k: v for k, v in crawler_env.items() if k in known}
    try:
        settings = Settings.from_env(values)
    except SettingsError as exc:
        problems.append(f"{where}: invalid settings: {exc}")
        return problems
    if settings.bus.backend != "kafka":
        problems.append(f"{where}: CRAWLER_BUS_BACKEND must be kafka, not "
                        f"{settings.bus.backend!r}")
    if settings.store.backend != "cassandra":
        problems.append(f"{where}: CRAWLER_STORE_BACKEND must be cassandra, not "
                        f"{settings.store.backend!r}")
    if settings.metrics.host in ("127.0.0.1", "localhost", "::1"):
        problems.append(f"{where}: CRAWLER_METRICS_HOST={settings.metrics.host} cannot be "
                        "reached by probes or Prometheus")
    if not settings.metrics.port:
        problems.append(f"{where}: CRAWLER_METRICS_PORT must not be 0")
    return problems


def compose_problems(doc: Mapping[str, Any], *, demo: bool = False,
                     profiles: Iterable[str] = ()) -> Problems:
    """The services' contract, checked on an interpolated Compose document as
    ``docker compose up`` runs it with ``profiles`` on (COMPOSE_PROFILES)."""
    problems: Problems = []
    profiles = set(profiles) | ({"demo"} if demo else set())
    services: dict[str, Any] = doc.get("services") or {}
    volumes_declared = set((doc.get("volumes") or {}).keys())
    active = active_services(services, profiles)
    crawler = {name: svc for name, svc in services.items() if _role_of(svc)}
    defined: dict[str, list[str]] = {}
    roles: dict[str, list[str]] = {}  # of the services that run with these profiles
    for name, svc in crawler.items():
        role = _role_of(svc)
        assert role is not None
        defined.setdefault(role, []).append(name)
        if name in active:
            replicas = int(((svc.get("deploy") or {}).get("replicas")) or 1)
            roles.setdefault(role, []).extend([name] * replicas)
    for role in DEFAULT_ROLES:
        if role not in roles:
            problems.append(f"compose: no service runs `crawler {role}`")
    for role in SEPARATE_PARSE_ROLES:
        if role not in defined:
            problems.append(f"compose: no service runs `crawler {role}` (profile "
                            f"{SEPARATE_PARSE_PROFILE}, for {PARSE_INLINE}=false)")
        for name in defined.get(role, []):
            if _profiles_of(crawler[name]) != [SEPARATE_PARSE_PROFILE]:
                problems.append(f"compose service {name}: must be in profile "
                                f"{SEPARATE_PARSE_PROFILE} only (by default the fetchers "
                                "parse and judge the pages)")
    if RENDER_ROLE not in defined:
        problems.append(f"compose: no service runs `crawler {RENDER_ROLE}` (profile "
                        f"{RENDER_PROFILE})")
    for name in defined.get(RENDER_ROLE, []):
        if _profiles_of(crawler[name]) != [RENDER_PROFILE]:
            problems.append(f"compose service {name}: must be in profile {RENDER_PROFILE} "
                            "only (rendering is off by default)")
        if (crawler[name].get("build") or {}).get("target") != RENDER_ROLE:
            problems.append(f"compose service {name}: must build the Dockerfile's target "
                            f"{RENDER_ROLE} (the image with a browser)")
    for name in crawler:
        if _role_of(crawler[name]) in DEFAULT_ROLES and _profiles_of(crawler[name]):
            problems.append(f"compose service {name}: must run in every profile")
    if len(roles.get("fetcher", [])) < 2:
        problems.append("compose: expected at least two fetchers")
    inline = {parse_inline(_mapping_env(crawler[n].get("environment")))
              for n in set(roles.get("fetcher", []))}
    if False in inline:
        for role in SEPARATE_PARSE_ROLES:
            if role not in roles:
                problems.append(f"compose: {PARSE_INLINE}=false but no `crawler {role}` "
                                f"runs (turn on the profile {SEPARATE_PARSE_PROFILE})")
    if len(inline) > 1:
        problems.append(f"compose: the fetchers disagree on {PARSE_INLINE}")

    for dep in ("kafka", "cassandra"):
        if dep not in services:
            problems.append(f"compose: service {dep} is missing")
        elif not (services[dep].get("healthcheck") or {}).get("test"):
            problems.append(f"compose: {dep} has no health check")
    if "kafka" in services and not str(services["kafka"].get("image", "")).startswith(
            "apache/kafka:"):
        problems.append("compose: kafka must use the apache/kafka image")
    if "cassandra" in services and not str(services["cassandra"].get("image", "")).startswith(
            "cassandra:5"):
        problems.append("compose: cassandra must use a cassandra:5 image")

    images = set()
    blob_volumes = set()
    metrics_targets = set()
    for name, svc in sorted(crawler.items()):
        where = f"compose service {name}"
        env = _mapping_env(svc.get("environment"))
        problems += settings_problems(where, env)
        if _role_of(svc) != RENDER_ROLE:  # the render role's image adds a browser
            images.add(svc.get("image"))
        depends = svc.get("depends_on") or {}
        for dep in ("kafka", "cassandra"):
            cond = depends.get(dep, {}).get("condition") if isinstance(depends, dict) else None
            if cond != "service_healthy":
                problems.append(f"{where}: must wait for {dep} to be healthy")
        mounts = {}
        for vol in svc.get("volumes") or []:
            source, _, target = str(vol).partition(":")
            mounts[target.split(":")[0]] = source
        root = env.get("CRAWLER_BLOB_ROOT", "")
        if root not in mounts:
            problems.append(f"{where}: CRAWLER_BLOB_ROOT={root} is not a mounted volume")
        else:
            blob_volumes.add(mounts[root])
        if not (svc.get("healthcheck") or {}).get("test"):
            problems.append(f"{where}: no health check")
        if name in active:
            metrics_targets.add(f"{name}:{env.get('CRAWLER_METRICS_PORT', '')}")
        if demo and _role_of(svc) == "fetcher":
            if "127.0.0.1/32" not in env.get("CRAWLER_FETCHER_ALLOW_NETWORKS", "").split(","):
                problems.append(f"{where}: the demo needs CRAWLER_FETCHER_ALLOW_NETWORKS "
                                "to allow 127.0.0.1/32")
            if not env.get("CRAWLER_FETCHER_DNS_SERVERS", "").startswith("127.0.0.1:"):
                problems.append(f"{where}: the demo needs CRAWLER_FETCHER_DNS_SERVERS "
                                "pointing at the simulated web's DNS")
        if not demo and env.get("CRAWLER_FETCHER_ALLOW_NETWORKS"):
            problems.append(f"{where}: outside the demo the SSRF guard must allow nothing")
    if len(images) > 1:
        problems.append(f"compose: crawler services use different images: {sorted(images)}")
    if len(blob_volumes) > 1:
        problems.append(f"compose: WARC volume not shared: {sorted(blob_volumes)}")
    for vol in blob_volumes:
        if vol not in volumes_declared:
            problems.append(f"compose: volume {vol} is not declared")

    for name, svc in services.items():
        for vol in svc.get("volumes") or []:
            source = str(vol).split(":")[0]
            if source.startswith((".", "/")):
                if not (COMPOSE_FILE.parent / source).resolve().exists():
                    problems.append(f"compose service {name}: {source} does not exist")
            elif source not in volumes_declared:
                problems.append(f"compose service {name}: volume {source} is not declared")
        durations = {f"healthcheck.{k}": v for k, v in (svc.get("healthcheck") or {}).items()
                     if k in ("interval", "timeout", "start_period", "start_interval")}
        if "stop_grace_period" in svc:
            durations["stop_grace_period"] = svc["stop_grace_period"]
        for field, value in durations.items():
            if not _DURATION.match(str(value)):
                problems.append(f"compose service {name}: {field}={value!r} is not a "
                                "duration (like 10s or 1m30s)")
        mode = str(svc.get("network_mode", ""))
        if mode.startswith("service:") and mode[len("service:"):] not in services:
            problems.append(f"compose service {name}: network_mode names no service")

    simweb = {n: s for n, s in services.items()
              if (s.get("entrypoint") or [None])[-1] == "simweb"}
    if not simweb:
        problems.append("compose: the simulated web is missing")
    for name, svc in simweb.items():
        if svc.get("profiles") != ["demo"]:
            problems.append(f"compose service {name}: must be in profile demo only")
        target = str(svc.get("network_mode", "")).removeprefix("service:")
        if _role_of(services.get(target, {})) != "fetcher":
            problems.append(f"compose service {name}: must share a fetcher's network")
    fetchers_with_web = {str(s.get("network_mode", "")).removeprefix("service:")
                         for s in simweb.values()}
    for name in roles.get("fetcher", []):
        if name not in fetchers_with_web:
            problems.append(f"compose: fetcher {name} has no simulated web beside it")

    problems += prometheus_problems(metrics_targets, services)
    return problems


def prometheus_problems(targets: set[str], services: Mapping[str, Any]) -> Problems:
    """deploy/prometheus/prometheus.yml scrapes every crawler service that runs
    (``targets``); its fixed targets are services that always run (in no profile), and
    services of a profile are found through DNS (dns_sd_configs), so no target is down
    because its profile is off."""
    problems = []
    prom = services.get("prometheus")
    if prom is None:
        return ["compose: service prometheus is missing"]
    mounts = [str(v) for v in prom.get("volumes") or []]
    if "./deploy/prometheus:/etc/prometheus:ro" not in mounts:
        problems.append("compose: prometheus does not mount deploy/prometheus")
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    static_targets: set[str] = set()
    scraped: set[str] = set()
    jobs = set()
    for job in config.get("scrape_configs", []):
        jobs.add(job["job_name"])
        for static in job.get("static_configs", []):
            static_targets.update(static.get("targets", []))
        for dns in job.get("dns_sd_configs", []):
            if dns.get("type", "SRV") == "A" and dns.get("port"):
                scraped.update(f"{n}:{dns['port']}" for n in dns.get("names", []))
    scraped |= static_targets
    missing = targets - scraped
    if missing:
        problems.append(f"prometheus.yml: crawler services not scraped: {sorted(missing)}")
    always = {name for name, svc in services.items() if not _profiles_of(svc)}
    for target in sorted(static_targets):
        host = target.rpartition(":")[0]
        if host not in ("127.0.0.1", "localhost") and host not in always:
            problems.append(f"prometheus.yml: target {target} is not a service that always "
                            "runs (services of a profile: dns_sd_configs)")
    if not set(ROLES) <= jobs:
        problems.append(f"prometheus.yml: jobs must be named after the roles, missing "
                        f"{sorted(set(ROLES) - jobs)}")
    for rule_file in config.get("rule_files", []):
        local = PROMETHEUS_CONFIG.parent / Path(rule_file).relative_to("/etc/prometheus")
        if not local.is_file():
            problems.append(f"prometheus.yml: rule file {rule_file} is not in deploy/prometheus")
    return problems


def promtool_problems() -> Problems:
    """``promtool check config`` and ``check rules`` on deploy/prometheus, when promtool
    is installed (Debian package prometheus); otherwise say it was skipped."""
    promtool = shutil.which("promtool")
    if promtool is None:
        say("promtool not installed: Prometheus config not linted (apt-get install prometheus)")
        return []
    problems = []
    with tempfile.TemporaryDirectory(prefix="check-deploy-prom-") as tmp:
        # The config names its rule files where the container mounts them.
        for path in PROMETHEUS_CONFIG.parent.glob("*.yml"):
            text = path.read_text(encoding="utf-8").replace("/etc/prometheus/", tmp + "/")
            (Path(tmp) / path.name).write_text(text, encoding="utf-8")
        for args in (["check", "config", str(Path(tmp) / PROMETHEUS_CONFIG.name)],
                     ["check", "rules", *sorted(str(p) for p in Path(tmp).glob("rules*.yml"))]):
            proc = subprocess.run([promtool, *args], capture_output=True, text=True)
            if proc.returncode != 0:
                out = (proc.stdout + proc.stderr).replace(tmp + "/", "deploy/prometheus/")
                problems.append(f"promtool {' '.join(args[:2])}: {out.strip()}")
    return problems


def load_compose(env: Mapping[str, str]) -> dict[str, Any]:
    raw = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise ValueError("docker-compose.yml is not a mapping")
    doc = interpolate(raw, env)
    assert isinstance(doc, dict)
    return doc


def check_compose() -> Problems:
    schema = json.loads(ensure_compose_schema().read_text(encoding="utf-8"))
    problems: Problems = []
    # As a user runs it: only the required token set; as the demo runs it; and each with
    # separate parser and dedup services (the profile and the setting).
    separate = {PARSE_INLINE: "false", "COMPOSE_PROFILES": SEPARATE_PARSE_PROFILE}
    # the two secrets compose requires (no defaults): as the user exports them
    secrets = {"CRAWLER_API_TOKEN": "token-for-checks",
               "GRAFANA_ADMIN_PASSWORD": "password-for-checks"}
    demo_env = {**read_env_file(DEMO_ENV), "GRAFANA_ADMIN_PASSWORD": "password-for-checks"}
    cases = [("default", secrets, False),
             ("demo", demo_env, True),
             ("separate-parse", {**secrets, **separate}, False),
             ("demo + separate-parse", {**demo_env, PARSE_INLINE: "false",
                                        "COMPOSE_PROFILES": f"demo,{SEPARATE_PARSE_PROFILE}"},
              True)]
    for label, env, demo in cases:
        doc = load_compose(env)
        profiles = [p for p in env.get("COMPOSE_PROFILES", "").split(",") if p]
        problems += [f"[{label}] {p}" for p in compose_schema_problems(doc, schema)]
        problems += [f"[{label}] {p}" for p in compose_problems(doc, demo=demo,
                                                                profiles=profiles)]
    for name in secrets:
        try:
            load_compose({k: v for k, v in secrets.items() if k != name})
            problems.append(f"compose: {name} must be required (${{...:?...}})")
        except InterpolationError:
            pass
    if read_env_file(DEMO_ENV).get("COMPOSE_PROFILES") != "demo":
        problems.append("deploy/compose/demo.env must set COMPOSE_PROFILES=demo")
    return problems + promtool_problems()


# --------------------------------------------------------------------------- docker

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def dockerignore_patterns(text: str) -> list[tuple[bool, str]]:
    """(exclude?, pattern) per line of a .dockerignore, in order."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:].strip() if negate else line
        out.append((not negate, pattern.strip("/")))
    return out


def _glob_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts) + "(?:/.*)?$")  # a folder pattern covers its content


def dockerignored(path: str, patterns: list[tuple[bool, str]]) -> bool:
    """Whether the build context leaves ``path`` out (the last matching line wins)."""
    excluded = False
    for exclude, pattern in patterns:
        if _glob_regex(pattern).match(path):
            excluded = exclude
    return excluded


def build_context(patterns: list[tuple[bool, str]]) -> list[str]:
    """The files the Docker build context holds (paths relative to the project)."""
    files = []
    skip_dirs = {".git", ".venv", ".cache", "var", "node_modules"}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = Path(dirpath).relative_to(ROOT)
        dirnames[:] = [d for d in dirnames if not (rel_dir == Path(".") and d in skip_dirs)]
        for name in filenames:
            rel = (rel_dir / name).as_posix()
            if not dockerignored(rel, patterns):
                files.append(rel)
    return sorted(files)


def dockerfile_problems() -> Problems:
    """The image's build, checked without a Docker engine: hadolint, the base image,
    non-root user and entrypoint, every COPY source in the build context, every package
    of pyproject.toml copied; then the copied context builds a wheel with the
    ``crawler`` command and every package."""
    problems: Problems = []
    text = DOCKERFILE.read_text(encoding="utf-8")
    hadolint = Path(sys.executable).parent / "hadolint"
    if hadolint.exists():
        proc = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            problems += [f"hadolint: {line}" for line in proc.stdout.splitlines() if line]
    else:
        problems.append("hadolint is not installed (pip install -e '.[dev]')")
    lines = [ln.strip() for ln in re.sub(r"\\\n", " ", text).splitlines()
             if ln.strip() and not ln.strip().startswith("#")]
    froms = [ln.split()[1] for ln in lines if ln.upper().startswith("FROM ")]
    stages = [ln.split()[3] for ln in lines
              if ln.upper().startswith("FROM ") and len(ln.split()) == 4
              and ln.split()[2].upper() == "AS"]
    bases = [f for f in froms if f not in stages]  # a stage may build on an earlier one
    if not froms or any(f != "python:3.11-slim" for f in bases):
        problems.append(f"Dockerfile: every stage must build FROM python:3.11-slim (or an "
                        f"earlier stage), not {froms}")
    final = lines[max(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM ")):]
    users = [ln.split()[1] for ln in final if ln.upper().startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append("Dockerfile: the final stage must switch to a non-root USER")
    if 'ENTRYPOINT ["crawler"]' not in final:
        problems.append('Dockerfile: the entrypoint must be ["crawler"]')
    patterns = dockerignore_patterns(DOCKERIGNORE.read_text(encoding="utf-8"))
    context = build_context(patterns)
    copied: list[str] = []
    for ln in lines:
        if ln.upper().startswith("COPY ") and "--from=" not in ln:
            *sources, _dest = ln.split()[1:]
            for src in sources:
                src = src.rstrip("/")
                if not any(f == src or f.startswith(src + "/") for f in context):
                    problems.append(f"Dockerfile: COPY {src}: not in the build context")
                copied.append(src)
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        if package not in copied:
            problems.append(f"Dockerfile: package {package} (pyproject.toml) is not copied")
    if problems:
        return problems
    files = [f for f in context if any(f == c or f.startswith(c + "/") for c in copied)]
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes() + b"\0")
    stamp = CACHE / "deploy" / "image-context.sha256"
    if stamp.is_file() and stamp.read_text().strip() == digest.hexdigest():
        return problems  # these very sources built before
    problems += _wheel_problems(files, pyproject)
    if not problems:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest.hexdigest() + "\n")
    return problems


def _wheel_problems(files: list[str], pyproject: Mapping[str, Any]) -> Problems:
    import zipfile

    with tempfile.TemporaryDirectory(prefix="check-deploy-image-") as tmp:
        src = Path(tmp) / "src"
        for rel in files:
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
        out = Path(tmp) / "wheel"
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                               "--disable-pip-version-check", "-w", str(out), str(src)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return [f"image build: pip cannot build the copied sources:\n{proc.stderr}"]
        (wheel,) = out.glob("*.whl")
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            entry = next((zf.read(n).decode() for n in names
                          if n.endswith("entry_points.txt")), "")
    problems = []
    for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        if f"{package}/__init__.py" not in names:
            problems.append(f"image build: package {package} is missing from the wheel")
    if not any(n.startswith("simweb/scenarios/") and n.endswith(".json") for n in names):
        problems.append("image build: simweb scenario files are missing from the wheel")
    if "crawler = crawler.cli:main" not in entry:
        problems.append("image build: the wheel has no `crawler` command")
    return problems


# --------------------------------------------------------------------------- helm


def settings_schema() -> dict[str, Any]:
    """JSON schema of the chart's free-form ``settings`` value: every section and key
    of common/settings.py that the chart does not set from its own values."""
    sections: dict[str, Any] = {}
    hints_root = typing.get_type_hints(Settings)
    for sec in dataclasses.fields(Settings):
        managed = CHART_MANAGED.get(sec.name, frozenset())
        if managed is None:
            continue
        sec_cls = hints_root[sec.name]
        hints = typing.get_type_hints(sec_cls)
        props: dict[str, Any] = {}
        for f in dataclasses.fields(sec_cls):
            if f.name in managed:
                continue
            props[f.name] = _json_type(hints[f.name], f.metadata)
            props[f.name]["description"] = (f"{env_name(sec.name, f.name)}: "
                                            f"{f.metadata.get('doc', '')}")
        sections[sec.name] = {"type": "object", "additionalProperties": False,
                              "properties": props}
    return {"type": "object", "additionalProperties": False, "properties": sections,
            "description": "Other settings by section and key (common/settings.py)."}


def _json_type(t: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any]
    if t is bool:
        out = {"type": "boolean"}
    elif t is int:
        out = {"type": "integer"}
    elif t is float:
        out = {"type": "number"}
    elif t is str:
        out = {"type": "string"}
    elif typing.get_origin(t) is tuple:
        out = {"type": "array", "items": {"type": "string"}}
    else:  # pragma: no cover - settings only use the types above
        raise TypeError(f"unsupported setting type {t!r}")
    if "minimum" in meta and out["type"] in ("integer", "number"):
        out["minimum"] = meta["minimum"]
    if "choices" in meta:
        out["enum"] = list(meta["choices"])
    return out


def values_schema_problems() -> Problems:
    schema = json.loads(VALUES_SCHEMA.read_text(encoding="utf-8"))
    if schema.get("properties", {}).get("settings") != settings_schema():
        return ["values.schema.json: the settings part is out of date with "
                "common/settings.py (run scripts/check-deploy write-schema)"]
    return []


def write_values_schema() -> None:
    schema = json.loads(VALUES_SCHEMA.read_text(encoding="utf-8"))
    schema.setdefault("properties", {})["settings"] = settings_schema()
    VALUES_SCHEMA.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")


def _containers(pod_spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(pod_spec.get("containers") or [])


def _matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _port_number(container: Mapping[str, Any], port: Any) -> int | None:
    for p in container.get("ports") or []:
        if port == p.get("name") or port == p.get("containerPort"):
            return int(p["containerPort"])
    return None


def external_names(values: dict[str, Any]) -> list[str]:
    """The Secrets and claims that values name as existing ones (made outside the
    chart)."""
    named = [values["api"]["existingSecret"], values["storage"]["existingClaim"],
             values["objectStorage"]["existingSecret"]]
    return [n for n in named if n]


def manifest_problems(docs: list[dict[str, Any]], *, kube_version: str,
                      external_secrets: Iterable[str] = (),
                      expect_autoscaled: Iterable[str] = ()) -> Problems:
    """Check a rendered chart: schemas, settings, probes, ports, images, references."""
    problems: Problems = []
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    known_versions = kubernetes_validate.utils.all_versions()
    schema_version = (kube_version if kube_version in known_versions
                      else kubernetes_validate.latest_version())
    for doc in docs:
        kind, name = doc.get("kind"), (doc.get("metadata") or {}).get("name")
        if not kind or not name:
            problems.append(f"manifest without kind or name: {str(doc)[:80]}")
            continue
        if name in by_kind.setdefault(kind, {}):
            problems.append(f"{kind}/{name} rendered twice")
        by_kind[kind][name] = doc
        if kind in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, schema_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(f"{kind}/{name}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{kind}/{name}: no Kubernetes {schema_version} schema for "
                            f"{doc.get('apiVersion')}")

    configmaps = by_kind.get("ConfigMap", {})
    secrets = by_kind.get("Secret", {})
    deployments = by_kind.get("Deployment", {})
    external = set(external_secrets)
    images: set[str] = set()
    roles_seen: dict[str, str] = {}
    role_env: dict[str, dict[str, str]] = {}
    claims: set[str] = set()
    pod_labels: dict[str, dict[str, str]] = {}

    for name, cm in configmaps.items():
        for key in (cm.get("data") or {}):
            if key.startswith("CRAWLER_") and key not in set(variable_names()):
                problems.append(f"ConfigMap/{name}: {key} is not a setting")

    for name, dep in deployments.items():
        where = f"Deployment/{name}"
        spec = dep["spec"]
        template = spec["template"]
        labels = template["metadata"].get("labels") or {}
        pod_labels[name] = labels
        if not _matches(spec["selector"].get("matchLabels") or {}, labels):
            problems.append(f"{where}: selector does not match its pod labels")
        pod = template["spec"]
        containers = _containers(pod)
        if len(containers) != 1:
            problems.append(f"{where}: expected one container, found {len(containers)}")
            continue
        c = containers[0]
        args = [*(c.get("command") or []), *(c.get("args") or [])]
        role = args[0] if args else ""
        if role not in ROLES or len(args) != 1:
            problems.append(f"{where}: must run `crawler <role>`, runs {args}")
        elif role in roles_seen:
            problems.append(f"{where}: role {role} also runs in {roles_seen[role]}")
        else:
            roles_seen[role] = name
        if role != RENDER_ROLE:  # the render role's image adds a browser
            images.add(c.get("image", ""))

        env: dict[str, str] = {}
        secret_vars: set[str] = set()
        for src in c.get("envFrom") or []:
            ref = (src.get("configMapRef") or {}).get("name")
            if ref is None:
                problems.append(f"{where}: envFrom only from ConfigMaps")
            elif ref not in configmaps:
                problems.append(f"{where}: ConfigMap {ref} is not in the chart")
            else:
                env.update({k: str(v) for k, v in (configmaps[ref].get("data") or {}).items()})
        for var in c.get("env") or []:
            if "value" in var:
                env[var["name"]] = str(var["value"])
            elif "secretKeyRef" in (var.get("valueFrom") or {}):
                ref = var["valueFrom"]["secretKeyRef"]
                if ref["name"] in secrets:
                    data = secrets[ref["name"]].get("data") or {}
                    if ref["key"] not in data:
                        problems.append(f"{where}: Secret {ref['name']} has no key "
                                        f"{ref['key']}")
                elif ref["name"] not in external:
                    problems.append(f"{where}: Secret {ref['name']} is not in the chart")
                env[var["name"]] = "from-secret"
                secret_vars.add(var["name"])
            else:
                problems.append(f"{where}: {var['name']}: only values and secret refs")
        if "CRAWLER_API_TOKEN" not in secret_vars:
            problems.append(f"{where}: CRAWLER_API_TOKEN must come from a Secret")
        problems += settings_problems(where, env, placeholders=secret_vars)
        role_env[role] = env

        metrics_port = int(env.get("CRAWLER_METRICS_PORT", "0") or 0)
        if _port_number(c, "metrics") != metrics_port:
            problems.append(f"{where}: container port 'metrics' is not CRAWLER_METRICS_PORT "
                            f"({metrics_port})")
        if role == "api":
            api_port = int(env.get("CRAWLER_API_PORT", "0") or 0)
            if _port_number(c, api_port) is None:
                problems.append(f"{where}: no container port for CRAWLER_API_PORT ({api_port})")
        for probe, path in (("livenessProbe", LIVENESS_PATH), ("readinessProbe", READINESS_PATH),
                            ("startupProbe", LIVENESS_PATH)):
            p = c.get(probe)
            if p is None:
                if probe != "startupProbe":
                    problems.append(f"{where}: no {probe}")
                continue
            http = p.get("httpGet") or {}
            if http.get("path") != path:
                problems.append(f"{where}: {probe} must GET {path}, not {http.get('path')}")
            if _port_number(c, http.get("port")) != metrics_port:
                problems.append(f"{where}: {probe} is not on the metrics port")

        resources = c.get("resources") or {}
        requests = resources.get("requests") or {}
        if not {"cpu", "memory"} <= set(requests) or "memory" not in (resources.get("limits")
                                                                       or {}):
            problems.append(f"{where}: needs cpu and memory requests and a memory limit")
        psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
        if not (csc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            problems.append(f"{where}: must run as non-root")

        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        root = env.get("CRAWLER_BLOB_ROOT", "")
        vol = volumes.get(mounts.get(root, ""), {})
        claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
        if claim is None:
            problems.append(f"{where}: CRAWLER_BLOB_ROOT={root} is not a mounted claim")
        else:
            claims.add(claim)
    if len(claims) > 1:
        problems.append(f"WARC volume not shared: {sorted(claims)}")
    for claim in claims:
        if claim not in by_kind.get("PersistentVolumeClaim", {}) and claim not in external:
            problems.append(f"PersistentVolumeClaim {claim} is not in the chart")
    for doc in by_kind.get("Pod", {}).values():  # helm test hooks
        for c in _containers(doc["spec"]):
            images.add(c.get("image", ""))
    if len(images) > 1:
        problems.append(f"containers use different images: {sorted(images)}")
    missing_roles = set(DEFAULT_ROLES) - set(roles_seen)
    if missing_roles:
        problems.append(f"no Deployment for {sorted(missing_roles)}")
    if "fetcher" in role_env and not parse_inline(role_env["fetcher"]):
        for role in SEPARATE_PARSE_ROLES:
            if role not in roles_seen:
                problems.append(f"{PARSE_INLINE}=false but no Deployment for {role} "
                                f"(services.{role}.enabled)")

    services = by_kind.get("Service", {})
    service_targets: dict[str, str] = {}
    for name, svc in services.items():
        where = f"Service/{name}"
        selector = svc["spec"].get("selector") or {}
        matched = [d for d, labels in pod_labels.items() if _matches(selector, labels)]
        if len(matched) != 1:
            problems.append(f"{where}: selects {len(matched)} Deployments, expected 1")
            continue
        service_targets[name] = matched[0]
        c = _containers(deployments[matched[0]]["spec"]["template"]["spec"])[0]
        for port in svc["spec"].get("ports") or []:
            target = port.get("targetPort", port.get("port"))
            if _port_number(c, target) is None:
                problems.append(f"{where}: port {port.get('name')} targets {target}, which "
                                f"Deployment/{matched[0]} does not expose")
    for dep_name in deployments:
        if dep_name not in service_targets.values():
            problems.append(f"Deployment/{dep_name}: no Service exposes its metrics port")

    autoscaled = set()
    for name, hpa in by_kind.get("HorizontalPodAutoscaler", {}).items():
        ref = hpa["spec"]["scaleTargetRef"]
        target = deployments.get(ref["name"])
        if ref.get("kind") != "Deployment" or target is None:
            problems.append(f"HorizontalPodAutoscaler/{name}: targets no Deployment")
            continue
        if "replicas" in target["spec"]:
            problems.append(f"Deployment/{ref['name']}: fixed replicas fight its autoscaler")
        if hpa["spec"].get("minReplicas", 1) > hpa["spec"]["maxReplicas"]:
            problems.append(f"HorizontalPodAutoscaler/{name}: minReplicas > maxReplicas")
        args = _containers(target["spec"]["template"]["spec"])[0].get("args") or [""]
        autoscaled.add(args[0])
    for role in set(expect_autoscaled) - autoscaled:
        problems.append(f"no HorizontalPodAutoscaler for the {role} Deployment")

    for name, sm in by_kind.get("ServiceMonitor", {}).items():
        where = f"ServiceMonitor/{name}"
        selector = (sm["spec"].get("selector") or {}).get("matchLabels") or {}
        selected = [s for s in services.values()
                    if _matches(selector, s["metadata"].get("labels") or {})]
        if len(selected) != len(services):
            problems.append(f"{where}: selects {len(selected)} of {len(services)} Services")
        job_label = sm["spec"].get("jobLabel")
        for svc in selected:
            if job_label and job_label not in (svc["metadata"].get("labels") or {}):
                problems.append(f"{where}: Service {svc['metadata']['name']} lacks "
                                f"the job label {job_label}")
            port_names = {p.get("name") for p in svc["spec"].get("ports") or []}
            for ep in sm["spec"].get("endpoints") or []:
                if ep.get("port") not in port_names:
                    problems.append(f"{where}: Service {svc['metadata']['name']} has no port "
                                    f"{ep.get('port')}")
                if ep.get("path", "/metrics") != "/metrics":
                    problems.append(f"{where}: scrapes {ep.get('path')}, not /metrics")
    return problems


def chart_cases() -> list[tuple[str, list[Path]]]:
    cases: list[tuple[str, list[Path]]] = [("default values", [])]
    for path in sorted((CHART / "ci").glob("*.yaml")):
        cases.append((f"ci/{path.name}", [path]))
    return cases


def render(helm: Path, values: list[Path], *, kube_version: str,
           extra: list[str] | None = None) -> list[dict[str, Any]]:
    args = ["template", "crawl", str(CHART), "--namespace", "crawl",
            "--kube-version", kube_version, "--include-crds"]
    for v in values:
        args += ["--values", str(v)]
    out = run_helm(helm, args + (extra or []))
    return [d for d in yaml.safe_load_all(out) if d]


def _values(paths: list[Path]) -> dict[str, Any]:
    merged: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    for p in paths:
        _merge(merged, yaml.safe_load(p.read_text()) or {})
    return merged


def _merge(into: dict[str, Any], new: Mapping[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


def egress_policy_problems(docs: list[dict[str, Any]], values: Mapping[str, Any]
                           ) -> Problems:
    """Each enabled web-facing role (fetcher, render) has an egress NetworkPolicy that
    selects its pods and allows DNS and the web but not the cluster's networks
    (networkPolicy.clusterCIDRs) nor any metadata address: every ipBlock it allows
    excepts them all."""
    # metadata addresses (AWS/GCP/Azure/OpenStack, AWS over IPv6, ECS, Alibaba)
    metadata = [ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254",
                                                  "169.254.170.2", "100.100.100.200")]
    np_values = values.get("networkPolicy") or {}
    if not np_values.get("enabled"):
        return ["networkPolicy.enabled is false: the fetcher and render pods could reach "
                "the cluster's networks and metadata addresses"]
    problems: Problems = []
    wanted = [ipaddress.ip_network(c) for c in (*np_values.get("clusterCIDRs", ()),
                                                *np_values.get("metadataCIDRs", ()))]
    pods = {(d.get("metadata") or {}).get("name"): d for d in docs
            if d.get("kind") == "Deployment"}
    policies = [d for d in docs if d.get("kind") == "NetworkPolicy"]
    for role in ("fetcher", "render"):
        if not values["services"][role].get("enabled"):
            continue
        deployment = next((d for n, d in pods.items() if n and n.endswith(f"-{role}")), None)
        if deployment is None:
            continue
        labels = deployment["spec"]["template"]["metadata"].get("labels") or {}
        mine = [p for p in policies
                if _matches((p["spec"].get("podSelector") or {}).get("matchLabels") or {},
                            labels) and "Egress" in (p["spec"].get("policyTypes") or [])]
        if not mine:
            problems.append(f"{role}: no egress NetworkPolicy selects its pods")
            continue
        dns = False
        for policy in mine:
            name = policy["metadata"]["name"]
            for rule in policy["spec"].get("egress") or []:
                ports = {(p.get("protocol", "TCP"), p.get("port"))
                         for p in rule.get("ports") or []}
                if {("UDP", 53), ("TCP", 53)} <= ports:
                    dns = True
                for peer in rule.get("to") or [{"ipBlock": {"cidr": "0.0.0.0/0"}},
                                               {"ipBlock": {"cidr": "::/0"}}]:
                    block = peer.get("ipBlock")
                    if block is None:
                        continue
                    cidr = ipaddress.ip_network(block["cidr"])
                    excepted = [ipaddress.ip_network(e) for e in block.get("except") or []]
                    for net in wanted:
                        if (net.version == cidr.version and net.subnet_of(cidr)  # type: ignore[arg-type]
                                and not any(net.subnet_of(e)  # type: ignore[arg-type]
                                            for e in excepted if e.version == net.version)):
                            problems.append(f"{name}: {cidr} does not except {net}")
                    for addr in metadata:
                        if addr in cidr and not any(addr in e for e in excepted):
                            problems.append(f"{name}: {cidr} lets {role} pods reach the "
                                            f"metadata address {addr}")
        if not dns:
            problems.append(f"{role}: its egress policy has no DNS rule (port 53 UDP+TCP)")
    return problems


def check_helm() -> Problems:
    helm = ensure_helm()
    kube_version = helm_kube_version()
    problems = values_schema_problems()
    for label, files in chart_cases():
        with step(f"helm lint + template + checks: {label}"):
            args = ["lint", "--strict", str(CHART)]
            for f in files:
                args += ["--values", str(f)]
            try:
                run_helm(helm, args)
                docs = render(helm, files, kube_version=kube_version)
            except DeployError as exc:
                problems.append(f"[{label}] {exc}")
                continue
            values = _values(files)
            external = external_names(values)
            expect = [r for r, s in values["services"].items()
                      if s.get("enabled") and s.get("autoscaling", {}).get("enabled")]
            problems += [f"[{label}] {p}" for p in manifest_problems(
                docs, kube_version=kube_version, external_secrets=external,
                expect_autoscaled=expect)]
            problems += [f"[{label}] {p}" for p in egress_policy_problems(docs, values)]
            if not files:
                if "fetcher" not in expect:
                    problems.append("[default values] fetchers must autoscale")
                on = [r for r in SEPARATE_PARSE_ROLES if values["services"][r]["enabled"]]
                if on:
                    problems.append(f"[default values] {on} must be off by default (the "
                                    f"fetchers parse; they are for {PARSE_INLINE}=false)")
    return problems


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/check-deploy",
                                     description="Validate docker-compose.yml and the chart.")
    parser.add_argument("what", nargs="?", default="all",
                        choices=("all", "docker", "compose", "helm", "tools",
                                 "write-schema"))
    args = parser.parse_args(argv)
    start = time.monotonic()
    problems: Problems = []
    checks: dict[str, Callable[[], Problems]] = {
        "docker": dockerfile_problems, "compose": check_compose, "helm": check_helm}
    try:
        if args.what == "write-schema":
            write_values_schema()
            say(f"wrote {VALUES_SCHEMA.relative_to(ROOT)}")
            return 0
        if args.what == "tools":
            ensure_compose_schema()
            ensure_helm()
            return 0
        for name, check in checks.items():
            if args.what in ("all", name):
                with step(f"{name} checked"):
                    problems += check()
    except (DeployError, InterpolationError, OSError, ValueError) as exc:
        problems.append(str(exc))
    for p in problems:
        print(f"  {p}", file=sys.stderr)
    took = time.monotonic() - start
    if problems:
        say(f"FAILED: {len(problems)} problem(s) in {took:.1f}s")
        return 1
    say(f"all deployment checks passed in {took:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
