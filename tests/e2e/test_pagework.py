"""Page work in worker processes: real processes, a real socket pair, real WARC files."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from common import pagework
from common.adapters.local_blobs import LocalBlobStore
from common.archive import read_response
from common.pagework import PageJobTimeoutError, PageWorkError, ProcessPageWork, WorkContext
from common.settings import Settings
from fetcher.service import write_exchange_job

ROOT = Path(__file__).resolve().parents[2]


def _pid(ctx: WorkContext) -> int:
    return os.getpid()


def _sleep(ctx: WorkContext, seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


class UnpicklableError(Exception):
    def __init__(self, handle: object) -> None:
        super().__init__("cannot cross")
        self.handle = handle


def _fail(ctx: WorkContext, how: str) -> None:
    if how == "value":
        raise ValueError("a hostile page")
    raise UnpicklableError(lambda: None)


def _work(tmp_path: Path, processes: int = 1, **options: Any) -> ProcessPageWork:
    settings = Settings().replace(crawl={"out_dir": str(tmp_path)})
    return ProcessPageWork(settings, processes=processes, root=str(tmp_path / "warc"),
                           writer="test", cdx_name="index.cdxj", **options)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


async def test_jobs_run_in_a_worker_process_and_its_records_are_readable(
        tmp_path: Path) -> None:
    work = _work(tmp_path)
    await work.start()
    try:
        worker_pid = await work.run(_pid)
        assert worker_pid != os.getpid()
        body = b"<html><body><p>worker</p></body></html>" * 50
        written = await work.run(
            write_exchange_job, url="http://a.test/p", request_headers=[("Accept", "*/*")],
            status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
            body=body, fetched_at=time.time(), ip="127.0.0.1", http_version="1.1",
            metadata={"fetchTimeMs": "3"})
    finally:
        await work.close()
    assert _gone(worker_pid)
    # the worker wrote under a writer id of its own, and the parent can read it back
    assert f"-test-p{worker_pid}-warc-" in written.pointer.file
    with LocalBlobStore(str(tmp_path / "warc"), writer_id="reader") as blobs:
        stored = read_response(blobs, written.pointer)
    assert stored.body == body and stored.url == "http://a.test/p"
    files = sorted((tmp_path / "warc").glob("*.warc.gz"))
    assert len(files) == 1
    with files[0].open("rb") as fh:
        kinds = [r.rec_type for r in ArchiveIterator(fh, check_digests="raise")]
    assert kinds == ["warcinfo", "response", "request", "metadata"]
    index = (tmp_path / "warc" / "index.cdxj").read_text().splitlines()
    assert len(index) == 1 and '"status": "200"' in index[0]


async def test_a_jobs_exception_is_raised_in_the_parent(tmp_path: Path) -> None:
    work = _work(tmp_path)
    await work.start()
    try:
        with pytest.raises(ValueError, match="a hostile page"):
            await work.run(_fail, "value")
        with pytest.raises(PageWorkError, match="UnpicklableError: cannot cross"):
            await work.run(_fail, "unpicklable")
        assert await work.run(_pid) != os.getpid()  # the worker is still there
    finally:
        await work.close()


async def test_jobs_spread_over_workers(tmp_path: Path) -> None:
    work = _work(tmp_path, processes=2)
    await work.start()
    try:
        pids = await asyncio.gather(*(work.run(_sleep, 0.3) for _ in range(4)))
    finally:
        await work.close()
    assert len(set(pids)) == 2 and os.getpid() not in pids


async def test_a_killed_worker_fails_its_job_and_the_next_job_gets_a_new_one(
        tmp_path: Path) -> None:
    work = _work(tmp_path)
    await work.start()
    try:
        first = await work.run(_pid)
        slow = asyncio.ensure_future(work.run(_sleep, 30.0))
        await asyncio.sleep(0.3)
        os.kill(first, signal.SIGKILL)  # our own child
        with pytest.raises(PageWorkError, match="ended"):
            await asyncio.wait_for(slow, 10)
        second = await work.run(_pid)
    finally:
        await work.close()
    assert second != first


async def test_a_worker_ignores_sigint(tmp_path: Path) -> None:
    work = _work(tmp_path)
    await work.start()
    try:
        pid = await work.run(_pid)
        os.kill(pid, signal.SIGINT)  # what a terminal's Ctrl-C sends the process group
        await asyncio.sleep(0.3)
        assert await work.run(_pid) == pid
    finally:
        await work.close()


def test_a_worker_ends_when_its_parent_dies(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import asyncio, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from common.pagework import ProcessPageWork
        from common.settings import Settings
        from tests.e2e.test_pagework import _pid

        async def main():
            work = ProcessPageWork(Settings(), processes=1, root={str(tmp_path)!r},
                                   writer="orphan", cdx_name="index.cdxj")
            await work.start()
            print(await work.run(_pid), flush=True)
            time.sleep(60)

        asyncio.run(main())
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              cwd=ROOT, text=True)
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert not _gone(worker)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while not _gone(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(worker), "the worker outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


async def test_a_job_over_the_time_limit_is_abandoned_and_its_worker_replaced(
        tmp_path: Path) -> None:
    work = _work(tmp_path, job_timeout=2.0, preload=(__name__,))
    await work.start()
    try:
        first = await work.run(_pid)
        started = time.monotonic()
        slow = asyncio.ensure_future(work.run(_sleep, 60.0))
        await asyncio.sleep(0.05)
        behind = asyncio.ensure_future(work.run(_pid))  # queued on the same worker
        with pytest.raises(PageJobTimeoutError, match=r"_sleep ran over 2 s"):
            await asyncio.wait_for(slow, 10)
        assert 2.0 <= time.monotonic() - started < 6
        # the job queued behind it was sent again, to the new worker
        second = await asyncio.wait_for(behind, 10)
        assert second != first and work.pids() == [second]
        assert await work.run(_pid) == second
        assert work.timeouts == 1
        assert _gone(first), "the worker of the abandoned job was not killed and reaped"
    finally:
        await work.close()


async def test_a_job_within_the_time_limit_is_not_touched(tmp_path: Path) -> None:
    work = _work(tmp_path, job_timeout=2.0, preload=(__name__,))
    await work.start()
    try:
        # each job's limit starts when it starts running, not when it was queued
        pids = await asyncio.gather(*(work.run(_sleep, 0.8) for _ in range(4)))
    finally:
        await work.close()
    assert len(set(pids)) == 1 and work.timeouts == 0


async def test_a_lane_never_waits_for_another(tmp_path: Path) -> None:
    work = _work(tmp_path, lanes=("write", "parse"), job_timeout=0)
    write, parse = work.lane("write"), work.lane("parse")
    await work.start()
    try:
        assert len(work.pids()) == 2
        await asyncio.gather(write.run(_pid), parse.run(_pid))  # both set up
        slow = asyncio.ensure_future(parse.run(_sleep, 3.0))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        writers = await asyncio.gather(*(write.run(_pid) for _ in range(5)))
        assert time.monotonic() - started < 1.5  # not behind the 3 s job
        assert not slow.done()
        parser_pid = await slow
    finally:
        await work.close()
    assert set(writers) == set(work.pids("write") or writers) and parser_pid not in writers
    with pytest.raises(KeyError):
        work.lane("other")


class _Machine:
    """CPU times of a machine whose cores are each ``idle`` idle (a fraction)."""

    def __init__(self, idle: float) -> None:
        self.idle = idle
        self.ticks = 0.0
        self.samples = 0

    def __call__(self) -> pagework.CpuSample:
        self.ticks += 100.0 * (os.cpu_count() or 1)
        self.samples += 1
        return self.idle * self.ticks, self.ticks


async def _backlog(work: ProcessPageWork, rounds: int, jobs: int) -> None:
    """``rounds`` of ``jobs`` parse jobs at once (each finds the worker busy), then
    until a worker the lane started meanwhile is set up."""
    parse = work.lane("parse")
    for _ in range(rounds):
        await asyncio.gather(*(parse.run(_sleep, 0.05) for _ in range(jobs)))
    grown = work._pools["parse"].growing
    if grown is not None:
        await grown


async def _steady_backlog(work: ProcessPageWork, seconds: float) -> None:
    """Parse jobs of 0.05 s sent one every 0.025 s for ``seconds`` (after the first,
    each finds the worker busy: twice the work it can do), then until they are done
    and a worker the lane started meanwhile is set up."""
    parse = work.lane("parse")
    jobs = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        jobs.append(asyncio.ensure_future(parse.run(_sleep, 0.05)))
        await asyncio.sleep(0.025)
    await asyncio.gather(*jobs)
    grown = work._pools["parse"].growing
    if grown is not None:
        await grown


def test_spare_cores_are_the_idle_share_of_the_ticks_between_samples() -> None:
    assert pagework.spare_cores((100.0, 1000.0), (150.0, 1200.0), 2) == 0.5
    assert pagework.spare_cores((0.0, 0.0), (400.0, 400.0), 4) == 4.0
    assert pagework.spare_cores((10.0, 10.0), (10.0, 10.0), 2) == 0.0  # no time passed
    sample = pagework.cpu_sample()
    if Path("/proc/stat").exists():
        assert sample is not None and 0 <= sample[0] <= sample[1]


def test_a_heap_is_trimmed_once_it_grew_by_the_threshold() -> None:
    mib = 1 << 20
    assert not pagework.trim_due(60 * mib, 60 * mib)
    assert not pagework.trim_due(60 * mib + pagework.TRIM_GROWTH - 1, 60 * mib)
    assert pagework.trim_due(60 * mib + pagework.TRIM_GROWTH, 60 * mib)
    assert not pagework.trim_due(40 * mib, 60 * mib)  # smaller than at the last look
    assert pagework.trim_due(10 * mib, 2 * mib, growth=8 * mib)
    if Path("/proc/self/statm").exists():
        anonymous = pagework.anonymous_memory()
        assert anonymous is not None and anonymous > 0


async def test_a_lane_grows_while_its_jobs_wait(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pagework, "GROW_AFTER", 3)
    monkeypatch.setattr(pagework, "GROW_AFTER_SECONDS", 0.3)
    work = _work(tmp_path, lanes=("write", "parse"), job_timeout=0,
                 lane_processes={"parse": 2}, cpu=_Machine(idle=0.9))
    write, parse = work.lane("write"), work.lane("parse")
    await work.start()
    try:
        assert len(work.pids("write")) == 1 and len(work.pids("parse")) == 1
        # one job at a time never waits: no second worker
        for _ in range(6):
            await parse.run(_pid)
        assert len(work.pids("parse")) == 1
        # jobs that keep finding the worker busy start a second one, and no third
        await _steady_backlog(work, 0.6)
        assert len(work.pids("parse")) == 2
        parsers = await asyncio.gather(*(parse.run(_sleep, 0.3) for _ in range(2)))
        for _ in range(3):
            await asyncio.gather(*(parse.run(_sleep, 0.05) for _ in range(6)))
        assert len(work.pids("parse")) == 2 and len(work.pids("write")) == 1
        assert await write.run(_pid) in work.pids("write")
    finally:
        await work.close()
    assert len(set(parsers)) == 2  # side by side, one in each


async def test_a_lane_does_not_grow_while_every_core_is_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the jobs wait because the machine is short of CPU, not of parse workers: another
    # worker would only take cores from the rest of the crawl
    monkeypatch.setattr(pagework, "GROW_AFTER", 3)
    monkeypatch.setattr(pagework, "GROW_AFTER_SECONDS", 0.0)
    machine = _Machine(idle=0.1 / (os.cpu_count() or 1))  # a tenth of a core idle
    work = _work(tmp_path, lanes=("write", "parse"), job_timeout=0,
                 lane_processes={"parse": 2}, cpu=machine)
    await work.start()
    try:
        await _backlog(work, rounds=4, jobs=6)
        assert work._pools["parse"].growing is None
        assert len(work.pids("parse")) == 1
        assert machine.samples >= 2  # it looked, and saw no spare core
        machine.idle = 0.9  # the cores free up: the next backlog grows the lane
        await _backlog(work, rounds=3, jobs=6)
        assert len(work.pids("parse")) == 2
    finally:
        await work.close()


async def test_a_short_burst_of_waiting_jobs_does_not_grow_the_lane(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # many jobs finding the worker busy for a moment is a burst, not a lane too small
    monkeypatch.setattr(pagework, "GROW_AFTER", 3)
    monkeypatch.setattr(pagework, "GROW_AFTER_SECONDS", 1.0)
    work = _work(tmp_path, lanes=("write", "parse"), job_timeout=0,
                 lane_processes={"parse": 2}, cpu=_Machine(idle=0.9))
    await work.start()
    try:
        await _backlog(work, rounds=3, jobs=20)  # each 20 at once: 20 in a row at once
        await _steady_backlog(work, 0.4)
        assert len(work.pids("parse")) == 1
        await _steady_backlog(work, 1.5)  # a backlog that lasted
        assert len(work.pids("parse")) == 2
    finally:
        await work.close()


def test_backlog_seconds_is_the_waiting_work_at_the_pace_of_the_answers() -> None:
    assert pagework.backlog_seconds(300, 100, 2.0) == 6.0  # 50 answers a second
    assert pagework.backlog_seconds(0, 100, 2.0) == 0.0  # nothing waits
    assert pagework.backlog_seconds(5, 0, 2.0) == float("inf")  # stuck: no answer came
    assert pagework.backlog_seconds(5, 10, 0.0) == float("inf")


async def test_a_lane_near_the_end_of_its_work_does_not_grow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the jobs keep finding the worker busy, but what waits would take it less than
    # GROW_BACKLOG_SECONDS: a new worker would start for the crawl's tail. The
    # threshold is set far above what the lane's own few jobs can reach (at most a
    # few dozen, answered at 20 a second) and far below what the upstream backlog
    # below makes, so the test does not hang on the machine's pace
    monkeypatch.setattr(pagework, "GROW_AFTER", 3)
    monkeypatch.setattr(pagework, "GROW_AFTER_SECONDS", 0.5)
    monkeypatch.setattr(pagework, "GROW_BACKLOG_SECONDS", 1000.0)
    upstream = {"parse": 0}
    asked: list[str] = []

    def waiting(lane: str) -> int:
        asked.append(lane)
        return upstream[lane]

    work = _work(tmp_path, lanes=("parse",), job_timeout=0, lane_processes={"parse": 2},
                 cpu=_Machine(idle=0.9), waiting=waiting)
    await work.start()
    try:
        await work.lane("parse").run(_pid)  # the worker has imported this module
        await _steady_backlog(work, 1.2)
        assert len(work.pids("parse")) == 1
        assert asked and set(asked) == {"parse"}  # it looked, and saw little ahead
        # a million waiting: over 1000 s of work at any pace the worker answers in
        upstream["parse"] = 1_000_000
        await _steady_backlog(work, 1.2)
        assert len(work.pids("parse")) == 2
    finally:
        await work.close()


def _model_loaded(ctx: WorkContext) -> bool:
    from parser import signals

    return signals._identifier is not None


async def test_a_worker_warms_up_the_preloaded_modules_before_its_first_job(
        tmp_path: Path) -> None:
    # parser.jobs's warm_up loads the language model (about a second) when the
    # worker starts, so a crawl's first page does not wait for it
    work = _work(tmp_path, preload=("parser.jobs",))
    await work.start()
    try:
        assert await work.run(_model_loaded) is True
    finally:
        await work.close()
    bare = _work(tmp_path / "bare")
    await bare.start()
    try:
        assert await bare.run(_model_loaded) is False  # loaded on first use otherwise
    finally:
        await bare.close()
    # per lane: only the lane that parses loads the model
    lanes = _work(tmp_path / "lanes", lanes=("write", "parse"),
                  preload={"write": ("fetcher.service",), "parse": ("parser.jobs",)})
    await lanes.start()
    try:
        assert await lanes.lane("parse").run(_model_loaded) is True
        assert await lanes.lane("write").run(_model_loaded) is False
    finally:
        await lanes.close()


_KEPT: list[bytes] = []  # a block allocated after the garbage, so the heap cannot shrink


def _fragment_heap(ctx: WorkContext, blocks: int) -> int | None:
    """Allocate ``blocks`` blocks of 4 KiB from the C heap (over pymalloc's limit), keep
    one allocated after them and free the rest: the freed space lies below a live
    block, where the allocator cannot give it back by shrinking its heap."""
    garbage = [bytes(4096) for _ in range(blocks)]
    _KEPT.append(bytes(4096))
    grown = pagework.anonymous_memory()
    del garbage
    return grown


def _anonymous(ctx: WorkContext) -> int | None:
    return pagework.anonymous_memory()


@pytest.mark.skipif(pagework.anonymous_memory() is None or pagework.HeapTrimmer()._trim is None,
                    reason="needs /proc and glibc's malloc_trim")
async def test_a_worker_gives_back_the_memory_a_large_job_freed(tmp_path: Path) -> None:
    work = _work(tmp_path)
    await work.start()
    try:
        before = await work.run(_anonymous)
        grown = await work.run(_fragment_heap, 25_000)  # about 100 MiB
        after = await work.run(_anonymous)
        small = await work.run(_fragment_heap, 1_000)  # 4 MiB: below the trim's growth
        later = await work.run(_anonymous)
    finally:
        await work.close()
    assert before is not None and grown is not None and after is not None
    assert small is not None and later is not None
    assert grown - before > 90 << 20
    # trimmed after the job: back near where the worker stood
    assert after - before < 16 << 20, (before >> 20, grown >> 20, after >> 20)
    # a job that grew the heap less than TRIM_GROWTH is left alone (its freed blocks
    # stay with the allocator, for the next job to reuse)
    assert later >= small - (1 << 20)
