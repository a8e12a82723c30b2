"""decode_message: every pgoutput message on every protocol version, plus hex-dump fixtures.

The hex dumps are written from the protocol manual by hand; each is checked both ways (decoder and
test builder), so the builder used by the other tests is itself pinned to the spec.
"""

from __future__ import annotations

import dataclasses

import pytest

from pgbridge.decode.messages import (
    Begin,
    BeginPrepare,
    Column,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    TypeInfo,
    Update,
)
from pgbridge.decode.pgoutput import decode_message
from pgbridge.errors import DecodeError
from pgbridge.lsn import Lsn
from tests.support.pgoutput_builder import encode_message, unhex

VERSIONS = (1, 2, 3, 4)
TS = 767_836_800_000_000  # 2024-05-01 00:00:00 UTC in microseconds since 2000-01-01
ROW = TupleData(b"tnub", (b"42", None, None, b"\x00\x01\xff"))
KEY = TupleData(b"tn", (b"42", None))

# One representative of every message, outside a stream block, with the first version that has it.
SAMPLES: list[tuple[Message, int]] = [
    (Begin(Lsn(0x1_6B37_4D48), TS, 745), 1),
    (LogicalMessage(None, True, Lsn(0x1_6B37_4D10), "audit", b"who=\x00root"), 1),
    (Commit(0, Lsn(0x1_6B37_4D48), Lsn(0x1_6B37_4D78), TS), 1),
    (Origin(Lsn(0xAB_CDEF), "pg_16385"), 1),
    (Relation(None, 16385, "public", "users", "d",
              (Column(True, "id", 23, -1), Column(False, "name", 1043, 68))), 1),
    (TypeInfo(None, 16400, "public", "mood"), 1),
    (Insert(None, 16385, ROW), 1),
    (Update(None, 16385, None, None, ROW), 1),
    (Update(None, 16385, "K", KEY, ROW), 1),
    (Update(None, 16385, "O", ROW, ROW), 1),
    (Delete(None, 16385, "K", KEY), 1),
    (Delete(None, 16385, "O", ROW), 1),
    (Truncate(None, 1, (16385, 16386)), 1),
    (StreamStart(745, True), 2),
    (StreamStop(), 2),
    (StreamCommit(745, 0, Lsn(0x300_0060), Lsn(0x300_0090), TS), 2),
    (StreamAbort(745, 746, None, None), 2),
    (BeginPrepare(Lsn(0x300_0060), Lsn(0x300_0090), TS, 745, "tx-1"), 3),
    (Prepare(0, Lsn(0x300_0060), Lsn(0x300_0090), TS, 745, "tx-1"), 3),
    (CommitPrepared(0, Lsn(0x300_00C0), Lsn(0x300_00F0), TS + 5, 745, "tx-1"), 3),
    (RollbackPrepared(0, Lsn(0x300_0090), Lsn(0x300_00F0), TS, TS + 5, 745, "tx-1"), 3),
    (StreamPrepare(0, Lsn(0x300_0060), Lsn(0x300_0090), TS, 745, "tx-1"), 3),
]
# The messages that carry the streamed transaction's xid inside a stream block (protocol 2+).
XID_BEARING = (Relation, TypeInfo, Insert, Update, Delete, Truncate, LogicalMessage)
STREAM_XID = 0x2E9


def _id(msg: Message) -> str:
    return type(msg).__name__ + (f"-{msg.old_kind}" if isinstance(msg, Update | Delete) else "")


def _decode(buf: bytes | bytearray | memoryview, version: int, in_stream: bool = False) -> Message:
    return decode_message(buf, proto_version=version, in_stream=in_stream)


def _encode(msg: Message, version: int, in_stream: bool = False) -> bytes:
    return encode_message(msg, proto_version=version, in_stream=in_stream)


def _streamed(msg: Message) -> Message:
    """The same message as sent inside a stream block: xid-bearing ones gain the xid."""
    return dataclasses.replace(msg, xid=STREAM_XID) if isinstance(msg, XID_BEARING) else msg


# -- every message x every protocol version ------------------------------------------------------

VERSIONED = [pytest.param(msg, v, id=f"{_id(msg)}-v{v}") for msg, since in SAMPLES for v in VERSIONS
             if v >= since]


@pytest.mark.parametrize(("msg", "version"), VERSIONED)
def test_every_message_decodes_on_every_protocol_version_that_has_it(msg: Message, version: int) -> None:
    assert _decode(_encode(msg, version), version) == msg


STREAMED = [pytest.param(msg, v, id=f"{_id(msg)}-v{v}") for msg, since in SAMPLES for v in (2, 3, 4)
            if v >= since]


