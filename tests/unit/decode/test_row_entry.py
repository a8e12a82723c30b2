"""The decoder's row entry (``PgoutputDecoder.read_row``): what the streaming loop calls on every
XLogData frame, with the frame as it arrived and the offset of its message.

The loop's rule is ``read_row(frame, at)``, and when that is ``None``, ``decode(frame[at:])``. So
for any frame, that rule must give what ``decode`` of the message alone gives: the same message,
or the same located ``DecodeError``. Inside a stream block every row carries an xid and
``read_row`` must leave the frame to ``decode`` (it answers ``None`` without reading it); the entry
changes at Stream Start and Stream Stop, which only ``decode`` sees. Each test runs with the
compiled reader and with the Python decoder (the package's ``kernel`` fixture).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.decode.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    StreamStart,
    StreamStop,
    TupleData,
    Update,
)
from pgbridge.decode.pgoutput import PgoutputDecoder
from pgbridge.errors import DecodeError
from pgbridge.lsn import Lsn
from tests.support.pgoutput_builder import encode_message

from .strategies import tuple_data

HEADER = b"w" + bytes(24)  # an XLogData header: the message starts at 25
AT = len(HEADER)
OLD = TupleData(b"tn", (b"1", None))
NEW = TupleData(b"tt", (b"1", b"a"))
ROWS: list[Message] = [
    Insert(None, 16385, NEW),
    Update(None, 16385, None, None, NEW),
    Update(None, 16385, "K", OLD, NEW),
    Update(None, 16385, "O", NEW, TupleData(b"tu", (b"1", None))),
    Delete(None, 16385, "K", OLD),
    Delete(None, 16385, "O", NEW),
]


def _loop(decoder: PgoutputDecoder, frame: bytes) -> tuple[str, object]:
    """What the streaming loop makes of ``frame``: the message, or the error that ends it."""
    view = memoryview(frame)
    try:
        message = decoder.read_row(view, AT)
        return ("read", message) if message is not None else ("decoded", decoder.decode(view[AT:]))
    except DecodeError as exc:
        return ("error", str(exc))


def _decoded(message: bytes) -> tuple[str, object]:
    try:
        return ("decoded", PgoutputDecoder(2).decode(message))
    except DecodeError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("row", ROWS, ids=lambda row: f"{type(row).__name__}-{getattr(row, 'old_kind', None)}")
def test_a_row_is_read_in_place_from_its_frame(row: Message) -> None:
    frame = HEADER + encode_message(row, proto_version=1)
    assert _loop(PgoutputDecoder(1), frame) == ("read", row)


def test_other_messages_are_left_to_decode() -> None:
    decoder = PgoutputDecoder(1)
    for message in (Begin(Lsn(0x30), 1, 7), Commit(0, Lsn(0x30), Lsn(0x60), 1),
                    Relation(None, 16385, "public", "t", "d", ())):
        frame = memoryview(HEADER + encode_message(message, proto_version=1))
        assert decoder.read_row(frame, AT) is None
        assert decoder.decode(frame[AT:]) == message
    assert decoder.read_row(memoryview(HEADER), AT) is None  # no message at all: ``decode`` names it


def test_inside_a_stream_block_rows_are_left_to_decode(kernel: str) -> None:
    decoder = PgoutputDecoder(2)
    outside = decoder.read_row
    streamed = HEADER + encode_message(Insert(9, 16385, NEW), proto_version=2, in_stream=True)
    assert decoder.decode(encode_message(StreamStart(9, True), proto_version=2)) == StreamStart(9, True)
    inside = decoder.read_row
    assert decoder.read_row(memoryview(streamed), AT) is None  # the xid would be read as the relation
    assert _loop(decoder, streamed) == ("decoded", Insert(9, 16385, NEW))
    assert decoder.decode(encode_message(StreamStop(), proto_version=2)) == StreamStop()
    assert decoder.read_row == outside
    assert (inside != outside) == (kernel == "native")  # the compiled reader outside, ``decode_row`` inside
    assert _loop(decoder, HEADER + encode_message(ROWS[2], proto_version=2)) == ("read", ROWS[2])


@given(st.sampled_from(ROWS), tuple_data(), st.integers(0, 2**32 - 1))
def test_rows_of_any_values_are_read_as_decode_reads_them(row: Message, data: TupleData, rel_id: int) -> None:
    if isinstance(row, Insert):
        row = Insert(None, rel_id, data)
    elif isinstance(row, Update):
        row = Update(None, rel_id, row.old_kind, data if row.old_kind else None, data)
    else:
        assert isinstance(row, Delete)
        row = Delete(None, rel_id, row.old_kind, data)
    message = encode_message(row, proto_version=1)
    assert _loop(PgoutputDecoder(1), HEADER + message) == ("read", row) == (
        "read", _decoded(message)[1])


def test_corrupt_rows_end_as_decode_ends_them() -> None:
    """Bytes flipped, cut or added after the tag: the loop's rule gives ``decode``'s message or its
    located error, never a different one (the compiled reader hands what it cannot read back)."""
    rng = random.Random(24)
    errors = 0
    for case in range(600):
        good = encode_message(rng.choice(ROWS), proto_version=1)
        message = bytearray(good)
        kind = rng.random()
        if kind < 0.25:
            del message[rng.randrange(1, len(message)):]
        elif kind < 0.5:
            message += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6)))
        else:
            for _ in range(rng.randrange(1, 4)):
                message[rng.randrange(1, len(message))] = rng.randrange(256)
        looped = _loop(PgoutputDecoder(1), HEADER + bytes(message))
        expected = _decoded(bytes(message))
        assert (looped[0] == "error") == (expected[0] == "error") and looped[1] == expected[1], case
        errors += expected[0] == "error"
    assert errors > 200  # most corruptions are caught, and named the same way
