"""The archive's records are, byte for byte, the records warcio's writer makes of the
same header fields, HTTP headers and payload (digests, Content-Type, Content-Length
and their order included), and a response handed to ``remember`` is the one reading
its record back gives."""

from __future__ import annotations

import zlib
from io import BytesIO
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

from common.adapters.local_blobs import LocalBlobStore
from common.archive import ArchiveWriter, StoredResponse, read_response
from common.messages import RecordPointer
from tests.unit.test_archive import T0, _write_archive

# warcio's choice of records without a payload digest, as the archive documents it
NO_PAYLOAD_DIGEST = ("warcinfo", "revisit", "metadata", "conversion")
MADE_BY_WRITER = ("WARC-Block-Digest", "Content-Type", "Content-Length")


class _Reference(WARCWriter):  # type: ignore[misc]
    NO_PAYLOAD_DIGEST_TYPES = NO_PAYLOAD_DIGEST


def _members(path: Path) -> list[bytes]:
    """Each gzip member of a file, decompressed."""
    data, out = path.read_bytes(), []
    while data:
        unpack = zlib.decompressobj(zlib.MAX_WBITS | 16)
        out.append(unpack.decompress(data))
        data = unpack.unused_data
    return out


def _warcio_bytes(raw: bytes) -> bytes:
    """The record warcio writes from the fields, HTTP headers and payload of ``raw``."""
    record = next(iter(ArchiveIterator(BytesIO(raw))))
    fields = [(n, v) for n, v in record.rec_headers.headers if n not in MADE_BY_WRITER]
    if record.rec_type in ("response", "request"):
        fields = [(n, v) for n, v in fields if n != "WARC-Payload-Digest"]
    payload = record.raw_stream.read()
    out = BytesIO()
    writer = _Reference(out, gzip=False, warc_version="1.1")
    made = writer.create_warc_record(
        record.rec_headers.get_header("WARC-Target-URI") or "", record.rec_type,
        payload=BytesIO(payload), length=len(payload), http_headers=record.http_headers,
        warc_content_type=record.rec_headers.get_header("Content-Type"),
        warc_headers_dict=dict(fields))
    writer.write_record(made)
    return out.getvalue()


def test_every_record_is_the_one_warcio_writes(tmp_path: Path) -> None:
    arc = _write_archive(tmp_path)
    seen: set[str] = set()
    for path in arc.all_files():
        if not path.name.endswith(".warc.gz"):
            continue
        for raw in _members(path):
            record = next(iter(ArchiveIterator(BytesIO(raw))))
            seen.add(record.rec_type)
            if record.rec_type in WARCWriter.WARC_RECORDS:  # warcio's block types
                assert (record.rec_headers.get_header("Content-Type")
                        == WARCWriter.WARC_RECORDS[record.rec_type])
            assert raw == _warcio_bytes(raw), record.rec_headers.get_header("WARC-Type")
    assert seen == {"warcinfo", "response", "request", "metadata", "revisit", "conversion"}


def test_rendered_records_match_warcio_too(tmp_path: Path) -> None:
    store = LocalBlobStore(str(tmp_path), writer_id="w1")
    writer = ArchiveWriter(store, software="t/1")
    written = writer.write_rendered(url="http://a.example/", html="<p>naïve ✓</p>",
                                    rendered_at=T0, refers_to_record_id="<urn:uuid:1>",
                                    fields={"Crawler-Render-Ms": "12", "X-Empty": "\r\n"})
    raw = zlib.decompress(store.read(written.pointer), zlib.MAX_WBITS | 16)
    store.close()
    assert raw == _warcio_bytes(raw)


def test_a_remembered_response_is_the_one_read_back(tmp_path: Path) -> None:
    store = LocalBlobStore(str(tmp_path), writer_id="w1")
    writer = ArchiveWriter(store, software="t/1")
    kept: list[tuple[RecordPointer, StoredResponse]] = []
    for reason, headers, body in (
            ("OK", [("Content-Type", "text/html"), ("X-Utf8", "naïve café")], b"<p>a</p>"),
            ("", [("Set-Cookie", 'a=b; filename="föö.txt"')], b""),
            ("Weird\r\nReason", [("Content-Length", "99")], bytes(range(256)))):
        writer.write_exchange(url="http://a.example/ü", method="GET",
                              request_headers=[("Accept", "*/*")], status=200, reason=reason,
                              response_headers=headers, body=body, fetched_at=T0,
                              ip="127.0.0.1", metadata={"k": "v"},
                              remember=lambda p, r: kept.append((p, r)), truncated="length")
    store.flush()
    for pointer, stored in kept:
        assert read_response(store, pointer) == stored
    store.close()
