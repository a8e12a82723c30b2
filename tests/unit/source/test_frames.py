"""frames: the 'w', 'k' and 'r' CopyData sub-messages of the streaming replication protocol."""

from __future__ import annotations

import struct
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.decode.messages import PG_EPOCH_UNIX_US
from pgbridge.errors import DecodeError
from pgbridge.lsn import Lsn
from pgbridge.source.frames import Keepalive, XLogData, build_status_update, parse_copy_message, pg_now_us
from tests.support.pgoutput_builder import unhex

XLOG_DATA = unhex("""
    77                      # 'w' XLogData
    0000 0000 0300 0028     # wal start 0/3000028
    0000 0000 0300 0028     # wal end: a logical walsender repeats the start here
    0002 ba57 efb5 a000     # send time 2024-05-01 00:00:00 UTC
    45                      # payload: a pgoutput Stream Stop ('E')
""")

KEEPALIVE = unhex("""
    6b                      # 'k' primary keepalive
    0000 0001 6b37 4d48     # wal end 1/6B374D48: how far the server has sent
    0002 ba57 efb5 a000     # send time 2024-05-01 00:00:00 UTC
    01                      # reply requested
""")

STATUS_UPDATE = unhex("""
    72                      # 'r' standby status update
    0000 0000 0300 0100     # written  0/3000100
    0000 0000 0300 0028     # flushed  0/3000028: what the server may recycle WAL up to
    0000 0000 0300 0028     # applied  0/3000028
    0002 ba57 efc8 b2d0     # client clock 2024-05-01 00:00:01.25 UTC
    00                      # no reply requested
""")

MAY_FIRST = 767_836_800_000_000  # 2024-05-01 00:00:00 UTC in microseconds since 2000-01-01


def test_xlogdata_frame_parses_header_and_payload() -> None:
    frame = parse_copy_message(XLOG_DATA)
    assert isinstance(frame, XLogData)
    assert (frame.wal_start, frame.wal_end, frame.send_time) == (0x300_0028, 0x300_0028, MAY_FIRST)
    assert bytes(frame.payload) == b"E"


def test_xlogdata_payload_is_a_view_into_the_frame_not_a_copy() -> None:
    buf = bytearray(XLOG_DATA)
    frame = parse_copy_message(buf)
    assert isinstance(frame, XLogData) and isinstance(frame.payload, memoryview)
    buf[25] = ord("S")
    assert bytes(frame.payload) == b"S"


def test_xlogdata_from_a_memoryview_keeps_viewing_the_same_memory() -> None:
    view = memoryview(XLOG_DATA)
    frame = parse_copy_message(view)
    assert isinstance(frame, XLogData)
    assert frame.payload.obj is XLOG_DATA


def test_xlogdata_with_an_empty_payload_has_an_empty_view() -> None:
    frame = parse_copy_message(XLOG_DATA[:25])
    assert isinstance(frame, XLogData) and len(frame.payload) == 0


@pytest.mark.parametrize(("cut", "offset", "field"), [(1, 1, "wal start"), (8, 1, "wal start"),
                                                      (9, 9, "wal end"), (17, 17, "send time"),
                                                      (24, 17, "send time")])
def test_truncated_xlogdata_header_names_the_field(cut: int, offset: int, field: str) -> None:
    with pytest.raises(DecodeError, match=field) as caught:
        parse_copy_message(XLOG_DATA[:cut])
    assert (caught.value.tag, caught.value.offset) == ("w", offset)


def test_keepalive_frame_parses() -> None:
    assert parse_copy_message(KEEPALIVE) == Keepalive(Lsn(0x1_6B37_4D48), MAY_FIRST, True)


def test_keepalive_without_reply_request() -> None:
    frame = parse_copy_message(KEEPALIVE[:-1] + b"\x00")
    assert isinstance(frame, Keepalive) and frame.reply_requested is False


