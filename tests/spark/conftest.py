"""Spark fixtures: one local[2] SparkSession for the whole test session, and the ``spark`` marker.

Spark tests are few and focused (2 shared cores): each end-to-end test runs the real chain —
Postgres → ``python -m pgbridge run`` → broker → mirror job → Delta Lake — on Postgres 18 only; the
bridge's behaviour on 15 is covered by tests/integration.

The session has Spark's own Kafka source (spark-sql-kafka-0-10), spark-avro and Delta Lake on its class path:
``jvm/fetch.py spark`` fetches their jars with Maven once (``jvm/spark/pom.xml``), so the jobs
under test read with ``format("kafka")`` and decode with ``from_avro`` as they do in production.

The cluster tests (``cluster`` marker) also get a Spark standalone cluster (a master and two workers,
executors in their own JVMs: ``tests/support/spark_cluster.py``) and an HDFS (a NameNode and a
DataNode: ``tests/support/hdfs.py``) and an S3 (moto's server, reached through s3a:
``tests/support/s3.py``), each started once per session, only when such a test runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Final

import pytest
from jvm.fetch import fetch

from tests.support.hdfs import Hdfs, start_hdfs
from tests.support.s3 import S3Server, start_s3
from tests.support.spark_cluster import SparkCluster, start_spark_cluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: runs a Spark job on local[2] (needs Java 17 and pgbridge[spark])")
    config.addinivalue_line("markers", "cluster: runs Spark jobs on a standalone cluster writing to HDFS")


# The shared local session's JVM: the serial GC (fewer threads) with both JIT compilers. Unlike the
# cluster's JVMs (spark_cluster.JVM_OPTIONS: C1 only), it lives as long as a worker's whole run and
# plans and runs the same Delta and Kafka code for every test, so C2's compiling pays back: four
# Spark modules in one session (schema changes, changelog, consistent, rename), alone on this
# machine, took 149-159 s and 215-232 busy CPU seconds, against 197-209 s and 263-283 with C1 only.
SESSION_JVM_OPTIONS: Final = "-XX:+UseSerialGC"


def spark_jars() -> str:
    """``spark.jars``: the spark-sql-kafka and spark-avro jars (and what they need beyond pyspark's)."""
    return ",".join(str(jar) for jar in sorted(fetch("spark").glob("*.jar")))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must import pgbridge_spark
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("pgbridge-tests")
               # s3a: the cluster tests read back what the job wrote to S3
               .config("spark.jars", ",".join([spark_jars(), *map(str, sorted(fetch("s3a").glob("*.jar")))]))
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
               .config("spark.driver.memory", "1g")
               .config("spark.driver.extraJavaOptions", SESSION_JVM_OPTIONS)
               .config("spark.sql.streaming.minBatchesToRetain", "5")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[SparkCluster]:
    """A Spark standalone master and two workers shared by the session (jobs go through
    ``spark_cluster.submit_command``)."""
    cluster = start_spark_cluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def hdfs() -> Iterator[Hdfs]:
    """A NameNode and a DataNode shared by the session; tests write under paths of their own."""
    started = start_hdfs()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """moto's S3 server shared by the session; tests use buckets of their own."""
    started = start_s3()
    try:
        yield started
    finally:
        started.close()
