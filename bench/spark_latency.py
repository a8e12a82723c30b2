"""Commit → mirror latency: how long after a Postgres COMMIT its row is in the Spark mirror.

Starts a throwaway Postgres 18 and Apache Kafka broker (``pgbridge.embedded``, jars from
``jvm/fetch.py kafka``), runs ``python -m pgbridge run`` as a child process and the mirror job
(``pgbridge_spark.mirror``: Spark's ``kafka`` source, ``from_avro``; jars from ``jvm/fetch.py
spark``) on ``local[2]`` in this process, then commits one probe row at a time
(with a steady background load of small transactions) and, after every micro-batch, reads the
mirrored Delta table to see which probes arrived. The session is the one ``python -m
pgbridge_spark.mirror`` builds (``session.build_session``: local[2], nothing tuned). Latency = time the batch finished minus time the
COMMIT returned, both on this machine's monotonic clock.

    .venv/bin/python bench/spark_latency.py [--probes 30] [--interval 1.0] [--trigger 0.5] [--consistent]
        [--parallel-tables N] [--output FILE]

Writes one JSON object to bench/results/spark-latency.json (``--output``; and prints it):
percentiles (p50, p95, p99) of commit→mirror latency and of micro-batch duration, with the command,
the load average before and after and the commit (``spark_mirror_throughput.write_result``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "spark"), str(ROOT / "service"), str(ROOT / "bench")]
RESULT = ROOT / "bench" / "results" / "spark-latency.json"

from jvm.fetch import classpath, fetch  # noqa: E402
from spark_mirror_throughput import write_result  # noqa: E402

from pgbridge.embedded.apache_kafka import start_kafka  # noqa: E402
from pgbridge.embedded.postgres import start_cluster  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=30)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between probe commits")
    parser.add_argument("--trigger", type=float, default=0.5, help="micro-batch trigger interval, seconds")
    parser.add_argument("--consistent", action="store_true", help="transaction-consistent mode")
    parser.add_argument("--parallel-tables", type=int, default=None,
                        help="the job's --parallel-tables (default: the job's, the driver's CPUs)")
    parser.add_argument("--output", type=Path, default=RESULT)
    args = parser.parse_args()
    load_before = os.getloadavg()

    from pgbridge_spark.config import MirrorConfig
    from pgbridge_spark.mirror import BatchResult, MirrorJob
    from pgbridge_spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="pgbridge-spark-bench-"))
    cluster = start_cluster(18)
    os.environ.setdefault("PGBRIDGE_SPARK_JARS", str(fetch("spark")))
    broker = start_kafka(classpath("kafka"), 1)
    bridge = None
    query = None
    try:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE probe (id int PRIMARY KEY, note text)")
            conn.execute("CREATE TABLE load (id int PRIMARY KEY, n int)")
            conn.execute("INSERT INTO load SELECT g, 0 FROM generate_series(1, 100) g")
        prefix = "bench"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}
        env.update({"PGBRIDGE_POSTGRES__DSN": dsn, "PGBRIDGE_POSTGRES__TABLES": "public.probe,public.load",
                    "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap, "PGBRIDGE_KAFKA__TOPIC_PREFIX": prefix,
                    "PGBRIDGE_HTTP__PORT": "0", "PGBRIDGE_POSTGRES__STATUS_INTERVAL_S": "0.5",
                    "PGBRIDGE_BUFFER__SPILL_DIR": str(work / "spill")})
        bridge = subprocess.Popen([sys.executable, "-m", "pgbridge", "run"], env=env,
                                  stdout=(work / "bridge.log").open("wb"), stderr=subprocess.STDOUT)
        spark = build_session("local[2]")
        spark.sparkContext.setLogLevel("ERROR")

        committed: dict[int, float] = {}
        seen: dict[int, float] = {}
        batch_seconds: list[float] = []
        batch_started = [time.monotonic()]
        output = work / "mirror"

        def on_batch(batch_id: int, result: BatchResult) -> None:
            now = time.monotonic()
            batch_seconds.append(now - batch_started[0])
            batch_started[0] = now
            if "public.probe" in result.tables:
                for row in spark.read.format("delta").load(str(output / "public.probe")).select("id").collect():
                    seen.setdefault(row["id"], now)

        config = MirrorConfig(bootstrap_servers=broker.bootstrap, prefix=prefix, output=str(output),
                              checkpoint=str(work / "checkpoint"), consistent=args.consistent,
                              trigger_seconds=args.trigger, parallel_tables=args.parallel_tables)
        query = MirrorJob(spark, config, on_batch=on_batch).start()

        # warm up: the first row makes topics, schemas and the Spark plan exist
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO probe VALUES (0, 'warm-up')")
        deadline = time.monotonic() + 180
        while 0 not in seen and time.monotonic() < deadline:
            time.sleep(0.1)
        if 0 not in seen:
            raise SystemExit("warm-up row never reached the mirror; see " + str(work / "bridge.log"))

        stop = threading.Event()

        def background() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not stop.is_set():
                    conn.execute("UPDATE load SET n = n + 1 WHERE id = (random() * 99)::int + 1")
                    time.sleep(0.02)

        loader = threading.Thread(target=background, daemon=True)
        loader.start()
        batch_seconds.clear()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for probe_id in range(1, args.probes + 1):
                conn.execute("INSERT INTO probe VALUES (%s, 'probe')", (probe_id,))
                committed[probe_id] = time.monotonic()
                time.sleep(args.interval)
        deadline = time.monotonic() + 120
        while len(set(committed) - set(seen)) and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        latencies = [seen[i] - committed[i] for i in committed if i in seen]
        result: dict[str, Any] = {
            "probes": args.probes, "arrived": len(latencies), "trigger_s": args.trigger,
            "consistent": args.consistent, "background_tx_per_s": round(1 / 0.02),
            "parallel_tables": args.parallel_tables,
            "commit_to_mirror_s": {"p50": round(statistics.median(latencies), 3),
                                   "p95": round(percentile(latencies, 0.95), 3),
                                   "p99": round(percentile(latencies, 0.99), 3),
                                   "max": round(max(latencies), 3), "min": round(min(latencies), 3)},
            "micro_batch_s": {"p50": round(statistics.median(batch_seconds), 3),
                              "p95": round(percentile(batch_seconds, 0.95), 3), "count": len(batch_seconds)},
        }
        write_result(result, args.output, load_before)
        return 0
    finally:
        if query is not None:
            query.stop()
        if bridge is not None:
            bridge.send_signal(signal.SIGTERM)
            try:
                bridge.wait(30)
            except subprocess.TimeoutExpired:
                bridge.kill()
        broker.close()
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
