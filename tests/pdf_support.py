"""A tiny PDF writer for tests and benchmarks: ordinary text PDFs and hostile ones.

Every file is generated in memory and small (a few KiB to about 1 MB), whatever it
expands to when read:

- :func:`text_pdf`: pages of plain text in a standard font (Helvetica), one line per
  ``Tj``; what a text extractor should read back word for word.
- :func:`bomb_pdf`: one page whose content stream is deflated twice
  (``[/FlateDecode /FlateDecode]``) and inflates to ``expanded`` bytes (gigabytes from
  a few KiB on disk).
- :func:`slow_pdf`: pages of near a million text operations each (a few KiB on disk),
  which keep an extractor busy for tens of seconds a page.
- :func:`many_pages_pdf`: ``pages`` pages (2,000 by default) of a line each.
- :func:`looping_pdf`: a cross-reference chain whose ``/Prev`` points at itself and a
  page tree whose kid is its own parent: a reader that follows either without a guard
  never ends.
- :func:`nested_pdf`: a page whose resources hold an array nested ``depth`` deep.
- :func:`garbage_pdf`: a PDF header and then nothing a reader can use.
"""

from __future__ import annotations

import zlib

WORDS = ("report", "river", "garden", "market", "signal", "window", "letter", "answer",
         "forest", "engine", "circle", "harbor", "planet", "silver", "winter", "animal")


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _stream(content: bytes, extra: bytes = b"") -> bytes:
    return (b"<< /Length " + str(len(content)).encode() + extra + b" >>\nstream\n"
            + content + b"\nendstream")


def _assemble(objects: list[bytes], *, root: int = 1, xref: bool = True,
              prev_self: bool = False, info: int | None = None) -> bytes:
    """A PDF of ``objects`` (object n is ``objects[n - 1]``) with a correct
    cross-reference table; ``prev_self``: its trailer's /Prev names the table itself."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    start = len(out)
    if xref:
        out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
        for offset in offsets:
            out += f"{offset:010d} 00000 n \n".encode()
    prev = f" /Prev {start}" if prev_self else ""
    prev += f" /Info {info} 0 R" if info is not None else ""
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root {root} 0 R{prev} >>\n"
            f"startxref\n{start}\n%%EOF\n").encode()
    return bytes(out)


def page_text(page: int, words: int = 200) -> list[str]:
    """The lines of ``page``'s text in :func:`text_pdf` (ten words a line)."""
    chosen = [WORDS[(page * 7 + i * 3 + i // 5) % len(WORDS)] for i in range(words)]
    return [" ".join(chosen[i:i + 10]) for i in range(0, len(chosen), 10)]


def text_pdf(pages: int = 3, words: int = 200, *, lines: list[list[str]] | None = None,
             compress: bool = True, title: str | None = None) -> bytes:
    """A PDF of ``pages`` pages of ``words`` words each (:func:`page_text`), or of the
    given ``lines`` per page; ``title``: its document information's /Title."""
    texts = lines if lines is not None else [page_text(p, words) for p in range(pages)]
    n = len(texts)
    # 1 catalog, 2 pages, 3 font, then per page: the page and its content stream
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode(),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, page_lines in enumerate(texts):
        ops = ["BT /F1 11 Tf 14 TL 50 780 Td"]
        ops += [f"({_escape(line)}) Tj T*" for line in page_lines]
        ops.append("ET")
        content = "\n".join(ops).encode("latin-1")
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       f"/Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {5 + 2 * i} 0 R >>".encode())
        objects.append(_stream(zlib.compress(content), b" /Filter /FlateDecode")
                       if compress else _stream(content))
    if title is None:
        return _assemble(objects)
    objects.append(f"<< /Title ({_escape(title)}) >>".encode("latin-1"))
    return _assemble(objects, info=len(objects))


def bomb_pdf(expanded: int = 4 * 1024**3) -> bytes:
    """One page whose content stream inflates to ``expanded`` bytes of spaces (deflated
    twice: about 4 KiB per GiB on disk)."""
    inner = zlib.compressobj(9)
    chunk = b" " * (1024 * 1024)
    parts = [inner.compress(chunk) for _ in range(expanded // len(chunk))]
    parts.append(inner.flush())
    twice = zlib.compress(b"".join(parts), 9)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
               b"/Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
               _stream(twice, b" /Filter [/FlateDecode /FlateDecode]")]
    return _assemble(objects)


def slow_pdf(pages: int = 1, operations: int = 900_000) -> bytes:
    """``pages`` pages each drawing ``operations`` two-letter strings (``(ab) Tj``),
    deflated twice: a few KiB on disk, tens of seconds of a text extractor's time per
    page (900,000 operations are 1.8 million tokens, under pypdf's 2 million a
    stream)."""
    block = b"(ab) Tj " * 100_000
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(pages))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i in range(pages):
        inner = zlib.compressobj(9)
        parts = [inner.compress(b"BT /F1 1 Tf ")]
        parts += [inner.compress(block) for _ in range(operations // 100_000)]
        parts.append(inner.compress(f" ({i}) Tj ET".encode()) + inner.flush())
        twice = zlib.compress(b"".join(parts), 9)
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       f"/Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {5 + 2 * i} 0 R >>".encode())
        objects.append(_stream(twice, b" /Filter [/FlateDecode /FlateDecode]"))
    return _assemble(objects)


def many_pages_pdf(pages: int = 2_000) -> bytes:
    """``pages`` pages of one short line each."""
    return text_pdf(lines=[[f"page {i} of the long file"] for i in range(pages)])


def looping_pdf() -> bytes:
    """A trailer whose /Prev is its own cross-reference table, and a page tree whose
    only kid is a Pages node that names the root as its kid again."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>"]
    return _assemble(objects, prev_self=True)


def nested_pdf(depth: int = 100_000) -> bytes:
    """A page whose resources hold an array nested ``depth`` deep (``[[[...]]]``)."""
    nested = b"[" * depth + b"]" * depth
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
               b"/Resources << /Deep 5 0 R >> /Contents 4 0 R >>",
               _stream(b"BT /F1 11 Tf 50 780 Td (nested) Tj ET"),
               nested]
    return _assemble(objects)


def garbage_pdf() -> bytes:
    """A PDF header followed by bytes that are no PDF."""
    return b"%PDF-1.4\n" + bytes(range(256)) * 16 + b"\n%%EOF\n"


HOSTILE = {
    "bomb": bomb_pdf,
    "many-pages": many_pages_pdf,
    "slow": slow_pdf,
    "looping": looping_pdf,
    "nested": nested_pdf,
    "garbage": garbage_pdf,
}
"""The hostile generators by name."""
