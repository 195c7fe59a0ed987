"""Messages: typed, versioned, and one clear error for anything malformed."""

from __future__ import annotations

import json

import pytest

from common.messages import (
    TOPIC_TYPES,
    Discovered,
    FetchOutcome,
    FetchResult,
    FetchTask,
    Link,
    MessageError,
    PageRecord,
    RecordPointer,
    Topic,
    decode,
    decode_topic,
    encode,
)

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
