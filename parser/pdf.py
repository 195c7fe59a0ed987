"""The text of a PDF: its pages' text and page count, read with pypdf, bounded.

Why pypdf (BSD, pure Python): measured against pypdfium2 (PDFium) and pdfminer.six
with ``python -m bench.pdf_libs`` (figures in docs/pdf.md), it is the one that ends
every hostile file there with a Python exception and bounded memory: its decoders stop
at 75 MB of output per stream (a stream deflated twice that inflates to 4 GiB ends as
``LimitReachedError`` at 180 MiB peak), it detects cyclic page trees, and a nesting
too deep ends as ``RecursionError``. PDFium reads text 2.7 times faster, but inflates
a whole stream in memory (533 MiB for a 256 MiB stream) and aborts the process
(SIGABRT) when an address-space cap refuses it; pdfminer.six is 14 times slower and
recursed without bound on a looping page tree.

Bounds, besides pypdf's own: the body's size (the caller refuses a body over
``CRAWLER_PARSER_PDF_MAX_BYTES``), the pages read (``max_pages``: the text of the first
ones; the page count is that of the whole file), the text kept (``max_chars``), and, in
a worker process, the address space the read may add (:func:`memory_capped`). Time is
the page job's limit (the caller runs this in a killable worker process).

No links are taken from a PDF: its text is stored and judged like a page's main text,
and nothing it links to is followed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import resource
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from common.pagework import WorkContext

log = logging.getLogger(__name__)

PDF_TYPES = ("application/pdf", "application/x-pdf")
#: Address space a PDF read may add to its worker process: pypdf's own decoders stop at
#: 75 MB a stream, and a page's objects and text are held a page at a time
READ_HEADROOM = 512 * 1024 * 1024
MAX_TEXT_CHARS = 2_000_000  # characters of text kept from one PDF (about 600 pages)


@dataclass(frozen=True, slots=True)
class PdfText:
    """What a PDF held: its text (pages apart by a blank line), its page count, and the
    pages whose text was read (fewer than ``pages`` when capped)."""

    text: str
    pages: int
    pages_read: int
    title: str | None = None  # the document information's /Title


class PdfError(ValueError):
    """A PDF that could not be read (the message says why)."""


def is_pdf(content_type: str | None) -> bool:
    """Pure: whether a Content-Type names a PDF."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media in PDF_TYPES


def read_pdf(body: bytes, *, max_pages: int, max_chars: int = MAX_TEXT_CHARS) -> PdfText:
    """The text of the first ``max_pages`` pages of ``body`` and its page count. Any
    failure of the file raises :class:`PdfError` (or MemoryError, RecursionError)."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # a warning per broken object
    try:
        reader = PdfReader(io.BytesIO(body), strict=False)
        if reader.is_encrypted:
            try:
                reader.decrypt("")  # most encrypted files on the web open with no password
            except Exception as exc:
                raise PdfError(f"encrypted PDF: {exc}") from exc
        pages = len(reader.pages)
        parts: list[str] = []
        size = 0
        read = 0
        for page in reader.pages:
            if read >= max_pages or size >= max_chars:
                break
            text = page.extract_text() or ""
            read += 1
            parts.append(text[:max_chars - size])
            size += len(parts[-1]) + 2
        title = _title(reader)
    except PdfError:
        raise
    except PyPdfError as exc:
        raise PdfError(f"{type(exc).__name__}: {exc}") from exc
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, AssertionError,
            UnicodeError, OverflowError, ZeroDivisionError) as exc:
        # pypdf raises plain Python errors on some malformed objects
        raise PdfError(f"malformed PDF ({type(exc).__name__}: {exc})") from exc
    return PdfText(text="\n\n".join(p.strip() for p in parts if p.strip()), pages=pages,
                   pages_read=read, title=title)


def _title(reader: Any) -> str | None:
    """The document's /Title, when it has a usable one (at most 1,000 characters)."""
    try:
        meta = reader.metadata
        title = None if meta is None else meta.title
    except Exception:  # a broken information dictionary: no title, the text stands
        return None
    if not isinstance(title, str) or not title.strip():
        return None
    return " ".join(title.split())[:1000]


def read_job(ctx: WorkContext, body: bytes) -> PdfText:
    """Page work: read a PDF body within the settings' caps (its size, its pages) and,
    in a worker process, with its memory capped."""
    settings = ctx.settings.parser
    if len(body) > settings.pdf_max_bytes:
        raise PdfError(f"a PDF of {len(body)} bytes, over CRAWLER_PARSER_PDF_MAX_BYTES "
                       f"({settings.pdf_max_bytes})")
    with memory_capped():
        return read_pdf(body, max_pages=settings.pdf_max_pages)


def address_space() -> int | None:
    """This process's address space in bytes (``/proc/self/statm``); None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * resource.getpagesize()


@contextlib.contextmanager
def memory_capped(headroom: int = READ_HEADROOM) -> Iterator[int | None]:
    """Within the block, this process may grow by at most ``headroom`` bytes of address
    space (``RLIMIT_AS``, lowered and then restored): an allocation past it raises
    MemoryError in the block instead of growing the process.

    Only in a worker process's main thread, where a job runs alone: in a thread of a
    service the limit would hold for every thread, so there it does nothing (and yields
    None); such services read PDFs in a worker process of their own."""
    now = address_space()
    if threading.current_thread() is not threading.main_thread() or now is None:
        yield None
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = now + headroom
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not cap memory for a PDF read: %r", exc)
        yield None
        return
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
