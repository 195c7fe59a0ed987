"""The request log's politeness helpers."""

from __future__ import annotations

import asyncio
import threading

import pytest

from simweb.log import RequestLog, RequestRecord


def record(seq: int, host: str, target: str, start: float, end: float,
           status: int = 200) -> RequestRecord:
    return RequestRecord(seq=seq, host=host, target=target, method="GET",
                         headers=(("User-Agent", "t"),), started=start, ended=end,
                         started_wall=1000 + start, ended_wall=1000 + end, status=status,
                         bytes_sent=10, completed=True)


def filled() -> RequestLog:
    log = RequestLog()
    rows = [
        ("a.test", "/robots.txt", 0.0, 0.1),
        ("a.test", "/", 0.15, 0.3),        # 0.05 after robots.txt (excluded by default)
        ("a.test", "/x?utm_source=y", 1.3, 1.5),   # gap 1.0
        ("a.test", "/y", 1.9, 2.0),       # gap 0.4
        ("b.test", "/", 0.0, 1.0),
        ("b.test", "/p", 0.5, 0.7),       # overlaps the first: -0.5
    ]
    for seq, (host, target, start, end) in enumerate(rows):
        log.begin(host)
        log.finish(record(seq, host, target, start, end))
    return log


def test_counts() -> None:
    log = filled()
    assert log.counts_by_host() == {"a.test": 4, "b.test": 2}
    assert log.counts_by_host(exclude_paths=("/robots.txt",)) == {"a.test": 3, "b.test": 2}
    assert log.counts_by_path("a.test") == {"/robots.txt": 1, "/": 1, "/x": 1, "/y": 1}
    assert log.counts_by_path("a.test", with_query=True)["/x?utm_source=y"] == 1
    assert log.count("a.test") == 4
    assert log.count("a.test", "/x") == 1
    assert log.hosts() == ["a.test", "b.test"]
    assert len(log) == 6


def test_gaps_and_min_gap() -> None:
    log = filled()
    assert log.gaps("a.test") == pytest.approx([1.0, 0.4])
    assert log.min_gap("a.test") == pytest.approx(0.4)
    assert log.min_gap("a.test", exclude_paths=()) == pytest.approx(0.05)
    assert log.min_gap("b.test") == pytest.approx(-0.5)
    assert log.min_gap("nobody.test") is None


def test_max_in_flight() -> None:
    log = filled()
    assert log.max_in_flight("a.test") == 1
    assert log.max_in_flight("b.test") == 2


def test_in_flight_and_records_per_host() -> None:
    log = RequestLog()
    seq = log.begin("a.test")
    assert log.in_flight("a.test") == 1 and log.in_flight() == 1
    log.finish(record(seq, "a.test", "/", 0, 1))
    assert log.in_flight("a.test") == 0
    rec = log.records("a.test")[0]
    assert rec.header("user-agent") == "t"
    assert rec.path == "/" and rec.duration == 1


def test_concurrent_writers_and_readers() -> None:
    log = RequestLog()
    per_thread = 500

    def writer(name: str) -> None:
        for i in range(per_thread):
            seq = log.begin(name)
            log.finish(record(seq, name, f"/{i}", i, i + 0.5))

    threads = [threading.Thread(target=writer, args=(f"h{i}.test",)) for i in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        log.counts_by_host()
        log.min_gap("h0.test")
    for t in threads:
        t.join()
    assert log.counts_by_host() == {f"h{i}.test": per_thread for i in range(4)}
    assert sorted(r.seq for r in log.records()) == list(range(4 * per_thread))


def test_wait_for() -> None:
    log = filled()
    assert log.wait_for(lambda lg: len(lg) == 6, timeout=0.1)
    assert not log.wait_for(lambda lg: len(lg) > 6, timeout=0.05)
    log.clear()
    assert len(log) == 0


async def test_wait_until() -> None:
    log = filled()
    async with asyncio.timeout(1):
        await log.wait_until(lambda lg: lg.count("b.test") == 2)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await log.wait_until(lambda lg: lg.count("b.test") == 3)

    async def add_later() -> None:
        await asyncio.sleep(0.05)
        seq = log.begin("b.test")
        log.finish(record(seq, "b.test", "/late", 3, 4))

    task = asyncio.create_task(add_later())
    async with asyncio.timeout(2):
        await log.wait_until(lambda lg: lg.count("b.test") == 3)
    await task


def test_gaps_and_in_flight_across_several_hosts() -> None:
    log = filled()
    # b.test's "/" runs from 0 to 1.0, beside a.test's first two requests
    assert log.max_in_flight(None) == 2
    assert log.max_in_flight(("a.test",)) == 1
    assert log.max_in_flight(["a.test", "b.test"]) == 2
    assert log.min_gap(("a.test",)) == log.min_gap("a.test")
    assert log.min_gap(None) == pytest.approx(-0.85)
    assert log.min_gap(()) is None