@pytest.mark.parametrize(("msg", "version"), STREAMED)
def test_every_message_decodes_inside_a_stream_block(msg: Message, version: int) -> None:
    streamed = _streamed(msg)
    assert _decode(_encode(streamed, version, in_stream=True), version, in_stream=True) == streamed


@pytest.mark.parametrize("msg", [m for m, _ in SAMPLES if isinstance(m, XID_BEARING)], ids=_id)
def test_xid_bearing_messages_grow_by_exactly_the_xid_inside_a_stream_block(msg: Message) -> None:
    plain = _encode(msg, 2)
    streamed = _encode(_streamed(msg), 2, in_stream=True)
    assert streamed == plain[:1] + STREAM_XID.to_bytes(4, "big") + plain[1:]


@pytest.mark.parametrize("msg", [m for m, _ in SAMPLES if not isinstance(m, XID_BEARING)], ids=_id)
def test_transaction_control_messages_are_the_same_inside_and_outside_a_stream_block(msg: Message) -> None:
    version = 4 if isinstance(msg, StreamAbort) else 3
    buf = _encode(msg, version)
    assert _decode(buf, version, in_stream=True) == _decode(buf, version, in_stream=False) == msg


@pytest.mark.parametrize(("msg", "version"), [
    pytest.param(msg, v, id=f"{_id(msg)}-v{v}") for msg, since in SAMPLES for v in VERSIONS if v < since])
def test_messages_newer_than_the_protocol_version_are_refused(msg: Message, version: int) -> None:
    buf = _encode(msg, 4)
    with pytest.raises(DecodeError, match=r"needs pgoutput protocol version [23]\+, stream uses") as caught:
        _decode(buf, version)
    assert (caught.value.tag, caught.value.offset) == (chr(buf[0]), 0)


def test_stream_abort_carries_abort_lsn_and_timestamp_from_protocol_4() -> None:
    msg = StreamAbort(745, 746, Lsn(0x300_0028), TS)
    assert _decode(_encode(msg, 4), 4) == msg
    with pytest.raises(ValueError, match="from protocol 4"):
        _encode(msg, 3)


def test_short_stream_abort_is_still_accepted_on_protocol_4() -> None:
    # Postgres 16+ writes the abort LSN and time only with streaming = parallel; with streaming = on
    # a protocol 4 stream still sends the two-xid form.
    assert _decode(unhex("41 000002e9 000002ea"), 4) == StreamAbort(745, 746, None, None)


def test_long_stream_abort_is_refused_before_protocol_4() -> None:
    buf = _encode(StreamAbort(745, 746, Lsn(0x300_0028), TS), 4)
    with pytest.raises(DecodeError, match="16 unexpected trailing byte") as caught:
        _decode(buf, 3)
    assert (caught.value.tag, caught.value.offset) == ("A", 9)


def test_streamed_insert_read_without_the_stream_flag_fails_instead_of_misreading() -> None:
    buf = _encode(Insert(STREAM_XID, 16384, ROW), 2, in_stream=True)
    with pytest.raises(DecodeError, match="tuple part marker is 0x00") as caught:
        _decode(buf, 2, in_stream=False)
    assert (caught.value.tag, caught.value.offset) == ("I", 5)


def test_in_stream_on_protocol_1_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="no streamed transactions"):
        _decode(_encode(Insert(None, 1, ROW), 1), 1, in_stream=True)


@pytest.mark.parametrize("version", [0, 5, -1])
def test_unsupported_protocol_versions_are_a_caller_error(version: int) -> None:
    with pytest.raises(ValueError, match="not supported"):
        _decode(b"E", version)


# -- field details -------------------------------------------------------------------------------

@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=lambda w: w.__name__)
def test_column_values_are_bytes_whatever_buffer_type_comes_in(wrap: type[bytes]) -> None:
    msg = _decode(wrap(_encode(Update(None, 7, "O", ROW, ROW), 1)), 1)
    assert isinstance(msg, Update) and msg.old is not None
    assert msg.new == msg.old == ROW
    assert all(type(value) is bytes for value in msg.new.values if value is not None)
    assert type(msg.new.kinds) is bytes


def test_a_memoryview_slice_of_a_larger_frame_decodes_only_its_own_bytes() -> None:
    payload = _encode(Insert(None, 7, ROW), 1)
    frame = memoryview(b"w" + bytes(24) + payload)
    assert _decode(frame[25:], 1) == Insert(None, 7, ROW)


