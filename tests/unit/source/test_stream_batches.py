"""``read_batch`` hands a huge frame over in a batch of its own (issue 16: a 500 MB row), so the
streaming loop lets go of it before the frames after it (the commit that replays the buffered
transaction and reads the row back from the spill file) are handled; small frames batch as before."""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from pgbridge.source.connection import ReplicationConnection
from pgbridge.source.stream import LARGE_FRAME_BYTES, ReplicationStream


class _Buffered:
    """libpq with every frame already read: get_copy_data hands them out, then 'nothing yet'."""

    def __init__(self, sock: socket.socket, frames: list[bytes]) -> None:
        self.socket = sock.fileno()
        self._frames = deque(frames)

    def get_copy_data(self, _async: int) -> tuple[int, memoryview | bytes]:
        if not self._frames:
            return 0, b""
        frame = self._frames.popleft()
        return len(frame), memoryview(frame)

    def consume_input(self) -> None:
        pass


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    left, right = socket.socketpair()
    right.send(b"x")  # readable, so a wait for the first frame returns at once
    yield left
    left.close()
    right.close()


def _batches(sock: socket.socket, frames: list[bytes], limit: int = 1024) -> list[list[int]]:
    connection: Any = ReplicationConnection("host=localhost dbname=x")
    connection._pgconn = _Buffered(sock, frames)
    stream = ReplicationStream(connection)
    batches = []
    while batch := stream.read_batch(0.01, limit):
        batches.append([len(frame) for frame in batch])
    stream.close()
    return batches


def test_a_large_frame_ends_its_batch(sock: socket.socket) -> None:
    huge = b"w" * LARGE_FRAME_BYTES
    frames = [b"w1", b"w22", huge, b"w333", b"c4444"]
    assert _batches(sock, frames) == [[2, 3, LARGE_FRAME_BYTES], [4, 5]]


def test_small_frames_batch_up_to_the_limit(sock: socket.socket) -> None:
    frames = [b"w" * (LARGE_FRAME_BYTES - 1)] * 3 + [b"k"] * 5
    assert _batches(sock, frames, limit=4) == [[LARGE_FRAME_BYTES - 1] * 3 + [1], [1] * 4]
