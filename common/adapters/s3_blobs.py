"""A :class:`~common.ports.BlobStore` on S3-compatible object storage, with a local spool.

Records are written exactly as :class:`~common.adapters.local_blobs.LocalBlobStore`
writes them, into a local folder (the *spool*); the bucket gets whole files:

- A WARC or text file is uploaded when it is finished (it rolls over, its stream gets a
  new header, or the store closes), as one object named ``{key_prefix}/{key}`` (the
  same key its pointers name); a file larger than ``multipart_bytes`` goes up as a
  multipart upload. Only once the bucket has acknowledged the whole object is the
  spool copy deleted, ``keep_uploaded`` seconds later (at close at the latest), so the
  read-back of a recent record (a parse follows its fetch) stays local, even while the
  server is away.
- Side files (the CDXJ index, page records, dead letters) stay in the spool, where
  lines keep being appended; a copy of the whole file (a snapshot) is uploaded when a
  file of the store rolls over, when the store closes and when a store starts on the
  spool. Uploads of one side file are serialised across processes by a lock, each reads
  the file while it holds it, so a later snapshot never loses lines to an earlier one.
- A store that starts on a spool uploads every file left there that no live process is
  writing (one whose writer died, or whose upload did not finish), then its side files:
  a crash leaves records in the spool, never only in memory.
- Uploads run on a thread of their own and are retried (with backoff, without end)
  while the server does not answer: the crawl goes on and the spool grows meanwhile.
  :meth:`S3BlobStore.close` waits up to ``upload_wait`` seconds for the uploads still
  pending; what is left then stays in the spool for the next start.

Reads (:meth:`S3BlobStore.read`) look in the spool first, then do a ranged GET of the
object, so a pointer can be read at any moment: before, during and after its upload.

The guarantee: a record :meth:`append` has returned is in the spool (in the page cache:
it survives the death of the process; after :meth:`flush`, a machine crash too) until
the bucket holds the whole file that has it. So after a crash nothing acknowledged is
lost as long as the spool folder survives (give it a persistent volume); a restarted
store ships it. The bucket alone holds every finished file and a snapshot of the side
files as of the last roll-over or close, not the file still being written.

At start the store checks the bucket (a listing of its key prefix): wrong credentials, a
missing bucket or a server that does not answer end the start with an error naming the
setting to look at.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from common.adapters.local_blobs import SUFFIX, BlobError, LocalBlobStore
from common.messages import RecordPointer
from common.settings import redact_userinfo

if TYPE_CHECKING:
    from obstore.store import S3Store

    from common.metrics import BlobMetrics

log = logging.getLogger(__name__)

SPOOL_LOCK = ".upload.lock"  # held while a start uploads what an earlier process left
_SIDE_LOCK = ".{name}.upload.lock"


class S3ConfigError(BlobError):
    """The bucket cannot be used as configured; the message names the setting."""


@dataclass(frozen=True, slots=True)
class S3Config:
    """Where the bucket is and how to reach it (see ``CRAWLER_BLOB_S3_*``)."""

    bucket: str
    endpoint: str = ""  # empty: the provider's default (AWS)
    region: str = "us-east-1"
    key_prefix: str = ""  # objects are named {key_prefix}/{key}
    path_style: bool = False
    credentials_file: str = ""  # AWS shared-credentials format; empty: environment
    profile: str = ""  # section of credentials_file; empty: AWS_PROFILE or default
    multipart_bytes: int = 64 * 1024 * 1024
    part_bytes: int = 16 * 1024 * 1024
    upload_wait: float = 300.0  # seconds close() waits for pending uploads
    keep_uploaded: float = 60.0  # seconds an uploaded file stays in the spool
    request_timeout: float = 30.0


def read_credentials(path: str, profile: str = "") -> tuple[str, str, str | None]:
    """Access key id, secret key and session token from an AWS shared-credentials file
    (``[profile]`` with ``aws_access_key_id`` and ``aws_secret_access_key``).

    A file that does not parse is reported by line number and kind of fault only: the
    parser's own message quotes the offending line (or names the option or section),
    which in a credentials file may well be a key."""
    parser = configparser.ConfigParser(interpolation=None)
    where = f"CRAWLER_BLOB_S3_CREDENTIALS_FILE={path!r}"
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as exc:
        raise S3ConfigError(f"{where}: cannot read it: {exc.strerror or type(exc).__name__}"
                            ) from None
    except UnicodeDecodeError:
        raise S3ConfigError(f"{where}: not UTF-8 text") from None
    except configparser.Error as exc:
        raise S3ConfigError(f"{where}: {_credentials_fault(exc)} (expected [profile] "
                            "sections of name = value lines)") from None
    name = profile or os.environ.get("AWS_PROFILE", "").strip() or "default"
    if not parser.has_section(name):
        raise S3ConfigError(f"{where}: no [{name}] section")
    section = parser[name]
    key, secret = section.get("aws_access_key_id"), section.get("aws_secret_access_key")
    if not key or not secret:
        raise S3ConfigError(f"{where}: [{name}] needs aws_access_key_id and "
                            "aws_secret_access_key")
    return key.strip(), secret.strip(), (section.get("aws_session_token") or None)


def _credentials_fault(exc: configparser.Error) -> str:
    """What is wrong with a credentials file, by line number, never quoting its text."""
    if isinstance(exc, configparser.MissingSectionHeaderError):
        return f"line {exc.lineno}: a line before the first [section] header"
    if isinstance(exc, configparser.ParsingError):
        lines = ", ".join(str(number) for number, _ in exc.errors[:10])
        more = ", ..." if len(exc.errors) > 10 else ""
        return f"line {lines}{more}: not a name = value line"
    if isinstance(exc, configparser.DuplicateOptionError):
        return f"line {exc.lineno}: an option given twice in its section"
    if isinstance(exc, configparser.DuplicateSectionError):
        return f"line {exc.lineno}: a section given twice"
    return f"not in the shared-credentials format ({type(exc).__name__})"


def open_bucket(config: S3Config) -> S3Store:
    """An obstore client for the bucket (credentials: the file, else the environment's
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ...)."""
    from obstore.store import S3Store

    options: dict[str, object] = {"region": config.region,
                                  "virtual_hosted_style_request": not config.path_style}
    if config.endpoint:
        options["endpoint"] = config.endpoint
    if config.credentials_file:
        key, secret, token = read_credentials(config.credentials_file, config.profile)
        options["access_key_id"] = key
        options["secret_access_key"] = secret
        if token:
            options["session_token"] = token
    timeout = timedelta(seconds=config.request_timeout)
    return S3Store(
        config.bucket, prefix=config.key_prefix or None,
        client_options={"allow_http": config.endpoint.startswith("http://"),
                        "timeout": timeout, "connect_timeout": timedelta(seconds=5)},
        # a few quick retries here; the upload thread retries without end on top
        retry_config={"max_retries": 2, "retry_timeout": timeout,
                      "backoff": {"init_backoff": timedelta(milliseconds=200),
                                  "max_backoff": timedelta(seconds=2), "base": 2}},
        **options)  # type: ignore[arg-type]


def check_bucket(bucket: S3Store, config: S3Config) -> None:
    """List one key of the prefix: raises :class:`S3ConfigError` saying what is wrong."""
    import obstore
    from obstore.exceptions import (
        BaseError,
        NotFoundError,
        PermissionDeniedError,
        UnauthenticatedError,
    )

    where = (f"bucket {config.bucket!r} at "
             f"{redact_userinfo(config.endpoint) or 'the default endpoint'} "
             "(CRAWLER_BLOB_S3_BUCKET, "
             "CRAWLER_BLOB_S3_ENDPOINT)")
    try:
        for _ in obstore.list(bucket, chunk_size=1):
            break
    except (PermissionDeniedError, UnauthenticatedError) as exc:
        raise S3ConfigError(
            f"{where}: the credentials were refused (AWS_ACCESS_KEY_ID/"
            f"AWS_SECRET_ACCESS_KEY or CRAWLER_BLOB_S3_CREDENTIALS_FILE): "
            f"{_first_line(exc)}") from None
    except NotFoundError as exc:
        raise S3ConfigError(f"{where}: no such bucket: {_first_line(exc)}") from None
    except BaseError as exc:
        text = str(exc)
        if any(s in text for s in ("InvalidAccessKeyId", "SignatureDoesNotMatch",
                                   "AccessDenied", "403")):
            raise S3ConfigError(
                f"{where}: the credentials were refused (AWS_ACCESS_KEY_ID/"
                f"AWS_SECRET_ACCESS_KEY or CRAWLER_BLOB_S3_CREDENTIALS_FILE): "
                f"{_first_line(exc)}") from None
        if "NoSuchBucket" in text:
            raise S3ConfigError(f"{where}: no such bucket") from None
        raise S3ConfigError(f"{where}: not usable: {_first_line(exc)}") from None


def _age(path: str) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return 0.0


def _first_line(exc: BaseException) -> str:
    """The error's text on one line, at most 300 characters, without the password of any
    URL it quotes (the client quotes the URL it asked, endpoint included)."""
    text = redact_userinfo(" ".join(str(exc).split()))
    return text if len(text) <= 300 else text[:300] + "..."


@contextlib.contextmanager
def _flocked(path: Path, *, blocking: bool) -> Iterator[bool]:
    """Hold an exclusive lock on ``path`` (made if missing); yields False when
    ``blocking`` is false and another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


