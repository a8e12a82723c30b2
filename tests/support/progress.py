"""An in-memory stand-in for the snapshot progress store (``snapshot/progress.py``) in unit tests of
what the incremental snapshotter writes: the records put, and how often they were flushed."""

from __future__ import annotations

from typing import Any


class MemoryProgress:
    topic = "p._snapshot"

    def __init__(self) -> None:
        self.records: dict[str, Any] = {}
        self.flushes = 0

    def put(self, key: str, value: Any) -> None:
        self.records[key] = value

    def flush(self) -> None:
        self.flushes += 1
