"""Short, derandomized fuzz of the transaction assembler (the CI slice of ``tests/fuzz/run.py``).

Decoded messages of every kind, in any order, with and without stream xids, fed to an assembler
that spills after a few changes: it must refuse what is out of order with a typed error (an
``InvariantError``), never an ``AssertionError``, ``KeyError`` or the like, and leave no spill file
behind once closed.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings

from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.decode.messages import Message, StreamStart
from pgbridge.errors import InvariantError
from pgbridge.lsn import Lsn
from tests.fuzz import targets
from tests.support.properties import examples


@settings(max_examples=examples(200), derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=targets.message_objects())
def test_messages_in_any_order_end_in_events_or_a_typed_error(msgs: list[Message], tmp_path: Path) -> None:
    with targets.fresh_spill_dir() as spill:
        targets.check_messages_fed(msgs, Path(spill) / "spill")


def test_a_second_stream_start_is_an_invariant_error_not_an_assertion(tmp_path: Path) -> None:
    """The shape the fuzzer looks for, pinned: out-of-order control messages raise typed errors."""
    assembler = TransactionAssembler(memory_bytes=1024, spill_dir=tmp_path / "spill")
    try:
        assembler.feed(StreamStart(7, True), Lsn(0x100))
        try:
            assembler.feed(StreamStart(8, True), Lsn(0x200))
        except InvariantError:
            pass
        else:
            raise AssertionError("a Stream Start inside a stream block was accepted")
    finally:
        assembler.close()
