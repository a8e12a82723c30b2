"""What ``--parallel-tables`` buys: the MERGEs of one micro-batch into several tables, one table after
the other against all at once (each through a sibling session, as ``MirrorJob`` commits them).

Each of ``--tables`` Delta tables (deletion vectors on, as the job creates them) holds ``--rows``
rows; a round MERGEs ``--changes`` spread updates into every table with the job's commit options
(``delta_tables.merge``'s commit options: txnAppId, txnVersion, userMetadata) through the job's own
``delta_tables.merge``, first sequentially through
the one session, then concurrently, one thread and sibling session (``session.sibling_session``)
per table. The session is ``session.build_session``'s (local[2], nothing tuned) and warmed by
``--warmup`` rounds of each before ``--rounds`` measured ones; the JVM's own CPU seconds are read
from /proc. Reported: wall and JVM CPU seconds per round, medians, and their ratio.

    .venv/bin/python bench/spark_parallel_tables.py [--tables 4] [--rows 100000] [--changes 100]

Writes JSON to bench/results/spark-parallel-tables.json (and prints it) with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "spark"), str(ROOT / "service"), str(ROOT / "bench")]

from e2e import procstat  # noqa: E402
from spark_mirror_throughput import write_result  # noqa: E402

RESULT = ROOT / "bench" / "results" / "spark-parallel-tables.json"


def jvm_cpu_s(pid: int) -> float:
    taken = procstat.sample(pid)
    assert taken is not None, "the Spark driver's JVM is gone"
    return taken.cpu_s


def timed(round_: Callable[[], None], pid: int) -> tuple[float, float]:
    cpu, started = jvm_cpu_s(pid), time.monotonic()
    round_()
    return time.monotonic() - started, jvm_cpu_s(pid) - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULT)
    args = parser.parse_args()
    load_before = os.getloadavg()


    from pgbridge_spark import delta_tables
    from pgbridge_spark.formats import Commit
    from pgbridge_spark.merge import MergePlan
    from pgbridge_spark.session import apply_job_defaults, build_session, sibling_session

    spark = build_session("local[2]")
    apply_job_defaults(spark)
    spark.sparkContext.setLogLevel("ERROR")
    pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
    work = Path(tempfile.mkdtemp(prefix="pgbridge-parallel-"))
    paths = [str(work / f"t{i}") for i in range(args.tables)]
    for path in paths:
        delta_tables.create_table(spark, path, spark.range(0).selectExpr("id", "'' AS v").schema)
        spark.range(args.rows).selectExpr("id", "'initial' AS v").write.format("delta").mode("append").save(path)
    step = max(1, args.rows // args.changes)
    version = iter(range(1, 1_000_000))

    upsert = MergePlan(condition="t.id = s.id", delete_when=None, update_when="true", update={"v": "s.v"},
                       insert_when="true", insert={"id": "s.id", "v": "s.v"}, truncate_before=None)

    def merge(session: Any, i: int) -> None:
        n = next(version)
        source = session.range(args.changes).selectExpr(f"(id * {step} + {n}) % {args.rows} AS id", f"'round {n}' AS v")
        delta_tables.merge(session, paths[i], source, upsert, Commit(f"bench-{i}", n, f'{{"table": {i}}}'))  # the job's

    siblings = [sibling_session(spark) for _ in paths]

    def sequential() -> None:
        for i in range(len(paths)):
            merge(spark, i)

    def parallel() -> None:
        with ThreadPoolExecutor(len(paths)) as pool:
            list(pool.map(lambda i: merge(siblings[i], i), range(len(paths))))

    measured: dict[str, list[tuple[float, float]]] = {"sequential": [], "parallel": []}
    for r in range(args.warmup + args.rounds):
        for name, round_ in (("sequential", sequential), ("parallel", parallel)):
            wall, cpu = timed(round_, pid)
            if r >= args.warmup:
                measured[name].append((wall, cpu))
    median = {name: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
              for name, runs in measured.items()}
    result = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "round_wall_s": {name: [round(w, 2) for w, _ in runs] for name, runs in measured.items()},
        "round_jvm_cpu_s": {name: [round(c, 2) for _, c in runs] for name, runs in measured.items()},
        "median_wall_s": {name: round(m[0], 2) for name, m in median.items()},
        "median_jvm_cpu_s": {name: round(m[1], 2) for name, m in median.items()},
        "parallel_over_sequential_wall": round(median["parallel"][0] / median["sequential"][0], 2),
    }
    spark.stop()
    write_result(result, args.output, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
