"""The SparkSession of ``python -m pgbridge_spark.mirror``, and the defaults the job sets itself.

Under ``spark-submit`` the session is the cluster's (jars from ``--packages`` or ``--jars``, Delta's
SQL extension from ``--conf``, see docs/spark.md); run with ``python -m`` the job builds a local
one with the pinned jars (``packages.session_jars``) and Delta Lake enabled.

Defaults that make a micro-batch cheap without tuning, applied unless the user set the key when
Spark started (``SparkConf``): Delta reconstructs a table's state with few tasks instead of 50,
and the driver has room for a large initial snapshot. Shuffle partitions are set per micro-batch
from its record count (``shuffle_partitions``), not left at Spark's 200.

One log line is quieted (``QUIET_LOGGERS``): Delta 4.2 logs ``ERROR DeltaParquetFileFormat: Failed
to translate filter EqualTo(__delta_internal_is_row_deleted,0)`` several times per micro-batch when
it reads a table with column mapping and deletion vectors (the job's tables have both). That filter
is Delta's own deletion-vector row filter, which has no physical column to push down to Parquet;
Delta then filters the rows itself, so nothing is wrong, but an ERROR a few times a second in a
healthy job's log hides real ones. That is the class's only ERROR line, so raising its logger to
FATAL loses nothing else.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from typing import Final

from pyspark.sql import SparkSession

from pgbridge_spark.packages import DELTA_SESSION_CONF, session_jars

DEFAULT_DRIVER_MEMORY: Final = "4g"
RECORDS_PER_SHUFFLE_PARTITION: Final = 500_000
MAX_SHUFFLE_PARTITIONS: Final = 200
# Runtime SQL settings the job applies to its session unless given when Spark started.
JOB_DEFAULTS: Final[Mapping[str, str]] = {
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.enabled": "true",
}


# Loggers whose ERROR lines are not errors (see the module docstring), raised to FATAL in the driver.
QUIET_LOGGERS: Final = ("org.apache.spark.sql.delta.DeltaParquetFileFormat",)


def build_session(master: str | None = None, app_name: str = "pgbridge-mirror", *, jars: bool = True,
                  driver_memory: str = DEFAULT_DRIVER_MEMORY) -> SparkSession:
    """A SparkSession for the job; ``master``, jars and driver memory only when not under spark-submit."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master).config("spark.driver.memory", driver_memory)
    if jars:
        builder = builder.config("spark.jars", ",".join(str(p) for p in session_jars()))
    for key, value in DELTA_SESSION_CONF.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def apply_job_defaults(spark: SparkSession) -> None:
    """``JOB_DEFAULTS`` for every key the user did not set when Spark started; ``QUIET_LOGGERS``."""
    started_with = spark.sparkContext.getConf()
    for key, value in JOB_DEFAULTS.items():
        if not started_with.contains(key):
            spark.conf.set(key, value)
    quiet_loggers(spark)


def quiet_loggers(spark: SparkSession) -> None:
    """``QUIET_LOGGERS`` at FATAL in the driver's log4j 2 (Spark's own logging)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    fatal = jvm.org.apache.logging.log4j.Level.FATAL
    for name in QUIET_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, fatal)


def shuffle_partitions(records: int, parallelism: int) -> int:
    """Shuffle partitions for a micro-batch of ``records``: the cores, more for large batches."""
    wanted = math.ceil(records / RECORDS_PER_SHUFFLE_PARTITION)
    return max(1, parallelism, min(wanted, MAX_SHUFFLE_PARTITIONS))