@dataclass(slots=True)
class _Uploads:
    """Work of the upload thread: finished data files, then side-file snapshots."""

    files: deque[str] = field(default_factory=deque)
    sides: set[str] = field(default_factory=set)
    uploaded: deque[tuple[float, str]] = field(default_factory=deque)  # (until, key)
    busy: bool = False
    failures: int = 0
    last_error: str | None = None

    def pending(self) -> int:
        return len(self.files) + len(self.sides) + (1 if self.busy else 0)


class S3BlobStore:
    """Rolled files written to a local spool and uploaded to a bucket; see the module
    docstring. Thread-safe like :class:`LocalBlobStore`."""

    def __init__(self, spool: str, config: S3Config, *, writer_id: str,
                 prefix: str = "crawl", max_bytes: int = 1_000_000_000,
                 fsync: bool = True, bucket: S3Store | None = None,
                 metrics: BlobMetrics | None = None) -> None:
        if not config.bucket:
            raise S3ConfigError("CRAWLER_BLOB_S3_BUCKET: a bucket name is needed")
        self.config = config
        self.bucket = bucket if bucket is not None else open_bucket(config)
        check_bucket(self.bucket, config)
        # this writer's objects, so a new file never takes the name of an uploaded one
        try:
            self._shipped = self._bucket_keys(f"{prefix}-{writer_id}-")
        except Exception as exc:
            raise S3ConfigError(f"listing bucket {config.bucket!r} (CRAWLER_BLOB_S3_*): "
                                f"{_first_line(exc)}") from None
        self._cond = threading.Condition()
        self._uploads = _Uploads()
        self._stopping = False
        self.local = LocalBlobStore(spool, writer_id=writer_id, prefix=prefix,
                                    max_bytes=max_bytes, fsync=fsync, lock_files=True,
                                    on_finished=self._finished,
                                    known_keys=lambda start: [
                                        k for k in self._shipped if k.startswith(start)])
        self.root = self.local.root
        self._sides: set[str] = set()  # side files this store appended to
        # uploads, failures and the backlog (crawler_blob_*: docs/object-storage.md)
        self.metrics = metrics
        if metrics is not None:
            metrics.watch_backlog(self.pending_uploads, self.pending_bytes)
        self._thread = threading.Thread(target=self._run, name="s3-upload", daemon=True)
        self._thread.start()
        with self._cond:  # first what an earlier process left in the spool
            self._uploads.files.extend(self._leftovers())
            self._uploads.sides.update(self._side_files())
            self._cond.notify_all()

    # -- BlobStore -----------------------------------------------------------------

    def set_file_header(self, stream: str, header: Callable[[str], bytes] | None) -> None:
        self.local.set_file_header(stream, header)

    def append(self, stream: str, data: bytes) -> RecordPointer:
        return self.local.append(stream, data)

    def append_line(self, name: str, line: str) -> None:
        self.local.append_line(name, line)
        if name not in self._sides:
            with self._cond:
                self._sides.add(name)

    def read(self, pointer: RecordPointer) -> bytes:
        """From the spool while the file is there, else a ranged GET of the object."""
        try:
            return self.local.read(pointer)
        except BlobError as exc:
            if not str(exc).startswith("no blob file"):
                raise
        import obstore
        from obstore.exceptions import BaseError, NotFoundError

        if pointer.length == 0:
            return b""
        try:
            data = obstore.get_range(self.bucket, pointer.file, start=pointer.offset,
                                     length=pointer.length)
        except FileNotFoundError:
            raise BlobError(f"no blob file {pointer.file!r} in the spool or the "
                            "bucket") from None
        except NotFoundError:
            raise BlobError(f"no blob file {pointer.file!r} in the spool or the "
                            "bucket") from None
        except BaseError as exc:
            raise BlobError(f"reading {pointer!r} from the bucket: "
                            f"{_first_line(exc)}") from None
        out = bytes(data)
        if len(out) != pointer.length:
            raise BlobError(f"pointer {pointer!r} runs past the end of the object "
                            f"({pointer.offset + len(out)} bytes)")
        return out

    def flush(self) -> None:
        self.local.flush()

    def close(self) -> None:
        """Finish every file, upload what is pending (waiting up to ``upload_wait``
        seconds), then stop the upload thread. Later appends raise; reads still work."""
        self.local.close()  # finished files are queued by _finished
        with self._cond:
            if self._stopping:
                return
            self._uploads.sides.update(self._sides)
            self._cond.notify_all()
        left = self.wait_uploaded(self.config.upload_wait)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=self.config.request_timeout + 5)
        with self._cond:
            self._expire(everything=True)
        if left:
            log.error("%d upload(s) not done within %.0f s (last error: %s); they stay "
                      "in the spool %s and are uploaded by the next start on it",
                      left, self.config.upload_wait, self._uploads.last_error, self.root)

    def __enter__(self) -> S3BlobStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- state ---------------------------------------------------------------------

    def pending_uploads(self) -> int:
        with self._cond:
            return self._uploads.pending()

    def pending_bytes(self) -> int:
        """Bytes of the finished files waiting for their upload (still in the spool)."""
        with self._cond:
            keys = list(self._uploads.files)
        total = 0
        for key in keys:
            with contextlib.suppress(OSError):
                total += (self.root / key).stat().st_size
        return total

    def wait_uploaded(self, timeout: float) -> int:
        """Wait until nothing is left to upload or ``timeout`` passes; what is left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._uploads.pending():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(min(remaining, 1.0))
            return self._uploads.pending()

    def upload_failures(self) -> int:
        """Upload attempts that failed so far (each was retried)."""
        with self._cond:
            return self._uploads.failures

    # -- internals -----------------------------------------------------------------

    def _finished(self, key: str) -> None:
        """A file was finished (called under the local store's lock)."""
        with self._cond:
            self._uploads.files.append(key)
            self._uploads.sides.update(self._sides)
            self._cond.notify_all()

    def _bucket_keys(self, start: str) -> list[str]:
        """Keys that begin with ``start`` (a listing's prefix is a whole path segment,
        so this lists from ``start`` on, in key order, and stops past it)."""
        import obstore

        keys: list[str] = []
        for batch in obstore.list(self.bucket, offset=start, chunk_size=1000):
            for meta in batch:
                key = meta["path"]
                if key <= start:
                    continue  # a server that does not honour the offset
                if not key.startswith(start):
                    return keys
                keys.append(key)
        return keys

    def _leftovers(self) -> list[str]:
        """Files in the spool no live process is writing (their lock is free)."""
        pattern = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*" + re.escape(SUFFIX))
        with _flocked(self.root / SPOOL_LOCK, blocking=False) as mine:
            if not mine:  # another store is starting on this spool and does it
                return []
            found = []
            with os.scandir(self.root) as scan:
                entries = list(scan)
            for entry in entries:
                stale_temp = (entry.name.startswith(".") and entry.name.endswith(".new")
                              and _age(entry.path) > 60)  # not one being made right now
                if not (stale_temp or pattern.fullmatch(entry.name)):
                    continue
                try:
                    fd = os.open(entry.path, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live writer has it
                finally:
                    os.close(fd)
                if stale_temp:  # made by a writer that died before it named the file
                    Path(entry.path).unlink(missing_ok=True)
                else:
                    found.append(entry.name)
            return sorted(found)

    def _side_files(self) -> list[str]:
        out = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.startswith(".") or name.endswith(SUFFIX):
                    continue
                out.append(Path(dirpath, name).relative_to(self.root).as_posix())
        return out

    def _expire(self, *, everything: bool = False) -> None:
        """Delete uploaded files whose time in the spool is over (with the lock held)."""
        now = time.monotonic()
        kept = self._uploads.uploaded
        while kept and (everything or kept[0][0] <= now):
            (self.root / kept.popleft()[1]).unlink(missing_ok=True)

    def _run(self) -> None:
        delay = 0.5
        while True:
            with self._cond:
                while True:
                    self._expire()
                    if self._stopping:
                        return
                    if self._uploads.pending():
                        break
                    kept = self._uploads.uploaded
                    self._cond.wait(max(0.05, kept[0][0] - time.monotonic()) if kept
                                    else None)
                kind, name = (("file", self._uploads.files[0]) if self._uploads.files
                              else ("side", sorted(self._uploads.sides)[0]))
                if kind == "side":
                    self._uploads.sides.discard(name)
                self._uploads.busy = True
            started = time.perf_counter()
            try:
                upload = self._upload_file if kind == "file" else self._upload_side
                size = upload(name)
            except Exception as exc:
                if self.metrics is not None:
                    self.metrics.count_failure(kind)
                with self._cond:
                    self._uploads.busy = False
                    if kind == "side":
                        self._uploads.sides.add(name)
                    self._uploads.failures += 1
                    self._uploads.last_error = f"{name}: {_first_line(exc)}"
                    log.warning("upload of %s failed (retried in %.1f s): %s", name, delay,
                                _first_line(exc))
                    self._cond.wait(delay)  # close() wakes it to stop
                delay = min(delay * 2, 10.0)
                continue
            delay = 0.5
            if size is not None and self.metrics is not None:
                self.metrics.record_upload(kind, size, time.perf_counter() - started)
            with self._cond:
                self._uploads.busy = False
                if kind == "file" and self._uploads.files and self._uploads.files[0] == name:
                    self._uploads.files.popleft()
                self._cond.notify_all()

    def _put(self, key: str, path: Path, size: int) -> None:
        import obstore

        with path.open("rb") as f:
            multipart = size > self.config.multipart_bytes
            obstore.put(self.bucket, key, f, use_multipart=multipart,
                        chunk_size=self.config.part_bytes, max_concurrency=4)

    def _upload_file(self, key: str) -> int | None:
        """Upload a finished file; its size, or None when it is gone already."""
        path = self.root / key
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None  # another process uploaded it and removed it
        self._put(key, path, size)
        log.info("uploaded %s (%d bytes)", key, size)
        if self.config.keep_uploaded <= 0:
            path.unlink(missing_ok=True)
            return size
        with self._cond:  # kept a while: reads of recent records stay local
            self._uploads.uploaded.append((time.monotonic() + self.config.keep_uploaded,
                                           key))
        return size

    def _upload_side(self, name: str) -> int | None:
        """Upload a snapshot of a side file; its size, or None when there is none."""
        path = self.root / name
        lock = path.with_name(_SIDE_LOCK.format(name=path.name))
        with _flocked(lock, blocking=True):
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                return None
            self._put(name, path, size)
            return size
