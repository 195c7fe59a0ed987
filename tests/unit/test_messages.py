"""Messages: typed, versioned, and one clear error for anything malformed."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import msgspec
import pytest

from common import minhash
from common.messages import (
    MAX_DEAD_LETTER_PAYLOAD,
    MAX_DEAD_LETTER_TEXT,
    MAX_DEPTH,
    MAX_HOPS,
    MAX_PRIORITY,
    MAX_SECONDS,
    MAX_TIMESTAMP,
    TOPIC_TYPES,
    DeadLetter,
    Discovered,
    FetchOutcome,
    FetchResult,
    FetchTask,
    HostControl,
    Link,
    Message,
    MessageError,
    PageRecord,
    ParsedPage,
    PayloadEncoding,
    RecordPointer,
    StatusUpdate,
    Topic,
    UrlStatus,
    dead_letter,
    dead_letter_payload,
    decode,
    decode_topic,
    encode,
)
from common.settings import CrawlSettings

TASK = FetchTask(task_id="t1", url="http://a.test/", host="a.test", etag='"x"')


def test_round_trip_every_kind() -> None:
    samples = [
        Discovered(host="a.test", links=[Link(url="http://a.test/", depth=0)]),
        TASK,
        FetchResult(task=TASK, outcome=FetchOutcome.OK, status=200,
                    record=RecordPointer("f.warc.gz", 10, 20), content_hash="sha256:00"),
    ]
    for msg in samples:
        assert decode(type(msg), encode(msg)) == msg


def test_page_record_uses_the_documented_camel_case_names() -> None:
    rec = PageRecord(url="http://a.test/", fetched_at="2026-01-01T00:00:00Z", status=200,
                     content_hash="sha256:ab", simhash="00ff00ff00ff00ff",
                     storage_key=RecordPointer("f", 1, 2), text_key=None)
    data = json.loads(encode(rec))
    assert set(data) >= {"url", "fetchedAt", "status", "contentHash", "simhash", "storageKey",
                         "textKey", "duplicateOf"}
    assert decode(PageRecord, encode(rec)) == rec


@pytest.mark.parametrize("payload", [
    b"", b"not json", b"[]", b'{"v": 1}', b'{"v": 1, "task_id": 5, "url": "u", "host": "h"}',
    b"\xff\xfe\x00",
])
def test_malformed_raises_message_error(payload: bytes) -> None:
    with pytest.raises(MessageError):
        decode(FetchTask, payload)


def test_unknown_version_raises_message_error() -> None:
    data = json.loads(encode(TASK))
    data["v"] = 99
    with pytest.raises(MessageError, match="unknown schema version 99"):
        decode(FetchTask, json.dumps(data).encode())


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    data = json.loads(encode(TASK))
    data["new_field"] = [1, 2]
    assert decode(FetchTask, json.dumps(data).encode()) == TASK


def test_every_topic_has_a_type() -> None:
    assert set(TOPIC_TYPES) == set(Topic)
    assert decode_topic(Topic.FETCH, encode(TASK)) == TASK


# ------------------------------------------------------------------ value ranges


def _link(**fields: object) -> bytes:
    # Building a message checks no range; decoding does.
    link = Link(url="http://a.test/", **fields)  # type: ignore[arg-type]
    return encode(Discovered(host="a.test", links=[link]))


@pytest.mark.parametrize(("fields", "where"), [
    ({"depth": -5}, "depth"),
    ({"depth": MAX_DEPTH + 1}, "depth"),
    ({"priority": -3}, "priority"),
    ({"priority": 10**9}, "priority"),
    ({"priority": MAX_PRIORITY + 1}, "priority"),
    ({"hops": -1}, "hops"),
    ({"hops": MAX_HOPS + 1}, "hops"),
])
def test_link_values_out_of_range_are_malformed(fields: dict[str, int], where: str) -> None:
    with pytest.raises(MessageError, match=where):
        decode(Discovered, _link(**fields))


def test_link_values_at_the_edges_of_their_ranges_decode() -> None:
    for fields in ({"depth": 0, "priority": 0, "hops": 0},
                   {"depth": MAX_DEPTH, "priority": MAX_PRIORITY, "hops": MAX_HOPS}):
        [link] = decode(Discovered, _link(**fields)).links
        assert (link.depth, link.priority, link.hops) == tuple(fields.values())


def test_max_priority_matches_the_most_priority_levels_settings_allow() -> None:
    levels = {f.name: f for f in dataclasses.fields(CrawlSettings)}["priority_levels"]
    assert levels.metadata["maximum"] == MAX_PRIORITY + 1


RESULT = FetchResult(task=TASK, outcome=FetchOutcome.OK, status=200)


@pytest.mark.parametrize(("message", "where"), [
    (msgspec.structs.replace(TASK, attempt=-1), "attempt"),
    (msgspec.structs.replace(TASK, depth=-1), "depth"),
    (msgspec.structs.replace(TASK, priority=100), "priority"),
    (msgspec.structs.replace(TASK, delay=-1.0), "delay"),
    (msgspec.structs.replace(TASK, delay=MAX_SECONDS * 2), "delay"),
    (msgspec.structs.replace(TASK, issued_at=-1.0), "issued_at"),
    (msgspec.structs.replace(TASK, previous_fetch_at=MAX_TIMESTAMP + 1), "previous_fetch_at"),
    (msgspec.structs.replace(TASK, previous_record=RecordPointer("f", -1, 10)), "offset"),
    (msgspec.structs.replace(TASK, previous_record=RecordPointer("f", 0, -10)), "length"),
    (msgspec.structs.replace(RESULT, status=-200), "status"),
    (msgspec.structs.replace(RESULT, status=1000), "status"),
    (msgspec.structs.replace(RESULT, body_bytes=-1), "body_bytes"),
    (msgspec.structs.replace(RESULT, elapsed=-0.5), "elapsed"),
    (msgspec.structs.replace(RESULT, retry_after=-5.0), "retry_after"),
    (msgspec.structs.replace(RESULT, robots_crawl_delay=-5.0), "robots_crawl_delay"),
    (msgspec.structs.replace(RESULT, fetched_at=-1.0), "fetched_at"),
    (HostControl(host="a.test", delay=-1.0), "delay"),
    (HostControl(host="a.test", max_pages=-1), "max_pages"),
    (DeadLetter(topic="status", key="k", payload="", error="", attempts=-1), "attempts"),
    (DeadLetter(topic="status", key="k", payload="", error="", attempts=1, size=-1), "size"),
])
def test_values_out_of_range_are_malformed(message: Message, where: str) -> None:
    with pytest.raises(MessageError, match=where):
        decode(type(message), encode(message))


def test_parsed_page_and_status_ranges() -> None:
    page = ParsedPage(url="http://a.test/", host="a.test", depth=1, priority=1, status=200,
                      fetched_at=1.0, content_hash=None, simhash=2**64 - 1)
    assert decode(ParsedPage, encode(page)) == page
    for bad, where in ((msgspec.structs.replace(page, depth=-1), "depth"),
                       (msgspec.structs.replace(page, text_chars=-1), "text_chars"),
                       (msgspec.structs.replace(page, simhash=-1), "simhash")):
        with pytest.raises(MessageError, match=where):
            decode(ParsedPage, encode(bad))
    data = encode(page).replace(b"18446744073709551615", b"18446744073709551616")
    with pytest.raises(MessageError, match="simhash"):
        decode(ParsedPage, data)
    update = StatusUpdate(url="http://a.test/", host="a.test", status=UrlStatus.DONE,
                          simhash=-5)
    with pytest.raises(MessageError, match="simhash"):
        decode(StatusUpdate, encode(update))


def test_parsed_page_carries_a_sketch() -> None:
    page = ParsedPage(url="http://a.test/", host="a.test", depth=1, priority=1, status=200,
                      fetched_at=1.0, content_hash=None, simhash=5,
                      sketch=minhash.sketch("one two three four five six seven"))
    assert decode(ParsedPage, encode(page)) == page
    assert decode(ParsedPage, encode(msgspec.structs.replace(page, sketch=None))).sketch is None
    older = encode(page).replace(b'"sketch"', b'"other"')  # from a parser before sketches
    assert decode(ParsedPage, older).sketch is None
    too_big = msgspec.structs.replace(page, sketch=b"x" * (minhash.SKETCH_BYTES + 1))
    with pytest.raises(MessageError, match="sketch"):
        decode(ParsedPage, encode(too_big))


# ------------------------------------------------------------------ dead letters


def _json_size(letter: DeadLetter) -> int:
    return len(encode(letter))


@pytest.mark.parametrize("payload", [
    b"\x80" * 400_000,  # invalid UTF-8: tripled as text with replacement characters
    b"\x00" * 400_000,  # valid UTF-8, but six times as long escaped in JSON
    b"\xff" * 2_000_000,
    "é".encode() * 400_000,  # valid UTF-8 over the limit
])
def test_dead_letters_of_big_payloads_stay_within_the_limit(payload: bytes) -> None:
    letter = dead_letter("status", "a.test", payload, "MessageError: bad", 1)
    assert _json_size(letter) <= MAX_DEAD_LETTER_PAYLOAD + 1000 < 1_000_000
    assert letter.encoding is PayloadEncoding.BASE64 and letter.truncated
    assert letter.size == len(payload)
    assert letter.digest == "sha256:" + hashlib.sha256(payload).hexdigest()
    back = decode(DeadLetter, encode(letter))
    kept = dead_letter_payload(back)
    assert len(kept) == MAX_DEAD_LETTER_PAYLOAD // 4 * 3 and payload.startswith(kept)


def test_a_small_utf8_payload_stays_readable_text() -> None:
    payload = encode(TASK)
    letter = dead_letter("fetch", "a.test", payload, "ValueError: x", 3)
    assert letter.encoding is PayloadEncoding.UTF8 and not letter.truncated
    assert letter.payload == payload.decode()
    assert (letter.size, letter.attempts) == (len(payload), 3)
    assert dead_letter_payload(decode(DeadLetter, encode(letter))) == payload


@pytest.mark.parametrize("payload", [b"\xff\xfe\x00", b"\xed\xb3\xbf", b"\x00" * 10, b""])
def test_small_payloads_come_back_exactly(payload: bytes) -> None:
    letter = dead_letter("status", "a.test", payload, "E", 1)
    assert not letter.truncated
    assert dead_letter_payload(decode(DeadLetter, encode(letter))) == payload


def test_text_is_kept_while_its_json_form_fits_and_cut_to_base64_past_it() -> None:
    fits = b"a" * 100
    assert dead_letter("s", "k", fits, "E", 1, limit=100).encoding is PayloadEncoding.UTF8
    escaped = b"\x01" * 20  # 20 bytes, 120 characters in JSON
    letter = dead_letter("s", "k", escaped, "E", 1, limit=100)
    assert letter.encoding is PayloadEncoding.BASE64 and not letter.truncated
    assert dead_letter_payload(letter) == escaped
    bare = dead_letter("s", "k", b"x" * 1000, "E", 1, limit=0)
    assert (bare.payload, bare.truncated, bare.size) == ("", True, 1000)


def test_dead_letter_key_and_error_are_cut_and_made_encodable() -> None:
    letter = dead_letter("status", "\udcff" + "k" * 10_000, b"x", "E" * 10_000, 1)
    assert len(letter.key) <= MAX_DEAD_LETTER_TEXT and len(letter.error) <= MAX_DEAD_LETTER_TEXT
    assert letter.key.startswith("\ufffd")
    decode(DeadLetter, encode(letter))


def test_letters_without_the_new_fields_still_decode() -> None:
    old = b'{"v":1,"topic":"status","key":"k","payload":"{}","error":"E","attempts":2}'
    letter = decode(DeadLetter, old)
    assert letter.encoding is PayloadEncoding.UTF8 and letter.size is None
    assert dead_letter_payload(letter) == b"{}"
