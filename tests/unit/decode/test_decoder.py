"""PgoutputDecoder: the Stream Start/Stop bracket decides whether xid-bearing messages carry an xid."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgbridge.decode.messages import (
    Begin,
    Commit,
    Insert,
    Message,
    Origin,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    TupleData,
)
from pgbridge.decode.pgoutput import PgoutputDecoder
from pgbridge.errors import DecodeError, InvariantError
from pgbridge.lsn import Lsn
from tests.support.pgoutput_builder import encode_message
from tests.support.properties import examples

from .strategies import messages

ROW = TupleData(b"tt", (b"1", b"a"))
USERS = Relation(None, 16385, "public", "users", "d", ())


def _frames(decoder_version: int, script: list[tuple[Message, bool]]) -> list[bytes]:
    return [encode_message(msg, proto_version=decoder_version, in_stream=in_stream) for msg, in_stream in script]


def test_decoder_reads_a_plain_transaction() -> None:
    script: list[tuple[Message, bool]] = [(Begin(Lsn(0x30), 1, 745), False), (USERS, False), (Insert(None, 16385, ROW), False),
              (Commit(0, Lsn(0x30), Lsn(0x60), 1), False)]
    decoder = PgoutputDecoder(1)
    assert [decoder.decode(buf) for buf in _frames(1, script)] == [msg for msg, _ in script]
    assert decoder.in_stream is False


def test_decoder_reads_xids_only_between_stream_start_and_stop() -> None:
    script: list[tuple[Message, bool]] = [
        (StreamStart(745, True), False),
        (Origin(Lsn(0), "upstream"), True),  # sent after Stream Start, carries no xid
        (Relation(745, 16385, "public", "users", "d", ()), True),
        (Insert(745, 16385, ROW), True),
        (StreamStop(), True),
        (Begin(Lsn(0x30), 1, 800), False),  # a small transaction between two segments
        (Insert(None, 16385, ROW), False),
        (Commit(0, Lsn(0x30), Lsn(0x60), 1), False),
        (StreamStart(745, False), False),
        (Insert(745, 16385, ROW), True),
        (StreamStop(), True),
        (StreamAbort(745, 746, None, None), False),
        (StreamCommit(745, 0, Lsn(0x90), Lsn(0xC0), 2), False),
    ]
    decoder = PgoutputDecoder(2)
    seen = []
    for buf, (msg, in_stream) in zip(_frames(2, script), script, strict=True):
        before = decoder.in_stream
        seen.append(decoder.decode(memoryview(buf)))
        if not isinstance(msg, StreamStart | StreamStop):
            assert before == decoder.in_stream == in_stream
    assert seen == [msg for msg, _ in script]


def test_stream_start_flips_the_flag_and_stream_stop_flips_it_back() -> None:
    decoder = PgoutputDecoder(4)
    decoder.decode(b"S\x00\x00\x02\xe9\x01")
    assert decoder.in_stream is True
    decoder.decode(b"E")
    assert decoder.in_stream is False


def test_stream_start_inside_a_stream_block_breaks_an_invariant() -> None:
    decoder = PgoutputDecoder(2)
    decoder.decode(encode_message(StreamStart(745, True), proto_version=2))
    with pytest.raises(InvariantError, match="Stream Start for xid 746 inside the stream block of xid 745"):
        decoder.decode(encode_message(StreamStart(746, True), proto_version=2))


def test_stream_stop_outside_a_stream_block_breaks_an_invariant() -> None:
    decoder = PgoutputDecoder(2)
    with pytest.raises(InvariantError, match="Stream Stop outside a stream block"):
        decoder.decode(b"E")


def test_decoder_on_protocol_1_refuses_stream_messages() -> None:
    with pytest.raises(DecodeError, match="needs pgoutput protocol version 2") as caught:
        PgoutputDecoder(1).decode(b"S\x00\x00\x02\xe9\x01")
    assert (caught.value.tag, caught.value.offset) == ("S", 0)


def test_decoder_refuses_an_empty_message() -> None:
    with pytest.raises(DecodeError, match="empty pgoutput message"):
        PgoutputDecoder(3).decode(memoryview(b""))


@pytest.mark.parametrize("version", [0, 5])
def test_decoder_refuses_protocol_versions_it_does_not_speak(version: int) -> None:
    with pytest.raises(ValueError, match="not supported"):
        PgoutputDecoder(version)


def test_decoder_reports_its_protocol_version() -> None:
    assert PgoutputDecoder(3).proto_version == 3


def test_a_failed_decode_inside_a_stream_keeps_the_stream_flag() -> None:
    decoder = PgoutputDecoder(2)
    decoder.decode(b"S\x00\x00\x02\xe9\x01")
    with pytest.raises(DecodeError):
        decoder.decode(b"I\x00")
    assert decoder.in_stream is True


@st.composite
def _streams(draw: st.DrawFn, version: int) -> list[tuple[Message, bool]]:
    """A sequence of plain messages and stream blocks, as a server could interleave them."""
    script: list[tuple[Message, bool]] = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            xid = draw(st.integers(1, 0xFFFF_FFFF))
            script.append((StreamStart(xid, draw(st.booleans())), False))
            body = st.lists(messages(version, True).filter(
                lambda m: not isinstance(m, StreamStart | StreamStop)), max_size=4)
            script += [(msg, True) for msg in draw(body)]
            script.append((StreamStop(), True))
        else:
            plain = messages(version, False).filter(lambda m: not isinstance(m, StreamStart | StreamStop))
            script.append((draw(plain), False))
    return script


@pytest.mark.parametrize("version", [2, 3, 4])
@settings(max_examples=examples(50))
@given(data=st.data())
def test_random_streams_decode_message_for_message(version: int, data: st.DataObject) -> None:
    script = data.draw(_streams(version))
    decoder = PgoutputDecoder(version)
    assert [decoder.decode(buf) for buf in _frames(version, script)] == [msg for msg, _ in script]
    assert decoder.in_stream is False
