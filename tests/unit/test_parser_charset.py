"""Charset sniffing and decoding of HTML bodies (parser.charset)."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parser.charset import CharsetSource, decode_html

FRENCH = ("Le conseil municipal a décidé de réduire les dépenses; l'été sera chaud à "
          "Besançon, où les élèves étudient. Ça coûte cher, déjà! ")
RUSSIAN = "Городской совет решил сократить расходы; лето будет жарким, ученики учатся. "
JAPANESE = ("市議会は支出を削減することを決定しました。"
            "夏は暑くなるでしょう。学生たちは勉強しています。")


def page(text: str, head: str = "", repeat: int = 20) -> str:
    body = "".join(f"<p>{text}</p>" for _ in range(repeat))
    return f"<html><head>{head}<title>t</title></head><body>{body}</body></html>"


def test_header_charset_is_used() -> None:
    body = page(FRENCH).encode("cp1252")
    decoded = decode_html(body, "text/html; charset=ISO-8859-1")
    assert decoded.source is CharsetSource.HEADER
    assert decoded.charset == "cp1252"  # WHATWG: latin-1 labels decode as windows-1252
    assert FRENCH in decoded.text
    assert decoded.errors == 0


def test_header_wins_over_meta() -> None:
    body = page(FRENCH, '<meta charset="koi8-r">').encode("cp1252")
    decoded = decode_html(body, "text/html; charset=windows-1252")
    assert decoded.source is CharsetSource.HEADER
    assert FRENCH in decoded.text


def test_bom_wins_over_header() -> None:
    body = codecs.BOM_UTF8 + page(FRENCH).encode("utf-8")
    decoded = decode_html(body, "text/html; charset=iso-8859-1")
    assert decoded.source is CharsetSource.BOM
    assert decoded.charset == "utf-8"
    assert decoded.text.startswith("<html>")  # the BOM is not part of the text
    assert FRENCH in decoded.text


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_bom(codec: str) -> None:
    bom = codecs.BOM_UTF16_LE if codec.endswith("le") else codecs.BOM_UTF16_BE
    decoded = decode_html(bom + page(JAPANESE).encode(codec), None)
    assert decoded.source is CharsetSource.BOM
    assert JAPANESE in decoded.text


@pytest.mark.parametrize("head", [
    '<meta charset="windows-1251">',
    "<meta charset=windows-1251>",
    '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">',
    '<meta content="text/html; charset=windows-1251" http-equiv="content-type">',
])
def test_meta_charset(head: str) -> None:
    decoded = decode_html(page(RUSSIAN, head).encode("cp1251"), "text/html")
    assert decoded.source is CharsetSource.META
    assert decoded.charset == "cp1251"
    assert RUSSIAN in decoded.text


def test_meta_in_a_comment_is_ignored() -> None:
    body = page(FRENCH, '<!-- <meta charset="koi8-r"> --><meta charset="windows-1252">')
    decoded = decode_html(body.encode("cp1252"), None)
    assert decoded.charset == "cp1252"
    assert FRENCH in decoded.text


def test_unknown_header_label_falls_through_to_meta() -> None:
    body = page(RUSSIAN, '<meta charset="windows-1251">').encode("cp1251")
    decoded = decode_html(body, "text/html; charset=no-such-charset")
    assert decoded.source is CharsetSource.META
    assert RUSSIAN in decoded.text


def test_utf7_is_refused() -> None:
    body = page("plain text").encode("ascii")
    decoded = decode_html(body, "text/html; charset=utf-7")
    assert decoded.charset != "utf-7"
    assert "plain text" in decoded.text


def test_meta_utf16_means_utf8() -> None:
    body = page(FRENCH, '<meta charset="utf-16">').encode("utf-8")
    decoded = decode_html(body, None)
    assert decoded.charset == "utf-8"
    assert FRENCH in decoded.text


def test_declared_utf8_but_latin1_bytes_is_detected() -> None:
    body = page(FRENCH).encode("cp1252")
    decoded = decode_html(body, "text/html; charset=utf-8")
    assert decoded.source is CharsetSource.DETECTED
    assert decoded.overridden == "utf-8"
    assert FRENCH in decoded.text
    assert "\ufffd" not in decoded.text


def test_declared_legacy_but_valid_utf8_is_utf8() -> None:
    body = page(FRENCH, '<meta charset="iso-8859-1">').encode("utf-8")
    decoded = decode_html(body, None)
    assert decoded.charset == "utf-8"
    assert decoded.source is CharsetSource.DETECTED
    assert decoded.overridden == "cp1252"
    assert FRENCH in decoded.text


def test_a_few_bad_bytes_keep_the_declaration() -> None:
    # A body capped in the middle of a character, plus one stray byte: still UTF-8.
    good = page(FRENCH).encode("utf-8")
    body = good[:200] + b"\xe9" + good[200:] + "é".encode()[:1]
    decoded = decode_html(body, "text/html; charset=utf-8")
    assert decoded.source is CharsetSource.HEADER
    assert decoded.charset == "utf-8"
    assert decoded.errors == 2
    assert decoded.text.count("\ufffd") == 2


def test_undeclared_utf8_and_ascii() -> None:
    assert decode_html(page(FRENCH).encode(), None).charset == "utf-8"
    decoded = decode_html(b"<p>plain</p>", None)
    assert (decoded.charset, decoded.text) == ("utf-8", "<p>plain</p>")


def test_undeclared_utf8_cut_mid_character_is_utf8() -> None:
    body = page(JAPANESE).encode("utf-8") + JAPANESE.encode()[:2]  # 2 of 3 bytes
    decoded = decode_html(body, None)
    assert decoded.charset == "utf-8"
    assert JAPANESE in decoded.text


@pytest.mark.parametrize(("text", "codec"), [
    (RUSSIAN, "cp1251"),
    (JAPANESE, "shift_jis"),
    (FRENCH, "cp1252"),
])
def test_undeclared_legacy_charset_is_detected(text: str, codec: str) -> None:
    decoded = decode_html(page(text).encode(codec), None)
    assert decoded.source is CharsetSource.DETECTED
    assert text in decoded.text


def test_literal_replacement_characters_are_not_errors() -> None:
    body = page("a \ufffd b").encode("utf-8") + b"\xff"
    decoded = decode_html(body, "text/html; charset=utf-8")
    assert decoded.errors == 1


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=4096), header=st.one_of(st.none(), st.text(max_size=80)))
def test_never_raises_on_junk(body: bytes, header: str | None) -> None:
    decoded = decode_html(body, header)
    assert isinstance(decoded.text, str)
    codecs.lookup(decoded.charset)
    decoded.text.encode("utf-8")  # no lone surrogates


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=500)
      .filter(lambda t: not t.startswith("\ufeff")))
def test_utf8_round_trip(text: str) -> None:
    decoded = decode_html(text.encode("utf-8"), "text/html; charset=utf-8")
    assert decoded.text == text
