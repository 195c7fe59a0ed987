"""PDF text: what is read from ordinary files, and how hostile files end (parser.pdf).

The hostile files come from :mod:`tests.pdf_support`, generated in memory (a few KiB
each, however much they expand to). Each must end quickly as :class:`PdfError` or a
bounded read, never as a hang or a process grown by gigabytes.
"""

from __future__ import annotations

import resource
import time

import pytest

from parser.jobs import pdf_analysis
from parser.pdf import PdfError, is_pdf, memory_capped, read_pdf
from tests.pdf_support import (
    bomb_pdf,
    garbage_pdf,
    looping_pdf,
    many_pages_pdf,
    nested_pdf,
    page_text,
    text_pdf,
)


def test_media_types() -> None:
    assert is_pdf("application/pdf")
    assert is_pdf("Application/PDF; charset=binary")
    assert is_pdf("application/x-pdf")
    assert not is_pdf("text/html")
    assert not is_pdf(None)


def test_text_and_page_count() -> None:
    read = read_pdf(text_pdf(pages=3, words=60, title="A  (report)"), max_pages=10)
    assert (read.pages, read.pages_read) == (3, 3)
    assert read.title == "A (report)"
    assert read_pdf(text_pdf(pages=1), max_pages=1).title is None
    for page in range(3):
        for line in page_text(page, 60):
            assert line in read.text
    # the pages' texts are apart by a blank line
    assert read.text.count("\n\n") == 2


def test_pages_read_are_capped_and_the_count_is_the_whole_files() -> None:
    read = read_pdf(text_pdf(pages=12, words=20), max_pages=5)
    assert (read.pages, read.pages_read) == (12, 5)
    assert page_text(4, 20)[0] in read.text
    assert page_text(5, 20)[0] not in read.text


def test_text_is_capped() -> None:
    read = read_pdf(text_pdf(pages=4, words=400), max_pages=10, max_chars=1_000)
    assert len(read.text) <= 1_000


def test_the_analysis_has_signals_and_no_links() -> None:
    found = pdf_analysis(read_pdf(text_pdf(pages=2, words=100), max_pages=10))
    assert found.links == [] and found.document_pages == 2
    assert found.signals.words == 200
    assert found.signals.chars == len(found.text)
    assert found.signals.boilerplate_ratio == 0


def _cpu_and_peak(fn: object) -> tuple[float, float]:
    started = time.process_time()
    assert callable(fn)
    fn()
    return time.process_time() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_a_decompression_bomb_ends_as_an_error_with_memory_bounded() -> None:
    data = bomb_pdf(4 * 1024**3)  # 4 GiB of content from 7 KiB
    assert len(data) < 16_000
    started = time.process_time()
    with memory_capped(), pytest.raises((PdfError, MemoryError)):
        read_pdf(data, max_pages=10)
    assert time.process_time() - started < 10
    # the process did not grow by the bomb's size (ru_maxrss is in KiB)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 1024 * 1024


def test_two_thousand_pages_are_counted_and_read_up_to_the_cap() -> None:
    data = many_pages_pdf(2_000)
    started = time.process_time()
    read = read_pdf(data, max_pages=100)
    assert (read.pages, read.pages_read) == (2_000, 100)
    assert "page 99 of the long file" in read.text
    assert time.process_time() - started < 10


def test_a_looping_file_ends_as_an_error() -> None:
    with pytest.raises(PdfError):
        read_pdf(looping_pdf(), max_pages=10)


def test_deep_nesting_is_read_or_refused_without_a_crash() -> None:
    try:
        read = read_pdf(nested_pdf(100_000), max_pages=10)
    except (PdfError, RecursionError):
        return
    assert read.pages == 1


def test_garbage_ends_as_an_error() -> None:
    with pytest.raises(PdfError):
        read_pdf(garbage_pdf(), max_pages=10)
    with pytest.raises(PdfError):
        read_pdf(b"", max_pages=10)


def test_memory_cap_refuses_growth_and_is_lifted_after() -> None:
    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(MemoryError), memory_capped(64 * 1024 * 1024):
        bytearray(512 * 1024 * 1024)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert len(bytearray(256 * 1024 * 1024)) == 256 * 1024 * 1024


def test_page_records_carry_document_pages_and_extra_and_old_lines_decode() -> None:
    import msgspec

    from common.messages import PageRecord

    record = PageRecord(url="http://a.test/r.pdf", fetched_at="2026-01-01T00:00:00Z",
                        status=200, content_hash=None, simhash=None, storage_key=None,
                        text_key=None, document_pages=3, extra={"title": "T"})
    line = msgspec.json.decode(msgspec.json.encode(record))
    assert line["documentPages"] == 3 and line["extra"] == {"title": "T"}
    del line["documentPages"], line["extra"]  # a line written before these fields
    old = msgspec.json.decode(msgspec.json.encode(line), type=PageRecord)
    assert old.document_pages is None and old.extra is None
