"""The host ring: stable across processes, and growth moves about 1/(N+1) of hosts."""

from __future__ import annotations

import subprocess
import sys
import zlib

import pytest

from common.ring import HostRing

HOSTS = [f"host{i}.example" for i in range(20000)]


def test_same_answer_in_another_process() -> None:
    ring = HostRing(12)
    sample = HOSTS[:50]
    code = (
        "from common.ring import HostRing; r = HostRing(12); "
        f"print(','.join(str(r(h)) for h in {sample!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "12345", "PATH": ""},
                         cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    assert out.stdout.strip() == ",".join(str(ring(h)) for h in sample)


def test_every_partition_gets_a_fair_share() -> None:
    ring = HostRing(8)
    counts = [0] * 8
    for h in HOSTS:
        counts[ring(h)] += 1
    mean = len(HOSTS) / 8
    assert min(counts) > 0.75 * mean, counts
    assert max(counts) < 1.25 * mean, counts


@pytest.mark.parametrize("n", [2, 4, 8, 12])
def test_growth_moves_about_one_in_n_plus_one(n: int) -> None:
    before, after = HostRing(n), HostRing(n + 1)
    moved = sum(1 for h in HOSTS if before(h) != after(h)) / len(HOSTS)
    mod_moved = sum(1 for h in HOSTS
                    if zlib.crc32(h.encode()) % n != zlib.crc32(h.encode()) % (n + 1)) / len(HOSTS)
    ideal = 1 / (n + 1)
    print(f"N={n}: ring moved {moved:.3f} of hosts (ideal {ideal:.3f}); "
          f"mod-N moved {mod_moved:.3f}")
    assert abs(moved - ideal) < 0.35 * ideal
    assert mod_moved > 0.45
    # every moved host goes to the new partition, none between old ones
    assert all(after(h) == n for h in HOSTS if before(h) != after(h))


def test_rejects_zero_partitions() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HostRing(0)
