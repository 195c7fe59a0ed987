"""Where a stage's page work runs: in worker threads of its process, or in processes.

Page work is the CPU-heavy part of handling one page outside the event loop: writing
its WARC records (compression, digests) and parsing it (charset, HTML, links, text,
SimHash). A job is a module-level function ``job(context, *args)``; the
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
  so processes can share those. Embedded mode uses it so a crawl on one machine uses
  a second core: the Python interpreter runs one thread at a time.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import signal
import socket
import struct
import sys
from collections import OrderedDict
from collections.abc import Callable
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

    def remember(self, pointer: RecordPointer, stored: StoredResponse) -> None:
        if self.keep_recent <= 0:
            return
        self.recent[pointer] = stored
        while len(self.recent) > self.keep_recent:
            self.recent.popitem(last=False)

    def recall(self, pointer: RecordPointer) -> StoredResponse | None:
        """The response written at ``pointer`` by this worker, once (then forgotten)."""
        return self.recent.pop(pointer, None)


class PageWork(Protocol):
    async def start(self) -> None:
        """Start the workers (before the first job)."""
        ...

    async def run(self, job: Callable[Concatenate[WorkContext, P], T],
                  *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``job(context, *args, **kwargs)`` away from the event loop."""
        ...

    async def close(self) -> None:
        """Release the workers once running jobs are done (idempotent)."""
        ...


class ThreadPageWork:
    """Jobs on worker threads of this process, with this process's blob store."""

    def __init__(self, context: WorkContext) -> None:
        self.context = context

    async def start(self) -> None:
        return None

    async def run(self, job: Callable[Concatenate[WorkContext, P], T],
                  *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(job, self.context, *args, **kwargs)

    async def close(self) -> None:
        return None


# -- worker processes ------------------------------------------------------------------

_HEADER = struct.Struct(">I")
RETIRE_SECONDS = 30.0  # a worker ending longer than this after its socket closed is killed


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


def worker_main(fd: int) -> int:
    """A worker process: set up from the first frame, then run jobs until the end."""
    from common.adapters.local_blobs import LocalBlobStore

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
    settings, root, writer, cdx_name = setup
    blobs = LocalBlobStore(root, writer_id=f"{writer}-p{os.getpid()}",
                           prefix=settings.blob.prefix, max_bytes=settings.blob.warc_max_bytes)
    archive = ArchiveWriter(blobs, software=settings.crawl.user_agent, cdx_name=cdx_name)
    context = WorkContext(settings, blobs, archive, keep_recent=KEEP_RECENT)
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
    finally:
        blobs.close()  # fsync: every record written is on disk before the worker ends
        sock.close()
    return 0


@dataclass(slots=True)
class _Worker:
    process: asyncio.subprocess.Process
    writer: asyncio.StreamWriter
    reader_task: asyncio.Task[None] | None = None
    pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    alive: bool = True


class ProcessPageWork:
    """Jobs in ``processes`` worker processes, each with a blob store in ``root``."""

    def __init__(self, settings: Settings, *, processes: int, root: str, writer: str,
                 cdx_name: str) -> None:
        if processes < 1:
            raise ValueError("ProcessPageWork needs at least one process")
        self.processes = processes
        self._setup = (settings, root, writer, cdx_name)
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._closed = False
        self._starting: asyncio.Lock | None = None

    def pids(self) -> list[int]:
        """Process ids of the live workers (for measuring them)."""
        return [w.process.pid for w in self._workers if w.alive]

    async def start(self) -> None:
        while len(self._workers) < self.processes:
            self._workers.append(await self._spawn())

    async def _spawn(self) -> _Worker:
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
        worker = _Worker(process, writer)
        writer.write(_frame(self._setup))
        worker.reader_task = asyncio.create_task(self._read(worker, reader),
                                                 name=f"page-worker-{process.pid}")
        return worker

    async def _read(self, worker: _Worker, reader: asyncio.StreamReader) -> None:
        error: BaseException = PageWorkError(f"page worker {worker.process.pid} ended")
        try:
            while True:
                head = await reader.readexactly(_HEADER.size)
                rid, ok, value = pickle.loads(await reader.readexactly(_HEADER.unpack(head)[0]))
                future = worker.pending.pop(rid, None)
                if future is None or future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value if isinstance(value, BaseException)
                                         else PageWorkError(repr(value)))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            error = PageWorkError(f"page worker {worker.process.pid} ended: {exc}")
        except Exception as exc:  # an unreadable answer: this worker is no use now
            error = PageWorkError(f"page worker {worker.process.pid} failed: {exc!r}")
        finally:
            worker.alive = False
            for future in worker.pending.values():
                if not future.done():
                    future.set_exception(error)
            worker.pending.clear()
            if not self._closed:
                log.warning("%s", error)

    async def _pick(self) -> _Worker:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            for i, w in enumerate(self._workers):
                if not w.alive:
                    await self._retire(w)
                    self._workers[i] = await self._spawn()
            await self.start()
        return min(self._workers, key=lambda w: len(w.pending))

    async def run(self, job: Callable[Concatenate[WorkContext, P], T],
                  *args: P.args, **kwargs: P.kwargs) -> T:
        if self._closed:
            raise PageWorkError("page workers are closed")
        worker = await self._pick()
        rid = next(self._ids)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        worker.pending[rid] = future
        try:
            worker.writer.write(_frame((rid, job, args, kwargs)))
            await worker.writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            worker.pending.pop(rid, None)
            raise PageWorkError(f"page worker {worker.process.pid}: {exc}") from exc
        return await future

    async def _retire(self, worker: _Worker) -> None:
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
        for w in self._workers:
            if w.pending:
                await asyncio.gather(*w.pending.values(), return_exceptions=True)
        await asyncio.gather(*(self._retire(w) for w in self._workers))
        self._workers.clear()


if __name__ == "__main__":
    # run as common.pagework, not __main__, so the classes pickled back (PageWorkError)
    # name a module the parent can import
    from common.pagework import worker_main as _main

    sys.exit(_main(int(sys.argv[1])))
