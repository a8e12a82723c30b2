"""Per-batch cost of the Delta mirror against table size: 1,000 changes into a 1M- and a 10M-row table.

Starts a throwaway Apache Kafka broker (jars from ``jvm/fetch.py kafka``), writes ``--rows``
narrow inserts of one keyed table (``id bigint, v int, note text, at timestamptz``, the records
pgbridge writes: single-object framing, two partitions, ``bench/spark_mirror_throughput.py``'s
encoder), and runs the mirror job as docs/spark.md says: ``python -m pgbridge_spark.mirror``'s own
session (``session.build_session``: local[2], the documented driver memory, nothing tuned) and
``--available-now``. Then, per round, ``--changes`` updates of keys spread evenly over the whole key
range (every file of the table is in range) go to the topic and the job runs again; and once more
with nothing new. Reported per table size:

- ``initial_load_s``: the run that mirrors the ``--rows`` inserts (it must not run out of memory);
- ``batch_s``: the micro-batch's own work (``BatchResult.seconds``: decode, reduce, one MERGE);
- ``run_s`` / ``empty_run_s``: the whole ``--available-now`` run with the batch / with nothing new
  (query start, planning, checkpoint), and their difference, what a user waits for the batch;
- ``fixed_s``: ``batch_s`` of a batch of one change (the cost whatever the batch holds);
- ``streaming_batch_s`` / ``streaming_fixed_s``: the same 1,000-change and 1-change batches applied by
  one query that keeps running (``processingTime`` trigger, as ``python -m pgbridge_spark.mirror``
  runs without ``--available-now``): what each micro-batch of a long-running job costs, without
  query start and the first reads of the schemas and the table's progress;
- ``process_run_s`` / ``process_empty_run_s``: as a user runs the job from a scheduler, each run its
  own process (``python -m pgbridge_spark.mirror ... --available-now``: a new JVM, nothing warmed
  up): the whole run with ``--changes`` new updates / with nothing new, and
  ``process_run_minus_empty_s_median``, their difference: what the batch costs such a user;
  ``process_batch_s``: the micro-batch's own seconds, from the job's log line;
- ``archive_*``: the same runs with ``--class-archive-dir`` (docs/spark.md, "Scheduled runs"): the
  first (``archive_first_run_s``, with changes) writes the driver's class archive as it ends, the
  others map it (``archive_batch_s``: their micro-batches' own seconds);
- ``quick_jit_*``: the same runs with ``--driver-java-options=-XX:TieredStopAtLevel=1`` (the driver
  JVM compiles with C1 only: docs/spark.md, "Scheduled runs"); ``quick_jit_archive_*``: with the
  class archive too;
- ``files``: files of the table after the rounds.

    .venv/bin/python bench/spark_delta_batches.py --rows 1000000 10000000 [--changes 1000] [--rounds 3]
        [--table-formats delta iceberg]

With ``--first-load-rows N`` it measures instead what ``QUICK_JIT`` costs a large batch: ``--rounds``
first loads of ``N`` rows, each by a new process into an empty output, as documented and with
``--driver-java-options=-XX:TieredStopAtLevel=1``, alternating (``first_loads``).

    .venv/bin/python bench/spark_delta_batches.py --first-load-rows 2000000 --rounds 2 \
        --output bench/results/spark-first-load-quick-jit.json

With ``--table-formats delta iceberg`` each format is measured in turn in the one run (the same
Spark session for the in-driver figures; ``python -m pgbridge_spark.mirror --table-format ...`` for
the process ones), its figures under ``sizes_{format}``.

Writes JSON to bench/results/spark-delta-batches.json (and prints it) with the load average before
and after: the machine may be shared, so read the figures with it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "spark"), str(ROOT / "service"), str(ROOT / "bench")]

from jvm.fetch import classpath, fetch  # noqa: E402
from spark_mirror_throughput import (  # noqa: E402
    PREFIX,
    TABLE_TOPIC,
    create_topic,
    encoded,
    producer,
    send,
    write_result,
)

from pgbridge.embedded.apache_kafka import start_kafka  # noqa: E402

RESULT = ROOT / "bench" / "results" / "spark-delta-batches.json"
BASE_LSN = 0x1000000
QUICK_JIT = "-XX:TieredStopAtLevel=1"  # C1 only: what docs/spark.md suggests for scheduled small batches
QUICK_JIT_OPTION = f"--driver-java-options={QUICK_JIT}"


def change(i: int, op: str, lsn: int, order: int, v: int) -> dict[str, Any]:
    row = {"id": i, "v": v, "note": f"row {i}", "at": 1_700_000_000_000_000 + i}
    return {"before": None, "after": row, "op": op, "unchanged_toast_columns": [], "unrepresentable": None,
            "source": {"db": "bench", "schema": "public", "table": "narrow", "lsn": lsn + order, "commit_lsn": lsn,
                       "xid": lsn, "ts_us": 1_700_000_000_000_000, "snapshot": op == "r", "origin": None},
            "transaction": None if op == "r" else {"id": f"{lsn}:{lsn}", "total_order": order,
                                                   "data_collection_order": order}}


def produce(bootstrap: str, topic: str, items: Iterator[tuple[int, bytes, bytes]], create: bool) -> None:
    out = producer(bootstrap)
    if create:
        create_topic(bootstrap, out, topic)
    send(out, topic, items, 300)


def snapshot(rows: int) -> Iterator[tuple[int, dict[str, Any]]]:
    for i in range(rows):
        yield i, change(i, "r", BASE_LSN, 0, 0)


def updates(rows: int, count: int, round_: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``count`` updates in one transaction, keys spread evenly over ``0 .. rows``."""
    lsn = BASE_LSN + (round_ + 1) * 0x100000
    step = max(1, rows // count)
    for n in range(count):
        i = (n * step + round_ * 7) % rows
        yield i, change(i, "u", lsn, n + 1, round_ + 1)


def run_format(spark: Any, bootstrap: str, out: Path, table_format: str) -> tuple[float, list[Any]]:
    from pgbridge_spark.config import MirrorConfig
    from pgbridge_spark.mirror import MirrorJob

    config = MirrorConfig(bootstrap_servers=bootstrap, prefix=PREFIX, output=str(out / "mirror"),
                          checkpoint=str(out / "checkpoint"), tables=("public.narrow",), table_format=table_format)
    results: list[Any] = []
    started = time.monotonic()
    query = MirrorJob(spark, config, on_batch=lambda _batch_id, result: results.append(result)).start(
        available_now=True)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return time.monotonic() - started, results


def streaming(spark: Any, bootstrap: str, out: Path, rows: int, changes: int, rounds: int,
              first_round: int, table_format: str) -> tuple[list[float], list[float]]:
    """Per-batch seconds of ``rounds`` batches of ``changes`` updates, then of ``rounds`` one-change
    batches, all applied by one running query (each produced once the previous batch is applied)."""
    import queue

    from pgbridge_spark.config import MirrorConfig
    from pgbridge_spark.mirror import MirrorJob

    config = MirrorConfig(bootstrap_servers=bootstrap, prefix=PREFIX, output=str(out / "mirror"),
                          checkpoint=str(out / "checkpoint"), tables=("public.narrow",), trigger_seconds=0.5,
                          table_format=table_format)
    done: queue.Queue[Any] = queue.Queue()
    query = MirrorJob(spark, config, on_batch=lambda _batch_id, result: done.put(result)).start()
    sizes = [changes] * rounds + [1] * rounds
    seconds = []
    try:
        for n, count in enumerate(sizes):
            produce(bootstrap, TABLE_TOPIC, encoded(updates(rows, count, first_round + n)), create=False)
            applied, spent = 0, 0.0
            while applied < count:  # the changes may arrive over two micro-batches: their sum
                result = done.get(timeout=600)
                applied, spent = applied + result.applied_count, spent + result.seconds
            seconds.append(spent)
    finally:
        query.stop()
    return seconds[:rounds], seconds[rounds:]


def run_process(bootstrap: str, out: Path, *extra: str) -> tuple[float, float | None]:
    """One ``python -m pgbridge_spark.mirror --available-now`` as its own process, as docs/spark.md
    says (nothing tuned): its wall seconds, and its micro-batch's own seconds (``None``: no batch)."""
    command = [sys.executable, "-m", "pgbridge_spark.mirror", "--bootstrap-servers", bootstrap, "--prefix", PREFIX,
               "--output", str(out / "mirror"), "--checkpoint", str(out / "checkpoint"), "--tables", "public.narrow",
               "--available-now", *extra]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    batches = [float(m.group(1)) for m in re.finditer(r"micro-batch \d+: \d+ changes applied to \d+ tables in ([0-9.]+) s",
                                                      done.stderr)]
    return seconds, sum(batches) if batches else None


def process_rounds(bootstrap: str, out: Path, rows: int, changes: int, rounds: range,
                   *extra: str) -> tuple[list[float], list[float], list[float | None]]:
    """Per round, ``changes`` updates applied by one process (``run_process``), then a process
    with nothing new: the whole runs' seconds, the empty runs' and the micro-batches' own."""
    runs: list[float] = []
    empty: list[float] = []
    batches: list[float | None] = []
    for round_ in rounds:
        produce(bootstrap, TABLE_TOPIC, encoded(updates(rows, changes, round_)), create=False)
        seconds, batch = run_process(bootstrap, out, *extra)
        runs.append(seconds)
        batches.append(batch)
        empty.append(run_process(bootstrap, out, *extra)[0])
    return runs, empty, batches


def process_figures(name: str, rounds: tuple[list[float], list[float], list[float | None]]) -> dict[str, Any]:
    """``process_rounds``' figures under ``name``: the runs, the empty runs, the micro-batches' own
    seconds and the median difference."""
    runs, empty, batches = rounds
    return {f"{name}_run_s": rounded(runs), f"{name}_empty_run_s": rounded(empty), f"{name}_batch_s": rounded(batches),
            f"{name}_run_minus_empty_s_median": median_difference(runs, empty)}


def median_difference(runs: list[float], empty: list[float]) -> float:
    """What the batch costs: the median of (run with it minus run with nothing new)."""
    return round(statistics.median(a - b for a, b in zip(runs, empty, strict=True)), 2)


def rounded(values: list[float] | list[float | None]) -> list[float | None]:
    return [None if x is None else round(x, 2) for x in values]


def measure(spark: Any, rows: int, changes: int, rounds: int, work: Path, table_format: str) -> dict[str, Any]:
    from pgbridge_spark.formats import table_format as format_of

    tables = format_of(table_format)
    cluster = start_kafka(classpath("kafka"), 1)
    out = Path(tempfile.mkdtemp(prefix=f"rows-{rows}-", dir=work))
    chosen = ("--table-format", table_format)

    def run(spark: Any, bootstrap: str, out: Path) -> tuple[float, list[Any]]:
        return run_format(spark, bootstrap, out, table_format)

    try:
        produce(cluster.bootstrap, TABLE_TOPIC, encoded(snapshot(rows)), create=True)
        load_s, _ = run(spark, cluster.bootstrap, out)
        table = str(out / "mirror" / "public.narrow")
        assert tables.read(spark, table).count() == rows
        batch_s, run_s, empty_s = [], [], []
        for r in range(rounds):
            produce(cluster.bootstrap, TABLE_TOPIC, encoded(updates(rows, changes, r)), create=False)
            seconds, results = run(spark, cluster.bootstrap, out)
            run_s.append(seconds)
            batch_s.append(sum(x.seconds for x in results))
            assert sum(x.applied_count for x in results) == changes, results
            seconds, results = run(spark, cluster.bootstrap, out)
            empty_s.append(seconds)
        produce(cluster.bootstrap, TABLE_TOPIC, encoded(updates(rows, 1, rounds)), create=False)
        _, results = run(spark, cluster.bootstrap, out)
        fixed_s = sum(x.seconds for x in results)
        changed = tables.read(spark, table).where(f"v = {rounds}").count()
        stream_s, stream_fixed_s = streaming(spark, cluster.bootstrap, out, rows, changes, rounds, rounds + 1,
                                             table_format)
        # as a user runs it: each run its own process (the running query above has stopped; these
        # take its checkpoint on), then the same with the class archive, whose first run writes it
        process = process_rounds(cluster.bootstrap, out, rows, changes, range(3 * rounds + 1, 4 * rounds + 1), *chosen)
        archive = (*chosen, "--class-archive-dir", str(out / "class-archive"))
        produce(cluster.bootstrap, TABLE_TOPIC, encoded(updates(rows, changes, 4 * rounds + 1)), create=False)
        first_s = run_process(cluster.bootstrap, out, *archive)[0]
        archived = process_rounds(cluster.bootstrap, out, rows, changes, range(4 * rounds + 2, 5 * rounds + 2),
                                  *archive)
        quick = process_rounds(cluster.bootstrap, out, rows, changes, range(5 * rounds + 2, 6 * rounds + 2), *chosen,
                               QUICK_JIT_OPTION)
        both = process_rounds(cluster.bootstrap, out, rows, changes, range(6 * rounds + 2, 7 * rounds + 2), *archive,
                              QUICK_JIT_OPTION)
        files = tables.file_count(spark, table)
        return {"table_format": table_format, "rows": rows, "changes": changes, "initial_load_s": round(load_s, 2),
                "batch_s": rounded(batch_s), "batch_s_median": round(statistics.median(batch_s), 2),
                "run_s": rounded(run_s), "empty_run_s": rounded(empty_s),
                "run_minus_empty_s_median": median_difference(run_s, empty_s),
                "fixed_s": round(fixed_s, 2), "rows_changed_last_round": changed,
                "streaming_batch_s": rounded(stream_s), "streaming_fixed_s": rounded(stream_fixed_s),
                **process_figures("process", process),
                "archive_first_run_s": round(first_s, 2), **process_figures("archive", archived),
                **process_figures("quick_jit", quick), **process_figures("quick_jit_archive", both),
                "files": files}
    finally:
        cluster.close()
        shutil.rmtree(out, ignore_errors=True)


def first_loads(rows: int, rounds: int, work: Path) -> dict[str, Any]:
    """Seconds of ``rounds`` first loads of ``rows`` by a new process each (``run_process`` into an
    empty output), as documented and with ``QUICK_JIT``, alternating: what C1 alone costs a job
    whose batch is large, beside what it saves a small one (``quick_jit_*`` of ``measure``)."""
    cluster = start_kafka(classpath("kafka"), 1)
    seconds: dict[str, list[float]] = {"documented": [], "quick_jit": []}
    try:
        produce(cluster.bootstrap, TABLE_TOPIC, encoded(snapshot(rows)), create=True)
        for _ in range(rounds):
            for name, extra in (("documented", ()), ("quick_jit", (QUICK_JIT_OPTION,))):
                out = Path(tempfile.mkdtemp(prefix="first-load-", dir=work))
                seconds[name].append(run_process(cluster.bootstrap, out, *extra)[0])
                shutil.rmtree(out, ignore_errors=True)
    finally:
        cluster.close()
    return {"rows": rows, **{f"{name}_first_load_s": rounded(values) for name, values in seconds.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULT)
    parser.add_argument("--table-formats", nargs="+", choices=("delta", "iceberg"), default=["delta"],
                        help="each format measured in turn, in one run (same session, same machine state)")
    parser.add_argument("--first-load-rows", type=int, default=None,
                        help="measure first loads of this many rows, as documented and with QUICK_JIT, instead")
    args = parser.parse_args()
    os.environ.setdefault("PGBRIDGE_SPARK_JARS", str(fetch("spark")))
    if args.first_load_rows is not None:
        load_before = os.getloadavg()
        work = Path(tempfile.mkdtemp(prefix="pgbridge-first-loads-"))
        try:
            loads = first_loads(args.first_load_rows, args.rounds, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        write_result({"benchmark": f"first load by a new process, with and without {QUICK_JIT}", **loads},
                     args.output, load_before)
        return 0

    from pgbridge_spark.session import build_session

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("pgbridge_spark").setLevel(logging.INFO)
    load_before = os.getloadavg()
    # what python -m pgbridge_spark.mirror builds: nothing tuned (Iceberg's jar beside Delta's when asked)
    spark = build_session("local[2]", table_format="iceberg" if "iceberg" in args.table_formats else "delta")
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="pgbridge-delta-batches-"))
    try:
        measured = {fmt: [measure(spark, rows, args.changes, args.rounds, work, fmt) for rows in args.rows]
                    for fmt in args.table_formats}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    import pyspark
    result: dict[str, Any] = {
        "benchmark": f"{' and '.join(args.table_formats)} mirror: {args.changes:,} spread changes against table size "
                     "(mirror mode, local[2], untuned)",
        "pyspark": pyspark.__version__,
    }
    for fmt, sizes in measured.items():
        key = "sizes" if len(measured) == 1 else f"sizes_{fmt}"
        result[key] = sizes
        if len(sizes) >= 2:
            ratio = round(sizes[-1]["batch_s_median"] / sizes[0]["batch_s_median"], 2)
            result["ratio_largest_to_smallest_batch" if len(measured) == 1 else f"ratio_largest_to_smallest_batch_{fmt}"] = ratio
    write_result(result, args.output, load_before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
