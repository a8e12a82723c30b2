"""The SparkSession of ``python -m pgbridge_spark.mirror``, and the defaults the job sets itself.

Under ``spark-submit`` the session is the cluster's (jars from ``--packages`` or ``--jars``, Delta's
SQL extension from ``--conf``, see docs/spark.md); run with ``python -m`` the job builds a local
one with the pinned jars (``packages.session_jars``) and Delta Lake enabled.

Defaults that make a micro-batch cheap without tuning, applied unless the user set the key when
Spark started (``SparkConf``): Delta reconstructs a table's state with few tasks instead of 50,
the reduction to the last change per key sorts after the shuffle only, and the driver has room for
a large initial snapshot. Shuffle partitions are set per micro-batch
from its record count (``shuffle_partitions``), not left at Spark's 200.

One log line is quieted (``QUIET_LOGGERS``): Delta 4.2 logs ``ERROR DeltaParquetFileFormat: Failed
to translate filter EqualTo(__delta_internal_is_row_deleted,0)`` several times per micro-batch when
it reads a table with column mapping and deletion vectors (the job's tables have both). That filter
is Delta's own deletion-vector row filter, which has no physical column to push down to Parquet;
Delta then filters the rows itself, so nothing is wrong, but an ERROR a few times a second in a
healthy job's log hides real ones. That is the class's only ERROR line, so raising its logger to
FATAL loses nothing else.

A class archive (``--class-archive-dir``, ``class_archive_option``) for jobs started often, e.g. an
``--available-now`` run from a scheduler: each such run is a new JVM that loads and verifies Spark's
classes again, seconds of a small batch's run. The first run writes a class-data-sharing archive
of what it loaded when it exits (``-XX:ArchiveClassesAtExit``, Java 13+); later runs map it
(``-XX:SharedArchiveFile``). The archive is a cache, never state: its name carries what it was made
from (pyspark, the Java), a JVM that cannot use it says so in one warning line and runs without
it, and a deleted one is written again. Its option joins the driver's own (``--driver-java-options``,
``java_options``) in ``spark.driver.extraJavaOptions``, the one key Spark reads them from.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from pyspark.sql import SparkSession

from pgbridge_spark.packages import ARTIFACTS, DELTA_SESSION_CONF, ICEBERG_ARTIFACTS, session_jars

log = logging.getLogger("pgbridge_spark.session")

DEFAULT_DRIVER_MEMORY: Final = "4g"
RECORDS_PER_SHUFFLE_PARTITION: Final = 500_000
MAX_SHUFFLE_PARTITIONS: Final = 200
# Runtime SQL settings the job applies to its session unless given when Spark started.
JOB_DEFAULTS: Final[Mapping[str, str]] = {
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.enabled": "true",
    # No partial "first row per key" before the shuffle (Spark's WindowGroupLimit): it sorts each
    # Kafka partition's records whole in one task, and a large first snapshot (10M rows in two
    # partitions: 5M a task) ran out of execution memory growing that sort's pointer array. After
    # the shuffle, the per-key sort runs on partitions sized to the batch (``shuffle_partitions``).
    "spark.sql.optimizer.windowGroupLimitThreshold": "-1",
}


# Loggers whose ERROR lines are not errors (see the module docstring), raised to FATAL in the driver.
QUIET_LOGGERS: Final = ("org.apache.spark.sql.delta.DeltaParquetFileFormat",)
# The driver's JVM options for a class archive (``class_archive_option``).
MAP_ARCHIVE: Final = "-XX:SharedArchiveFile="
WRITE_ARCHIVE_AT_EXIT: Final = "-XX:ArchiveClassesAtExit="


def pyspark_home() -> Path:
    """pyspark's own Spark distribution (``bin/``, ``jars/``): what ``python -m`` runs Spark from."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def class_archive_path(directory: Path) -> Path:
    """The archive in ``directory`` for this pyspark and this Java: a new one after either changes."""
    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=str(Path(java_home) / "bin")) if java_home else shutil.which("java")
    made_from = [pyspark.__version__, str(pyspark_home())]
    if java is not None:
        real = Path(java).resolve()
        made_from += [str(real), str(real.stat().st_mtime_ns)]
    digest = hashlib.sha256("\n".join(made_from).encode()).hexdigest()[:16]
    return directory / f"pgbridge-spark-{digest}.jsa"


