"""The physical limits, measured on the same data in the same run.

* ``pg_recvlogical``: the walsender decoding the same WAL with pgoutput and the same options the
  bridge asks for, written to /dev/null. Its slot is created just before the workload is loaded
  (next to the bridge's), and it is started after the bridge has stopped, with ``--endpos`` at
  the WAL position reached by the workload: the time it takes is what Postgres needs to decode
  and send the changes, with no consumer cost worth the name.
* ``pg_recvlogical`` live: the same, but streaming while the workload commits, in a pass of its
  own with nothing else consuming. The moment the walsender has sent (``pg_stat_replication.
  sent_lsn``) everything up to the WAL position the workload ended at is the earliest any consumer
  of the slot could have it: its lag after the last commit is the floor under every system's.
* the raw producer (``raw_producer.py``, its own process): confluent-kafka producing as many
  records of the bridge's average size to a fresh topic, with the bridge's producer settings
  (idempotent, ``acks=all``): what the broker and librdkafka can take.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from e2e.procstat import sample

RAW_PRODUCER = Path(__file__).with_name("raw_producer.py")


@dataclass(frozen=True)
class AnchorResult:
    rows_per_s: float
    seconds: float
    cpu_s: float | None = None
    peak_rss_mb: float | None = None


def create_slot(dsn: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


def current_lsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])


def drop_slot(dsn: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                     (slot,))


def pg_recvlogical(bindir: Path, dsn: str, *, slot: str, publication: str, end_lsn: str, rows: int,
                   proto_version: int = 3) -> AnchorResult:
    """Drain ``slot`` to ``end_lsn`` with the options pgbridge uses on PostgreSQL 15."""
    command = [str(bindir / "pg_recvlogical"), "-d", dsn, "--slot", slot, "--start", "--no-loop",
               "--endpos", end_lsn, "-f", "/dev/null", "-s", "1",
               "-o", f"proto_version={proto_version}", "-o", f"publication_names={publication}",
               "-o", "messages=true", "-o", "streaming=on"]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, stderr = process.communicate(timeout=3600)
    seconds = time.monotonic() - started
    if process.returncode != 0:
        raise RuntimeError(f"pg_recvlogical failed ({process.returncode}): {stderr.decode(errors='replace')}")
    return AnchorResult(rows_per_s=rows / seconds, seconds=seconds)


class LiveWalsender:
    """``pg_recvlogical`` streaming a slot while the workload commits (see the module docstring)."""

    APPLICATION = "bench_walsender_live"

    def __init__(self, bindir: Path, dsn: str, *, slot: str, publication: str, proto_version: int = 3) -> None:
        self.dsn = dsn
        self.slot = slot
        self.command = [str(bindir / "pg_recvlogical"), "-d", dsn, "--slot", slot, "--start", "--no-loop",
                        "-f", "/dev/null", "-s", "1", "-o", f"proto_version={proto_version}",
                        "-o", f"publication_names={publication}", "-o", "messages=true", "-o", "streaming=on"]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> LiveWalsender:
        env = {**os.environ, "PGAPPNAME": self.APPLICATION}
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                                   (self.slot,)).fetchone()
                if row is not None and row[0]:
                    return self
                if self.process.poll() is not None:
                    raise RuntimeError(f"pg_recvlogical exited: {self.process.stderr.read().decode(errors='replace')}"
                                       if self.process.stderr else "pg_recvlogical exited")
                time.sleep(0.05)
        raise RuntimeError("pg_recvlogical's slot did not become active")

    def wait_sent(self, end_lsn: str, timeout: float = 600.0) -> float:
        """Wall time at which the walsender had sent everything up to ``end_lsn`` (polled every 5 ms)."""
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                row = conn.execute("SELECT sent_lsn >= %s::pg_lsn FROM pg_stat_replication "
                                   "WHERE application_name = %s", (end_lsn, self.APPLICATION)).fetchone()
                if row is not None and row[0]:
                    return time.time()
                time.sleep(0.005)
        raise RuntimeError(f"the walsender did not reach {end_lsn} in {timeout:.0f} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def raw_producer(bootstrap: str, topic: str, *, count: int, size: int, key_size: int) -> AnchorResult:
    process = subprocess.Popen([sys.executable, str(RAW_PRODUCER), "--bootstrap", bootstrap, "--topic", topic,
                                "--count", str(count), "--size", str(size), "--key-size", str(key_size)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0.0
    while process.poll() is None:
        current = sample(process.pid)
        if current is not None:
            peak = max(peak, current.hwm_kb / 1024)
        time.sleep(0.1)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"raw producer failed: {stderr.decode(errors='replace')}")
    out = json.loads(stdout)
    return AnchorResult(rows_per_s=count / out["seconds"], seconds=out["seconds"], cpu_s=out["cpu_s"],
                        peak_rss_mb=peak or None)
