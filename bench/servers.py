"""The servers the benchmark runs: nginx for the web, a DNS responder for its names,
and the load generator that measures the web server's ceiling.

nginx comes from the distribution's packages (installed with apt-get when missing) and
runs from a configuration in the bench working folder, in the foreground as a child of
the benchmark, on 127.0.0.1 only; it is stopped by its PID. One server block serves
every host from ``<web root>/$host``. The access log records each request's host,
target, status and time, so the set of fetched URLs is measured at the server, the same
way for every crawler.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NGINX_CONF = """\
worker_processes {workers};
user root;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
daemon off;
worker_rlimit_nofile 16384;
events {{
    worker_connections 8192;
}}
http {{
    types {{
        text/html html htm;
        application/xhtml+xml xhtml;
        text/plain txt;
        text/css css;
        application/javascript js;
        image/png png;
        image/gif gif;
        image/jpeg jpg jpeg;
        image/svg+xml svg;
        image/x-icon ico;
        application/pdf pdf;
        application/gzip gz tgz;
        application/zip zip;
        application/epub+zip epub;
        application/json json;
        application/xml xml;
        font/woff woff;
        font/woff2 woff2;
        font/ttf ttf;
        application/octet-stream eot inv bz2 xz tar py c h sh rst;
    }}
    default_type text/html;
    charset utf-8;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 100000;
    server_tokens off;
    # cached descriptors stay open: keep them well under worker_rlimit_nofile, which
    # also has to hold a connection per host a crawler keeps alive (1,000 in --full)
    open_file_cache max=4096 inactive=20s;
    open_file_cache_valid 300s;
    client_body_temp_path {folder}/tmp/body;
    proxy_temp_path {folder}/tmp/proxy;
    fastcgi_temp_path {folder}/tmp/fastcgi;
    uwsgi_temp_path {folder}/tmp/uwsgi;
    scgi_temp_path {folder}/tmp/scgi;
    log_format bench '$msec $host $request_uri $status $body_bytes_sent $request_time';
    access_log {folder}/access.log bench;
    server {{
        listen 127.0.0.1:{port} default_server backlog=4096;
        server_name _;
        root {root}/$host;
        index index.html;
        location / {{
            try_files $uri $uri/index.html =404;
        }}
    }}
}}
"""


class BenchError(RuntimeError):
    """A benchmark step that cannot go on; the message says what to do."""


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise BenchError(f"nothing answers on 127.0.0.1:{port} after {timeout:.0f} s")


_apt_updated = False


def apt_install(package: str, binary: str, log: Any = print) -> str:
    """The path of ``binary``, installing ``package`` with apt-get when it is missing
    (``package`` may list alternatives, "a|b": the first that installs wins)."""
    global _apt_updated
    found = shutil.which(binary) or (f"/usr/sbin/{binary}"
                                     if os.path.exists(f"/usr/sbin/{binary}") else None)
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise BenchError(f"{binary} is missing and there is no apt-get; install {package}")
    if os.geteuid() != 0:
        raise BenchError(f"{binary} is missing; install it with: sudo apt-get install "
                         f"{package}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not _apt_updated:
        log("apt-get update")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        _apt_updated = True
    for i, name in enumerate(package.split("|")):
        log(f"apt-get install {name}")
        done = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                               name], env=env, stdout=subprocess.DEVNULL)
        if done.returncode == 0:
            break
        if i == len(package.split("|")) - 1:
            raise BenchError(f"apt-get could not install {package.replace('|', ' or ')}")
    found = shutil.which(binary) or (f"/usr/sbin/{binary}"
                                     if os.path.exists(f"/usr/sbin/{binary}") else None)
    if not found:
        raise BenchError(f"{package} was installed but {binary} is not on PATH")
    return found


@dataclass(frozen=True, slots=True)
class LogLine:
    time: float
    host: str
    target: str
    status: int
    bytes: int
    request_time: float


def parse_access_log(data: bytes) -> list[LogLine]:
    """Lines of the ``bench`` log format; malformed lines are skipped."""
    out = []
    for raw in data.decode("utf-8", "replace").splitlines():
        parts = raw.split(" ")
        if len(parts) != 6:
            continue
        try:
            out.append(LogLine(float(parts[0]), parts[1], parts[2], int(parts[3]),
                               int(parts[4]), float(parts[5])))
        except ValueError:
            continue
    return out


class Nginx:
    """nginx serving ``root`` on 127.0.0.1:``port`` (a child process, stopped by PID)."""

    def __init__(self, binary: str, folder: Path, root: Path, port: int,
                 workers: int = 1) -> None:
        self.binary = binary
        self.folder = folder
        self.root = root
        self.port = port
        self.workers = workers
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def access_log(self) -> Path:
        return self.folder / "access.log"

    def start(self) -> None:
        (self.folder / "tmp").mkdir(parents=True, exist_ok=True)
        conf = self.folder / "nginx.conf"
        conf.write_text(NGINX_CONF.format(workers=self.workers, folder=self.folder,
                                          port=self.port, root=self.root.resolve()))
        self.access_log.write_bytes(b"")
        check = subprocess.run([self.binary, "-t", "-q", "-p", str(self.folder), "-c",
                                str(conf)], capture_output=True, text=True)
        if check.returncode != 0:
            raise BenchError(f"nginx rejects its configuration: {check.stderr.strip()}")
        self.proc = subprocess.Popen([self.binary, "-p", str(self.folder), "-c", str(conf)],
                                     stdin=subprocess.DEVNULL)
        wait_for_port(self.port)

    def log_offset(self) -> int:
        return self.access_log.stat().st_size

    def log_since(self, offset: int) -> list[LogLine]:
        with self.access_log.open("rb") as f:
            f.seek(offset)
            return parse_access_log(f.read())

    def worker_pids(self) -> list[int]:
        if self.proc is None:
            return []
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid == self.proc.pid:
                    out.append(int(entry.name))
        return out

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (from /proc)."""
    return cpu_sample(pid)[1]


