"""Text signals (parser.signals): language, length and boilerplate ratio, on the parsed
page, the page record and the text (conversion) record."""

from __future__ import annotations

import json
from io import BytesIO
from pathlib import Path

import msgspec
import pytest
from warcio.archiveiterator import ArchiveIterator

from common import urls
from common.adapters.local_blobs import LocalBlobStore
from common.archive import (
    BOILERPLATE_RATIO_FIELD,
    LANGUAGE_CONFIDENCE_FIELD,
    LANGUAGE_FIELD,
    TEXT_CHARS_FIELD,
    TEXT_WORDS_FIELD,
    ArchiveWriter,
    TextFields,
)
from common.messages import (
    MessageError,
    PageRecord,
    ParsedPage,
    RecordPointer,
    decode,
    encode,
)
from dedup.service import page_record
from parser.jobs import analyse, text_fields
from parser.signals import identify_language, text_signals
from parser.text import MainText
from tests.warc_checks import warcio_check

ENGLISH = ("The council met on Tuesday evening and agreed to rebuild the old bridge over "
           "the river before the winter, after engineers found the piers were unsafe.")
GERMAN = ("Der Gemeinderat hat am Dienstagabend beschlossen, die alte Brücke über den Fluss "
          "noch vor dem Winter neu zu bauen, weil die Pfeiler nicht mehr sicher sind.")
FRENCH = ("Le conseil municipal a décidé mardi soir de reconstruire le vieux pont sur la "
          "rivière avant l'hiver, car les piliers ne sont plus sûrs selon les ingénieurs.")
TRACKING = urls.TrackingRules.from_patterns(["utm_*"])


@pytest.mark.parametrize(("text", "language"), [(ENGLISH, "en"), (GERMAN, "de"),
                                                (FRENCH, "fr")])
def test_language_is_identified(text: str, language: str) -> None:
    found, confidence = identify_language(text)
    assert found == language
    assert 0.5 <= confidence <= 1.0


@pytest.mark.parametrize("text", ["", "   ", "12 345 678 90", "OK", "© 2024 — 3/4"])
def test_too_little_text_has_no_language(text: str) -> None:
    assert identify_language(text) == (None, 0.0)


def test_signals_of_a_main_text() -> None:
    signals = text_signals(MainText(ENGLISH, visible_chars=len(ENGLISH) * 4))
    assert signals.language == "en"
    assert signals.chars == len(ENGLISH)
    assert signals.words == len(ENGLISH.split())
    assert signals.boilerplate_ratio == pytest.approx(0.75, abs=0.001)


def _html(article: str) -> bytes:
    nav = "".join(f'<li><a href="/s{i}">Section number {i}</a></li>' for i in range(25))
    return (f"<html><head><title>Bridge</title></head><body><nav><ul>{nav}</ul></nav>"
            f"<article><h1>Bridge</h1><p>{article}</p><p>{article}</p></article>"
            f"<footer><p>Copyright 2024 Example News, all rights reserved.</p></footer>"
            f"</body></html>").encode()


def test_analyse_gives_the_signals_of_an_html_page() -> None:
    found = analyse(_html(GERMAN), "text/html; charset=utf-8", "https://example.de/a",
                    x_robots_tag=None, product_token="PoliteCrawler", tracking=TRACKING)
    signals = found.signals
    assert signals.language == "de"
    assert signals.chars == len(found.text)
    assert signals.words == 2 * len(GERMAN.split())
    assert 0.2 < signals.boilerplate_ratio < 0.8  # navigation, title and footer dropped


def test_analyse_gives_plain_text_no_boilerplate() -> None:
    found = analyse(FRENCH.encode(), "text/plain; charset=utf-8", "https://example.fr/a.txt",
                    x_robots_tag=None, product_token="PoliteCrawler", tracking=TRACKING)
    assert found.signals.language == "fr"
    assert found.signals.boilerplate_ratio == 0.0
    assert found.signals.words == len(FRENCH.split())


def _page(**fields: object) -> ParsedPage:
    base = ParsedPage(url="https://example.com/a", host="example.com", depth=0, priority=0,
                      status=200, fetched_at=1_714_564_800.0, content_hash="sha256:00",
                      simhash=1, record=RecordPointer("w.warc.gz", 0, 10),
                      text_record=RecordPointer("t.warc.gz", 0, 10), text_chars=120)
    return msgspec.structs.replace(base, **fields)


