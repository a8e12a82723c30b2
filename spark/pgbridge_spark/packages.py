"""The one Spark this package runs on, and the jars it needs beyond pyspark's own.

Spark's connectors and Delta Lake must match the Spark they run in, and not every combination is
published: delta-spark 4.2.0 is built for Spark 4.1, and spark-sql-kafka-0-10, its token provider
and spark-avro 4.1.1 are all on Maven Central (spark-sql-kafka-0-10 at 4.1.3, below). So pyproject pins ``pyspark==4.1.1`` and
``delta-spark==4.2.0``, ``jvm/spark/pom.xml`` lists the same jars for the tests, and ``ARTIFACTS``
below names them for a user who installed the wheel (``jvm/`` is not in it).

``session_jars`` finds each jar, in order: a directory named by ``PGBRIDGE_SPARK_JARS`` (what
``python jvm/fetch.py spark`` prints), the local Maven repository (``~/.m2/repository``), Spark's
Ivy cache; then asks Maven for the missing ones (``mvn dependency:get``, one artifact each, no
transitive resolution: pyspark's ``jars/`` already holds everything else these need); then lets
Spark's own Ivy resolve the coordinates (``spark.jars.packages``) in a child process so that its
output never reaches the user. A jar still missing is one ``MissingJars`` line naming the
coordinates and the fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SPARK_VERSION: Final = "4.1.1"
# spark-sql-kafka-0-10 4.1.1 fails a query that restarts on a micro-batch the checkpoint had not
# committed (NullPointerException in KafkaMicroBatchStream.metrics, SPARK-55271 / SPARK-57438):
# exactly the restart after a crash. 4.1.3 has the fix; its token provider and spark-avro 4.1.3 are
# not on Maven Central as this machine reaches it, and 4.1.1's serve (same minor release).
KAFKA_SOURCE_VERSION: Final = "4.1.3"
DELTA_VERSION: Final = "4.2.0"
ICEBERG_VERSION: Final = "1.11.0"
SCALA_VERSION: Final = "2.13"
JARS_ENV: Final = "PGBRIDGE_SPARK_JARS"
MAVEN_TIMEOUT_S: Final = 600.0


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"

    @property
    def jar(self) -> str:
        return f"{self.name}-{self.version}.jar"

    def in_maven(self, repository: Path) -> Path:
        return repository.joinpath(*self.group.split("."), self.name, self.version, self.jar)

    def in_ivy(self, ivy: Path) -> Path:
        """Where Spark's ``spark.jars.packages`` leaves the jar (``{ivy}/jars/{group}_{name}-{version}.jar``)."""
        return ivy / "jars" / f"{self.group}_{self.jar}"


ARTIFACTS: Final = (
    Artifact("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_VERSION}", KAFKA_SOURCE_VERSION),
    Artifact("org.apache.spark", f"spark-token-provider-kafka-0-10_{SCALA_VERSION}", SPARK_VERSION),
    Artifact("org.apache.spark", f"spark-avro_{SCALA_VERSION}", SPARK_VERSION),
    # the versions spark-sql-kafka-0-10 4.1.3 declares
    Artifact("org.apache.kafka", "kafka-clients", "3.9.1"),
    Artifact("org.apache.commons", "commons-pool2", "2.12.1"),
    Artifact("io.delta", f"delta-spark_{SCALA_VERSION}", DELTA_VERSION),
    Artifact("io.delta", "delta-storage", DELTA_VERSION),
)

# Apache Iceberg's Spark runtime (one shaded jar), only in sessions of ``--table-format iceberg``
ICEBERG_ARTIFACTS: Final = (
    Artifact("org.apache.iceberg", f"iceberg-spark-runtime-4.1_{SCALA_VERSION}", ICEBERG_VERSION),
)

