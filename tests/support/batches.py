"""A replication stream for driving ``Session.run`` without Postgres: it hands out prepared
batches of CopyData frames, as ``ReplicationStream.read_batch`` would, and sets the session's
stop event once they are all read."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any


class BatchStream:
    def __init__(self, batches: Sequence[Sequence[Any]], stop: threading.Event) -> None:  # bytes, arrays…
        self._batches = [list(batch) for batch in batches]
        self._stop = stop

    def read_batch(self, _timeout: float) -> list[memoryview]:
        if not self._batches:
            self._stop.set()
            return []
        return [memoryview(frame) for frame in self._batches.pop(0)]
