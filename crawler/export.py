"""``crawler export``: a crawl's kept pages as JSON Lines or Parquet, or the crawl as WACZ.

One row per kept page (docs/export.md): the page record's fields, the page's text (read
by its ``textKey`` from the text WARC files) or its Markdown (by ``markdownKey``, when
the crawl wrote Markdown), the JSON object an extraction hook added (``extra``), the
page count of a document (``documentPages``) and where its response record is
(``warcFilename``, ``warcOffset``, ``warcLength``).

Where the page records come from:

- a crawl folder (embedded mode, ``--out``): ``<out>/warc/pages.jsonl`` (or the folder
  ``CRAWLER_BLOB_ROOT`` names); with ``CRAWLER_BLOB_BACKEND=s3`` that folder is the
  spool, and records whose file has left it are read from the bucket;
- a cluster (``--cluster``): the Kafka topic ``<CRAWLER_BUS_TOPIC_PREFIX>.pages``, read
  from its first offset to the end it had when the export started, into a temporary
  file of the same lines as a ``pages.jsonl``; records are read from the blob store the
  ``CRAWLER_BLOB_*`` settings name (the shared folder, or the bucket).

Which record counts: a URL may have several records (a page refreshed by a recrawl, a
record delivered twice): the last one wins, as it is the page as last stored. A URL's
records are in order in both sources (one file appended in order; one Kafka partition
per host). A page is kept unless its last record names a ``duplicateOf`` or a
``nearDuplicateOf`` (``--include-duplicates`` keeps those too).

Memory stays bounded on a large crawl: a first pass keeps 8 bytes per record (a hash
of its URL), the second streams the records, and rows go out in row groups.

The pure parts (:func:`latest_mask`, :func:`is_kept`, :func:`build_row`,
:func:`conversion_payload`) hold no I/O; :func:`export` and the sinks are the thin I/O
around them.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol

import msgspec

from common.messages import RecordPointer
from common.ports import BlobStore

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from common.settings import Settings

Format = Literal["jsonl", "parquet", "wacz"]
Content = Literal["text", "markdown"]
FORMATS: tuple[str, ...] = ("jsonl", "parquet", "wacz")
CONTENTS: tuple[str, ...] = ("text", "markdown")

PYARROW_HINT = ("--format parquet needs pyarrow: pip install 'crawler[export]' "
                "(or pip install pyarrow)")

ROW_GROUP_ROWS = 10_000
"""A Parquet row group holds at most this many rows ..."""
ROW_GROUP_BYTES = 64 * 1024 * 1024
"""... or about this many bytes of text, whichever comes first: what the writer keeps
in memory at most (plus the row group being encoded)."""


class ExportError(RuntimeError):
    """The export cannot be made; the message says why and what to do."""


class SourcePage(msgspec.Struct, kw_only=True, rename="camel"):
    """A page record as read back, from this version or another: every field but the
    URL may be absent (``markdownKey``, ``extra`` and ``documentPages`` come from
    newer writers), and unknown fields are ignored."""

    url: str
    fetched_at: str = ""
    status: int = 0
    content_hash: str | None = None
    simhash: str | None = None
    storage_key: RecordPointer | None = None
    text_key: RecordPointer | None = None
    markdown_key: RecordPointer | None = None
    duplicate_of: str | None = None
    near_duplicate_of: str | None = None
    language: str | None = None
    language_confidence: float | None = None
    text_chars: int | None = None
    text_words: int | None = None
    boilerplate_ratio: float | None = None
    extra: dict[str, Any] | None = None
    document_pages: int | None = None


class _UrlOnly(msgspec.Struct):
    url: str


_decode_page = msgspec.json.Decoder(SourcePage).decode
_decode_url = msgspec.json.Decoder(_UrlOnly).decode


# -- pure ------------------------------------------------------------------------------


COLUMNS: tuple[str, ...] = (
    "url", "host", "fetchedAt", "status", "language", "languageConfidence", "textChars",
    "textWords", "boilerplateRatio", "contentHash", "simhash", "{content}", "extra",
    "documentPages", "warcFilename", "warcOffset", "warcLength")
"""The columns of a row, in order; ``{content}`` is ``text`` or ``markdown``."""


def columns(content: Content) -> list[str]:
    return [content if c == "{content}" else c for c in COLUMNS]


def url_hash(url: str) -> int:
    """A 64-bit hash of a URL (BLAKE2b): two URLs share one with a chance of about
    n²/2⁶⁵ over n URLs, which a crawl of any size can ignore."""
    return int.from_bytes(hashlib.blake2b(url.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "little")


def latest_mask(hashes: npt.NDArray[np.uint64], valid: npt.NDArray[np.bool_]
                ) -> npt.NDArray[np.bool_]:
    """For each record (its URL's hash, and whether it could be read), whether it is
    the last readable record of its URL."""
    import numpy as np

    keep = np.zeros(len(hashes), dtype=bool)
    where = np.flatnonzero(valid)
    if not len(where):
        return keep
    reversed_positions = where[::-1]
    _, first = np.unique(hashes[reversed_positions], return_index=True)
    keep[reversed_positions[first]] = True
    return keep


def is_kept(page: SourcePage) -> bool:
    """A page the crawl kept: neither an exact nor a near duplicate of another."""
    return not page.duplicate_of and not page.near_duplicate_of


def host_of(url: str) -> str | None:
    """The host key of ``url`` as the crawler keys hosts (``news.test:8080``)."""
    from common.urls import UrlError, host_key

    try:
        return host_key(url)
    except UrlError:
        return None


def build_row(page: SourcePage, content: Content, body: str | None) -> dict[str, Any]:
    """The row of a kept page: ``body`` is its text or Markdown (None: none)."""
    key = page.storage_key
    return {
        "url": page.url,
        "host": host_of(page.url),
        "fetchedAt": page.fetched_at or None,
        "status": page.status,
        "language": page.language,
        "languageConfidence": page.language_confidence,
        "textChars": page.text_chars,
        "textWords": page.text_words,
        "boilerplateRatio": page.boilerplate_ratio,
        "contentHash": page.content_hash,
        "simhash": page.simhash,
        content: body,
        "extra": page.extra,
        "documentPages": page.document_pages,
        "warcFilename": key.file if key else None,
        "warcOffset": key.offset if key else None,
        "warcLength": key.length if key else None,
    }


def conversion_payload(record: bytes) -> str:
    """The payload of the one WARC record in ``record`` (a text or Markdown record) as
    text; raises ValueError when it is not a readable WARC record."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    try:
        for rec in ArchiveIterator(BytesIO(record)):
            data: bytes = rec.content_stream().read()
            return data.decode("utf-8", "replace")
    except (ArchiveLoadFailed, EOFError, OSError) as exc:
        raise ValueError(str(exc)) from exc
    raise ValueError("no WARC record")


def parse_time(value: str | None) -> datetime | None:
    """A page record's ``fetchedAt`` (ISO 8601, UTC) as a datetime; None if unreadable."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# -- reading the page records ----------------------------------------------------------


@dataclass(slots=True)
class Report:
    """What an export did, for the closing message and the tests."""

    rows: int = 0  # rows written
    records: int = 0  # page record lines read
    unreadable: int = 0  # lines that were not a page record (a torn last line, ...)
    superseded: int = 0  # older records of a URL with a later one
    duplicates: int = 0  # last records naming duplicateOf / nearDuplicateOf, left out
    no_content: int = 0  # rows without text or Markdown (the page had none)
    content_errors: list[str] = field(default_factory=list)  # first few read errors
    content_error_count: int = 0
    markdown_keys: int = 0  # rows whose record had a markdownKey
    seconds: float = 0.0  # CPU seconds of the export
    extra: dict[str, Any] = field(default_factory=dict)  # format-specific figures

    def lines(self, what: str, content: Content | None) -> list[str]:
        out = [f"{self.rows} {what} from {self.records} page records"
               + (f" ({self.duplicates} duplicates left out)" if self.duplicates else "")]
        if self.superseded:
            out.append(f"{self.superseded} older records of refreshed pages skipped")
        if self.unreadable:
            out.append(f"{self.unreadable} lines were not page records and were skipped")
        if content == "markdown" and self.rows and not self.markdown_keys:
            out.append("--content markdown: no page record has a markdownKey (the crawl "
                       "wrote no Markdown), so the markdown column is empty")
        if self.content_error_count:
            out.append(f"{self.content_error_count} {content} records could not be read "
                       f"(first: {self.content_errors[0]})")
        return out


def selected_pages(path: Path, *, include_duplicates: bool, report: Report
                   ) -> Iterator[SourcePage]:
    """The pages of the page record file ``path`` to export, in file order: the last
    record of each URL, duplicates left out unless ``include_duplicates``. Two passes
    over the file; memory: 9 bytes per line."""
    import numpy as np

    hashes = np.zeros(1024, dtype=np.uint64)
    valid = np.zeros(1024, dtype=bool)
    n = 0
    with path.open("rb") as fh:
        for line in fh:
            if n == len(hashes):
                hashes = np.resize(hashes, n * 2)
                valid = np.resize(valid, n * 2)
            try:
                hashes[n] = url_hash(_decode_url(line).url)
                valid[n] = True
            except msgspec.DecodeError:
                valid[n] = False
            n += 1
    mask = latest_mask(hashes[:n], valid[:n])
    with path.open("rb") as fh:
        for i, line in enumerate(fh):
            if not valid[i]:
                if line.strip():  # blank lines are no records and no fault
                    report.unreadable += 1
                continue
            report.records += 1
            if not mask[i]:
                report.superseded += 1
                continue
            try:
                page = _decode_page(line)
            except msgspec.DecodeError:  # the URL was readable, the rest is not
                report.unreadable += 1
                continue
            if not include_duplicates and not is_kept(page):
                report.duplicates += 1
                continue
            yield page


# -- sinks -----------------------------------------------------------------------------


class Sink(Protocol):
    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Rows as JSON Lines (UTF-8, one object a line, keys in :data:`COLUMNS` order)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.encode = msgspec.json.Encoder().encode

    def write(self, row: dict[str, Any]) -> None:
        self.out.write(self.encode(row) + b"\n")

    def close(self) -> None:
        self.out.flush()


def parquet_schema(content: Content) -> Any:
    """The Parquet schema of the rows (docs/export.md)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    types = {"url": pa.string(), "host": pa.string(),
             "fetchedAt": pa.timestamp("us", tz="UTC"), "status": pa.int16(),
             "language": pa.string(), "languageConfidence": pa.float64(),
             "textChars": pa.int64(), "textWords": pa.int64(),
             "boilerplateRatio": pa.float64(), "contentHash": pa.string(),
             "simhash": pa.string(), content: pa.string(), "extra": pa.string(),
             "documentPages": pa.int64(), "warcFilename": pa.string(),
             "warcOffset": pa.int64(), "warcLength": pa.int64()}
    return pa.schema([pa.field(name, types[name]) for name in columns(content)])


class ParquetSink:
    """Rows into a Parquet file, a row group every :data:`ROW_GROUP_ROWS` rows or
    :data:`ROW_GROUP_BYTES` bytes of text; ``extra`` as a JSON string, ``fetchedAt`` as
    a UTC timestamp (microseconds), compressed with zstd."""

    def __init__(self, out: IO[bytes], content: Content, *,
                 group_rows: int = ROW_GROUP_ROWS, group_bytes: int = ROW_GROUP_BYTES
                 ) -> None:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        self.content = content
        self.schema = parquet_schema(content)
        self.names = columns(content)
        self.writer = pq.ParquetWriter(out, self.schema, compression="zstd")
        self.group_rows = group_rows
        self.group_bytes = group_bytes
        self.groups = 0
        self._reset()

    def _reset(self) -> None:
        self.buffer: dict[str, list[Any]] = {name: [] for name in self.names}
        self.bytes = 0

    def write(self, row: dict[str, Any]) -> None:
        row = dict(row)
        row["fetchedAt"] = parse_time(row["fetchedAt"])
        if row["extra"] is not None:
            row["extra"] = json.dumps(row["extra"], ensure_ascii=False, sort_keys=True)
        for name in self.names:
            self.buffer[name].append(row[name])
        self.bytes += len(row[self.content] or "") + len(row["url"]) + 200
        if len(self.buffer["url"]) >= self.group_rows or self.bytes >= self.group_bytes:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if not self.buffer["url"]:
            return
        table = pa.Table.from_pydict(self.buffer, schema=self.schema)
        self.writer.write_table(table, row_group_size=len(table))
        self.groups += 1
        self._reset()

    def close(self) -> None:
        self._flush()
        self.writer.close()


# -- the export ------------------------------------------------------------------------


def _content_pointer(page: SourcePage, content: Content) -> RecordPointer | None:
    return page.text_key if content == "text" else page.markdown_key


def page_content(blobs: BlobStore, page: SourcePage, content: Content,
                 report: Report) -> str | None:
    """The page's text or Markdown, read by pointer; None when it has none, or when the
    record cannot be read (counted in ``report``, with the first few reasons)."""
    from common.adapters.local_blobs import BlobError

    if content == "markdown" and page.markdown_key is not None:
        report.markdown_keys += 1
    pointer = _content_pointer(page, content)
    if pointer is None:
        report.no_content += 1
        return None
    try:
        return conversion_payload(blobs.read(pointer))
    except (BlobError, ValueError, OSError) as exc:
        report.content_error_count += 1
        if len(report.content_errors) < 5:
            report.content_errors.append(f"{page.url}: {exc}")
        return None


def export_rows(pages: Iterator[SourcePage], blobs: BlobStore, sink: Sink,
                content: Content, report: Report) -> None:
    """Write the row of each of ``pages`` to ``sink``."""
    for page in pages:
        sink.write(build_row(page, content, page_content(blobs, page, content, report)))
        report.rows += 1


@dataclass(slots=True)
class Request:
    """What ``crawler export`` was asked for."""

    format: Format
    to: Path
    content: Content | None = None  # None: text for jsonl/parquet, none in a WACZ
    include_duplicates: bool = False
    cluster: bool = False
    partial: bool = False  # a cluster whose oldest page records Kafka has dropped


def check_request(req: Request) -> str | None:
    """Why the request cannot be carried out before anything is read, or None."""
    if req.format == "parquet":
        try:
            importlib.import_module("pyarrow.parquet")
        except ImportError:
            return PYARROW_HINT
    if req.format == "wacz" and not req.to.name.endswith(".wacz"):
        return f"--to {req.to}: a WACZ file's name must end in .wacz"
    parent = req.to.parent
    if req.to.is_dir():
        return f"--to {req.to} is a folder; give a file name"
    if not parent.is_dir():
        return f"--to {req.to}: the folder {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--to {req.to}: the folder {parent} is not writable"
    return None


def pages_file(settings: Settings) -> Path:
    """The page record file of a crawl folder."""
    from common.runtime import blob_root

    return blob_root(settings) / "pages.jsonl"


def export(settings: Settings, req: Request,
           log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
           ) -> Report:
    """Carry out ``req``: write the file ``req.to`` (through a temporary name beside it,
    renamed when complete, so a failed export leaves no half file under that name)."""
    from common.runtime import blob_root, make_blobs, writer_id

    start = time.process_time()
    report = Report()
    root = blob_root(settings)
    if not root.is_dir() and settings.blob.backend != "s3":
        raise ExportError(f"the WARC folder {root} does not exist: give the crawl's "
                          "folder (--out) or its CRAWLER_BLOB_ROOT")
    with _PageRecords(settings, req, log) as source, tempfile.TemporaryDirectory(
            prefix="crawler-export-spool-") as empty:
        if not root.is_dir():
            root = Path(empty)  # no spool here: every record comes from the bucket
        blobs = make_blobs(settings, writer_id("export"), root=str(root))
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{req.to.name}.", suffix=".partial",
                                       dir=req.to.parent)
            try:
                with os.fdopen(fd, "w+b") as out:
                    pages = selected_pages(source, include_duplicates=req.include_duplicates,
                                           report=report)
                    if req.format == "wacz":
                        _write_wacz(settings, req, out, blobs, pages, report, log)
                    else:
                        content: Content = req.content or "text"
                        sink: Sink = (JsonlSink(out) if req.format == "jsonl"
                                      else ParquetSink(out, content))
                        export_rows(pages, blobs, sink, content, report)
                        sink.close()
                    out.flush()
                    os.fsync(out.fileno())
                mask = os.umask(0o22)  # a new file's usual mode (mkstemp makes it 0600)
                os.umask(mask)
                os.chmod(tmp, 0o666 & ~mask)
                os.replace(tmp, req.to)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        finally:
            blobs.close()
    report.seconds = time.process_time() - start
    return report


