"""reader: the cursor helpers report the offset of the field that does not fit."""

from __future__ import annotations

import pytest

from pgbridge.decode.reader import Layout, Reader, read_cstring
from pgbridge.errors import DecodeError


def test_reader_reads_fields_in_sequence_and_finishes_at_the_end() -> None:
    buf = b"X" + bytes([7]) + (513).to_bytes(2, "big") + (-2).to_bytes(4, "big", signed=True) + b"ab\x00"
    r = Reader(buf, "X")
    assert (r.u8("a"), r.u16("b"), r.i32("c"), r.cstring("d")) == (7, 513, -2, "ab")
    r.finish()


@pytest.mark.parametrize(("method", "size"), [("u8", 1), ("u16", 2), ("u32", 4), ("i32", 4), ("i64", 8),
                                               ("lsn", 8)])
def test_reader_short_read_names_the_field_and_its_offset(method: str, size: int) -> None:
    r = Reader(b"X" + bytes(size - 1), "X")
    with pytest.raises(DecodeError, match="message truncated: thing does not fit") as caught:
        getattr(r, method)("thing")
    assert (caught.value.tag, caught.value.offset) == ("X", 1)
    assert r.pos == 1


def test_reader_raw_refuses_a_length_past_the_end() -> None:
    r = Reader(b"Xabc", "X")
    with pytest.raises(DecodeError, match=r"content \(4 bytes\)") as caught:
        r.raw(4, "content")
    assert caught.value.offset == 1
    assert r.raw(3, "content") == b"abc"


def test_reader_finish_refuses_trailing_bytes() -> None:
    r = Reader(b"X\x01\x02\x03", "X")
    r.u8("a")
    with pytest.raises(DecodeError, match="2 unexpected trailing byte") as caught:
        r.finish()
    assert caught.value.offset == 2


def test_cstring_returns_the_offset_after_the_nul() -> None:
    assert read_cstring(b"Xpublic\x00users\x00", 1, "R", "namespace") == ("public", 8)
    assert read_cstring(b"X\x00", 1, "R", "namespace") == ("", 2)


def test_cstring_without_nul_is_refused_where_it_starts() -> None:
    with pytest.raises(DecodeError, match="name has no NUL terminator") as caught:
        read_cstring(b"Xabc", 1, "R", "name")
    assert caught.value.offset == 1


def test_cstring_with_invalid_utf8_points_at_the_bad_byte() -> None:
    with pytest.raises(DecodeError, match="not valid UTF-8") as caught:
        read_cstring(b"Xab\xc3(\x00", 1, "R", "name")
    assert caught.value.offset == 3


def test_layout_error_names_the_first_field_that_is_cut_off() -> None:
    layout = Layout("!QqI", "final lsn", "commit timestamp", "xid")
    assert layout.size == 20
    error = layout.error(b"B" + bytes(12), "B", 1)
    assert (error.tag, error.offset) == ("B", 9)
    assert "commit timestamp" in str(error)


def test_exact_layout_error_reports_trailing_bytes() -> None:
    layout = Layout("!I", "xid")
    error = layout.error(b"S" + bytes(6), "S", 1, exact=True)
    assert error.offset == 5
    assert "2 unexpected trailing byte" in str(error)


def test_layout_needs_one_name_per_field() -> None:
    with pytest.raises(ValueError, match="one name per field"):
        Layout("!II", "xid")
