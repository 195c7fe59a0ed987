"""Processes a script starts in the background, found again through their PID files.

A PID file alone is not trusted: the PID may have been reused by another program since.
:func:`running_pid` accepts a PID only while that process is alive and its command line
passes the caller's test (the marker the script put on the command line when it started
it), so stopping only ever signals a process this checkout started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def read_pid(pid_file: Path) -> int | None:
    """The number in a PID file, or None when there is no such file or no number in it."""
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
    """The process's command line, one string an argument (empty when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def running_pid(pid_file: Path, ours: Callable[[list[str]], bool]) -> int | None:
    """The PID from ``pid_file`` while that process is alive and ``ours`` accepts its
    command line; None otherwise (no file, gone, or another program with that PID)."""
    pid = read_pid(pid_file)
    if pid is None or not process_alive(pid):
        return None
    return pid if ours(process_cmdline(pid)) else None


def rss_mib(pid: int) -> float | None:
    """The process's resident memory in MiB, or None when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_note(pid: int | None) -> str:
    """``", rss N MiB"`` for a status line, or nothing when the memory is unknown."""
    rss = rss_mib(pid) if pid else None
    return f", rss {rss:.0f} MiB" if rss is not None else ""


def size_of(path: Path) -> int:
    """The file's size in bytes, 0 when it does not exist (where a new log starts)."""
    return path.stat().st_size if path.exists() else 0


def tail(path: Path, lines: int = 20, offset: int = 0, *, missing: str = "") -> str:
    """The last lines of a file, of what was written after byte ``offset``; ``missing``
    (else ``(no <path>)``) when the file cannot be read."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return missing or f"(no {path})"
    return "\n".join(text.splitlines()[-lines:])


def spawn_logged(cmd: Sequence[str], log_file: Path, pid_file: Path, *,
                 cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a session of its own, so it outlives the script, with its output
    appended to ``log_file`` after a dated start line, and its PID written to
    ``pid_file``."""
    with log_file.open("ab") as out:
        out.write(f"\n--- start {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        out.flush()
        proc = subprocess.Popen(list(cmd), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n")
    return proc


def wait_gone(pid: int, timeout: float, on_kill: Callable[[], None]) -> None:
    """Wait up to ``timeout`` seconds for a signalled process to end; then call
    ``on_kill`` (to say so), send SIGKILL and wait until it is gone."""
    deadline = time.monotonic() + timeout
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if process_alive(pid):
        on_kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while process_alive(pid):
            time.sleep(0.1)


def terminate(pid: int, timeout: float, on_kill: Callable[[], None]) -> None:
    """SIGTERM (a process already gone is fine), then :func:`wait_gone`. Only for a PID
    that :func:`running_pid` accepted or that this script has just started."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    wait_gone(pid, timeout, on_kill)