@pytest.mark.parametrize(("cut", "offset", "field"), [(1, 1, "wal end"), (9, 9, "send time"),
                                                      (17, 17, "reply requested flag")])
def test_truncated_keepalive_names_the_field(cut: int, offset: int, field: str) -> None:
    with pytest.raises(DecodeError, match=field) as caught:
        parse_copy_message(KEEPALIVE[:cut])
    assert (caught.value.tag, caught.value.offset) == ("k", offset)


def test_keepalive_with_trailing_bytes_is_refused() -> None:
    with pytest.raises(DecodeError, match="1 unexpected trailing byte") as caught:
        parse_copy_message(KEEPALIVE + b"\x00")
    assert (caught.value.tag, caught.value.offset) == ("k", 18)


@pytest.mark.parametrize("tag", [b"r", b"x", b"\x00", b"E"])
def test_unknown_copydata_type_is_refused(tag: bytes) -> None:
    with pytest.raises(DecodeError, match="unknown CopyData message type") as caught:
        parse_copy_message(tag + bytes(24))
    assert (caught.value.tag, caught.value.offset) == (tag.decode("latin-1"), 0)


def test_empty_copydata_is_refused() -> None:
    with pytest.raises(DecodeError, match="empty CopyData message") as caught:
        parse_copy_message(b"")
    assert caught.value.offset == 0


def test_status_update_matches_the_hex_fixture() -> None:
    assert build_status_update(0x300_0100, 0x300_0028, 0x300_0028, now_us=MAY_FIRST + 1_250_000) == STATUS_UPDATE


def test_status_update_can_ask_the_server_to_reply() -> None:
    frame = build_status_update(1, 1, 1, now_us=0, reply_requested=True)
    assert len(frame) == 34 and frame[-1] == 1


@pytest.mark.parametrize("lsn", [-1, 1 << 64])
def test_status_update_refuses_values_that_are_not_lsns(lsn: int) -> None:
    with pytest.raises(ValueError, match="flush_lsn"):
        build_status_update(0, lsn, 0, now_us=0)


@given(write=st.integers(0, (1 << 64) - 1), flush=st.integers(0, (1 << 64) - 1),
       apply=st.integers(0, (1 << 64) - 1), now=st.integers(-(1 << 63), (1 << 63) - 1), reply=st.booleans())
def test_status_update_layout_holds_for_any_values(write: int, flush: int, apply: int, now: int,
                                                   reply: bool) -> None:
    frame = build_status_update(write, flush, apply, now_us=now, reply_requested=reply)
    assert struct.unpack(">cQQQq?", frame) == (b"r", write, flush, apply, now, reply)


@given(wal_start=st.integers(0, (1 << 64) - 1), wal_end=st.integers(0, (1 << 64) - 1),
       send_time=st.integers(-(1 << 63), (1 << 63) - 1), payload=st.binary(max_size=32))
def test_any_xlogdata_frame_round_trips(wal_start: int, wal_end: int, send_time: int, payload: bytes) -> None:
    frame = parse_copy_message(b"w" + struct.pack(">QQq", wal_start, wal_end, send_time) + payload)
    assert isinstance(frame, XLogData)
    assert (frame.wal_start, frame.wal_end, frame.send_time, bytes(frame.payload)) == (
        wal_start, wal_end, send_time, payload)


def test_postgres_epoch_is_zero() -> None:
    assert pg_now_us(datetime(2000, 1, 1, tzinfo=UTC).timestamp()) == 0
    assert pg_now_us(0.0) == -PG_EPOCH_UNIX_US


def test_pg_now_us_converts_a_known_instant() -> None:
    assert pg_now_us(datetime(2024, 5, 1, 0, 0, 1, 250_000, tzinfo=UTC).timestamp()) == MAY_FIRST + 1_250_000


def test_pg_now_us_without_argument_reads_the_clock() -> None:
    before = pg_now_us(time.time())
    now = pg_now_us()
    after = pg_now_us(time.time())
    assert before - 1000 <= now <= after + 1000
