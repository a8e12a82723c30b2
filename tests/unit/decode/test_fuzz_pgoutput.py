"""Short, derandomized fuzz of the pgoutput decoder (the CI slice of ``tests/fuzz/run.py``).

Arbitrary bytes, valid messages and mutated ones go through the compiled kernel and the Python
reference: both must agree, and fail only with typed errors. Whole sessions, mutated, go through
decoder and assembler together. A fixed seed keeps CI deterministic; the long run explores more.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgbridge.decode.pgoutput import decode_message
from pgbridge.errors import DecodeError
from tests.fuzz import targets
from tests.support.properties import examples

SHORT = settings(max_examples=examples(60), derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(params=["both"])
def kernel() -> str:
    """Overrides the package's per-kernel fixture: every example here runs both decoders itself."""
    return "both"


@pytest.mark.parametrize(("version", "in_stream"), targets.CONTEXTS, ids=str)
@SHORT
@given(data=st.data())
def test_any_bytes_decode_alike_in_both_kernels_or_raise_typed_errors(
        version: int, in_stream: bool, data: st.DataObject) -> None:
    targets.check_message(data.draw(targets.message_bytes(version, in_stream)), version, in_stream)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@SHORT
@given(data=st.data())
def test_mutated_sessions_stop_at_a_typed_error(version: int, data: st.DataObject) -> None:
    with targets.fresh_spill_dir() as spill:
        targets.check_session(data.draw(targets.mutated_session(version)), version,
                              Path(spill) / "spill")


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@settings(max_examples=examples(30), derandomize=True, database=None)
@given(data=st.data())
def test_valid_sessions_are_consumed_whole(version: int, data: st.DataObject) -> None:
    """The generator's sessions are valid, so a mutated session's error is the mutation's doing."""
    frames = data.draw(targets.sessions(version))
    with targets.fresh_spill_dir() as spill:
        assert targets.check_session(frames, version, Path(spill) / "spill") == len(frames)


def test_a_column_claiming_four_gigabytes_is_refused_without_allocating_it() -> None:
    """A length field is never trusted for an allocation: 0xffffffff bytes claimed, 3 present."""
    frame = b"I\x00\x00\x40\x00N\x00\x01t\xff\xff\xff\xffabc"
    assert "does not fit" in str(targets.check_message(frame, 1, False))
    with pytest.raises(DecodeError, match="column value"):
        decode_message(frame, proto_version=1, in_stream=False)


def test_a_tuple_claiming_65535_columns_is_refused() -> None:
    frame = b"I\x00\x00\x40\x00N\xff\xff" + b"n" * 10
    assert "does not fit" in str(targets.check_message(frame, 1, False))


def test_a_broken_property_is_reported_as_a_fuzz_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness itself can fail: an untyped exception from the decoder is caught as one."""
    def explode(buf: bytes, **kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(targets, "decode_message", explode)
    with pytest.raises(targets.FuzzFailure, match="untyped KeyError"):
        targets.check_message(b"B", 1, False)
