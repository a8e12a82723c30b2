"""decode_message error paths: each malformed frame raises DecodeError naming the tag and the offset
of the field at fault (offset 0 is the tag byte)."""

from __future__ import annotations

import pytest

from pgbridge.decode.messages import Insert, LogicalMessage, Message, Relation, TupleData, Update
from pgbridge.decode.pgoutput import decode_message
from pgbridge.errors import DecodeError
from pgbridge.lsn import Lsn
from tests.support.pgoutput_builder import encode_message, unhex

from .test_pgoutput import SAMPLES, STREAMED, _id, _streamed

INSERT = unhex("""
    49                      # 0  'I'
    0000 4001               # 1  relation oid
    4e                      # 5  'N'
    0002                    # 6  2 columns
    74 0000 0003 616263     # 8  t, length at 9, value at 13..15
    6e                      # 16 n
""")  # 17 bytes


def _error(buf: bytes, version: int = 1, in_stream: bool = False) -> DecodeError:
    with pytest.raises(DecodeError) as caught:
        decode_message(buf, proto_version=version, in_stream=in_stream)
    return caught.value


def test_insert_fixture_is_valid_before_we_break_it() -> None:
    assert decode_message(INSERT, proto_version=1, in_stream=False) == Insert(
        None, 16385, TupleData(b"tn", (b"abc", None)))


def test_empty_message_is_refused_at_offset_0() -> None:
    error = _error(b"")
    assert (error.tag, error.offset) == (None, 0)
    assert "empty" in str(error)


@pytest.mark.parametrize("tag", [b"Z", b"\x00", b"w", b"k", b"x"])
def test_unknown_tag_is_refused_at_offset_0(tag: bytes) -> None:
    error = _error(tag + bytes(20), version=4)
    assert (error.tag, error.offset) == (tag.decode("latin-1"), 0)
    assert "unknown pgoutput message tag" in str(error)


def test_error_text_carries_tag_and_offset_for_the_operator() -> None:
    error = _error(INSERT[:11])
    assert str(error) == "message truncated: column value length does not fit at tag 'I', offset 9"
    assert error.hint is not None


# -- truncation ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cut", "offset", "what"), [
    (1, 1, "relation oid"),
    (4, 1, "relation oid"),
    (5, 5, "tuple part marker"),
    (6, 6, "column count"),
    (7, 6, "column count"),
    (8, 8, "column kind byte"),
    (9, 9, "column value length"),
    (12, 9, "column value length"),
    (13, 13, "column value (3 bytes)"),
    (15, 13, "column value (3 bytes)"),
    (16, 16, "column kind byte"),
])
def test_truncated_insert_names_the_field_that_is_cut_off(cut: int, offset: int, what: str) -> None:
    error = _error(INSERT[:cut])
    assert (error.tag, error.offset) == ("I", offset)
    assert what in str(error)


def test_value_running_past_the_end_before_the_last_column_is_reported_at_its_start() -> None:
    buf = bytearray(INSERT)
    buf[12] = 0x10  # value "abc" now claims 16 bytes; the 'n' column after it is swallowed
    error = _error(bytes(buf))
    assert (error.tag, error.offset) == ("I", 13)


def test_huge_column_length_is_a_truncation_not_a_memory_blowup() -> None:
    buf = bytearray(INSERT)
    buf[9:13] = b"\xff\xff\xff\xff"
    assert _error(bytes(buf)).offset == 13


def test_column_count_larger_than_the_columns_sent_is_a_truncation() -> None:
    buf = bytearray(INSERT)
    buf[6:8] = b"\xff\xff"
    error = _error(bytes(buf))
    assert (error.tag, error.offset) == ("I", 17)
    assert "column kind byte" in str(error)


@pytest.mark.parametrize(("msg", "version"), [
    pytest.param(msg, since, id=_id(msg)) for msg, since in SAMPLES])
def test_every_strict_prefix_of_every_message_is_refused_with_its_tag(msg: Message, version: int) -> None:
    buf = encode_message(msg, proto_version=version)
    for cut in range(1, len(buf)):
        error = _error(buf[:cut], version)
        assert error.tag == chr(buf[0])
        assert error.offset is not None and 0 < error.offset <= cut


@pytest.mark.parametrize(("msg", "version"), [
    pytest.param(msg, since, id=_id(msg)) for msg, since in SAMPLES])
def test_trailing_garbage_after_any_message_is_refused_where_it_starts(msg: Message, version: int) -> None:
    buf = encode_message(msg, proto_version=version)
    error = _error(buf + b"\x00", version)
    assert (error.tag, error.offset) == (chr(buf[0]), len(buf))
    assert "unexpected trailing byte" in str(error)


@pytest.mark.parametrize(("msg", "version"), STREAMED)
def test_trailing_garbage_inside_a_stream_block_is_refused_too(msg: Message, version: int) -> None:
    buf = encode_message(_streamed(msg), proto_version=version, in_stream=True)
    error = _error(buf + b"\xff\xff", version, in_stream=True)
    assert (error.tag, error.offset) == (chr(buf[0]), len(buf))


