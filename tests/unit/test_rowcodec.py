"""The struct <-> row codec both stores share."""

from __future__ import annotations

import msgspec
import pytest

from common.adapters.rowcodec import RowCodec
from common.messages import Reason, RecordPointer, UrlStatus
from common.ports import HostState, UrlState

URLS = RowCodec(UrlState, pointer="record", unsigned=frozenset({"simhash"}))


def test_a_url_row_round_trips_with_pointer_unsigned_and_enums() -> None:
    row = UrlState(host="a.test", url="http://a.test/", status=UrlStatus.REJECTED,
                   reason=Reason.BLOCKED, simhash=2**64 - 1,
                   record=RecordPointer("f.warc.gz", 10, 20))
    values = URLS.encode(row)
    assert len(values) == len(URLS.columns)
    cols = dict(zip(URLS.columns, values, strict=True))
    assert (cols["record_file"], cols["record_offset"], cols["record_length"]) == (
        "f.warc.gz", 10, 20)
    assert cols["simhash"] == -1  # two's complement in a signed 64-bit column
    assert cols["status"] == "rejected" and type(cols["status"]) is str
    assert URLS.decode(values) == row


def test_no_pointer_is_three_nulls_and_bools_come_back_from_integers() -> None:
    values = URLS.encode(UrlState(host="a.test", url="http://a.test/x"))
    cols = dict(zip(URLS.columns, values, strict=True))
    assert cols["record_file"] is cols["record_offset"] is cols["record_length"] is None
    hosts = RowCodec(HostState)
    stored = [1 if v is True else 0 if v is False else v
              for v in hosts.encode(HostState(host="h", blocked=True))]
    back = hosts.decode(stored)
    assert back.blocked is True and back.capped is False


def test_a_corrupt_row_is_an_error() -> None:
    values = URLS.encode(UrlState(host="a.test", url="http://a.test/"))
    values[URLS.columns.index("status")] = "no-such-status"
    with pytest.raises(msgspec.ValidationError):
        URLS.decode(values)
