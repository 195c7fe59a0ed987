"""Where a stage's page work runs: in worker threads of its process, or in processes.

Page work is the CPU-heavy part of handling one page outside the event loop: writing
its WARC records (compression, digests) and parsing it (charset, HTML, links, text,
SimHash). A job is a module-level function ``job(context, *args)``, or a
:class:`JobRef` naming one (so the sender need not import its module); the
:class:`WorkContext` gives it the blob store, the archive writer and the settings of
the worker it runs in.

- :class:`ThreadPageWork` runs jobs on worker threads of the stage's own process, with
  the stage's own blob store. Every service in cluster mode uses it: each service is a
  process of its own already, and one scales a cluster by running more of them.
- :class:`ProcessPageWork` runs jobs in worker processes (``python -m
  common.pagework``, a fresh interpreter, so nothing of the parent's threads or
  sockets is copied). Each worker has a blob store of its own in the same folder,
  under the writer id ``<writer>-p<pid>``, so records of different processes never
  share a file; side-file lines (the CDXJ index) are appended with one ``write`` each,
  so processes can share those. Embedded mode parses pages this way, so a crawl on one
  machine uses a second core: the Python interpreter runs one thread at a time. (It
  writes WARC records on threads: compression, digests and file writes run outside
  the interpreter's lock, and a writer process cost 40 MiB for no gain in pace.)

Parent and worker talk over a socket pair the event loop reads and writes itself, with
no helper threads: a frame is a 4-byte big-endian length and a pickle. The parent
sends ``(id, job, args, kwargs)``; the worker answers ``(id, ok, result or
exception)``. Jobs and results cross by pickle, so they carry plain values (msgspec
structs, dataclasses, bytes), never open files or sockets. A job's exception is raised
again in the parent (as :class:`PageWorkError` when it cannot be pickled).

A worker ignores SIGINT: the parent decides when to stop (Ctrl-C stops the crawl in
order, then the parent closes its end of the socket, and the worker closes its files
and exits). A worker whose parent dies sees the socket end and exits the same way. A
worker that dies fails the jobs it was running with :class:`PageWorkError` (so their
messages are delivered again), and the next job gets a new worker.

Time limit: a worker runs its jobs one after another, so the parent knows which job is
running (the oldest unanswered one) and since when (the previous answer, or the
worker's "ready" frame, sent once it is set up). A job that runs longer than
``job_timeout`` seconds (``CRAWLER_CRAWL_PAGE_JOB_TIMEOUT``) is abandoned: the parent
kills the worker (SIGKILL to its own child, by PID), the job fails with
:class:`PageJobTimeoutError`, the jobs queued behind it are sent again, and the next job
starts a new worker. Records the killed worker wrote stay in its files (a record
it was writing may end torn, like after a crash; readers skip it).

Lanes: ``ProcessPageWork(..., lanes=("write", "parse"))`` runs a pool of workers per
lane and :meth:`ProcessPageWork.lane` hands a stage the view of one lane, so jobs of
one lane never wait behind another's (a slow parse would delay no other page's
records if writes had a lane of their own). A parse job whose page another process
wrote reads it back from the file the writer appended it to.

Memory: a worker hands the memory a large page's parse freed back to the system. A
parse of a 2.5 MB page (a documentation site's table of contents, say) takes about
110 MiB of heap; the allocator keeps it once freed, as free space between live blocks
it cannot give back by shrinking its heap, so the worker would stay that large for the
rest of the crawl and each worker the lane adds would too. After a job that left the
worker's anonymous memory :data:`TRIM_GROWTH` above where it stood, the worker asks
the C library to release its free pages (glibc's ``malloc_trim``: about 4 ms after such
a page, against the second its parse took); elsewhere it does nothing.

Threads cannot be killed: :class:`ThreadPageWork` has no time limit and one pool for
every job. There the input bounds of the parser (:mod:`parser.html`) are what keeps a
page's cost bounded; note that resiliparse holds the GIL while it parses (lexbor does
not), so a slow parse there stalls the whole process.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import importlib
import itertools
import logging
import os
import pickle
import signal
import socket
import struct
import sys
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from common import urls
from common.archive import ArchiveWriter, StoredResponse
from common.messages import RecordPointer
from common.ports import BlobStore
from common.settings import Settings

log = logging.getLogger(__name__)

KEEP_RECENT = 256  # responses a worker keeps for parsing (about 5 MiB of 20 KiB pages)

P = ParamSpec("P")
T = TypeVar("T")


class PageWorkError(RuntimeError):
    """A page job could not run: its worker process died."""


class PageJobTimeoutError(PageWorkError):
    """A page job ran longer than the time limit: abandoned, its worker killed."""


class _ResendError(Exception):
    """A job queued behind an abandoned one: send it again to a new worker."""


DEFAULT_LANE = "page"
RESENDS = 3  # times a job queued behind abandoned ones is sent again before it fails


@dataclass(slots=True)
class WorkContext:
    """What a page job may use: the settings and the worker's blob store and archive.

    With ``keep_recent`` > 0 it also keeps the last responses written here (at most
    that many), so parsing a page written by the same worker skips reading it back
    from the file. Only useful where one process both writes and parses pages (embedded
    mode); a fetcher service never parses, so it keeps none.
    """

    settings: Settings
    blobs: BlobStore
    archive: ArchiveWriter
    keep_recent: int = 0
    tracking: urls.TrackingRules = field(init=False)
    recent: OrderedDict[RecordPointer, StoredResponse] = field(init=False)

    def __post_init__(self) -> None:
        self.tracking = urls.TrackingRules.from_settings(self.settings.urls)
        self.recent = OrderedDict()

    @property
    def keeper(self) -> Callable[[RecordPointer, StoredResponse], None] | None:
        """What a writer hands its responses to (None when none are kept, so a writer
        does not build a response nobody will read)."""
        return self.remember if self.keep_recent > 0 else None

    def remember(self, pointer: RecordPointer, stored: StoredResponse) -> None:
        self.recent[pointer] = stored
        while len(self.recent) > self.keep_recent:
            self.recent.popitem(last=False)

    def recall(self, pointer: RecordPointer) -> StoredResponse | None:
        """The response written at ``pointer`` by this worker, once (then forgotten)."""
        return self.recent.pop(pointer, None)


class JobRef:
    """A job named by its module and function. It pickles as those two names, so the
    process that hands it to a worker process need not import the job's module and the
    libraries that module loads (the worker imports them: a parent's start-up stays
    short); called in a thread, it imports the module then."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name

    def __call__(self, context: WorkContext, *args: Any, **kwargs: Any) -> Any:
        job = getattr(importlib.import_module(self.module), self.name)
        return job(context, *args, **kwargs)

    def __reduce__(self) -> tuple[type[JobRef], tuple[str, str]]:
        return JobRef, (self.module, self.name)

    def __repr__(self) -> str:
        return f"JobRef({self.module}:{self.name})"


