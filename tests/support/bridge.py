"""Run pgbridge for integration tests: as a child process (to SIGKILL it) and read what it wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgbridge.consumer import SchemaStore, UnknownSchema
from tests.support.kafka import Record, read_topic, read_topics
from tests.support.ports import free_port
from tests.support.postgres import slot_confirmed_flush_lsn
from tests.support.waiting import wait_until


def bridge_env(
    dsn: str, bootstrap: str, prefix: str, *, slot: str | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PGBRIDGE_")}
    env.update(
        {
            "PGBRIDGE_POSTGRES__DSN": dsn,
            "PGBRIDGE_POSTGRES__SLOT": slot or prefix,
            "PGBRIDGE_POSTGRES__PUBLICATION": prefix,
            "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "PGBRIDGE_KAFKA__TOPIC_PREFIX": prefix,
            "PGBRIDGE_POSTGRES__STATUS_INTERVAL_S": "0.5",
            "PGBRIDGE_HTTP__PORT": "0",
            "PGBRIDGE_BUFFER__SPILL_DIR": tempfile.mkdtemp(prefix="pgbridge-spill-"),
        }
    )
    env.update(extra or {})
    return env


def _log_file() -> Path:
    """A new empty log file (mkstemp's descriptor closed: the child gets its own)."""
    descriptor, path = tempfile.mkstemp(prefix="pgbridge-", suffix=".log")
    os.close(descriptor)
    return Path(path)


# Every bridge started and not yet reaped: tests/conftest.py kills what a test left running (one that
# failed before its ``with`` or ``kill``), so no child outlives its test and no ResourceWarning of
# a running Popen lands on a later, unrelated test.
_running: set[BridgeProcess] = set()


def kill_leftovers() -> list[str]:
    """Kill and reap every bridge still running; the logs' names of those that were."""
    left = [bridge for bridge in list(_running) if bridge.alive()]
    for bridge in list(_running):
        bridge.kill()
    return [str(bridge.log_path) for bridge in left]


@dataclass(eq=False)
class BridgeProcess:
    """``python -m pgbridge run`` as a child process, with its stderr kept in a file."""

    env: dict[str, str]
    log_path: Path = field(default_factory=_log_file)
    process: subprocess.Popen[bytes] | None = None
    http_port: int | None = None

    def start(self, *, http: bool = False) -> BridgeProcess:
        env = dict(self.env)
        if http:
            self.http_port = free_port()
            env["PGBRIDGE_HTTP__PORT"] = str(self.http_port)
            env["PGBRIDGE_HTTP__HOST"] = "127.0.0.1"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pgbridge", "run"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        _running.add(self)
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        _running.discard(self)

    def terminate(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        _running.discard(self)
        return code

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_confirmed(self, dsn: str, slot: str, *, timeout: float = 90.0,
                       waiting_for: str = "its slot to confirm a position") -> BridgeProcess:
        """Wait until ``slot`` on ``dsn`` has a confirmed position: pgbridge created it and streams
        (after its initial snapshot, when it takes one). Fails as soon as pgbridge exits instead of
        waiting out ``timeout``, and either way with the end of its log as it is then."""
        def outcome() -> str | None:
            if slot_confirmed_flush_lsn(dsn, slot) is not None:
                return "confirmed"
            return None if self.alive() else "exited"

        try:
            ended = wait_until(outcome, timeout=timeout, message=f"pgbridge waiting for {waiting_for}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log()[-4000:]}") from exc
        if ended == "exited":
            code = None if self.process is None else self.process.returncode
            raise AssertionError(f"pgbridge exited ({code}) waiting for {waiting_for}:\n{self.log()[-4000:]}")
        return self

    def __enter__(self) -> BridgeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


@dataclass(frozen=True)
class Event:
    """A decoded table record: the envelope (None for a tombstone) with its Kafka coordinates."""

    topic: str
    partition: int
    offset: int
    key: Any
    value: dict[str, Any] | None


class TopicSchemas(SchemaStore):
    """The writer schemas of ``{prefix}._schemas``, read again when a record names one not read yet.

    The bridge publishes a table's schemas just before the table's first record, so a test that
    reads them while the bridge is still behind (a big transaction on a loaded machine) sees some
    of them only: a schema missing at decode time is waited for, as a consumer would, instead of
    failing the test on timing."""

    def __init__(self, bootstrap: str, prefix: str, *, timeout: float) -> None:
        super().__init__()
        self._bootstrap = bootstrap
        self._topic = f"{prefix}._schemas"
        self._timeout = timeout
        self._read()

    def _read(self) -> None:
        for record in read_topic(self._bootstrap, self._topic, min_count=1, timeout=self._timeout, idle=1.0):
            assert record.key is not None and record.value is not None
            self.add(record.key, record.value)

    def _has(self, fingerprint: str) -> bool:
        self._read()
        return fingerprint in self

    def decode(self, data: bytes | None, reader_schema: dict[str, Any] | None = None) -> Any:
        try:
            return super().decode(data, reader_schema)
        except UnknownSchema as missing:
            fingerprint = str(missing.args[0])
        wait_until(lambda: self._has(fingerprint), timeout=self._timeout, interval=0.5,
                   message=f"writer schema {fingerprint} on {self._topic}")
        return super().decode(data, reader_schema)


def load_schemas(bootstrap: str, prefix: str, *, timeout: float = 30.0) -> SchemaStore:
    return TopicSchemas(bootstrap, prefix, timeout=timeout)


def decode_records(store: SchemaStore, records: Iterable[Record]) -> list[Event]:
    return [
        Event(r.topic, r.partition, r.offset, store.decode(r.key), store.decode(r.value)) for r in records
    ]


def read_events(
    bootstrap: str, topic: str, prefix: str, *, min_count: int, timeout: float = 60.0, idle: float = 2.0
) -> list[Event]:
    records = read_topic(bootstrap, topic, min_count=min_count, timeout=timeout, idle=idle)
    return decode_records(load_schemas(bootstrap, prefix), records)


def change_events(events: Iterable[Event]) -> list[dict[str, Any]]:
    """Envelopes only (no tombstones), ordered by (commit_lsn, total_order) then offset."""
    values = [e.value for e in events if e.value is not None]
    return sorted(
        values, key=lambda v: (v["source"]["commit_lsn"], (v["transaction"] or {}).get("total_order", 0))
    )


def wait_for_count(bootstrap: str, topic: str, count: int, timeout: float) -> list[Record]:
    """The records of ``topic`` once there are at least ``count`` (read_topic waits for the topic)."""
    return read_topic(bootstrap, topic, min_count=count, timeout=timeout, idle=0.5)


__all__ = [
    "BridgeProcess",
    "Event",
    "bridge_env",
    "change_events",
    "decode_records",
    "kill_leftovers",
    "load_schemas",
    "read_events",
    "read_topics",
    "wait_for_count",
]