def cpu_sample(pid: int) -> tuple[int, float]:
    """(start time in clock ticks, user + system CPU seconds) of a live process; the
    start time tells a restarted process that reused the PID apart. (0, 0.0) if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0, 0.0
    fields = stat.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[19]), (int(fields[11]) + int(fields[12])) / ticks


class DnsServer:
    """The simulated web's DNS responder as a child process, answering every host of
    the web with 127.0.0.1."""

    def __init__(self, python: str, repo: Path, names_file: Path) -> None:
        self.python = python
        self.repo = repo
        self.names_file = names_file
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.python, "-m", "bench.dnsd", str(self.names_file)], cwd=self.repo,
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONPATH": str(self.repo)})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError("the DNS responder did not start")
        self.port = int(json.loads(line)["port"])

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


WRK_SCRIPT = """\
local targets = {}
for line in io.lines("%s") do
  local host, path = line:match("^(%%S+) (%%S+)$")
  if host then targets[#targets + 1] = {host, path} end
end
local i = 0
request = function()
  i = i + 1
  local t = targets[(i %% #targets) + 1]
  return wrk.format("GET", t[2], {["Host"] = t[1]})
end
"""


def server_ceiling(wrk: str, folder: Path, port: int, targets: list[tuple[str, str]], *,
                   seconds: float = 8.0, connections: int = 64,
                   threads: int = 1) -> dict[str, Any]:
    """Requests per second nginx serves to wrk on loopback, cycling through ``targets``
    (host, path): the ceiling no crawl on this machine can pass."""
    folder.mkdir(parents=True, exist_ok=True)
    listing = folder / "wrk-targets.txt"
    listing.write_text("".join(f"{h} {p}\n" for h, p in targets))
    script = folder / "wrk.lua"
    script.write_text(WRK_SCRIPT % listing)
    cmd = [wrk, "-t", str(threads), "-c", str(connections), "-d", f"{seconds:g}s",
           "-s", str(script), f"http://127.0.0.1:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise BenchError(f"wrk failed: {out.stderr.strip()}")
    text = out.stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    transfer = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", text)
    latency = re.search(r"Latency\s+([\d.]+)(\w+)", text)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors: (.*)", text)
    scale = {"B": 1e-6, "KB": 1e-3, "MB": 1.0, "GB": 1e3}
    lat_scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    return {
        "tool": "wrk", "command": " ".join(cmd[:-1]) + " http://127.0.0.1:PORT/",
        "connections": connections, "threads": threads, "seconds": seconds,
        "requests_per_second": float(rps.group(1)) if rps else None,
        "megabytes_per_second": (float(transfer.group(1)) * scale.get(transfer.group(2), 1.0)
                                 if transfer else None),
        "mean_latency_ms": (float(latency.group(1)) * lat_scale.get(latency.group(2), 1.0)
                            if latency else None),
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": errors.group(1).strip() if errors else "",
        "targets": len(targets),
    }


def python_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                         capture_output=True, text=True)
    return out.stdout.strip() or sys.version.split()[0]
