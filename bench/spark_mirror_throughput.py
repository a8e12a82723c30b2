"""Mirror throughput of the Spark job (rows/s on local[2]) per decoder, on the same topic data.

Starts a throwaway Apache Kafka broker (the suite's, jars from ``jvm/fetch.py kafka``), writes
``--rows`` narrow change records of one keyed table (``id bigint, v int, note text, at
timestamptz``; inserts in transactions of ``--tx-size`` rows, single-object framing with the schema
in ``{prefix}._schemas``, key and value as pgbridge writes them) to a topic of two partitions, then
runs the mirror job (``pgbridge_spark.mirror``, Spark's ``kafka`` source) with ``--available-now``
once per decoder (``jvm``: spark-avro's ``from_avro``; ``python``: fastavro in ``mapInArrow``),
each into a fresh output and checkpoint, in one SparkSession that has spark-sql-kafka and
spark-avro (``jvm/fetch.py spark``). (The figures of the former Python Kafka source in
bench/results come from this script at commit fa078f7, which still had that source.) A warm-up
run per decoder first takes class loading and JIT out of the figures. Rows/s = rows mirrored /
wall time from ``start()`` to the query's end; every run must mirror every row (checked).

    .venv/bin/python bench/spark_mirror_throughput.py [--rows 200000] [--repeat 1]

Writes JSON to bench/results/spark-mirror-throughput.json (and prints it), with the load average
before and after: the machine is shared, so read the figures with it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "spark"), str(ROOT / "service")]

from e2e.spark_mirror import run_available_now  # noqa: E402
from fastavro import parse_schema, schemaless_writer  # noqa: E402
from jvm.fetch import classpath, fetch  # noqa: E402

from pgbridge.embedded.apache_kafka import start_kafka  # noqa: E402
from pgbridge.encode.wire import fingerprint64, fingerprint_hex, single_object_header  # noqa: E402

RESULT = ROOT / "bench" / "results" / "spark-mirror-throughput.json"
PREFIX = "bench"
TABLE_TOPIC = f"{PREFIX}.public.narrow"

SOURCE = {"type": "record", "name": "Source", "namespace": "pgbridge", "fields": [
    {"name": n, "type": t} for n, t in (("db", "string"), ("schema", "string"), ("table", "string"),
                                        ("lsn", "long"), ("commit_lsn", "long"), ("xid", "long"),
                                        ("ts_us", "long"), ("snapshot", "boolean"))] + [
    {"name": "origin", "type": ["null", "string"], "default": None}]}
TRANSACTION = {"type": "record", "name": "Transaction", "namespace": "pgbridge", "fields": [
    {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
    {"name": "data_collection_order", "type": "long"}]}
ROW = {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": ["null", "long"], "default": None, "pg_type": "int8"},
    {"name": "v", "type": ["null", "int"], "default": None, "pg_type": "int4"},
    {"name": "note", "type": ["null", "string"], "default": None, "pg_type": "text"},
    {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None,
     "pg_type": "timestamptz"}]}
ENVELOPE = {"type": "record", "name": "Envelope", "namespace": f"{PREFIX}.public.narrow", "fields": [
    {"name": "before", "type": ["null", ROW], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "op", "type": "string"}, {"name": "source", "type": SOURCE},
    {"name": "transaction", "type": ["null", TRANSACTION], "default": None},
    {"name": "unchanged_toast_columns", "type": {"type": "array", "items": "string"}, "default": []},
    {"name": "unrepresentable", "type": ["null", {"type": "map", "values": "string"}], "default": None}]}
KEY = {"type": "record", "name": "Key", "namespace": f"{PREFIX}.public.narrow",
       "fields": [{"name": "id", "type": "long", "pg_type": "int8"}]}


def records(rows: int, tx_size: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(id, envelope)`` of ``rows`` inserts, ``tx_size`` per transaction, in commit order."""
    for i in range(rows):
        tx, order = divmod(i, tx_size)
        lsn = 0x1000000 + tx * 0x1000
        yield i, {"before": None, "after": {"id": i, "v": i % 1000, "note": f"row {i}",
                                            "at": 1_700_000_000_000_000 + i},
                  "op": "c", "unchanged_toast_columns": [], "unrepresentable": None,
                  "source": {"db": "bench", "schema": "public", "table": "narrow", "lsn": lsn + order,
                             "commit_lsn": lsn + tx_size, "xid": 1000 + tx, "ts_us": 1_700_000_000_000_000,
                             "snapshot": False, "origin": None},
                  "transaction": {"id": f"{1000 + tx}:{lsn + tx_size}", "total_order": order + 1,
                                  "data_collection_order": order + 1}}


def encoded(changes: Iterable[tuple[int, dict[str, Any]]]) -> Iterator[tuple[int, bytes, bytes]]:
    """``(id, key, value)`` bytes of ``(id, envelope)`` changes as pgbridge writes them (single-object
    framing); bench/spark_delta_batches.py writes its records with it too."""
    value_schema, key_schema = parse_schema(ENVELOPE), parse_schema(KEY)
    value_header, key_header = single_object_header(fingerprint64(ENVELOPE)), single_object_header(fingerprint64(KEY))
    for i, envelope in changes:
        key, value = io.BytesIO(key_header), io.BytesIO(value_header)
        key.seek(len(key_header))
        value.seek(len(value_header))
        schemaless_writer(key, key_schema, {"id": i})
        schemaless_writer(value, value_schema, envelope)
        yield i, key.getvalue(), value.getvalue()


