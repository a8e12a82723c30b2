"""Memory benchmark: one huge transaction through pgbridge with a small buffer budget.

Run from the repository root::

    .venv/bin/python bench/spill_bench.py --gb 2 --buffer-mb 64

It starts a throwaway Postgres and a Tansu broker (``pgbridge.embedded``), runs ``python -m pgbridge
run`` as a child process (default settings apart from ``buffer.memory_bytes``: streaming on, so
Postgres streams the transaction while it runs), inserts ``--gb`` GiB of row data in ONE
transaction (``--row-bytes`` of text per row, generated server-side), commits, and waits until the
slot's confirmed LSN passes the commit, i.e. until Kafka has acknowledged every record. It reports
the peak RSS of the pgbridge process (``VmHWM``), its RSS before the transaction, rows/s, and
pgbridge's own ``pgbridge_spilled_bytes_total``. The broker keeps everything in memory, so the
machine needs roughly 2-3x ``--gb`` of free RAM besides; ``--gb 0.05`` is a quick sanity run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psycopg

from pgbridge.embedded import broker as embedded_broker
from pgbridge.embedded import postgres as embedded_postgres
from pgbridge.embedded.ports import free_port

PREFIX = "bench"
GIB = 1 << 30


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="GiB of row data in the transaction")
    parser.add_argument("--buffer-mb", type=int, default=64, help="pgbridge buffer.memory_bytes in MiB")
    parser.add_argument("--row-bytes", type=int, default=1000, help="text bytes per row (below TOAST's 2 kB)")
    parser.add_argument("--version", type=int, default=None, help="Postgres major version (default: any)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the acknowledgement")
    args = parser.parse_args()

    rows = int(args.gb * GIB) // args.row_bytes
    version = args.version or embedded_postgres.pick_version()
    spill_dir = Path(tempfile.mkdtemp(prefix="pgbridge-spill-bench-"))
    log_path = Path(tempfile.mkstemp(prefix="pgbridge-spill-bench-", suffix=".log")[1])
    cluster = embedded_postgres.start_cluster(version, settings={"max_wal_size": "8GB"})
    broker = embedded_broker.start_broker()
    bridge: subprocess.Popen[bytes] | None = None
    try:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE bench (id bigint PRIMARY KEY, payload text)")
        http_port = free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("PGBRIDGE_")}
        env.update({
            "PGBRIDGE_POSTGRES__DSN": dsn,
            "PGBRIDGE_POSTGRES__TABLES": "public.bench",
            "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap,
            "PGBRIDGE_KAFKA__TOPIC_PREFIX": PREFIX,
            "PGBRIDGE_SNAPSHOT__MODE": "never",
            "PGBRIDGE_BUFFER__MEMORY_BYTES": str(args.buffer_mb << 20),
            "PGBRIDGE_BUFFER__SPILL_DIR": str(spill_dir),
            "PGBRIDGE_HTTP__PORT": str(http_port),
            "PGBRIDGE_POSTGRES__STATUS_INTERVAL_S": "1",
        })
        with log_path.open("ab") as log:
            bridge = subprocess.Popen([sys.executable, "-m", "pgbridge", "run"], env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
        _wait(lambda: _confirmed(dsn) is not None, 120, "the slot to be created", bridge, log_path)
        rss_before = _status_kib(bridge.pid, "VmRSS")
        print(f"Postgres {version}, {rows:,} rows x {args.row_bytes} B = {rows * args.row_bytes / GIB:.2f} GiB "
              f"in one transaction, buffer {args.buffer_mb} MiB; pgbridge RSS before: {rss_before / 1024:.0f} MiB",
              flush=True)

        started = time.monotonic()
        with psycopg.connect(dsn) as conn:
            conn.execute("INSERT INTO bench SELECT g, rpad(md5(g::text), %s, md5((g + 1)::text)) "
                         "FROM generate_series(1, %s) g", (args.row_bytes, rows))
            conn.commit()
            row = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
        assert row is not None
        committed_at = time.monotonic()
        print(f"inserted and committed in {committed_at - started:.1f} s; waiting for Kafka to acknowledge",
              flush=True)
        # The confirmed LSN passing the commit means Kafka acknowledged the whole transaction; it
        # may reach the commit record's start earlier (a keepalive while nothing was received yet).
        _wait(lambda: (_confirmed(dsn) or 0) >= row[0] and _published(http_port) >= rows, args.timeout,
              "every record to be acknowledged", bridge, log_path)
        done = time.monotonic()
        metrics = _metrics(http_port)
        peak = _status_kib(bridge.pid, "VmHWM")
        published = _published(http_port)
        print(f"published {published:,.0f} records; acknowledged {done - committed_at:.1f} s after COMMIT, "
              f"{done - started:.1f} s after the INSERT began: {rows / (done - started):,.0f} rows/s end to end")
        print(f"pgbridge peak RSS (VmHWM): {peak / 1024:.0f} MiB; "
              f"spilled: {metrics.get('pgbridge_spilled_bytes_total', 0) / GIB:.2f} GiB; "
              f"buffered now: {metrics.get('pgbridge_buffered_bytes', 0):.0f} B")
        if published != rows:
            print(f"ERROR: expected {rows} records", file=sys.stderr)
            return 1
        bridge.send_signal(signal.SIGTERM)
        bridge.wait(120)
        return 0
    except BaseException:
        print(f"Postgres log tail:\n{cluster.log_tail()}", file=sys.stderr)
        raise
    finally:
        if bridge is not None and bridge.poll() is None:
            bridge.kill()
            bridge.wait(30)
        broker.close()
        cluster.close()
        shutil.rmtree(spill_dir, ignore_errors=True)
        print(f"pgbridge log: {log_path}")


def _confirmed(dsn: str) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM pg_replication_slots "
                           "WHERE slot_name = 'pgbridge'").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _published(port: int) -> float:
    return sum(v for k, v in _metrics(port).items() if k.startswith("pgbridge_events_total{"))


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def _metrics(port: int) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


def _wait(predicate: object, timeout: float, what: str, bridge: subprocess.Popen[bytes], log_path: Path) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if bridge.poll() is not None:
            raise SystemExit(f"pgbridge exited with {bridge.returncode}; log: {log_path}\n{log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}; log: {log_path}")
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
