"""The COPY BOTH loop: read CopyData frames and send standby status updates, waiting on the socket.

Framing decisions live in ``frames.py``; this module only moves bytes and waits, so that a
stalled network shows up as a timeout here and nowhere else.
"""

from __future__ import annotations

import selectors
from typing import Final, NoReturn

import psycopg
from psycopg import pq

from pgbridge.errors import SourceUnavailable
from pgbridge.source.connection import ReplicationConnection, result_error
from pgbridge.source.frames import build_status_update, pg_now_us

LARGE_FRAME_BYTES: Final = 1 << 20
"""A batch ends after a frame this large, so the loop lets go of it before it reads on: a huge row
(issue 16: a 500 MB text value) must not stay alive in the batch while a later frame of the same
batch (its transaction's commit) replays the buffered transaction, which reads that row back."""


class ReplicationStream:
    def __init__(self, connection: ReplicationConnection) -> None:
        self._conn = connection
        self._pgconn = connection.pgconn
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._pgconn.socket, selectors.EVENT_READ)
        self._end: int | None = None  # get_copy_data's -1/-2, held back while frames before it are handled

    def read_batch(self, timeout: float, limit: int = 1024) -> list[memoryview]:
        """Every CopyData payload libpq has buffered or can read without waiting (at most
        ``limit``), waiting up to ``timeout`` seconds for the first; empty if none arrived.

        One call per batch instead of one per frame keeps the loop's fixed costs (the call, the
        stop check, the select) off the per-row path; a busy stream yields dozens of frames per
        socket read. A frame of ``LARGE_FRAME_BYTES`` or more ends its batch. The end of the
        stream is raised once the frames before it are handed over.
        """
        if self._end is not None:
            self._end_of_copy(self._end)
        try:
            return self._read_batch(timeout, limit)
        except psycopg.OperationalError as exc:
            # libpq's "consuming input failed: server closed the connection unexpectedly": the
            # walsender went away without a word (wal_sender_timeout, a crash): reconnect, not exit.
            raise SourceUnavailable(f"replication stream broken: {str(exc).strip()}") from None

    def _read_batch(self, timeout: float, limit: int) -> list[memoryview]:
        pgconn = self._pgconn
        get = pgconn.get_copy_data
        batch: list[memoryview] = []
        nbytes, data = get(1)
        if nbytes == 0:
            if not self._selector.select(timeout):
                return batch
            pgconn.consume_input()
            nbytes, data = get(1)
        while nbytes > 0:
            batch.append(data)
            if len(batch) >= limit or nbytes >= LARGE_FRAME_BYTES:
                return batch
            nbytes, data = get(1)
            if nbytes == 0:  # buffer drained: take what the socket already holds, without waiting
                pgconn.consume_input()
                nbytes, data = get(1)
        if nbytes < 0:
            if not batch:
                self._end_of_copy(nbytes)
            self._end = nbytes
        return batch

    def _end_of_copy(self, nbytes: int) -> NoReturn:
        pgconn = self._pgconn
        if nbytes == -1:
            result = pgconn.get_result()
            if result is not None and result.status == pq.ExecStatus.FATAL_ERROR:
                raise result_error(result, "replication stream")
            raise SourceUnavailable("replication stream ended by the server")
        message = pgconn.error_message.decode(errors="replace").strip()
        raise SourceUnavailable(f"replication stream broken: {message or 'connection lost'}")

    def send_status(self, lsn: int, *, reply_requested: bool = False) -> None:
        try:
            self._send_status(lsn, reply_requested=reply_requested)
        except psycopg.OperationalError as exc:
            # libpq's "sending copy data failed: no COPY in progress": the server ended the stream
            # (a fast shutdown's CopyDone) before this update went out: reconnect, not exit.
            raise SourceUnavailable(f"replication stream broken: {str(exc).strip()}") from None

    def _send_status(self, lsn: int, *, reply_requested: bool) -> None:
        frame = build_status_update(lsn, lsn, lsn, now_us=pg_now_us(), reply_requested=reply_requested)
        pgconn = self._pgconn
        if pgconn.put_copy_data(frame) != 1:
            raise SourceUnavailable("could not queue a standby status update: "
                                    + pgconn.error_message.decode(errors="replace").strip())
        for _ in range(100):
            flushed = pgconn.flush()
            if flushed == 0:
                return
            if flushed < 0:
                break
            self._selector.select(0.05)
        raise SourceUnavailable("could not send a standby status update: connection stalled")

    def close(self) -> None:
        self._selector.close()