def _write_wacz(settings: Settings, req: Request, out: IO[bytes], blobs: BlobStore,
                pages: Iterator[SourcePage], report: Report,
                log: Callable[[str], None]) -> None:
    from crawler.wacz import archive_files, write_wacz

    files = archive_files(settings, blobs)
    names = files.names()
    if not names:
        raise ExportError("the crawl has no WARC files to package")
    content = req.content

    def text_of(page: Any) -> str | None:
        assert content is not None
        return page_content(blobs, page, content, report)

    packed = write_wacz(out, files, names, pages, text_of if content else None, log)
    report.rows = packed.pages
    report.extra.update({"warcFiles": packed.warc_files, "cdxjLines": packed.cdxj_lines})


class _PageRecords:
    """The page record file to read: the crawl folder's, or a temporary copy of the
    cluster's topic (deleted on exit)."""

    def __init__(self, settings: Settings, req: Request, log: Callable[[str], None]) -> None:
        self.settings = settings
        self.req = req
        self.log = log
        self.tmp: Path | None = None

    def __enter__(self) -> Path:
        if not self.req.cluster:
            path = pages_file(self.settings)
            if not path.exists():
                raise ExportError(f"no page records at {path}: is {self.settings.crawl.out_dir}"
                                  " a crawl folder (--out)? For a cluster give --cluster")
            return path
        fd, name = tempfile.mkstemp(prefix="crawler-export-pages-", suffix=".jsonl")
        self.tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                n = dump_pages_topic(self.settings, out, partial=self.req.partial,
                                     log=self.log)
        except BaseException:  # __exit__ is not called when __enter__ raises
            self.tmp.unlink(missing_ok=True)
            raise
        self.log(f"read {n} page records from Kafka")
        return self.tmp

    def __exit__(self, *exc: object) -> None:
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)


