"""The streaming loop lets go of a huge frame (issue 16: a row holding a 500 MB value) once it is
decoded, before its row is handled: encoding the row needs as much memory again, and the frame is
a second copy of the value nobody needs any more. Small frames go through the loop as before."""

from __future__ import annotations

import array
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from pgbridge.ack.progress import ProgressReporter
from pgbridge.ack.tracker import AckTracker
from pgbridge.decode.messages import Insert, Message, TupleData
from pgbridge.decode.pgoutput import PgoutputDecoder
from pgbridge.lsn import Lsn
from pgbridge.metrics import Metrics
from pgbridge.pipeline import Session
from pgbridge.source.monitor import SlotIdentity
from pgbridge.source.stream import LARGE_FRAME_BYTES
from tests.support.batches import BatchStream
from tests.support.pgoutput_builder import encode_message

HEADER = b"w" + (0x1000).to_bytes(8, "big") + (0x2000).to_bytes(8, "big") + (0).to_bytes(8, "big")


def _frame(row_id: int, size: int) -> array.array[int]:
    """An XLogData frame of an Insert, in an object a weak reference can watch."""
    insert = Insert(xid=None, rel_id=16384, new=TupleData(b"tt", (str(row_id).encode(), b"v" * size)))
    return array.array("B", HEADER + encode_message(insert, proto_version=1))


class _Assembler:
    def plain_row(self, message: Message, wal_start: Lsn) -> None:
        return None  # every message through ``feed``

    def feed(self, message: Message, wal_start: Lsn) -> Iterator[Message]:
        yield message


class _Dispatcher:
    def __init__(self, watched: weakref.ref[array.array[int]]) -> None:
        self.watched = watched
        self.handled: list[tuple[bytes, int, bool]] = []

    def row(self, event: Any) -> None:
        raise AssertionError("no row is handed over without the assembler")

    def handle(self, event: Any) -> None:
        self.handled.append((event.new.values[0], len(event.new.values[1]), self.watched() is not None))


def _run(frames: list[array.array[int]], watch: int) -> list[tuple[bytes, int, bool]]:
    session: Any = Session.__new__(Session)
    session.stop = threading.Event()
    session.stream = BatchStream([frames], session.stop)
    session.decoder = PgoutputDecoder(1)
    session.assembler = _Assembler()
    dispatcher = _Dispatcher(weakref.ref(frames[watch]))
    session.dispatcher = dispatcher
    session.reporter = ProgressReporter(AckTracker(), Metrics(), SlotIdentity(), status_interval_s=10.0, stall_s=60.0)
    session._housekeeping = lambda **_: None
    frames.clear()  # the stream's batch holds the only references now
    session.run()
    assert session.reporter.received_lsn == 0x2000
    return dispatcher.handled


def test_a_huge_frame_is_released_before_its_row_is_handled() -> None:
    handled = _run([_frame(1, 10), _frame(2, 2 * LARGE_FRAME_BYTES)], watch=1)
    assert handled == [(b"1", 10, True), (b"2", 2 * LARGE_FRAME_BYTES, False)]


def test_small_frames_are_handled_in_order_while_their_batch_holds_them() -> None:
    handled = _run([_frame(1, 10), _frame(2, LARGE_FRAME_BYTES - 100), _frame(3, 5)], watch=1)
    assert handled == [(b"1", 10, True), (b"2", LARGE_FRAME_BYTES - 100, True), (b"3", 5, True)]