def test_tuple_with_no_columns_decodes_to_empty_kinds_and_values() -> None:
    assert _decode(unhex("49 00000007 4e 0000"), 1) == Insert(None, 7, TupleData(b"", ()))


def test_all_text_tuple_reports_text_kinds() -> None:
    row = TupleData(b"ttt", (b"", b"a", b"\x00" * 300))
    assert _decode(_encode(Insert(None, 7, row), 1), 1) == Insert(None, 7, row)


def test_binary_values_keep_embedded_nul_bytes() -> None:
    row = TupleData(b"bb", (b"\x00\x00\x00\x07", b"\x00"))
    assert _decode(_encode(Insert(None, 7, row), 1), 1) == Insert(None, 7, row)


def test_large_column_value_decodes_intact() -> None:
    value = bytes(range(256)) * 4096  # 1 MiB, as a TOASTed text column would arrive
    msg = _decode(_encode(Insert(None, 7, TupleData(b"t", (value,))), 1), 1)
    assert isinstance(msg, Insert) and msg.new.values == (value,)


def test_truncate_option_bits_map_to_cascade_and_restart_identity() -> None:
    for options, cascade, restart in ((0, False, False), (1, True, False), (2, False, True), (3, True, True)):
        msg = _decode(_encode(Truncate(None, options, (1,)), 1), 1)
        assert isinstance(msg, Truncate)
        assert (msg.cascade, msg.restart_identity) == (cascade, restart)


def test_truncate_of_no_relations_decodes() -> None:
    assert _decode(unhex("54 00000000 00"), 1) == Truncate(None, 0, ())


def test_logical_message_flag_byte_decides_transactional() -> None:
    buf = bytearray(_encode(LogicalMessage(None, True, Lsn(5), "p", b""), 1))
    assert buf[1] == 1
    buf[1] = 0
    msg = _decode(bytes(buf), 1)
    assert isinstance(msg, LogicalMessage) and msg.transactional is False


def test_non_ascii_names_decode_from_utf8() -> None:
    msg = Relation(None, 1, "schéma", "таблица", "f", (Column(False, "列", 25, -1),))
    assert _decode(_encode(msg, 1), 1) == msg


def test_stream_start_first_segment_flag_is_one_only_for_the_first_segment() -> None:
    assert _decode(unhex("53 000002e9 01"), 2) == StreamStart(745, True)
    assert _decode(unhex("53 000002e9 00"), 2) == StreamStart(745, False)


def test_lsns_and_timestamps_use_the_full_64_bits() -> None:
    msg = Begin(Lsn((1 << 64) - 1), -(1 << 63), 0xFFFF_FFFF)
    assert _decode(_encode(msg, 1), 1) == msg


# -- hex-dump fixtures of the tricky frames --------------------------------------------------------

UPDATE_WITH_KEY = unhex("""
    55                      # 'U' update
    0000 4001               # relation oid 16385
    4b                      # 'K': the old replica identity key follows (the key changed)
    0002                    # 2 columns
    74 0000 0001 37         #   t "7"
    6e                      #   n: not a key column, so not sent
    4e                      # 'N': the new row follows
    0002                    # 2 columns
    74 0000 0001 38         #   t "8"
    74 0000 0003 626f62     #   t "bob"
""")

UPDATE_WITH_OLD_ROW_STREAMED = unhex("""
    55                      # 'U' update
    0000 02e9               # xid 745: we are inside a stream block
    0000 4001               # relation oid 16385
    4f                      # 'O': the whole old row follows (REPLICA IDENTITY FULL)
    0002                    # 2 columns
    74 0000 0001 37         #   t "7"
    74 0000 0005 616c696365 #   t "alice"
    4e                      # 'N': the new row follows
    0002                    # 2 columns
    74 0000 0001 37         #   t "7"
    75                      #   u: unchanged TOASTed value, not sent
""")

DELETE_WITH_OLD_ROW = unhex("""
    44                      # 'D' delete
    0000 4001               # relation oid 16385
    4f                      # 'O': the whole old row follows
    0003                    # 3 columns
    74 0000 0001 37         #   t "7"
    6e                      #   n: NULL
    62 0000 0004 00000007   #   b: int4 7 in binary
""")

TRUNCATE_TWO_RELATIONS = unhex("""
    54                      # 'T' truncate
    0000 0002               # 2 relations
    03                      # options: CASCADE | RESTART IDENTITY
    0000 4001               # relation oid 16385
    0000 4002               # relation oid 16386
""")

