"""A standby status update sent after the server ended the stream is a reconnect, not an exit."""

from __future__ import annotations

import socket
from typing import Any

import psycopg
import pytest

from pgbridge.errors import SourceUnavailable
from pgbridge.source.connection import ReplicationConnection
from pgbridge.source.stream import ReplicationStream


class _EndedCopy:
    """The libpq connection after the server's CopyDone: put_copy_data raises, as libpq does."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock.fileno()

    def put_copy_data(self, _frame: bytes) -> int:
        raise psycopg.OperationalError("sending copy data failed: no COPY in progress")


def test_status_update_after_copy_done_is_source_unavailable() -> None:
    left, right = socket.socketpair()
    try:
        connection: Any = ReplicationConnection("host=localhost dbname=x")
        connection._pgconn = _EndedCopy(left)
        stream = ReplicationStream(connection)
        with pytest.raises(SourceUnavailable, match="no COPY in progress"):
            stream.send_status(0x1000)
        stream.close()
    finally:
        left.close()
        right.close()
