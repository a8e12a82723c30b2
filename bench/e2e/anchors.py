"""The physical limits, measured on the same data in the same run.

* ``pg_recvlogical``: the walsender decoding the same WAL with pgoutput and the same options the
  bridge asks for, written to /dev/null. Its slot is created just before the workload is loaded
  (next to the bridge's), and it is started after the bridge has stopped, with ``--endpos`` at
  the WAL position reached by the workload: the time it takes is what Postgres needs to decode
  and send the changes, with no consumer cost worth the name.
* the raw producer (``raw_producer.py``, its own process): confluent-kafka producing as many
  records of the bridge's average size to a fresh topic, with the bridge's producer settings
  (idempotent, ``acks=all``): what the broker and librdkafka can take.
"""

from __future__ import annotations

import json
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