RELATION_USERS = unhex("""
    52                      # 'R' relation
    0000 4001               # relation oid 16385
    7075626c6963 00         # namespace "public"
    7573657273 00           # name "users"
    64                      # replica identity 'd' (default: primary key)
    0002                    # 2 columns
    01 6964 00              #   key column "id"
       0000 0017 ffffffff   #     int4 (oid 23), no type modifier
    00 6e616d65 00          #   column "name"
       0000 0413 00000044   #     varchar (oid 1043), typmod 68 = varchar(64)
""")

STREAM_ABORT_V3 = unhex("""
    41                      # 'A' stream abort
    0000 02e9               # xid 745
    0000 02ea               # subtransaction xid 746
""")

STREAM_ABORT_V4 = unhex("""
    41                      # 'A' stream abort
    0000 02e9               # xid 745
    0000 02ea               # subtransaction xid 746
    0000 0000 0300 0028     # abort lsn 0/3000028          (protocol 4, streaming = parallel)
    0002 ba57 efc8 b2d0     # abort time 2024-05-01 00:00:01.25 UTC
""")

FIXTURES = [
    pytest.param(UPDATE_WITH_KEY, 1, False,
                 Update(None, 16385, "K", TupleData(b"tn", (b"7", None)), TupleData(b"tt", (b"8", b"bob"))),
                 id="update-with-key"),
    pytest.param(UPDATE_WITH_OLD_ROW_STREAMED, 2, True,
                 Update(745, 16385, "O", TupleData(b"tt", (b"7", b"alice")), TupleData(b"tu", (b"7", None))),
                 id="update-with-old-row-streamed"),
    pytest.param(DELETE_WITH_OLD_ROW, 1, False,
                 Delete(None, 16385, "O", TupleData(b"tnb", (b"7", None, b"\x00\x00\x00\x07"))),
                 id="delete-with-old-row"),
    pytest.param(TRUNCATE_TWO_RELATIONS, 1, False, Truncate(None, 3, (16385, 16386)), id="truncate-two"),
    pytest.param(RELATION_USERS, 1, False,
                 Relation(None, 16385, "public", "users", "d",
                          (Column(True, "id", 23, -1), Column(False, "name", 1043, 68))),
                 id="relation"),
    pytest.param(STREAM_ABORT_V3, 3, False, StreamAbort(745, 746, None, None), id="stream-abort-v3"),
    pytest.param(STREAM_ABORT_V4, 4, False, StreamAbort(745, 746, Lsn(0x300_0028), 767_836_801_250_000),
                 id="stream-abort-v4"),
]


@pytest.mark.parametrize(("dump", "version", "in_stream", "expected"), FIXTURES)
def test_hex_fixture_decodes_to_the_expected_message(dump: bytes, version: int, in_stream: bool,
                                                     expected: Message) -> None:
    assert _decode(dump, version, in_stream) == expected


@pytest.mark.parametrize(("dump", "version", "in_stream", "expected"), FIXTURES)
def test_builder_reproduces_each_hex_fixture_byte_for_byte(dump: bytes, version: int, in_stream: bool,
                                                           expected: Message) -> None:
    assert _encode(expected, version, in_stream) == dump


def test_update_with_key_decodes_k_part() -> None:
    msg = _decode(UPDATE_WITH_KEY, 1)
    assert isinstance(msg, Update)
    assert msg.old_kind == "K" and msg.old == TupleData(b"tn", (b"7", None))


def test_update_with_old_tuple_decodes_o_part() -> None:
    msg = _decode(UPDATE_WITH_OLD_ROW_STREAMED, 2, in_stream=True)
    assert isinstance(msg, Update)
    assert (msg.xid, msg.old_kind) == (745, "O")
    assert msg.new.kinds == b"tu" and msg.new.values[1] is None


def test_truncate_with_two_relations_lists_both_in_order() -> None:
    msg = _decode(TRUNCATE_TWO_RELATIONS, 1)
    assert isinstance(msg, Truncate)
    assert msg.rel_ids == (16385, 16386) and msg.cascade and msg.restart_identity


def test_stream_abort_v3_and_v4_differ_only_by_the_abort_fields() -> None:
    assert STREAM_ABORT_V4[:9] == STREAM_ABORT_V3
    v3, v4 = _decode(STREAM_ABORT_V3, 3), _decode(STREAM_ABORT_V4, 4)
    assert isinstance(v3, StreamAbort) and isinstance(v4, StreamAbort)
    assert (v3.xid, v3.subxid) == (v4.xid, v4.subxid) == (745, 746)
    assert (v3.abort_lsn, v3.abort_ts) == (None, None)
    assert (v4.abort_lsn, v4.abort_ts) == (0x300_0028, 767_836_801_250_000)