# What Ivy would pull in transitively that pyspark's jars/ already has (or Delta does not need to
# read and write tables: its kernel and Unity Catalog client): left out so that the class path
# never holds two versions of one library.
IVY_EXCLUDES: Final = (
    "org.scala-lang:scala-library", "org.scala-lang.modules:scala-parallel-collections_2.13",
    "io.delta:delta-kernel-api", "io.delta:delta-kernel-defaults", "io.delta:delta-kernel-unitycatalog",
    "io.unitycatalog:unitycatalog-client", "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.hadoop:hadoop-client-api", "org.slf4j:slf4j-api", "com.github.luben:zstd-jni",
    "at.yawk.lz4:lz4-java", "org.lz4:lz4-java", "org.xerial.snappy:snappy-java",
    "org.apache.spark:spark-tags_2.13", "com.google.code.findbugs:jsr305", "org.tukaani:xz",
    "org.apache.logging.log4j:log4j-slf4j2-impl", "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
)

# Delta Lake in a session: its SQL extension and catalog (static: set before the session starts).
DELTA_SESSION_CONF: Final[Mapping[str, str]] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


class MissingJars(RuntimeError):
    """A pinned jar could be found nowhere and neither Maven nor Spark's Ivy could fetch it."""


def coordinates(artifacts: Iterable[Artifact] = ARTIFACTS) -> str:
    """``spark.jars.packages`` / ``--packages`` value."""
    return ",".join(a.coordinates for a in artifacts)


def maven_repository() -> Path:
    return Path(os.environ.get("MAVEN_REPOSITORY") or Path.home() / ".m2" / "repository")


def ivy_home() -> Path:
    return Path.home() / ".ivy2.5.2"


def find_local(artifacts: Sequence[Artifact], directories: Sequence[Path], maven: Path,
               ivy: Path) -> dict[Artifact, Path]:
    """The artifacts whose jar is on this machine, and where (the first place wins)."""
    found: dict[Artifact, Path] = {}
    for artifact in artifacts:
        candidates = [c for d in directories for c in (d / artifact.jar, d / f"{artifact.group}_{artifact.jar}")]
        candidates += [artifact.in_maven(maven), artifact.in_ivy(ivy)]
        hit = next((c for c in candidates if c.is_file()), None)
        if hit is not None:
            found[artifact] = hit
    return found


def missing_message(missing: Sequence[Artifact], why: str) -> str:
    names = ", ".join(a.coordinates for a in missing)
    gets = "; ".join(f"mvn dependency:get -Dartifact={a.coordinates} -Dtransitive=false" for a in missing)
    return (f"cannot get the Spark jars {names} ({why}): fetch them with `{gets}` (or point {JARS_ENV} at a "
            "directory holding them, or pass them to spark-submit with --jars)")


def _maven_get(mvn: str, artifact: Artifact) -> bool:
    cmd = [mvn, "-q", "-B", "dependency:get", f"-Dartifact={artifact.coordinates}", "-Dtransitive=false"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _ivy_resolve(artifacts: Sequence[Artifact]) -> bool:
    """Let Spark's Ivy fetch ``artifacts`` into its cache in a child JVM whose output is dropped."""
    script = ("import sys\nfrom pyspark.sql import SparkSession\n"
              "s = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')"
              ".config('spark.jars.packages', sys.argv[1]).config('spark.jars.excludes', sys.argv[2])"
              ".getOrCreate())\ns.stop()\n")
    try:
        done = subprocess.run([sys.executable, "-c", script, coordinates(artifacts), ",".join(IVY_EXCLUDES)],
                              capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def session_jars(artifacts: Sequence[Artifact] = ARTIFACTS) -> list[Path]:
    """Local paths of every jar in ``artifacts`` (``spark.jars``), fetching what is missing."""
    directories = [Path(d) for d in os.environ.get(JARS_ENV, "").split(os.pathsep) if d]
    maven, ivy = maven_repository(), ivy_home()
    found = find_local(artifacts, directories, maven, ivy)
    missing = [a for a in artifacts if a not in found]
    if missing and (mvn := shutil.which("mvn")) is not None:
        for artifact in missing:
            _maven_get(mvn, artifact)
        found.update(find_local(missing, [], maven, ivy))
        missing = [a for a in artifacts if a not in found]
    if missing:
        _ivy_resolve(missing)
        found.update(find_local(missing, [], maven, ivy))
        missing = [a for a in artifacts if a not in found]
    if missing:
        raise MissingJars(missing_message(missing, "not on this machine, and neither Maven nor Spark's Ivy "
                                                   "could fetch them"))
    return [found[a] for a in artifacts]
