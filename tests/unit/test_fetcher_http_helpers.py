"""Pure helpers of the HTTP fetcher: Retry-After, status classes, media types."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from common.messages import FetchOutcome
from common.settings import Settings
from fetcher.http import (
    HttpFetcher,
    accept_header,
    classify_status,
    media_type_allowed,
    parse_retry_after,
    sniff_media_type,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("value", "expected"), [
    ("120", 120.0),
    (" 7 ", 7.0),
    ("0", 0.0),
    ("1.5", 1.5),
    ("Wed, 01 May 2024 12:01:30 GMT", 90.0),  # IMF-fixdate
    ("Wednesday, 01-May-24 12:00:10 GMT", 10.0),  # RFC 850
    ("Wed May  1 12:00:05 2024", 5.0),  # asctime
    ("Wed, 01 May 2024 11:00:00 GMT", 0.0),  # in the past
    ("Wed, 01 May 2024 14:00:00 +0200", 0.0),  # same instant, other zone
    ("9" * 5000, 1e12),  # longer than int() takes: the largest wait, capped by the caller
    ("1" + "0" * 400, 1e12),  # past float's range
])
def test_parse_retry_after(value: str, expected: float) -> None:
    assert parse_retry_after(value, NOW) == pytest.approx(expected)


@pytest.mark.parametrize("value", [None, "", "   ", "soon", "-5", "nan", "inf", "²", "١٢",
                                   "Wed, 99 Foo 2024 12:00:00 GMT"])
def test_parse_retry_after_unusable(value: str | None) -> None:
    assert parse_retry_after(value, NOW) is None


@pytest.mark.parametrize(("status", "location", "retry", "expected"), [
    (200, None, None, FetchOutcome.OK),
    (204, None, None, FetchOutcome.OK),
    (304, None, None, FetchOutcome.NOT_MODIFIED),
    (301, "http://a.test/x", None, FetchOutcome.REDIRECT),
    (308, "http://a.test/x", None, FetchOutcome.REDIRECT),
    (302, None, None, FetchOutcome.HTTP_ERROR),
    (404, None, None, FetchOutcome.HTTP_ERROR),
    (403, None, 10.0, FetchOutcome.HTTP_ERROR),
    (429, None, None, FetchOutcome.THROTTLED),
    (429, None, 30.0, FetchOutcome.THROTTLED),
    (503, None, 30.0, FetchOutcome.THROTTLED),
    (503, None, None, FetchOutcome.SERVER_ERROR),
    (500, None, 30.0, FetchOutcome.SERVER_ERROR),
    (599, None, None, FetchOutcome.SERVER_ERROR),
    (101, None, None, FetchOutcome.NETWORK_ERROR),
    (700, None, None, FetchOutcome.NETWORK_ERROR),
])
def test_classify_status(status: int, location: str | None, retry: float | None,
                         expected: FetchOutcome) -> None:
    assert classify_status(status, location=location, retry_after=retry) is expected


def test_media_type_allowed() -> None:
    allowed = ("text/html", "application/xhtml+xml", "image/*")
    assert media_type_allowed("text/html", allowed)
    assert media_type_allowed("TEXT/HTML", allowed)
    assert media_type_allowed("image/png", allowed)
    assert not media_type_allowed("text/plain", allowed)
    assert not media_type_allowed("application/xhtml", allowed)
    assert not media_type_allowed("", allowed)
    assert media_type_allowed("anything/at-all", ("*/*",))


def test_accept_header() -> None:
    assert accept_header(("text/html", "text/plain")) == \
        "text/html, text/plain;q=0.9, */*;q=0.1"
    assert accept_header(()) == "*/*"


@pytest.mark.parametrize(("head", "expected"), [
    (b"<!DOCTYPE html><html>", "text/html"),
    (b"  \n<HTML lang=en>", "text/html"),
    (b"<p>hi</p>", "text/html"),
    (b"<!-- c -->", "text/html"),
    (b"<?xml version='1.0'?><rss/>", "text/xml"),
    (b"%PDF-1.7", "application/pdf"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "application/octet-stream"),
    (b"just some words", "text/plain"),
    (b"\xef\xbb\xbfhello", "text/plain"),
    (b"<pre>", "text/plain"),  # not one of the sniffed tags
    (b"", "text/plain"),
])
def test_sniff_media_type(head: bytes, expected: str) -> None:
    assert sniff_media_type(head) == expected


@pytest.mark.parametrize(("key", "value", "message"), [
    ("allow_networks", ("127.0.0.1/33",), "not an IP network"),
    ("resolve", ("example.com:80",), "bad resolve entry"),
    ("dns_servers", ("dns.example",), "bad DNS server"),
])
def test_bad_network_settings_fail_at_construction(key: str, value: tuple[str, ...],
                                                   message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HttpFetcher(Settings().replace(fetcher={key: value}))
