"""What exactly-once costs: the same workloads through pgbridge at-least-once and exactly-once, one run.

    python bench/exactly_once.py [--rows 1000000] [--bigtx-rows 100000] [--repeat 2]

One Postgres 15 (Debian's, else the wheel's 18) and one Apache Kafka node (jars from Maven via
jvm/fetch.py) serve every pass. A pass: a fresh table and slot, pgbridge streaming (snapshot never),
the workload committed live (narrow rows in transactions of 1,000 rows, or one transaction of
``--bigtx-rows``), then the time until the slot's confirmed LSN reaches the last commit, which in
both modes means Kafka has the data (exactly-once: committed). Reported per pass: rows/s from the
first commit to that confirmation, and the lag after the last commit. Passes alternate between the
modes so a machine that slows down hurts both alike; ratios are taken within the run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jvm.fetch import classpath  # noqa: E402

from pgbridge.embedded.apache_kafka import start_kafka  # noqa: E402
from pgbridge.embedded.postgres import start_cluster  # noqa: E402

NARROW_DDL = "CREATE TABLE t (id bigint PRIMARY KEY, a int, b text, c timestamptz, d numeric(12,2))"
NARROW_INSERT = ("INSERT INTO t SELECT g, mod(g, 100000), repeat(md5(g::text), 3) || 'abcd', "
                 "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', mod(g, 1000000) / 100.0 "
                 "FROM generate_series(%s::bigint, %s::bigint) AS g")


def _confirmed(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots "
                           "WHERE slot_name = %s", (slot,)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def one_pass(admin_dsn: str, dsn_of: Callable[[str], str], bootstrap: str, *, exactly_once: bool, rows: int,
             tx_rows: int, transaction_max_ms: int) -> dict[str, float]:
    name = f"b_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = dsn_of(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(NARROW_DDL)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}
    env.update({"PGBRIDGE_POSTGRES__DSN": dsn, "PGBRIDGE_POSTGRES__SLOT": name, "PGBRIDGE_POSTGRES__PUBLICATION": name,
                "PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never",
                "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": bootstrap, "PGBRIDGE_KAFKA__TOPIC_PREFIX": name,
                "PGBRIDGE_KAFKA__EXACTLY_ONCE": "true" if exactly_once else "false",
                    "PGBRIDGE_KAFKA__TRANSACTION_MAX_MS": str(transaction_max_ms),
                "PGBRIDGE_POSTGRES__STATUS_INTERVAL_S": "0.2", "PGBRIDGE_HTTP__PORT": "0",
                "PGBRIDGE_HA__LEADER_ELECTION": "false",
                "PGBRIDGE_BUFFER__SPILL_DIR": tempfile.mkdtemp(prefix="pgbridge-bench-spill-")})
    log_path = Path(tempfile.mkstemp(prefix="pgbridge-bench-", suffix=".log")[1])
    with log_path.open("wb") as log:
        bridge = subprocess.Popen([sys.executable, "-m", "pgbridge", "run"], env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not _confirmed(dsn, name):
            if time.monotonic() > deadline or bridge.poll() is not None:
                raise RuntimeError(f"pgbridge never created its slot; log {log_path}")
            time.sleep(0.2)
        time.sleep(1.0)  # streaming
        with psycopg.connect(dsn, autocommit=True) as conn:
            first = time.monotonic()
            for start in range(1, rows + 1, tx_rows):
                conn.execute(NARROW_INSERT, (start, min(rows, start + tx_rows - 1)))
            last = time.monotonic()
            end_row = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint").fetchone()
        assert end_row is not None
        end_lsn = int(end_row[0])
        while _confirmed(dsn, name) < end_lsn:
            if bridge.poll() is not None:
                raise RuntimeError(f"pgbridge exited; log {log_path}")
            time.sleep(0.05)
        done = time.monotonic()
    finally:
        bridge.send_signal(signal.SIGTERM)
        bridge.wait(60)
    return {"rows_per_s": rows / (done - first), "lag_s": done - last, "commit_s": last - first}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--bigtx-rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--transaction-max-ms", type=int, default=500, help="kafka.transaction_max_ms")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    cluster = start_cluster(15 if Path("/usr/lib/postgresql/15/bin/postgres").exists() else 18,
                            settings={"max_wal_size": "4GB"})
    kafka = start_kafka(classpath("kafka"), 1)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    try:
        admin = cluster.dsn("postgres")
        for workload, rows, tx_rows in (("narrow", args.rows, 1000), ("bigtx", args.bigtx_rows, args.bigtx_rows)):
            for _ in range(args.repeat):
                for mode in ("at_least_once", "exactly_once"):
                    figures = one_pass(admin, cluster.dsn, kafka.bootstrap, exactly_once=mode == "exactly_once",
                                       rows=rows, tx_rows=tx_rows, transaction_max_ms=args.transaction_max_ms)
                    results.setdefault(workload, {}).setdefault(mode, []).append(figures)
                    print(f"{workload:6} {mode:13} {figures['rows_per_s']:>9,.0f} rows/s  "
                          f"lag {figures['lag_s']:.2f} s", flush=True)
    finally:
        kafka.close()
        cluster.close()
    print()
    for workload, modes in results.items():
        alo = statistics.median(p["rows_per_s"] for p in modes["at_least_once"])
        eos = statistics.median(p["rows_per_s"] for p in modes["exactly_once"])
        alo_lag = statistics.median(p["lag_s"] for p in modes["at_least_once"])
        eos_lag = statistics.median(p["lag_s"] for p in modes["exactly_once"])
        print(f"{workload}: exactly-once {eos:,.0f} rows/s vs at-least-once {alo:,.0f} rows/s = "
              f"{eos / alo:.2f}x ({(1 - eos / alo) * 100:+.0f}% fewer); lag {eos_lag:.2f} s vs {alo_lag:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
