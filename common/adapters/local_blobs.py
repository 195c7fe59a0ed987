"""A :class:`~common.ports.BlobStore` on a local folder (or a shared volume).

Layout under ``root``::

    {prefix}-{writer_id}-{stream}-{seq:05d}.warc.gz   one rolled file of a stream
    {name}                                          a side file (index.cdxj, pages.jsonl)

Pointers name files by *key*: the path relative to ``root`` with ``/`` separators,
never an absolute path, so a pointer stays valid when the folder is mounted elsewhere
and the same keys can later name objects in an object store (``append`` would stage
the current file locally and upload it when it rolls; ``read`` would be a ranged GET).

Writing rules:

- Every record is appended with one ``write`` call to a file opened ``O_APPEND``; a
  record is never split across files. A file rolls over when the next record would
  take it past ``max_bytes`` (a record larger than that gets a file of its own).
- Files are created with ``O_EXCL``: an existing file is never opened for writing
  again, so nothing is ever overwritten. A new process (a restart) continues its
  streams with the next sequence number after the highest one on disk for its
  ``writer_id``; the previous file, possibly ending in a record torn by a crash, is
  left as it is. Several processes with different ``writer_id`` values can share one
  root: their file names never collide.
- :meth:`LocalBlobStore.set_file_header` names a record (the WARC ``warcinfo``) that
  begins every new file of a stream.
- Side files are opened ``O_APPEND`` and every line is written with one ``write``
  call, so lines of processes sharing a side file on a local file system do not mix.
  A side file whose last line was torn by a crash gets a line break before the next
  line, so the fragment stays a line of its own that readers can skip.

Durability: records are not buffered in the process. When ``append`` returns, the
bytes are in the operating system's page cache and survive the death of the process
(SIGKILL included); :meth:`LocalBlobStore.flush` makes them durable against a
machine crash or power loss (``fsync`` of every open file, and of the folder when
files were created since the last flush). Publish a pointer to another stage only
after ``flush`` when that matters. Records of a file are flushed before its side
files, so after ``flush`` an index line never names bytes that are not on disk.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from common.messages import RecordPointer

SUFFIX = ".warc.gz"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SIDE_PART_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class BlobError(ValueError):
    """A pointer or name that does not name stored bytes, or a store used after close."""


@dataclass(slots=True)
class _OpenFile:
    key: str
    fd: int
    size: int
    records: int = 0  # records appended (not counting the header)
    dirty: bool = True


@dataclass(slots=True)
class _Stream:
    name: str
    next_seq: int | None = None  # found on disk at first use
    current: _OpenFile | None = None
    header: Callable[[str], bytes] | None = None


@dataclass(slots=True)
class _SideFile:
    fd: int
    dirty: bool = False


@dataclass(slots=True)
class _State:
    streams: dict[str, _Stream] = field(default_factory=dict)
    side: dict[str, _SideFile] = field(default_factory=dict)
    dirs_dirty: set[Path] = field(default_factory=set)
    closed: bool = False


def _check_name(kind: str, value: str) -> str:
    if not _NAME_RE.fullmatch(value):
        raise ValueError(f"{kind} {value!r}: use 1-64 letters, digits, '_', '.', '-' "
                         "(not first)")
    return value


def _check_key(key: str) -> tuple[str, ...]:
    """Split a relative key into its parts, refusing anything that leaves the root."""
    parts = tuple(key.split("/"))
    if not key or any(not _SIDE_PART_RE.fullmatch(p) or p in (".", "..") for p in parts):
        raise BlobError(f"invalid blob key {key!r}")
    return parts


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class LocalBlobStore:
    """Rolled append-only files in a local folder; see the module docstring.

    Thread-safe: every method may be called from worker threads.
    """

    def __init__(self, root: str, *, writer_id: str, prefix: str = "crawl",
                 max_bytes: int = 1_000_000_000, fsync: bool = True,
                 lock_files: bool = False,
                 on_finished: Callable[[str], None] | None = None,
                 known_keys: Callable[[str], Iterable[str]] | None = None) -> None:
        """Hooks for a store that ships finished files elsewhere (see
        :mod:`common.adapters.s3_blobs`): with ``lock_files``, a file being written is
        held under an exclusive ``flock`` from before its name appears until it is
        finished, so another process can tell a finished file (its lock is free) from
        one still written; ``on_finished(key)`` is called after a file is finished
        (fsynced and closed); ``known_keys(name_prefix)`` names files already shipped
        elsewhere, whose sequence numbers a new file of the stream must not reuse."""
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.root = Path(root)
        self.writer_id = _check_name("writer_id", writer_id)
        self.prefix = _check_name("prefix", prefix)
        self.max_bytes = max_bytes
        self.fsync = fsync
        self.lock_files = lock_files
        self.on_finished = on_finished
        self.known_keys = known_keys
        self._lock = threading.Lock()
        self._state = _State()
        self.root.mkdir(parents=True, exist_ok=True)

    # -- naming --------------------------------------------------------------------

    def file_key(self, stream: str, seq: int) -> str:
        """The key of file number ``seq`` of ``stream`` written by this writer."""
        return f"{self.prefix}-{self.writer_id}-{stream}-{seq:05d}{SUFFIX}"

    def stream_files(self, stream: str) -> list[str]:
        """Keys of this writer's files of ``stream`` on disk, in sequence order."""
        return [key for _, key in self._existing(_check_name("stream", stream))]

    def _existing(self, stream: str) -> list[tuple[int, str]]:
        start = f"{self.prefix}-{self.writer_id}-{stream}-"
        pattern = re.compile(re.escape(start) + r"(\d{5,})" + re.escape(SUFFIX))
        found = []
        with os.scandir(self.root) as entries:
            for entry in entries:
                m = pattern.fullmatch(entry.name)
                if m:
                    found.append((int(m.group(1)), entry.name))
        return sorted(found)

    def _highest_elsewhere(self, stream: str) -> int | None:
        if self.known_keys is None:
            return None
        start = f"{self.prefix}-{self.writer_id}-{stream}-"
        pattern = re.compile(re.escape(start) + r"(\d{5,})" + re.escape(SUFFIX))
        seqs = [int(m.group(1)) for key in self.known_keys(start)
                if (m := pattern.fullmatch(key))]
        return max(seqs) if seqs else None

    # -- BlobStore -----------------------------------------------------------------

    def set_file_header(self, stream: str, header: Callable[[str], bytes] | None) -> None:
        """Begin every new file of ``stream`` with ``header(key)``.

        A file of the stream already open is finished, so the next record starts a new
        file that begins with the header.
        """
        _check_name("stream", stream)
        with self._lock:
            self._check_open()
            st = self._stream(stream)
            st.header = header
            self._finish(st)

    def append(self, stream: str, data: bytes) -> RecordPointer:
        """Append ``data`` as one record of ``stream``; return where it is."""
        _check_name("stream", stream)
        if not data:
            raise ValueError("cannot append an empty record")
        with self._lock:
            self._check_open()
            st = self._stream(stream)
            cur = st.current
            if cur is not None and cur.records and cur.size + len(data) > self.max_bytes:
                self._finish(st)
                cur = None
            if cur is None:
                cur = self._open_new(st)
            offset = cur.size
            try:
                _write_all(cur.fd, data)
            except OSError:
                # The file may now end in a partial record: never write after it.
                self._finish(st)
                raise
            cur.size += len(data)
            cur.records += 1
            cur.dirty = True
            return RecordPointer(file=cur.key, offset=offset, length=len(data))

    def append_line(self, name: str, line: str) -> None:
        """Append ``line`` (one trailing line break optional) to the side file ``name``."""
        if line.endswith("\n"):
            line = line[:-1]
        if "\n" in line or "\r" in line:
            raise ValueError("a side-file line cannot contain a line break")
        data = (line + "\n").encode("utf-8", "surrogateescape")
        _check_key(name)
        with self._lock:
            self._check_open()
            side = self._state.side.get(name)
            if side is None:
                side = self._open_side(name)
            _write_all(side.fd, data)
            side.dirty = True

    def read(self, pointer: RecordPointer) -> bytes:
        """The ``pointer.length`` bytes at ``pointer.offset`` of ``pointer.file``."""
        path = self.root.joinpath(*_check_key(pointer.file))
        if pointer.offset < 0 or pointer.length < 0:
            raise BlobError(f"invalid pointer {pointer!r}")
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise BlobError(f"no blob file {pointer.file!r}") from None
        try:
            size = os.fstat(fd).st_size
            if pointer.offset + pointer.length > size:
                raise BlobError(f"pointer {pointer!r} runs past the end of the file "
                                f"({size} bytes)")
            chunks = []
            pos, left = pointer.offset, pointer.length
            while left:
                chunk = os.pread(fd, left, pos)
                if not chunk:
                    raise BlobError(f"short read at {pos} of {pointer.file!r}")
                chunks.append(chunk)
                pos += len(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def flush(self) -> None:
        """Make every appended record and line durable (fsync); records first."""
        with self._lock:
            self._sync()

    def close(self) -> None:
        """Flush and close every file. Later appends raise; reads still work."""
        with self._lock:
            if self._state.closed:
                return
            try:
                self._sync()
            finally:
                for st in self._state.streams.values():
                    self._finish(st)
                for side in self._state.side.values():
                    os.close(side.fd)
                self._state.side.clear()
                self._state.closed = True

    def __enter__(self) -> LocalBlobStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- internals (called with the lock held) -------------------------------------

    def _check_open(self) -> None:
        if self._state.closed:
            raise BlobError("the blob store is closed")

    def _stream(self, stream: str) -> _Stream:
        st = self._state.streams.get(stream)
        if st is None:
            st = self._state.streams[stream] = _Stream(stream)
        return st

    def _open_new(self, st: _Stream) -> _OpenFile:
        if st.next_seq is None:
            existing = self._existing(st.name)
            highest = max([existing[-1][0]] if existing else [], default=-1)
            elsewhere = self._highest_elsewhere(st.name)
            st.next_seq = max(highest, -1 if elsewhere is None else elsewhere) + 1
        while True:
            key = self.file_key(st.name, st.next_seq)
            st.next_seq += 1
            try:
                fd = self._create(key)
            except FileExistsError:
                continue  # another process with the same writer_id: never overwrite
            break
        self._state.dirs_dirty.add(self.root)
        opened = _OpenFile(key=key, fd=fd, size=0)
        st.current = opened
        if st.header is not None:
            try:
                head = st.header(key)
                _write_all(fd, head)
            except BaseException:
                self._finish(st)
                raise
            opened.size = len(head)
        return opened

    def _create(self, key: str) -> int:
        """Open a new file ``key`` for appending; FileExistsError if it exists.

        With ``lock_files`` the file is made under a temporary name, locked, and only
        then given its name (``link`` fails like ``O_EXCL`` when the name is taken), so
        no other process ever sees it unlocked while it is written.
        """
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
        if not self.lock_files:
            return os.open(self.root / key, flags, 0o644)
        temp = self.root / f".{key}.{os.getpid()}.{threading.get_ident()}.new"
        fd = os.open(temp, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.link(temp, self.root / key)
        except BaseException:
            os.close(fd)
            raise
        finally:
            temp.unlink(missing_ok=True)
        return fd

    def _finish(self, st: _Stream) -> None:
        cur, st.current = st.current, None
        if cur is None:
            return
        try:
            if self.fsync:
                os.fsync(cur.fd)
        finally:
            os.close(cur.fd)  # releases the lock (lock_files)
        if self.on_finished is not None:
            self.on_finished(cur.key)

    def _open_side(self, name: str) -> _SideFile:
        path = self.root.joinpath(*_check_key(name))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            _write_all(fd, b"\n")  # end a line torn by a crash
        side = self._state.side[name] = _SideFile(fd)
        self._state.dirs_dirty.add(path.parent)
        return side

    def _sync(self) -> None:
        if not self.fsync:
            return
        for st in self._state.streams.values():
            if st.current is not None and st.current.dirty:
                os.fsync(st.current.fd)
                st.current.dirty = False
        for side in self._state.side.values():
            if side.dirty:
                os.fsync(side.fd)
                side.dirty = False
        for folder in sorted(self._state.dirs_dirty):
            dfd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        self._state.dirs_dirty.clear()
