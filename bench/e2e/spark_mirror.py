"""The Spark half of the end-to-end bench: the Delta mirror job applying what pgbridge just wrote.

``bench/run.py --spark``: after each workload's pgbridge pass its table topic holds every change of
the workload, written by the bridge itself (records, schemas in ``{prefix}._schemas``, partitions
as configured). The mirror job (``pgbridge_spark.mirror``, mirror mode, the session ``python -m
pgbridge_spark.mirror`` builds: local[2], nothing tuned) then applies the whole topic into a fresh
Delta table with ``--available-now``, in this process; its rate (changes applied / wall time from
the query's start to its end) is reported beside the bridge's own rate on the same machine, in the
same run. Every change must be applied (the micro-batches' ``applied_count`` adds up to the
workload's rows), or the pass fails.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class MirrorRun:
    changes: int
    seconds: float
    micro_batches: int

    @property
    def rows_per_s(self) -> float:
        return self.changes / self.seconds


def run_available_now(spark: Any, config: Any) -> tuple[float, list[int]]:
    """Run the mirror job of ``config`` once with ``--available-now``: (wall seconds from the
    query's start to its end, each micro-batch's ``applied_count``); a failed query raises."""
    from pgbridge_spark.mirror import MirrorJob

    applied: list[int] = []
    started = time.monotonic()
    query = MirrorJob(spark, config, on_batch=lambda _batch, result: applied.append(result.applied_count)).start(
        available_now=True)
    query.awaitTermination()
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"the mirror job failed: {query.exception()}")
    return seconds, applied


class SparkMirror:
    """One SparkSession for the whole bench run (started on first use; ``close()`` stops it)."""

    def __init__(self) -> None:
        self._spark: Any = None
        self._work = Path(tempfile.mkdtemp(prefix="pgbridge-bench-spark-"))

    def _session(self) -> Any:
        if self._spark is None:
            sys.path[:0] = [str(ROOT), str(ROOT / "spark")]
            from jvm.fetch import fetch

            from pgbridge_spark.session import build_session

            os.environ.setdefault("PGBRIDGE_SPARK_JARS", str(fetch("spark")))
            self._spark = build_session("local[2]", app_name="pgbridge-bench-mirror")
            self._spark.sparkContext.setLogLevel("ERROR")
        return self._spark

    def apply(self, bootstrap: str, prefix: str, table: str, changes: int) -> MirrorRun:
        """Mirror topic ``{prefix}.public.{table}`` into a fresh Delta table; every change must apply."""
        from pgbridge_spark.config import MirrorConfig

        spark = self._session()
        out = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=self._work))
        config = MirrorConfig(bootstrap_servers=bootstrap, prefix=prefix, output=str(out / "mirror"),
                              checkpoint=str(out / "checkpoint"), tables=(f"public.{table}",))
        try:
            seconds, applied = run_available_now(spark, config)
            if sum(applied) != changes:
                raise RuntimeError(f"the mirror job applied {sum(applied):,} of {changes:,} changes")
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return MirrorRun(changes, seconds, len(applied))

    def close(self) -> None:
        if self._spark is not None:
            self._spark.stop()
        shutil.rmtree(self._work, ignore_errors=True)