class PageWork(Protocol):
    async def start(self, *, wait: bool = True) -> None:
        """Start the workers (before the first job); with ``wait`` false, return
        without waiting for them to be set up (jobs sent meanwhile wait in their
        queues, and a job's time limit starts once its worker is ready)."""
        ...

    async def run(self, job: Callable[Concatenate[WorkContext, P], T],
                  *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``job(context, *args, **kwargs)`` away from the event loop."""
        ...

    async def close(self) -> None:
        """Release the workers once running jobs are done (idempotent)."""
        ...

    def lane(self, name: str) -> PageWork:
        """The jobs of lane ``name``: with workers of their own where the implementation
        has lanes, else these same workers."""
        ...


class ThreadPageWork:
    """Jobs on worker threads of this process, with this process's blob store."""

    def __init__(self, context: WorkContext) -> None:
        self.context = context

    async def start(self, *, wait: bool = True) -> None:
        return None

    async def run(self, job: Callable[Concatenate[WorkContext, P], T],
                  *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(job, self.context, *args, **kwargs)

    async def close(self) -> None:
        return None

    def lane(self, name: str) -> PageWork:
        return self  # one thread pool; see the module docstring


# -- worker processes ------------------------------------------------------------------

_HEADER = struct.Struct(">I")
RETIRE_SECONDS = 30.0  # a worker ending longer than this after its socket closed is killed
#: A lane below its most workers starts another when this many jobs in a row found
#: every worker busy ...
GROW_AFTER = 100
#: ... over at least this many seconds (a backlog that lasts, not a moment's burst: on
#: a web of light pages 100 jobs pass in half a second, and such bursts formed at
#: random, starting a worker that bought no pace for 60-90 MiB; jobs in a row that
#: found every worker busy mean the lane was busy all of that time) ...
GROW_AFTER_SECONDS = 2.0
#: ... and the machine had at least this much of a core idle while they queued: where
#: every core is busy (the main process is the bottleneck, not the lane), another worker
#: only competes for the same cores and the crawl gets slower (docs/benchmarks.md) ...
GROW_SPARE_CORES = 0.5
#: ... and, where the lane is told how many jobs wait for it upstream (``waiting``),
#: those jobs and its own would take its workers at least this many seconds at the
#: pace they answered in meanwhile: a worker takes about a second to start and 80 to
#: 90 MiB, so it must have more work ahead than a crawl's tail (on a site of heavy
#: pages a lane one worker kept up with grew near the crawl's end, with 2 to 3 s of
#: parsing left, for no pace and 80 MiB; docs/cost.md)
GROW_BACKLOG_SECONDS = 5.0

CpuSample = tuple[float, float]
"""The machine's idle and total CPU time since boot, in clock ticks of every core."""


def cpu_sample() -> CpuSample | None:
    """The machine's CPU times from ``/proc/stat`` (idle and I/O wait count as idle);
    None where there is no such file (then a lane grows on its backlog alone)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 6 or fields[0] != b"cpu":
        return None
    ticks = [float(x) for x in fields[1:]]
    # guest time (fields 9 and 10) is counted in user time already
    return ticks[3] + ticks[4], sum(ticks[:8])


def spare_cores(before: CpuSample, after: CpuSample, cores: int) -> float:
    """Pure: how many cores were idle, on average, between two samples (0 when no time
    passed between them)."""
    total = after[1] - before[1]
    if total <= 0:
        return 0.0
    return max(0.0, min(1.0, (after[0] - before[0]) / total)) * cores


def backlog_seconds(jobs: int, answered: int, seconds: float) -> float:
    """Pure: how long ``jobs`` waiting jobs would take at the pace of ``answered``
    answers in ``seconds`` (infinite when none came: the lane is stuck behind long
    jobs; 0 when nothing waits)."""
    if jobs <= 0:
        return 0.0
    if answered <= 0 or seconds <= 0:
        return float("inf")
    return jobs * seconds / answered


def _frame(value: object) -> bytes:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes from ``sock``; None at the end of the stream."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


#: A worker whose anonymous memory grew this much since the last look (its start, or
#: the last trim) asks the C library to give its free pages back after the job.
TRIM_GROWTH = 32 << 20


def trim_due(anonymous: int, baseline: int, growth: int = TRIM_GROWTH) -> bool:
    """Pure: whether a worker with ``anonymous`` bytes of anonymous memory, against
    ``baseline`` at its start or last trim, should trim its heap now."""
    return anonymous - baseline >= growth


def anonymous_memory() -> int | None:
    """This process's resident memory not backed by files (bytes), from
    ``/proc/self/statm``; None where there is no such file."""
    try:
        with open("/proc/self/statm", "rb") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class HeapTrimmer:
    """Gives freed heap pages back after a job that grew the process (see the module
    docstring); a no-op where the C library has no ``malloc_trim`` or there is no
    ``/proc``."""

    __slots__ = ("_trim", "baseline", "trims")

    def __init__(self) -> None:
        self._trim: Callable[[int], int] | None = None
        name = ctypes.util.find_library("c")
        try:
            library = ctypes.CDLL(name) if name else None
            trim = getattr(library, "malloc_trim", None)
        except OSError:
            trim = None
        if trim is not None:
            trim.argtypes = [ctypes.c_size_t]
            trim.restype = ctypes.c_int
            self._trim = trim
        self.baseline = anonymous_memory() or 0
        self.trims = 0

    def after_job(self) -> None:
        if self._trim is None:
            return
        now = anonymous_memory()
        if now is None or not trim_due(now, self.baseline):
            return
        self._trim(0)
        self.trims += 1
        self.baseline = anonymous_memory() or now


def worker_main(fd: int) -> int:
    """A worker process: set up from the first frame, then run jobs until the end."""
    from common.runtime import make_blobs

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)

    def receive() -> Any:
        head = _recv_exact(sock, _HEADER.size)
        if head is None:
            return None
        body = _recv_exact(sock, _HEADER.unpack(head)[0])
        return None if body is None else pickle.loads(body)

    setup = receive()
    if setup is None:
        return 0
    settings, root, writer, cdx_name, keep_recent, preload = setup
    for module in preload:  # the jobs' modules, so a first job does not pay the import
        warm_up = getattr(importlib.import_module(module), "warm_up", None)
        if callable(warm_up):  # and what they load on first use (a model, say)
            warm_up()
    blobs = make_blobs(settings, f"{writer}-p{os.getpid()}", root=root)
    archive = ArchiveWriter(blobs, software=settings.crawl.user_agent, cdx_name=cdx_name)
    context = WorkContext(settings, blobs, archive, keep_recent=keep_recent)
    trimmer = HeapTrimmer()  # its baseline: the worker set up, its model loaded
    sock.sendall(_frame((None, True, os.getpid())))  # ready: job time limits start now
    try:
        while (request := receive()) is not None:
            rid, job, args, kwargs = request
            try:
                answer = _frame((rid, True, job(context, *args, **kwargs)))
            except Exception as exc:  # the job's failure is the parent's to handle
                try:
                    answer = _frame((rid, False, exc))
                except Exception:
                    answer = _frame((rid, False, PageWorkError(f"{type(exc).__name__}: {exc}")))
            sock.sendall(answer)
            del request, answer, args, kwargs  # the job's input and output are garbage now
            trimmer.after_job()  # after the answer, so no result waits for it
    finally:
        blobs.close()  # fsync: every record written is on disk before the worker ends
        sock.close()
    return 0


@dataclass(slots=True)
class _Job:
    future: asyncio.Future[Any]
    name: str


@dataclass(slots=True)
class _Worker:
    process: asyncio.subprocess.Process
    writer: asyncio.StreamWriter
    lane: str
    reader_task: asyncio.Task[None] | None = None
    # jobs sent and not answered, oldest first: the first is the one running
    pending: dict[int, _Job] = field(default_factory=dict)
    alive: bool = True
    ready: bool = False  # set up (its start-up does not count against a job's limit)
    started: asyncio.Event = field(default_factory=asyncio.Event)  # ready, or ended
    killed: bool = False  # by us, for a job over the time limit
    timer: asyncio.TimerHandle | None = None  # the running job's time limit


@dataclass(slots=True)
class _Pool:
    workers: list[_Worker] = field(default_factory=list)
    starting: asyncio.Lock = field(default_factory=asyncio.Lock)  # one replacement at a time
    queued_in_a_row: int = 0  # jobs in a row that found every worker of the lane busy
    queued_since: CpuSample | None = None  # the machine's CPU times at the first of them
    queued_at: float = 0.0  # and the time (the event loop's clock)
    answered: int = 0  # jobs the lane's workers answered, ever
    answered_since: int = 0  # ... at the first of the jobs in a row
    growing: asyncio.Task[None] | None = None  # another worker starting (see GROW_AFTER)


class ProcessPageWork:
    """Jobs in ``processes`` worker processes per lane, each with a blob store in
    ``root``; a job running longer than ``job_timeout`` seconds (default: the setting;
    0: no limit) is abandoned and its worker killed and replaced. Each worker imports
    the modules named in ``preload`` (those of the jobs) and calls their ``warm_up()``,
    where they have one, before it takes jobs; a mapping names them per lane (a lane it
    leaves out preloads nothing), so a lane whose jobs never need a module's warm-up (a
    language model, say) does not pay for it in time or memory.

    A lane below its ``lane_processes`` grows by one worker when its jobs keep finding
    every worker busy (:data:`GROW_AFTER`, :data:`GROW_AFTER_SECONDS`) while the machine
    has a core to spare (:data:`GROW_SPARE_CORES`, from ``cpu``) and, where ``waiting``
    tells how many of the lane's jobs wait upstream (a bus's queue), enough work is
    ahead to pay for a worker (:data:`GROW_BACKLOG_SECONDS`)."""

    def __init__(self, settings: Settings, *, processes: int, root: str, writer: str,
                 cdx_name: str, lanes: tuple[str, ...] = (DEFAULT_LANE,),
                 job_timeout: float | None = None, keep_recent: int = KEEP_RECENT,
                 preload: tuple[str, ...] | Mapping[str, tuple[str, ...]] = (),
                 lane_processes: Mapping[str, int] | None = None,
                 cpu: Callable[[], CpuSample | None] = cpu_sample,
                 waiting: Callable[[str], int] | None = None) -> None:
        if processes < 1:
            raise ValueError("ProcessPageWork needs at least one process")
        if not lanes:
            raise ValueError("ProcessPageWork needs at least one lane")
        self.processes = processes
        # workers per lane: ``processes`` at the start, and up to ``lane_processes``
        # where that names more, started while the lane's jobs wait (GROW_AFTER)
        self._sizes = {name: processes for name in lanes}
        self._limits = {name: max(processes, (lane_processes or {}).get(name) or 0)
                        for name in lanes}
        self.job_timeout = (settings.crawl.page_job_timeout if job_timeout is None
                            else job_timeout)
        self._setup = (settings, root, writer, cdx_name, keep_recent)
        self._preload = ({name: tuple(preload.get(name, ())) for name in lanes}
                         if isinstance(preload, Mapping)
                         else {name: tuple(preload) for name in lanes})
        self._cpu = cpu  # the machine's CPU times, for GROW_SPARE_CORES
        self._waiting = waiting  # jobs waiting for a lane upstream, for GROW_BACKLOG_SECONDS
        self._cores = os.cpu_count() or 1
        self._pools = {name: _Pool() for name in lanes}
        self._default = lanes[0]
        self._ids = itertools.count()
        self._closed = False
        self.timeouts = 0  # jobs abandoned for running over the limit

    @property
    def _workers(self) -> list[_Worker]:
        return [w for pool in self._pools.values() for w in pool.workers]

    def pids(self, lane: str | None = None) -> list[int]:
        """Process ids of the live workers (of one lane, or all; for measuring them)."""
        return [w.process.pid for w in self._workers
                if w.alive and (lane is None or w.lane == lane)]

    def lane(self, name: str) -> PageWork:
        if name not in self._pools:
            raise KeyError(f"no page work lane {name!r} (lanes: {', '.join(self._pools)})")
        return _Lane(self, name)

    async def start(self, *, wait: bool = True) -> None:
        """Start the workers and (with ``wait``) wait until each is set up (``preload``
        imported)."""
        for name, pool in self._pools.items():
            while len(pool.workers) < self._sizes[name]:
                pool.workers.append(await self._spawn(name))
        if wait:
            await asyncio.gather(*(w.started.wait() for w in self._workers))

    async def _spawn(self, lane: str) -> _Worker:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "common.pagework", str(child.fileno()),
                pass_fds=(child.fileno(),), env=env, stdin=asyncio.subprocess.DEVNULL)
        finally:
            child.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent)
        worker = _Worker(process, writer, lane)
        writer.write(_frame((*self._setup, self._preload[lane])))
        worker.reader_task = asyncio.create_task(self._read(worker, reader),
                                                 name=f"page-worker-{process.pid}")
        return worker

    async def _read(self, worker: _Worker, reader: asyncio.StreamReader) -> None:
        error: BaseException = PageWorkError(f"page worker {worker.process.pid} ended")
        try:
            while True:
                head = await reader.readexactly(_HEADER.size)
                rid, ok, value = pickle.loads(await reader.readexactly(_HEADER.unpack(head)[0]))
                if rid is None:  # the worker is ready
                    worker.ready = True
                    worker.started.set()
                    self._arm(worker)
                    continue
                job = worker.pending.pop(rid, None)
                self._arm(worker)  # the next job, if any, runs from now
                self._pools[worker.lane].answered += 1
                if job is None or job.future.done():
                    continue
                if ok:
                    job.future.set_result(value)
                else:
                    job.future.set_exception(value if isinstance(value, BaseException)
                                             else PageWorkError(repr(value)))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            error = PageWorkError(f"page worker {worker.process.pid} ended: {exc}")
        except Exception as exc:  # an unreadable answer: this worker is no use now
            error = PageWorkError(f"page worker {worker.process.pid} failed: {exc!r}")
        finally:
            worker.alive = False
            worker.started.set()
            self._disarm(worker)
            for job in worker.pending.values():
                if not job.future.done():
                    job.future.set_exception(error)
            worker.pending.clear()
            if not self._closed and not worker.killed:
                log.warning("%s", error)

    def _disarm(self, worker: _Worker) -> None:
        if worker.timer is not None:
            worker.timer.cancel()
            worker.timer = None

    def _arm(self, worker: _Worker) -> None:
        """Start the time limit of the job now at the head of ``worker``'s queue."""
        self._disarm(worker)
        if self.job_timeout and worker.alive and worker.ready and worker.pending:
            rid = next(iter(worker.pending))
            worker.timer = asyncio.get_running_loop().call_later(
                self.job_timeout, self._overdue, worker, rid)

    def _overdue(self, worker: _Worker, rid: int) -> None:
        """The job ``rid`` ran over the limit: fail it, kill its worker (our child, by
        its PID) and send the jobs queued behind it again."""
        worker.timer = None
        if not worker.alive or next(iter(worker.pending), None) != rid:
            return
        worker.alive = False
        worker.killed = True
        self.timeouts += 1
        job = worker.pending.pop(rid)
        pid = worker.process.pid
        log.warning("page job %s ran over %g s; killing page worker %d", job.name,
                    self.job_timeout, pid)
        with contextlib.suppress(ProcessLookupError):
            worker.process.kill()
        if not job.future.done():
            job.future.set_exception(PageJobTimeoutError(
                f"{job.name} ran over {self.job_timeout:g} s (page worker {pid} killed)"))
        for queued in worker.pending.values():
            if not queued.future.done():
                queued.future.set_exception(_ResendError())
        worker.pending.clear()

    async def _pick(self, lane: str) -> _Worker:
        pool = self._pools[lane]
        async with pool.starting:
            for i, w in enumerate(pool.workers):
                if not w.alive:
                    await self._retire(w)
                    pool.workers[i] = await self._spawn(lane)
            while len(pool.workers) < self._sizes[lane]:
                pool.workers.append(await self._spawn(lane))
        best = min(pool.workers, key=lambda w: len(w.pending))
        if len(pool.workers) >= self._limits[lane]:
            return best  # as many workers as it may have: nothing to count
        if not best.pending:
            pool.queued_in_a_row = 0
        else:
            if pool.queued_in_a_row == 0:
                pool.queued_since = self._cpu()
                pool.queued_at = asyncio.get_running_loop().time()
                pool.answered_since = pool.answered
            pool.queued_in_a_row += 1
        if (pool.queued_in_a_row >= GROW_AFTER and pool.growing is None
                and not self._closed
                and asyncio.get_running_loop().time() - pool.queued_at
                >= GROW_AFTER_SECONDS):
            if self._has_spare_cores(pool) and self._has_work_ahead(lane, pool):
                pool.growing = asyncio.create_task(self._grow(lane),
                                                   name=f"page-work-grow-{lane}")
            else:  # the cores are busy, or the lane nearly done: count anew from here
                pool.queued_in_a_row = 0
        return best

    def _has_work_ahead(self, lane: str, pool: _Pool) -> bool:
        if self._waiting is None:
            return True  # what waits upstream is unknown: the backlog in a row decides
        jobs = self._waiting(lane) + sum(len(w.pending) for w in pool.workers)
        seconds = asyncio.get_running_loop().time() - pool.queued_at
        return (backlog_seconds(jobs, pool.answered - pool.answered_since, seconds)
                >= GROW_BACKLOG_SECONDS)

    def _has_spare_cores(self, pool: _Pool) -> bool:
        now = self._cpu()
        if pool.queued_since is None or now is None:
            return True  # the machine's CPU times are unknown: the backlog decides
        return spare_cores(pool.queued_since, now, self._cores) >= GROW_SPARE_CORES

    async def _grow(self, lane: str) -> None:
        """Start one more worker of ``lane``; it takes jobs once it is set up."""
        pool = self._pools[lane]
        try:
            worker = await self._spawn(lane)
            await worker.started.wait()
            if self._closed or not worker.alive:
                await self._retire(worker)
                return
            pool.workers.append(worker)
            log.info("page work: lane %s grew to %d workers (jobs were waiting)", lane,
                     len(pool.workers))
        except Exception as exc:  # no new worker: the lane goes on with those it has
            log.warning("page work: could not start another %s worker: %r", lane, exc)
            self._limits[lane] = len(pool.workers)
        finally:
            pool.queued_in_a_row = 0
            pool.growing = None

    async def run(self, job: Callable[Concatenate[WorkContext, P], T],
                  *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(self._default, job, *args, **kwargs)

    async def _run(self, lane: str, job: Callable[Concatenate[WorkContext, P], T],
                   *args: P.args, **kwargs: P.kwargs) -> T:
        name = getattr(job, "__qualname__", repr(job))
        for attempt in itertools.count():
            if self._closed:
                raise PageWorkError("page workers are closed")
            worker = await self._pick(lane)
            rid = next(self._ids)
            future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
            worker.pending[rid] = _Job(future, name)
            if len(worker.pending) == 1:
                self._arm(worker)
            try:
                worker.writer.write(_frame((rid, job, args, kwargs)))
                await worker.writer.drain()
            except (ConnectionError, RuntimeError) as exc:
                worker.pending.pop(rid, None)
                raise PageWorkError(f"page worker {worker.process.pid}: {exc}") from exc
            try:
                return await future
            except _ResendError:
                if attempt >= RESENDS:
                    raise PageWorkError(f"{name} was queued behind {RESENDS + 1} jobs "
                                        "that ran over the time limit") from None
        raise AssertionError("unreachable")

    async def _retire(self, worker: _Worker) -> None:
        self._disarm(worker)
        worker.writer.close()
        with contextlib.suppress(ConnectionError):
            await worker.writer.wait_closed()
        try:
            await asyncio.wait_for(worker.process.wait(), RETIRE_SECONDS)
        except TimeoutError:
            log.warning("page worker %d did not end; killing it", worker.process.pid)
            worker.process.kill()
            await worker.process.wait()
        if worker.reader_task is not None:
            worker.reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker.reader_task

    async def close(self) -> None:
        """Wait for the jobs sent, then end every worker (each closes its files)."""
        if self._closed:
            return
        self._closed = True
        growing = [pool.growing for pool in self._pools.values() if pool.growing is not None]
        if growing:  # each retires its new worker itself once it sees the close
            await asyncio.gather(*growing, return_exceptions=True)
        workers = self._workers
        for w in workers:
            if w.pending:
                await asyncio.gather(*(job.future for job in w.pending.values()),
                                     return_exceptions=True)
        await asyncio.gather(*(self._retire(w) for w in workers))
        for pool in self._pools.values():
            pool.workers.clear()


class _Lane:
    """One lane of a :class:`ProcessPageWork`: its jobs go to that lane's workers;
    starting and closing act on the whole."""

    def __init__(self, work: ProcessPageWork, name: str) -> None:
        self.work = work
        self.name = name

    async def start(self, *, wait: bool = True) -> None:
        await self.work.start(wait=wait)

    async def run(self, job: Callable[Concatenate[WorkContext, P], T],
                  *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.work._run(self.name, job, *args, **kwargs)

    async def close(self) -> None:
        await self.work.close()

    def lane(self, name: str) -> PageWork:
        return self.work.lane(name)


if __name__ == "__main__":
    # run as common.pagework, not __main__, so the classes pickled back (PageWorkError)
    # name a module the parent can import
    from common.pagework import worker_main as _main

    sys.exit(_main(int(sys.argv[1])))