# -- the cluster's page records --------------------------------------------------------


def dump_pages_topic(settings: Settings, out: IO[bytes], *, partial: bool = False,
                     timeout: float = 30.0, log: Callable[[str], None] = print) -> int:
    """Copy every record of the cluster's pages topic, as it is when called, to ``out``
    (one JSON line each, partition after partition, each in offset order); the number
    copied. Joins no consumer group and commits nothing, so the crawl's consumers and a
    later export see the topic as before.

    Raises :class:`ExportError` when Kafka does not answer, the topic does not exist, or
    Kafka has already deleted records of it (its retention) unless ``partial``.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from common.messages import Topic

    topic = f"{settings.bus.topic_prefix}.{Topic.PAGES.value}"
    bootstrap = settings.bus.kafka_bootstrap
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crawler-export",
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "client.id": "crawler-export", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest",
                         "reconnect.backoff.max.ms": 1000})
    try:
        try:
            meta = consumer.list_topics(topic, timeout=timeout)
        except KafkaException as exc:
            raise ExportError(f"Kafka at {bootstrap} (CRAWLER_BUS_KAFKA_BOOTSTRAP) did "
                              f"not answer: {exc}") from None
        info = meta.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise ExportError(f"Kafka at {bootstrap} has no topic {topic} "
                              "(CRAWLER_BUS_TOPIC_PREFIX): no page records to export")
        ranges: list[tuple[int, int, int]] = []
        dropped = 0
        for p in sorted(info.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                       timeout=timeout)
            ranges.append((p, low, high))
            dropped += low
        if dropped:
            text = (f"Kafka has deleted the first {dropped} records of {topic} (its "
                    "retention, retention.ms): pages of those records would be missing")
            if not partial:
                raise ExportError(text + "; give --partial to export what is left, and "
                                  "keep the pages topic longer (retention.ms=-1)")
            log(f"warning: {text}")
        count = 0
        for p, low, high in ranges:
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            position = low
            deadline = time.monotonic() + timeout
            while position < high:
                msgs = consumer.consume(1000, timeout=1.0)
                if not msgs and time.monotonic() > deadline:
                    raise ExportError(f"reading {topic} partition {p} stopped at offset "
                                      f"{position} of {high}")
                for msg in msgs:
                    if msg.error() is not None:
                        continue  # end of partition, or a passing error: keep polling
                    offset = msg.offset()
                    if offset is None:
                        continue
                    if offset >= high:
                        position = high
                        break
                    value = msg.value()
                    if value:
                        out.write(value.rstrip(b"\n") + b"\n")
                        count += 1
                    position = offset + 1
                    deadline = time.monotonic() + timeout
            consumer.unassign()
        return count
    finally:
        consumer.close()


def main(settings: Settings, req: Request) -> int:
    """``crawler export``: 0 done, 1 failed while exporting, 2 could not start."""
    problem = check_request(req)
    if problem:
        print(f"crawler: {problem}", file=sys.stderr)
        return 2
    try:
        report = export(settings, req)
    except ExportError as exc:
        print(f"crawler: {exc}", file=sys.stderr)
        return 1
    what = {"jsonl": "rows", "parquet": "rows", "wacz": "pages"}[req.format]
    for line in report.lines(what, req.content or ("text" if req.format != "wacz" else None)):
        print(line, file=sys.stderr)
    size = req.to.stat().st_size
    print(f"wrote {req.to} ({size:,} bytes, {report.seconds:.1f} CPU s)", file=sys.stderr)
    return 0


__all__: Sequence[str] = (
    "COLUMNS", "ExportError", "JsonlSink", "ParquetSink", "Report", "Request", "SourcePage",
    "build_row", "check_request", "conversion_payload", "dump_pages_topic", "export",
    "is_kept", "latest_mask", "main", "parquet_schema", "selected_pages", "url_hash")