def test_parsed_page_from_an_older_parser_decodes_without_signals() -> None:
    data = json.loads(encode(_page()))
    for name in ("text_words", "language", "language_confidence", "boilerplate_ratio"):
        del data[name]
    page = decode(ParsedPage, json.dumps(data).encode())
    assert page.language is None and page.boilerplate_ratio is None and page.text_words == 0


def test_parsed_page_signals_round_trip_and_are_range_checked() -> None:
    page = _page(language="en", language_confidence=0.99, text_words=20,
                 boilerplate_ratio=0.4)
    assert decode(ParsedPage, encode(page)) == page
    data = json.loads(encode(page))
    for name, bad in (("boilerplate_ratio", 1.5), ("language_confidence", -0.1),
                      ("text_words", -1), ("language", "")):
        broken = dict(data, **{name: bad})
        with pytest.raises(MessageError):
            decode(ParsedPage, json.dumps(broken).encode())


def test_page_record_carries_the_signals_in_camel_case() -> None:
    page = _page(language="en", language_confidence=0.99, text_words=20,
                 boilerplate_ratio=0.4)
    record = page_record(page, None)
    data = json.loads(encode(record))
    assert data["language"] == "en" and data["languageConfidence"] == 0.99
    assert data["textChars"] == 120 and data["textWords"] == 20
    assert data["boilerplateRatio"] == 0.4
    assert decode(PageRecord, encode(record)) == record
    without_text = page_record(_page(text_record=None, language="en"), None)
    assert without_text.language is None and without_text.text_chars is None


def test_page_record_names_the_markdown_record_and_older_records_decode() -> None:
    markdown = RecordPointer("t.warc.gz", 10, 20)
    data = json.loads(encode(page_record(_page(markdown_record=markdown), None)))
    assert data["markdownKey"] == {"file": "t.warc.gz", "offset": 10, "length": 20}
    assert page_record(_page(), None).markdown_key is None
    assert page_record(_page(text_record=None, markdown_record=markdown),
                       None).markdown_key is None
    del data["markdownKey"]  # a page record or parsed page from before the field
    assert decode(PageRecord, json.dumps(data).encode()).markdown_key is None
    parsed = json.loads(encode(_page(markdown_record=markdown)))
    del parsed["markdown_record"]
    assert decode(ParsedPage, json.dumps(parsed).encode()).markdown_record is None


def test_conversion_record_carries_the_signals(tmp_path: Path) -> None:
    store = LocalBlobStore(str(tmp_path), writer_id="w1")
    writer = ArchiveWriter(store, software="polite-crawler/test")
    signals = text_signals(MainText(ENGLISH, visible_chars=2 * len(ENGLISH)))
    written = writer.write_text(url="https://example.com/a", text=ENGLISH,
                                fetched_at=1_714_564_800.0, refers_to_record_id=None,
                                signals=text_fields(signals))
    unknown = writer.write_text(url="https://example.com/b", text="12 34",
                                fetched_at=1_714_564_800.0, refers_to_record_id=None,
                                signals=text_fields(text_signals(MainText("12 34", 5))))
    record = next(ArchiveIterator(BytesIO(store.read(written.pointer))))
    headers = record.rec_headers
    assert headers.get_header(LANGUAGE_FIELD) == "en"
    assert float(headers.get_header(LANGUAGE_CONFIDENCE_FIELD)) >= 0.5
    assert headers.get_header(TEXT_CHARS_FIELD) == str(len(ENGLISH))
    assert headers.get_header(TEXT_WORDS_FIELD) == str(len(ENGLISH.split()))
    assert headers.get_header(BOILERPLATE_RATIO_FIELD) == "0.5000"
    other = next(ArchiveIterator(BytesIO(store.read(unknown.pointer)))).rec_headers
    assert other.get_header(LANGUAGE_FIELD) is None
    assert other.get_header(LANGUAGE_CONFIDENCE_FIELD) is None
    assert other.get_header(TEXT_WORDS_FIELD) == "2"
    assert warcio_check([tmp_path / path for path in store.stream_files("text")]).returncode == 0


def test_a_language_that_is_not_a_tag_is_refused() -> None:
    with pytest.raises(ValueError, match="language"):
        TextFields(language="en\r\nX: y", language_confidence=1.0, chars=1, words=1,
                   boilerplate_ratio=0.0).header_fields()
