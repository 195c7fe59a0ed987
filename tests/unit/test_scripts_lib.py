"""scripts/lib, the helpers scripts/servers, kube, docker and check-deploy share: a PID file
is trusted only for a live process whose command line carries the starter's marker, so
stopping never signals another program that got the PID; logs, jars and settings."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from scripts.lib import build, cli, proc

ROOT = Path(__file__).resolve().parents[2]
MARKER = "--started-by=scripts-lib-test"


def _sleeper(*extra: str) -> subprocess.Popen[bytes]:
    """A process that sleeps until it is signalled, with ``extra`` on its command line."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *extra])


@pytest.fixture
def marked() -> Iterator[subprocess.Popen[bytes]]:
    child = _sleeper(MARKER)
    yield child
    child.kill()
    child.wait()


@pytest.fixture
def unmarked() -> Iterator[subprocess.Popen[bytes]]:
    child = _sleeper()
    yield child
    child.kill()
    child.wait()


def _wait_for_cmdline(pid: int) -> None:
    """Until the child has exec'd python (its command line is the new one)."""
    deadline = time.monotonic() + 10
    while "-c" not in proc.process_cmdline(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_running_pid_only_for_a_live_process_with_the_marker(
        tmp_path: Path, marked: subprocess.Popen[bytes],
        unmarked: subprocess.Popen[bytes]) -> None:
    pid_file = tmp_path / "x.pid"

    def ours(cmd: list[str]) -> bool:
        return MARKER in cmd

    assert proc.running_pid(pid_file, ours) is None  # no PID file
    pid_file.write_text("not a number\n")
    assert proc.running_pid(pid_file, ours) is None
    for child in (marked, unmarked):
        _wait_for_cmdline(child.pid)
    pid_file.write_text(f"{unmarked.pid}\n")
    assert proc.running_pid(pid_file, ours) is None  # alive, but not ours
    pid_file.write_text(f"{marked.pid}\n")
    assert proc.running_pid(pid_file, ours) == marked.pid
    proc.terminate(marked.pid, 10, lambda: None)
    assert marked.wait(timeout=10) == -15  # SIGTERM was enough
    assert proc.running_pid(pid_file, ours) is None  # gone


def test_wait_gone_kills_what_ignores_sigterm() -> None:
    with subprocess.Popen([sys.executable, "-c",
                           "import signal, time; signal.signal(signal.SIGTERM, "
                           "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
                          stdout=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        said: list[str] = []
        started = time.monotonic()
        proc.terminate(child.pid, 0.5, lambda: said.append("SIGKILL"))
        assert child.wait(timeout=10) == -9
        assert said == ["SIGKILL"] and time.monotonic() - started < 5


def _servers_script(var: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("SERVERS_VAR", str(var))
    spec = importlib.util.spec_from_file_location(
        "servers_for_lib_test", ROOT / "scripts" / "servers.d" / "servers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_scripts_servers_stop_leaves_a_process_without_its_marker_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        unmarked: subprocess.Popen[bytes]) -> None:
    servers = _servers_script(tmp_path / "var", monkeypatch)
    kafka = servers.Kafka()
    kafka.pid_file.parent.mkdir(parents=True)
    _wait_for_cmdline(unmarked.pid)
    kafka.pid_file.write_text(f"{unmarked.pid}\n")  # a PID another program now has
    assert kafka.signal_stop() is None
    assert unmarked.poll() is None  # not signalled
    assert not kafka.pid_file.exists()

    owned = _sleeper(kafka.marker)
    try:
        _wait_for_cmdline(owned.pid)
        kafka.pid_file.write_text(f"{owned.pid}\n")
        assert kafka.running_pid() == owned.pid
        kafka.stop()
        assert owned.wait(timeout=10) == -15
        assert not kafka.pid_file.exists()
    finally:
        owned.kill()
        owned.wait()


def test_spawn_logged_appends_after_a_start_line_and_writes_the_pid(tmp_path: Path) -> None:
    log, pid_file = tmp_path / "out.log", tmp_path / "out.pid"
    log.write_text("earlier run\n")
    offset = proc.size_of(log)
    child = proc.spawn_logged([sys.executable, "-c", "print('hello'); import sys; "
                               "print('oops', file=sys.stderr)"], log, pid_file, cwd=tmp_path)
    assert child.wait(timeout=30) == 0
    assert proc.read_pid(pid_file) == child.pid
    text = log.read_text()
    assert text.startswith("earlier run\n\n--- start ")
    blank, start, *output = proc.tail(log, offset=offset).splitlines()
    assert (blank, start[:10], output) == ("", "--- start ", ["hello", "oops"])
    assert proc.tail(log, 1) == "oops"
    assert proc.tail(tmp_path / "none.log") == f"(no {tmp_path / 'none.log'})"
    assert proc.tail(tmp_path / "none.log", missing="(no log)") == "(no log)"
    assert proc.size_of(tmp_path / "none.log") == 0
    assert proc.rss_note(None) == ""


def test_jars_installed_needs_every_jar_the_stamp_names(tmp_path: Path) -> None:
    assert not build.jars_installed(tmp_path)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.jar").write_bytes(b"")
    (tmp_path / "installed.txt").write_text("a.jar\nb.jar\n")
    assert not build.jars_installed(tmp_path)  # a fetch that stopped half-way
    (tmp_path / "lib" / "b.jar").write_bytes(b"")
    assert build.jars_installed(tmp_path)
    (tmp_path / "installed.txt").write_text("")
    assert not build.jars_installed(tmp_path)


def test_fetch_jars_keeps_what_maven_copied(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "mvn").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "mvn").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_bin))
    home = tmp_path / "home"
    commands: list[list[str]] = []

    def run(cmd: list[str]) -> None:  # stands in for Maven: copies two jars
        commands.append(cmd)
        out = Path(next(a for a in cmd if a.startswith("-DoutputDirectory="))
                   .split("=", 1)[1])
        out.mkdir()
        for name in ("z.jar", "a.jar"):
            (out / name).write_bytes(b"")

    names = build.fetch_jars(home, "<project/>", "thing 1.0", run=run, error=RuntimeError)
    assert names == ["a.jar", "z.jar"]
    assert build.jars_installed(home)
    assert (home / "pom.xml").read_text() == "<project/>"
    assert commands[0][1:6] == ["-B", "-q", "--strict-checksums", "-f", str(home / "pom.xml")]
    with pytest.raises(KeyError, match=r"mvn copied no jars for thing 1\.0"):
        build.fetch_jars(home, "<project/>", "thing 1.0", run=lambda cmd: None,
                         error=KeyError)


def test_settings_from_the_environment_fail_with_the_scripts_own_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class ScriptError(RuntimeError):
        pass

    monkeypatch.setenv("LIB_TEST_PORT", " 8080 ")
    assert cli.env_port("LIB_TEST_PORT", 1, error=ScriptError) == 8080
    monkeypatch.setenv("LIB_TEST_PORT", "")
    assert cli.env_port("LIB_TEST_PORT", 1, error=ScriptError) == 1
    monkeypatch.setenv("LIB_TEST_PORT", "70000")
    with pytest.raises(ScriptError, match="LIB_TEST_PORT=70000 is not a TCP port"):
        cli.env_port("LIB_TEST_PORT", 1, error=ScriptError)
    monkeypatch.setenv("LIB_TEST_PORT", "many")
    with pytest.raises(ScriptError, match="LIB_TEST_PORT='many' is not a whole number"):
        cli.env_int("LIB_TEST_PORT", 1, error=ScriptError)


def test_go_env_keeps_a_chosen_toolchain_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOTOOLCHAIN", "go1.99.0")
    env = build.go_env()
    assert (env["GOFLAGS"], env["GOTOOLCHAIN"], env["CGO_ENABLED"]) == (
        "-mod=mod", "go1.99.0", "0")
    assert build.go_env(GOTOOLCHAIN="local", GOBIN="/x")["GOTOOLCHAIN"] == "local"
    monkeypatch.delenv("GOTOOLCHAIN")
    assert build.go_env()["GOTOOLCHAIN"] == "local"


def test_timed_says_how_long_even_when_the_step_fails() -> None:
    said: list[str] = []
    with pytest.raises(ValueError, match="bad"), cli.timed(said.append, "built x", unit="s"):
        raise ValueError("bad")
    assert len(said) == 1 and said[0].startswith("built x (") and said[0].endswith("s)")
    assert not said[0].endswith(" s)")
