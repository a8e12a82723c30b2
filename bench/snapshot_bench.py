"""Initial snapshot benchmark: N rows (default 1M) snapshotted while another session updates and
deletes them; optionally checks that replaying the topic per key gives the table's final rows.

Run from the repository root::

    .venv/bin/python bench/snapshot_bench.py --rows 1000000 --workers 2 --verify

It starts a throwaway Postgres and a Tansu broker (``pgbridge.embedded``), fills
``bench_items (id bigint PRIMARY KEY, v text, n int)``, starts a churn session (updates, deletes,
inserts, key changes in small transactions), and runs ``python -m pgbridge run`` with
``snapshot.mode=initial``. The snapshot is done when the real slot exists: pgbridge creates it only
after Kafka acknowledged every snapshot record. Reported: rows/s over that time (planning, reading,
encoding, producing and acknowledging included) and pgbridge's own logged read rate. With
``--verify`` the churn is stopped, the slot allowed to catch up, and the topic replayed
(tests/support/replay.py) and compared with the table.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.bridge import read_events
from tests.support.churn import Churn, create_filled_table
from tests.support.replay import diff_states, replay, table_state, wait_caught_up

from pgbridge.embedded import broker as embedded_broker
from pgbridge.embedded import postgres as embedded_postgres

PREFIX = "bench"
TABLE = "public.bench_items"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    parser.add_argument("--no-churn", action="store_true", help="snapshot a quiet table")
    parser.add_argument("--verify", action="store_true", help="replay the topic and compare with the table")
    parser.add_argument("--version", type=int, default=None, help="Postgres major version (default: any)")
    args = parser.parse_args()

    version = args.version or embedded_postgres.pick_version()
    log_path = Path(tempfile.mkstemp(prefix="pgbridge-snapshot-bench-", suffix=".log")[1])
    cluster = embedded_postgres.start_cluster(version, settings={"max_wal_size": "4GB"})
    broker = embedded_broker.start_broker()
    bridge: subprocess.Popen[bytes] | None = None
    churn: Churn | None = None
    try:
        dsn = cluster.dsn()
        create_filled_table(dsn, TABLE, args.rows)
        env = {key: value for key, value in os.environ.items() if not key.startswith("PGBRIDGE_")}
        env.update({
            "PGBRIDGE_POSTGRES__DSN": dsn, "PGBRIDGE_POSTGRES__SLOT": PREFIX,
            "PGBRIDGE_POSTGRES__PUBLICATION": PREFIX, "PGBRIDGE_POSTGRES__TABLES": TABLE,
            "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap, "PGBRIDGE_KAFKA__TOPIC_PREFIX": PREFIX,
            "PGBRIDGE_SNAPSHOT__WORKERS": str(args.workers), "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": str(args.chunk_rows),
            "PGBRIDGE_HTTP__PORT": "0", "PGBRIDGE_POSTGRES__STATUS_INTERVAL_S": "1",
        })
        if not args.no_churn:
            churn = Churn(dsn, TABLE, args.rows, seed=5)
            churn.start()
        started = time.monotonic()
        with log_path.open("ab") as log:
            bridge = subprocess.Popen([sys.executable, "-m", "pgbridge", "run"], env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
        while not _slot_exists(dsn):
            if bridge.poll() is not None:
                raise SystemExit(f"pgbridge exited with {bridge.returncode}; log: {log_path}")
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        logged = re.findall(r"rows_per_s\W+(\d+)", log_path.read_text())
        print(f"Postgres {version}: {args.rows:,} rows, {args.workers} workers, chunks of {args.chunk_rows:,}, "
              f"churn {'off' if churn is None else 'on'}: snapshot acknowledged in {elapsed:.1f} s = "
              f"{args.rows / elapsed:,.0f} rows/s (pgbridge start to slot); read rate logged: {logged} rows/s",
              flush=True)
        if args.verify:
            transactions = churn.stop() if churn is not None else 0
            wait_caught_up(dsn, PREFIX, timeout=1800)
            events = read_events(broker.bootstrap, f"{PREFIX}.{TABLE}", PREFIX, min_count=args.rows, timeout=1800,
                                 idle=5.0)
            problem = diff_states(replay(events), table_state(dsn, TABLE, ("id",)))
            print(f"verify: {len(events):,} records, {transactions:,} churn transactions: "
                  f"{'replay == table' if not problem else 'MISMATCH ' + problem}")
            if problem:
                return 1
        bridge.send_signal(signal.SIGTERM)
        bridge.wait(120)
        return 0
    finally:
        if churn is not None:
            churn.halt.set()
        if bridge is not None and bridge.poll() is None:
            bridge.kill()
            bridge.wait(30)
        broker.close()
        cluster.close()
        print(f"pgbridge log: {log_path}")


def _slot_exists(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (PREFIX,)).fetchone() is not None


if __name__ == "__main__":
    sys.exit(main())
