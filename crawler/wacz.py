"""``crawler export --format wacz``: the crawl's WARC files packaged as a WACZ 1.1.1 file.

Layout (WACZ 1.1.1, https://specs.webrecorder.net/wacz/1.1.1/):

- ``archive/<file>``: every WARC file of the crawl (``*.warc.gz``: the page archive and
  the text files), each stored as it is (ZIP ``STORE``: already compressed, and
  readable by a ranged request into the ZIP);
- ``indexes/index.cdxj``: a CDXJ line per response and revisit record, made while each
  file is copied in (so it names only records that are in the package, at their real
  offsets), sorted as ``LC_ALL=C sort`` sorts (by an external merge sort: a bounded
  number of lines in memory);
- ``pages/pages.jsonl``: the header line ``{"format": "json-pages-1.0", "id": "pages",
  "title": "All Pages"}``, then ``{"url", "ts"}`` per kept page (``ts`` its fetch time,
  RFC 3339), with ``text`` when ``--content`` asks for it;
- ``datapackage.json``: ``profile``, ``wacz_version``, ``created``, ``modified``,
  ``software``, ``title``, ``mainPageUrl`` and ``mainPageDate`` (the first page), and
  per file ``name``, ``path``, ``hash`` (``sha256:<hex>``) and ``bytes``;
- ``datapackage-digest.json``: ``path`` and ``hash`` of ``datapackage.json``.

Where the WARC files come from: the blob store's folder (a crawl folder's ``warc/``, or
a cluster's shared ``CRAWLER_BLOB_ROOT``), or with ``CRAWLER_BLOB_BACKEND=s3`` the
bucket's objects together with the files still in the spool.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from common.adapters.local_blobs import SUFFIX
from common.archive import cdxj_line
from common.messages import RecordPointer
from common.ports import BlobStore

if TYPE_CHECKING:
    from common.settings import Settings


class PageLike(Protocol):
    """What a page of pages/pages.jsonl is made of (crawler.export.SourcePage has it)."""

    url: str
    fetched_at: str

WACZ_VERSION = "1.1.1"
PAGES_HEADER = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
CHUNK = 1 << 20
SORT_RUN_LINES = 200_000
"""CDXJ lines sorted in memory at once; more spill to sorted temporary files."""


# -- where the WARC files are ----------------------------------------------------------


class ArchiveFiles(Protocol):
    """The WARC files of a crawl, by key (the name pointers and CDXJ lines use)."""

    def names(self) -> list[str]: ...

    def open(self, name: str) -> AbstractContextManager[IO[bytes]]: ...


class FolderFiles:
    """The ``*.warc.gz`` files of a folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def names(self) -> list[str]:
        return sorted(p.name for p in self.root.glob("*" + SUFFIX)
                      if p.is_file() and not p.name.startswith("."))

    def open(self, name: str) -> AbstractContextManager[IO[bytes]]:
        return (self.root / name).open("rb")


class _ChunkReader:
    """A read()-able stream over an iterator of byte chunks."""

    def __init__(self, chunks: Iterator[Any]) -> None:
        self.chunks = chunks
        self.buffer = b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self.buffer) < n:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buffer += bytes(chunk)
        if n < 0:
            n = len(self.buffer)
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def close(self) -> None:
        pass


class BucketFiles:
    """The WARC files of an S3 blob store: the bucket's objects and the files still in
    the spool (a file in both is read from the spool, as the store reads records)."""

    def __init__(self, bucket: Any, spool: Path) -> None:
        self.bucket = bucket
        self.spool = FolderFiles(spool)

    def names(self) -> list[str]:
        import obstore

        keys = set(self.spool.names())
        for batch in obstore.list(self.bucket, chunk_size=1000):
            for meta in batch:
                key = str(meta["path"])
                if key.endswith(SUFFIX) and "/" not in key and not key.startswith("."):
                    keys.add(key)
        return sorted(keys)

    @contextmanager
    def _from_bucket(self, name: str) -> Iterator[IO[bytes]]:
        import obstore

        result = obstore.get(self.bucket, name)
        yield _ChunkReader(iter(result.stream(min_chunk_size=CHUNK)))  # type: ignore[misc]

    def open(self, name: str) -> AbstractContextManager[IO[bytes]]:
        if (self.spool.root / name).is_file():
            return self.spool.open(name)
        return self._from_bucket(name)


