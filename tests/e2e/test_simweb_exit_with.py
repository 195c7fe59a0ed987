"""``python -m simweb --exit-with HOST:PORT``: the simulated web leaves (exit code 3) once
that address, after answering, stops answering; until it first answers it waits. The
compose demo relies on it to follow a restarted fetcher into its new network namespace."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _start(address: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "simweb", "--port", "0", "--exit-with",
                             address, "--misses", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    info = json.loads(proc.stdout.readline())  # serving
    assert info["port"] > 0
    return proc


def test_exits_when_its_partner_goes_away() -> None:
    partner = _listener()
    address = f"127.0.0.1:{partner.getsockname()[1]}"
    proc = _start(address)
    with proc:
        try:
            time.sleep(2.5)  # it saw the partner answer
            assert proc.poll() is None
            partner.close()
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 3
            assert f"{address} stopped answering" in err
        finally:
            if proc.poll() is None:
                proc.kill()


def test_waits_for_a_partner_that_has_not_answered_yet() -> None:
    probe = _listener()
    address = f"127.0.0.1:{probe.getsockname()[1]}"
    probe.close()  # nothing listens there yet
    proc = _start(address)
    with proc:
        try:
            time.sleep(4.0)
            assert proc.poll() is None  # not armed: the partner never answered
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
        assert proc.returncode == 0


def test_refuses_an_address_without_a_port() -> None:
    proc = subprocess.run([sys.executable, "-m", "simweb", "--exit-with", "localhost"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert "expected HOST:PORT" in proc.stderr


pytestmark = pytest.mark.e2e