def class_path_folders(environ: Mapping[str, str]) -> list[Path]:
    """Folders Spark's launcher puts on the driver's class path (its configuration folders)."""
    conf = environ.get("SPARK_CONF_DIR") or str(pyspark_home() / "conf")
    return [Path(p) for p in (conf, environ.get("HADOOP_CONF_DIR"), environ.get("YARN_CONF_DIR")) if p]


def class_archive_option(archive: Path, class_path_folders: Iterable[Path]) -> str | None:
    """The driver's JVM option for ``archive``: map it when it is there, else write it at exit;
    ``None`` when it is missing and a folder with files is on the class path, where the JVM refuses
    to write one ("Cannot have non-empty directory in paths") and would not start."""
    if archive.is_file() and archive.stat().st_size > 0:
        return f"{MAP_ARCHIVE}{archive}"
    if any(folder.is_dir() and any(folder.iterdir()) for folder in class_path_folders):
        return None
    return f"{WRITE_ARCHIVE_AT_EXIT}{archive}"


def build_session(master: str | None = None, app_name: str = "pgbridge-mirror", *, jars: bool = True,
                  driver_memory: str = DEFAULT_DRIVER_MEMORY, class_archive_dir: str | None = None,
                  driver_java_options: str | None = None, table_format: str = "delta") -> SparkSession:
    """A SparkSession for the job; ``master``, jars, driver memory, the driver's JVM options and the
    class archive only when not under spark-submit (which starts the driver's JVM itself). Iceberg's
    runtime jar joins the others for ``table_format="iceberg"`` only (Delta stays: the consistent
    job's control table)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master).config("spark.driver.memory", driver_memory)
        archive = _class_archive(Path(class_archive_dir).expanduser().resolve()) if class_archive_dir else None
        options = java_options(driver_java_options, archive)
        if options is not None:
            builder = builder.config("spark.driver.extraJavaOptions", options)
    if jars:
        artifacts = ARTIFACTS + (ICEBERG_ARTIFACTS if table_format == "iceberg" else ())
        builder = builder.config("spark.jars", ",".join(str(p) for p in session_jars(artifacts)))
    for key, value in DELTA_SESSION_CONF.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def java_options(chosen: str | None, class_archive: str | None) -> str | None:
    """The driver's ``spark.driver.extraJavaOptions``: ``--driver-java-options`` and the class
    archive's option together (Spark takes one string for the key); ``None`` when neither is given,
    so a value from ``spark-defaults.conf`` stays."""
    options = " ".join(part for part in ((chosen or "").strip(), class_archive or "") if part)
    return options or None


def _class_archive(directory: Path) -> str | None:
    """The class archive's JVM option for ``directory`` (logged), ``None`` when one cannot be written."""
    directory.mkdir(parents=True, exist_ok=True)
    archive = class_archive_path(directory)
    option = class_archive_option(archive, class_path_folders(os.environ))
    if option is None:
        log.warning("class archive %s not written: a configuration folder with files is on the driver's class "
                    "path (SPARK_CONF_DIR, HADOOP_CONF_DIR or YARN_CONF_DIR), which Java's class-data sharing "
                    "refuses", archive)
        return None
    log.info("class archive %s: %s", archive, "mapped" if option.startswith(MAP_ARCHIVE) else
             "written when this run ends")
    return option


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


def table_workers(requested: int | None, tables: int) -> int:
    """How many tables of a micro-batch commit at once: ``requested`` (``--parallel-tables``) or
    the driver's CPUs, never more than there are tables. Most of a small ``MERGE`` is the driver
    planning and committing it, one thread per table: tables at once keep the driver's cores busy."""
    wanted = requested if requested is not None else (os.cpu_count() or 1)
    return max(1, min(wanted, tables))


def sibling_session(spark: SparkSession) -> SparkSession:
    """A session sharing ``spark``'s SparkContext and cached data, with a copy of its SQL settings
    (those set at runtime too: the batch's shuffle partitions, ``JOB_DEFAULTS``) and settings of its
    own from then on: the commit options of one table (``delta_tables.commit_options``) are
    session settings, so tables committing at once need a session each."""
    sibling = spark.newSession()
    for key, value in spark.conf.getAll.items():
        if spark.conf.isModifiable(key):
            sibling.conf.set(key, value)
    return sibling