def archive_files(settings: Settings, blobs: BlobStore) -> ArchiveFiles:
    """The WARC files of the crawl the settings name (see the module docstring)."""
    from common.adapters.local_blobs import LocalBlobStore

    if settings.blob.backend == "s3":
        from common.adapters.s3_blobs import S3BlobStore

        if isinstance(blobs, S3BlobStore):
            return BucketFiles(blobs.bucket, Path(blobs.root))
    if isinstance(blobs, LocalBlobStore):
        return FolderFiles(blobs.root)
    from common.runtime import blob_root

    return FolderFiles(blob_root(settings))


# -- copying a file in, and indexing it on the way --------------------------------------


class _Tee:
    """Reads ``src``; every byte read also goes to ``dst`` and into a SHA-256."""

    def __init__(self, src: IO[bytes], dst: IO[bytes]) -> None:
        self.src = src
        self.dst = dst
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n)
        if data:
            self.dst.write(data)
            self.sha.update(data)
            self.size += len(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


def index_lines(stream: Any, name: str, add: Callable[[str], None]) -> str | None:
    """CDXJ lines of the response and revisit records of the WARC file read from
    ``stream`` (its key is ``name``), each given to ``add``; returns why reading stopped
    early (a torn or bad record), or None."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    it = ArchiveIterator(stream)
    try:
        for rec in it:
            kind = rec.rec_type
            if kind not in ("response", "revisit") or rec.http_headers is None:
                continue
            h = rec.rec_headers
            url = h.get_header("WARC-Target-URI") or ""
            date = h.get_header("WARC-Date") or ""
            code = rec.http_headers.get_statuscode()
            status = int(code) if code and code.isdigit() else None
            mime = "warc/revisit" if kind == "revisit" else _mime(rec.http_headers)
            digest = h.get_header("WARC-Payload-Digest")
            it.read_to_end(rec)
            pointer = RecordPointer(name, it.get_record_offset(), it.get_record_length())
            add(cdxj_line(url=url, date=date, mime=mime, status=status, digest=digest,
                          pointer=pointer))
    except (ArchiveLoadFailed, EOFError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _mime(headers: Any) -> str:
    value = headers.get_header("Content-Type") or ""
    return value.split(";", 1)[0].strip().lower() or "unk"


# -- sorting the index -------------------------------------------------------------------


class LineSorter:
    """Lines sorted in code point order (UTF-8 byte order, as ``LC_ALL=C sort``), with at
    most ``run_lines`` lines in memory: full runs are sorted into temporary files and
    merged at the end."""

    def __init__(self, run_lines: int = SORT_RUN_LINES) -> None:
        self.run_lines = run_lines
        self.lines: list[str] = []
        self.runs: list[IO[str]] = []
        self.count = 0

    def add(self, line: str) -> None:
        self.lines.append(line)
        self.count += 1
        if len(self.lines) >= self.run_lines:
            self._spill()

    def _spill(self) -> None:
        self.lines.sort()
        run = tempfile.TemporaryFile("w+", encoding="utf-8", newline="\n")  # noqa: SIM115 - closed by close()
        run.writelines(line + "\n" for line in self.lines)
        run.seek(0)
        self.runs.append(run)
        self.lines = []

    def merged(self) -> Iterator[str]:
        if not self.runs:
            yield from sorted(self.lines)
            return
        if self.lines:
            self._spill()
        for line in heapq.merge(*self.runs):
            yield line.rstrip("\n")

    def close(self) -> None:
        for run in self.runs:
            run.close()
        self.runs = []


# -- the package -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resource:
    """One file of the package as datapackage.json lists it."""

    path: str
    sha256: str
    size: int

    def entry(self) -> dict[str, Any]:
        return {"name": Path(self.path).name.lower(), "path": self.path,
                "hash": f"sha256:{self.sha256}", "bytes": self.size}


class _HashedWriter:
    def __init__(self, dst: IO[bytes]) -> None:
        self.dst = dst
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self.dst.write(data)
        self.sha.update(data)
        self.size += len(data)


def _entry(path: str, when: datetime, *, stored: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(path, date_time=when.timetuple()[:6])
    info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def page_line(page: PageLike, text: str | None) -> dict[str, Any]:
    """A page of pages/pages.jsonl: an id (a hash of URL and time: the same page of the
    same crawl gets the same id in every export), url, ts (RFC 3339), and text when
    given. The id also makes every line share a field with the header line, which
    table readers of the package (frictionless) need to see a row in it."""
    key = f"{page.url} {page.fetched_at}".encode("utf-8", "surrogatepass")
    line: dict[str, Any] = {"id": hashlib.blake2b(key, digest_size=8).hexdigest(),
                            "url": page.url, "ts": page.fetched_at}
    if text is not None:
        line["text"] = text
    return line


def datapackage(resources: list[Resource], *, created: str, software: str,
                main_page: tuple[str, str] | None) -> bytes:
    """The bytes of datapackage.json."""
    package: dict[str, Any] = {
        "profile": "data-package", "wacz_version": WACZ_VERSION,
        "title": "crawler export", "created": created, "modified": created,
        "software": software, "resources": [r.entry() for r in resources]}
    if main_page is not None:
        package["mainPageUrl"], package["mainPageDate"] = main_page
    return json.dumps(package, indent=2).encode("utf-8")


def digest_file(datapackage_bytes: bytes) -> bytes:
    """The bytes of datapackage-digest.json."""
    sha = hashlib.sha256(datapackage_bytes).hexdigest()
    return json.dumps({"path": "datapackage.json", "hash": f"sha256:{sha}"},
                      indent=2).encode("utf-8")


def _software() -> str:
    try:
        return f"crawler {version('crawler')}"
    except PackageNotFoundError:
        return "crawler"


@dataclass(slots=True)
class Packed:
    """What went into a WACZ."""

    pages: int = 0
    warc_files: int = 0
    cdxj_lines: int = 0


def write_wacz(out: IO[bytes], files: ArchiveFiles, names: list[str],
               pages: Iterator[PageLike], text_of: Callable[[PageLike], str | None] | None,
               log: Callable[[str], None]) -> Packed:
    """Write the WACZ of the files ``names`` of ``files`` and of ``pages`` to ``out``
    (seekable); ``text_of``, when given, gives the text of a page's line."""
    packed = Packed(warc_files=len(names))
    now = datetime.now(UTC)
    created = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    resources: list[Resource] = []
    sorter = LineSorter()
    with ExitStack() as stack:
        stack.callback(sorter.close)
        z = stack.enter_context(zipfile.ZipFile(out, "w", allowZip64=True))
        for name in names:
            path = f"archive/{name}"
            with files.open(name) as src, z.open(_entry(path, now, stored=True), "w",
                                                 force_zip64=True) as dst:
                tee = _Tee(src, dst)
                problem = index_lines(tee, name, sorter.add)
                tee.drain()
            if problem:
                log(f"warning: {name}: records after offset-indexed ones were not indexed "
                    f"({problem})")
            resources.append(Resource(path, tee.sha.hexdigest(), tee.size))
        with z.open(_entry("indexes/index.cdxj", now, stored=False), "w",
                    force_zip64=True) as dst:
            index = _HashedWriter(dst)
            buffered: list[bytes] = []
            for line in sorter.merged():
                buffered.append(line.encode("utf-8") + b"\n")
                if len(buffered) >= 4096:
                    index.write(b"".join(buffered))
                    buffered = []
            index.write(b"".join(buffered))
        resources.append(Resource("indexes/index.cdxj", index.sha.hexdigest(), index.size))
        main_page: tuple[str, str] | None = None
        with z.open(_entry("pages/pages.jsonl", now, stored=False), "w",
                    force_zip64=True) as dst:
            listing = _HashedWriter(dst)
            listing.write(json.dumps(PAGES_HEADER).encode("utf-8") + b"\n")
            for page in pages:
                text = text_of(page) if text_of is not None else None
                listing.write(json.dumps(page_line(page, text), ensure_ascii=False)
                              .encode("utf-8") + b"\n")
                packed.pages += 1
                if main_page is None and page.fetched_at:
                    main_page = (page.url, page.fetched_at)
        resources.append(Resource("pages/pages.jsonl", listing.sha.hexdigest(),
                                  listing.size))
        package = datapackage(resources, created=created, software=_software(),
                              main_page=main_page)
        z.writestr(_entry("datapackage.json", now, stored=False), package)
        z.writestr(_entry("datapackage-digest.json", now, stored=False),
                   digest_file(package))
    packed.cdxj_lines = sorter.count
    return packed
