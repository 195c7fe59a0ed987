"""The benchmark's memory samples sum a crawler's whole process tree and count its
processes (so a report shows when embedded mode's parse lane grew)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from bench.runners import tree_memory

# a parent that starts one child and waits for it (both sleep until killed)
PARENT = ("import subprocess, sys, time; "
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
          "print(c.pid, flush=True); c.wait()")


def test_a_tree_of_two_processes_is_counted_and_summed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE,
                              text=True)
    child = None
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while True:
            rss, pss, processes = tree_memory(parent.pid)
            if processes == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert processes == 2
        assert rss > 2 * 1024 * 1024 and 0 < pss <= rss
    finally:
        if child is not None:  # ours: the parent started it
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    assert tree_memory(parent.pid) == (0, 0, 0)  # gone