def producer(bootstrap: str) -> Any:
    """A producer tuned for bulk loading (the figures are the consumer's, not this one's)."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                     "compression.type": "lz4", "acks": "all"})


def create_topic(bootstrap: str, producer: Any, topic: str) -> None:
    """``topic`` with two partitions and ``{PREFIX}._schemas`` holding the key and value schemas."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1), NewTopic(f"{PREFIX}._schemas", 1, 1)]).values():
        future.result(30)
    for schema in (ENVELOPE, KEY):
        producer.produce(f"{PREFIX}._schemas", key=fingerprint_hex(fingerprint64(schema)).encode(),
                         value=json.dumps(schema).encode())


def send(producer: Any, topic: str, items: Iterable[tuple[int, bytes, bytes]], flush_s: float) -> None:
    """``items`` to ``topic``, partition ``id % 2``, waiting for room when the producer's queue is
    full; all delivered within ``flush_s`` of the last one, or ``RuntimeError``."""
    for i, key, value in items:
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=i % 2)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(flush_s) != 0:
        raise RuntimeError(f"records not delivered within {flush_s:g} s")


def produce(bootstrap: str, rows: int, tx_size: int) -> float:
    """The benchmark's records to a new topic; the seconds it took to send them."""
    out = producer(bootstrap)
    create_topic(bootstrap, out, TABLE_TOPIC)
    started = time.monotonic()
    send(out, TABLE_TOPIC, encoded(records(rows, tx_size)), 120)
    return time.monotonic() - started


def write_result(result: dict[str, Any], output: Path, load_before: tuple[float, float, float]) -> None:
    """``result`` with the command, the load average before and now, the machine and the commit, as
    JSON to ``output`` and stdout: the machine is shared, so the figures are read with the load."""
    result = {"command": " ".join([".venv/bin/python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
              **result,
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "cpus": os.cpu_count(), "python": platform.python_version(),
              "git_commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True).stdout.strip()}
    text = json.dumps(result, indent=2)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text + "\n")
    print(text)


def session(jars: str) -> Any:
    """The session ``python -m pgbridge_spark.mirror`` builds (local[2], nothing tuned), with ``jars``."""
    from pgbridge_spark.session import build_session

    os.environ.setdefault("PGBRIDGE_SPARK_JARS", str(Path(jars.split(",")[0]).parent))
    spark = build_session("local[2]", app_name="pgbridge-spark-mirror-throughput")
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def mirror_once(spark: Any, bootstrap: str, work: Path, decoder: str, expected: int,
                tables: tuple[str, ...] = ("public.narrow",)) -> dict[str, Any]:
    from pgbridge_spark.config import MirrorConfig

    run = Path(tempfile.mkdtemp(prefix=f"{decoder}-", dir=work))
    config = MirrorConfig(bootstrap_servers=bootstrap, prefix=PREFIX, output=str(run / "out"),
                          checkpoint=str(run / "checkpoint"), decoder=decoder, tables=tables)
    try:
        elapsed, batches = run_available_now(spark, config)
    except RuntimeError as exc:
        raise RuntimeError(f"{decoder}: {exc}") from exc
    mirrored = spark.read.format("delta").load(str(run / "out" / "public.narrow")).count()
    if mirrored != expected:
        raise RuntimeError(f"{decoder}: mirrored {mirrored} rows, expected {expected}")
    shutil.rmtree(run, ignore_errors=True)
    return {"decoder": decoder, "source": "kafka", "rows": mirrored, "seconds": round(elapsed, 2),
            "rows_per_s": round(mirrored / elapsed), "micro_batches": len(batches)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--tx-size", type=int, default=100, help="rows per source transaction")
    parser.add_argument("--repeat", type=int, default=1, help="runs per decoder")
    parser.add_argument("--output", type=Path, default=RESULT)
    args = parser.parse_args()

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="pgbridge-spark-throughput-"))
    jars = ",".join(str(j) for j in sorted(fetch("spark").glob("*.jar")))
    cluster = start_kafka(classpath("kafka"), 1)
    try:
        produce_s = produce(cluster.bootstrap, args.rows, args.tx_size)
        spark = session(jars)
        try:
            warm = mirror_once(spark, cluster.bootstrap, work, "jvm", args.rows)
            mirror_once(spark, cluster.bootstrap, work, "python", args.rows)
            runs = [mirror_once(spark, cluster.bootstrap, work, decoder, args.rows)
                    for _ in range(args.repeat) for decoder in ("jvm", "python")]
        finally:
            spark.stop()
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    best: dict[str, int] = {}
    for run in runs:
        name = f"{run['decoder']}/{run['source']}"
        best[name] = max(best.get(name, 0), run["rows_per_s"])
    import pyspark
    write_result({
        "benchmark": "spark mirror throughput (mirror mode, available-now, local[2])",
        "rows": args.rows, "tx_size": args.tx_size, "topic_partitions": 2,
        "broker": "Apache Kafka (jvm/kafka), single node", "pyspark": pyspark.__version__,
        "spark_jars": sorted(Path(j).name for j in jars.split(",")),
        "produce_seconds": round(produce_s, 2), "warmup_run": warm, "runs": runs, "best_rows_per_s": best,
        "java": subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0],
    }, args.output, load_before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
