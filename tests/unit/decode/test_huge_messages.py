"""A row message of hundreds of megabytes (issue 16: a 500 MB text value) is decoded in the
memoryview it arrived in: each value is copied out once, the message is not copied to ``bytes``
first. Runs with the compiled kernel and without (the conftest's ``kernel`` fixture)."""

from __future__ import annotations

import tracemalloc

import pytest

from pgbridge.decode.messages import Delete, Insert, TupleData, Update
from pgbridge.decode.pgoutput import IN_PLACE_BYTES, PgoutputDecoder, decode_message
from pgbridge.errors import DecodeError
from tests.support.pgoutput_builder import encode_message

HUGE = 32 << 20


def _row(value: bytes) -> TupleData:
    return TupleData(kinds=b"tnt", values=(b"2", None, value))


@pytest.mark.parametrize("in_stream", [False, True])
def test_a_huge_insert_is_decoded_in_place_and_each_value_copied_once(in_stream: bool) -> None:
    value = b"0123456789abcdef" * (HUGE // 16)
    message = Insert(xid=7 if in_stream else None, rel_id=16384, new=_row(value))
    frame = memoryview(encode_message(message, proto_version=4, in_stream=in_stream))
    decoder = PgoutputDecoder(4)
    if in_stream:
        decoder.decode(memoryview(b"S\x00\x00\x00\x07\x01"))  # Stream Start of xid 7
    tracemalloc.start()
    try:
        decoded = decoder.decode(frame)
        allocated = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoded == message
    assert isinstance(decoded, Insert) and type(decoded.new.values[2]) is bytes
    assert allocated < HUGE * 5 // 4, f"decoding allocated {allocated:,} bytes for a {HUGE:,}-byte value"


def test_huge_updates_and_deletes_decode_in_place_like_small_ones() -> None:
    old = TupleData(kinds=b"tnt", values=(b"1", None, b"o" * IN_PLACE_BYTES))
    for message in (Update(xid=None, rel_id=1, old_kind="O", old=old, new=_row(b"n" * IN_PLACE_BYTES)),
                    Update(xid=None, rel_id=1, old_kind=None, old=None, new=_row(b"n" * IN_PLACE_BYTES)),
                    Delete(xid=None, rel_id=1, old_kind="O", old=old)):
        data = encode_message(message, proto_version=1)
        assert decode_message(memoryview(data), proto_version=1, in_stream=False) == message
        assert decode_message(bytearray(data), proto_version=1, in_stream=False) == message
        assert decode_message(data, proto_version=1, in_stream=False) == message


def test_a_truncated_huge_message_names_the_value_that_does_not_fit() -> None:
    data = encode_message(Insert(xid=None, rel_id=1, new=_row(b"x" * IN_PLACE_BYTES)), proto_version=1)
    with pytest.raises(DecodeError, match="column value") as raised:
        PgoutputDecoder(1).decode(memoryview(data)[:-10])
    assert raised.value.offset == len(data) - IN_PLACE_BYTES  # where the cut value starts