def test_truncated_streamed_insert_reports_the_xid_field() -> None:
    error = _error(b"I\x00\x00", 2, in_stream=True)
    assert (error.tag, error.offset) == ("I", 1)
    assert "xid" in str(error)


def test_truncate_with_fewer_relation_oids_than_announced_names_the_first_missing_one() -> None:
    buf = unhex("54 00000003 00 00004001 00004002 0000")
    error = _error(buf)
    assert (error.tag, error.offset) == ("T", 14)
    assert "relation oid 3 of 3" in str(error)


def test_logical_message_content_shorter_than_its_length_is_a_truncation() -> None:
    buf = encode_message(LogicalMessage(None, False, Lsn(1), "p", b"abcd"), proto_version=1)
    error = _error(buf[:-1])
    assert (error.tag, error.offset) == ("M", len(buf) - 4)
    assert "content (4 bytes)" in str(error)


def test_begin_cut_inside_the_commit_timestamp_names_it() -> None:
    error = _error(unhex("42 00000001 6b374d48 0002"))
    assert (error.tag, error.offset) == ("B", 9)
    assert "commit timestamp" in str(error)


def test_stream_abort_v4_cut_between_short_and_long_form_names_the_abort_lsn() -> None:
    error = _error(unhex("41 000002e9 000002ea 000000"), 4)
    assert (error.tag, error.offset) == ("A", 9)
    assert "abort lsn" in str(error)


def test_stream_stop_with_a_body_is_refused() -> None:
    error = _error(b"E\x00", 2)
    assert (error.tag, error.offset) == ("E", 1)


# -- bad markers and kinds -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", [b"x", b"N", b"\x00", b"T"])
def test_unknown_tuple_column_kind_is_refused_at_the_kind_byte(kind: bytes) -> None:
    buf = INSERT[:16] + kind
    error = _error(buf)
    assert (error.tag, error.offset) == ("I", 16)
    assert f"unknown column kind byte 0x{kind[0]:02x} in column 1 of 2" in str(error)


def test_unknown_kind_in_the_first_column_is_refused_at_the_kind_byte() -> None:
    buf = bytearray(INSERT)
    buf[8] = ord("X")
    assert _error(bytes(buf)).offset == 8


def test_insert_without_the_n_marker_is_refused() -> None:
    buf = bytearray(INSERT)
    buf[5] = ord("K")
    error = _error(bytes(buf))
    assert (error.tag, error.offset) == ("I", 5)
    assert "expected 'N'" in str(error)


@pytest.mark.parametrize(("in_stream", "offset"), [(False, 5), (True, 9)])
def test_update_with_an_unknown_part_byte_is_refused(in_stream: bool, offset: int) -> None:
    msg = Update(7 if in_stream else None, 1, None, None, TupleData(b"n", (None,)))
    buf = bytearray(encode_message(msg, proto_version=2, in_stream=in_stream))
    assert buf[offset] == ord("N")
    buf[offset] = ord("X")
    error = _error(bytes(buf), 2, in_stream)
    assert (error.tag, error.offset) == ("U", offset)
    assert "expected 'K', 'O' or 'N'" in str(error)


def test_update_whose_old_tuple_is_not_followed_by_n_is_refused() -> None:
    buf = bytearray(unhex("55 00000001 4b 0001 6e 4e 0001 6e"))
    buf[9] = ord("O")  # a second old part instead of the new row
    error = _error(bytes(buf))
    assert (error.tag, error.offset) == ("U", 9)
    assert "expected 'N'" in str(error)


def test_update_cut_right_after_the_old_tuple_names_the_n_marker() -> None:
    error = _error(unhex("55 00000001 4b 0001 6e"))
    assert (error.tag, error.offset) == ("U", 9)
    assert "'N' marker" in str(error)


@pytest.mark.parametrize("part", [b"N", b"X", b"k"])
def test_delete_with_a_part_byte_other_than_k_or_o_is_refused(part: bytes) -> None:
    error = _error(b"D\x00\x00\x00\x01" + part + b"\x00\x01n")
    assert (error.tag, error.offset) == ("D", 5)
    assert "expected 'K' or 'O'" in str(error)


# -- strings ---------------------------------------------------------------------------------------

def test_relation_name_without_nul_terminator_is_refused_where_the_string_starts() -> None:
    error = _error(unhex("52 00004001 7075626c6963 00 7573657273"))
    assert (error.tag, error.offset) == ("R", 12)
    assert "relation name has no NUL terminator" in str(error)


def test_invalid_utf8_in_a_column_name_is_refused_at_the_bad_byte() -> None:
    msg = Relation(None, 1, "", "t", "d", ())
    buf = encode_message(msg, proto_version=1)[:-2] + b"\x00\x01" + b"\x00ab\xffc\x00" + bytes(8)
    error = _error(buf)
    assert (error.tag, error.offset) == ("R", len(buf) - 8 - 3)
    assert "column name is not valid UTF-8" in str(error)
