"""Property tests: builder -> decode_message round trips, and no input makes the decoder fail with
anything but DecodeError."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pgbridge.decode.messages import Message, StreamAbort
from pgbridge.decode.pgoutput import decode_message
from pgbridge.errors import DecodeError
from tests.support.pgoutput_builder import encode_message

from .strategies import messages

CONTEXTS = [(1, False), (2, False), (2, True), (3, False), (3, True), (4, False), (4, True)]


@pytest.mark.parametrize(("version", "in_stream"), CONTEXTS, ids=lambda v: str(v))
@given(data=st.data())
def test_random_messages_round_trip_through_the_builder_and_decoder(version: int, in_stream: bool,
                                                                    data: st.DataObject) -> None:
    msg = data.draw(messages(version, in_stream))
    buf = encode_message(msg, proto_version=version, in_stream=in_stream)
    assert decode_message(buf, proto_version=version, in_stream=in_stream) == msg
    assert decode_message(memoryview(bytearray(buf)), proto_version=version, in_stream=in_stream) == msg


@pytest.mark.parametrize(("version", "in_stream"), CONTEXTS, ids=lambda v: str(v))
@given(data=st.data())
def test_random_messages_cut_short_or_padded_raise_decode_error(version: int, in_stream: bool,
                                                                data: st.DataObject) -> None:
    msg = data.draw(messages(version, in_stream))
    buf = encode_message(msg, proto_version=version, in_stream=in_stream)
    cut = data.draw(st.integers(1, len(buf) - 1)) if len(buf) > 1 else None
    if cut is not None and not (isinstance(msg, StreamAbort) and version >= 4 and cut == 9):
        # (a long v4 Stream Abort cut after the xids is a valid short one)
        with pytest.raises(DecodeError) as caught:
            decode_message(buf[:cut], proto_version=version, in_stream=in_stream)
        assert caught.value.tag == chr(buf[0])
        assert caught.value.offset is not None and caught.value.offset <= cut
    with pytest.raises(DecodeError) as caught:
        decode_message(buf + data.draw(st.binary(min_size=1, max_size=3)), proto_version=version,
                       in_stream=in_stream)
    assert (caught.value.tag, caught.value.offset) == (chr(buf[0]), len(buf))


def _decode_or_error(buf: bytes, version: int, in_stream: bool) -> Message | DecodeError:
    try:
        return decode_message(buf, proto_version=version, in_stream=in_stream)
    except DecodeError as exc:
        return exc


@pytest.mark.parametrize(("version", "in_stream"), CONTEXTS, ids=lambda v: str(v))
@given(buf=st.binary(max_size=64) | st.builds(lambda tag, rest: tag + rest,
                                              st.sampled_from([bytes([c]) for c in b"BMCORYIUDTSEcAbPKrp"]),
                                              st.binary(max_size=64)))
@example(buf=b"I\x00\x00\x00\x01N\x00\x01t\xff\xff\xff\xff")
@example(buf=b"R\x00\x00\x00\x01\xff\x00")
def test_arbitrary_bytes_decode_or_raise_decode_error_and_nothing_else(version: int, in_stream: bool,
                                                                       buf: bytes) -> None:
    result = _decode_or_error(buf, version, in_stream)
    if isinstance(result, DecodeError):
        assert result.offset is not None and 0 <= result.offset <= len(buf)


@pytest.mark.parametrize(("version", "in_stream"), CONTEXTS, ids=lambda v: str(v))
@given(data=st.data())
def test_a_single_flipped_byte_never_escapes_as_anything_but_decode_error(version: int, in_stream: bool,
                                                                          data: st.DataObject) -> None:
    buf = bytearray(encode_message(data.draw(messages(version, in_stream)), proto_version=version,
                                   in_stream=in_stream))
    buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    _decode_or_error(bytes(buf), version, in_stream)
