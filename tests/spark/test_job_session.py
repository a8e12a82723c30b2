"""What the job does to its Spark session besides the SQL settings: Delta's harmless ERROR line.

Delta 4.2 logs ``ERROR DeltaParquetFileFormat: Failed to translate filter`` each time a table with
column mapping and deletion vectors (every table the job writes) is read with a deleted row in
it. ``session.apply_job_defaults`` (the mirror job, the migration tool) and the reading tool quiet
that logger: here its level flips in a running session, and ``python -m pgbridge_spark.reading``
run as a user runs it prints such a table without the line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from pgbridge_spark import delta_tables
from pgbridge_spark.session import QUIET_LOGGERS, apply_job_defaults
from tests.support.distribution import REPO_ROOT

pytestmark = [pytest.mark.spark]

NOISE = "Failed to translate filter"


def _table_with_a_deleted_row(spark: Any, path: str) -> None:
    """A table as the job creates it (column mapping, deletion vectors), one row deleted."""
    delta_tables.create_table(spark, path, StructType([StructField("id", LongType()), StructField("v", IntegerType())]))
    spark.range(0, 12).selectExpr("id", "cast(id * 10 as int) v").write.format("delta").mode("append").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 5")


def test_the_job_defaults_raise_deltas_noisy_logger_above_error(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    for name in QUIET_LOGGERS:  # as a session starts (another test may have quieted it already)
        log4j.core.config.Configurator.setLevel(name, log4j.Level.ERROR)
    assert all(log4j.LogManager.getLogger(name).isErrorEnabled() for name in QUIET_LOGGERS)
    apply_job_defaults(spark)
    assert not any(log4j.LogManager.getLogger(name).isErrorEnabled() for name in QUIET_LOGGERS)
    assert all(log4j.LogManager.getLogger(name).isFatalEnabled() for name in QUIET_LOGGERS)


def test_the_reading_tool_prints_a_table_with_deleted_rows_without_an_error_line(spark: Any, tmp_path: Path) -> None:
    # given
    output = tmp_path / "mirror"
    _table_with_a_deleted_row(spark, str(output / "public.t"))
    # when: as docs/spark.md says
    done = subprocess.run([sys.executable, "-m", "pgbridge_spark.reading", str(output), "public.t"],
                          cwd=REPO_ROOT / "spark", capture_output=True, text=True, timeout=300, check=False)
    # then
    assert done.returncode == 0, done.stderr[-4000:]
    shown = [line for line in done.stdout.splitlines() if line.startswith("|") and "id" not in line]
    assert sorted(int(line.split("|")[1]) for line in shown) == [i for i in range(12) if i != 5], done.stdout
    assert NOISE not in done.stderr, done.stderr[-4000:]


def test_a_class_archive_is_written_by_the_first_run_and_mapped_by_the_next(tmp_path: Path) -> None:
    # given: runs as python -m starts them (build_session), with --class-archive-dir's folder and
    # --driver-java-options of their own
    archives = tmp_path / "archives"
    script = ("import sys; from pgbridge_spark.session import build_session; "
              "s = build_session('local[1]', jars=False, class_archive_dir=sys.argv[1], "
              "driver_java_options='-XX:TieredStopAtLevel=1 -Dpgbridge.probe=chosen'); "
              "print('JVM', *s.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()"
              ".getInputArguments()); assert s.range(10).count() == 10; s.stop()")

    def run() -> str:
        done = subprocess.run([sys.executable, "-c", script, str(archives)], cwd=REPO_ROOT / "spark",
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
        return done.stdout + done.stderr
    # when: the first run ends
    first = run()
    # then: it wrote the archive as it exited
    written = list(archives.glob("*.jsa"))
    assert "-XX:ArchiveClassesAtExit=" in first and len(written) == 1 and written[0].stat().st_size > 0, first[-3000:]
    # and: the driver's own options reached its JVM beside the archive's
    assert "-XX:TieredStopAtLevel=1 -Dpgbridge.probe=chosen -XX:ArchiveClassesAtExit=" in first, first[-3000:]
    # when: the next run starts
    second = run()
    # then: its JVM mapped that archive (a JVM that cannot use one warns "Unable to use shared archive")
    assert f"-XX:SharedArchiveFile={written[0]}" in second and "-Dpgbridge.probe=chosen" in second, second[-3000:]
    assert "Unable to use shared archive" not in second and "[warning][cds" not in second, second[-3000:]
