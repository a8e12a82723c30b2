"""A real Spark standalone cluster for the tests: a master and two workers started from pyspark's
own distribution (``bin/spark-class``), each its own JVM on loopback ports.

A job submitted to it (``spark-submit --master spark://...``, ``submit_command``) runs its driver
in the submitting process's JVM and its tasks in one executor JVM per worker, each in the worker's
own work directory: a job that kept state on the driver's disk, or read a file only the driver
has, fails here as it would on a cluster of machines. Small on purpose (one core and 1 GiB per
worker, 512 MiB executors, small daemons) so it fits a shared 2-core machine beside Postgres,
Kafka and HDFS.

Ready means the master's status page (``/json``) lists both workers ALIVE. ``close()`` kills the
workers (and their executors, in the workers' sessions) and then the master.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pgbridge.embedded._process import wait_for
from pgbridge_spark.session import pyspark_home
from tests.support.daemons import DaemonGroup
from tests.support.ports import free_port

HOST: Final = "127.0.0.1"
WORKERS: Final = 2
WORKER_CORES: Final = 1
WORKER_MEMORY: Final = "1g"
EXECUTOR_MEMORY: Final = "512m"
START_TIMEOUT_S: Final = 120.0
# The Spark JVMs of the cluster tests (this cluster's daemons, drivers and executors): the serial GC
# and the C1 compiler only. They live for seconds to minutes on small data, so C2's compiling and
# G1's threads are CPU that never pays back, and the suite is CPU-bound on two cores. (The shared
# local session of tests/spark/conftest.py lives a worker's whole run, where C2 pays:
# SESSION_JVM_OPTIONS there.) Measured alone on this machine, busy CPU
# seconds of the whole machine and wall time: one cluster kill test (hdfs) 275 -> 135 CPU-s,
# 153 -> 93 s; test_changelog 95 -> 77 CPU-s, 55 -> 55 s; test_mirror_end_to_end with
# test_consistent_mirror 292 -> 252 CPU-s, 172 -> 184 s. Tests only: the job's own defaults are
# untouched (its users' drivers run long or on big batches, where C2 pays).
JVM_OPTIONS: Final = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
_LOG4J2: Final = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.deploy.name = org.apache.spark.deploy
logger.deploy.level = info
"""


def spark_home() -> Path:
    """pyspark's own distribution: ``bin/``, ``jars/`` (what the cluster and spark-submit run)."""
    return pyspark_home()


class SparkCluster:
    """A master and ``WORKERS`` workers; ``master_url`` is ``spark://127.0.0.1:PORT``."""

    def __init__(self) -> None:
        self.group = DaemonGroup("pgbridge-spark-")
        self.master_port, self.master_ui_port = free_port(), free_port()
        self.conf_dir = self.group.workdir / "conf"
        self.conf_dir.mkdir()
        (self.conf_dir / "log4j2.properties").write_text(_LOG4J2)

    def __repr__(self) -> str:
        return f"<SparkCluster {self.master_url}>"

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    def env(self) -> dict[str, str]:
        """The environment of the daemons and of ``spark-submit``: pyspark's distribution, loopback
        only, this cluster's configuration folder, and the Python that has pgbridge_spark."""
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("SPARK_", "PYSPARK_", "HADOOP_"))}
        env.update({"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST, "SPARK_LOCAL_HOSTNAME": HOST,
                    "SPARK_CONF_DIR": str(self.conf_dir), "SPARK_DAEMON_MEMORY": "256m",
                    "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS,
                    "SPARK_LOG_DIR": str(self.group.workdir / "logs"),
                    "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
        return env

    def _daemon(self, main_class: str, *args: str) -> list[str]:
        return [str(spark_home() / "bin" / "spark-class"), main_class, *args]

    def start(self) -> SparkCluster:
        with self.group.starting("the Spark cluster"):
            self.group.start("master", self._daemon(
                "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(self.master_port),
                "--webui-port", str(self.master_ui_port)), env=self.env())
            for number in range(1, WORKERS + 1):
                work_dir = self.group.workdir / f"worker-{number}" / "work"
                self.group.start(f"worker-{number}", self._daemon(
                    "org.apache.spark.deploy.worker.Worker", "--host", HOST, "--port", str(free_port()),
                    "--webui-port", str(free_port()), "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
                    "--work-dir", str(work_dir), self.master_url), env=self.env())
            wait_for(self._ready, timeout=START_TIMEOUT_S, interval=0.25,
                     what=f"the Spark master {self.master_url} to see {WORKERS} workers alive")
        return self

    def status(self) -> dict[str, Any]:
        """The master's status (``/json``): workers, running and completed applications."""
        with urllib.request.urlopen(f"http://{HOST}:{self.master_ui_port}/json/", timeout=5) as response:
            status: dict[str, Any] = json.load(response)
        return status

    def _ready(self) -> bool:
        self.group.check_alive()
        try:
            workers: list[dict[str, Any]] = self.status().get("workers", [])
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return sum(1 for worker in workers if worker.get("state") == "ALIVE") >= WORKERS

    def submit_command(self, app: str | Path, args: Sequence[str] = (), *,
                       conf: Mapping[str, str] | None = None, jars: Sequence[Path] = ()) -> list[str]:
        """``spark-submit --master <this cluster> ... app args``: what a user runs against a cluster,
        with executors this size and ``jars`` shipped to them."""
        settings = {"spark.executor.memory": EXECUTOR_MEMORY, "spark.executor.cores": str(WORKER_CORES),
                    "spark.driver.memory": "1g", "spark.ui.enabled": "false",
                    # tasks start once every executor is in, so both workers take part
                    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                    "spark.pyspark.python": sys.executable,
                    "spark.driver.extraJavaOptions": JVM_OPTIONS, "spark.executor.extraJavaOptions": JVM_OPTIONS,
                    **(conf or {})}
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url]
        if jars:
            command += ["--jars", ",".join(str(jar) for jar in jars)]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, str(app), *args]

    def executor_workers(self, app_id: str) -> set[str]:
        """The workers (``worker-1``, ...) that ran an executor of the application ``app_id``."""
        return {path.parts[-3] for path in self.group.workdir.glob(f"worker-*/work/{app_id}")}

    def executor_logs(self, lines: int = 30) -> str:
        """The tail of every executor's stderr (in the workers' work directories)."""
        tails = []
        for stderr in sorted(self.group.workdir.glob("worker-*/work/*/*/stderr")):
            text = stderr.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {stderr.relative_to(self.group.workdir)}\n" + "\n".join(text))
        return "\n".join(tails)

    def logs(self) -> str:
        return self.group.logs() + "\n" + self.executor_logs()

    def close(self) -> None:
        self.group.close()


def start_spark_cluster() -> SparkCluster:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("the Spark cluster needs Java 17: install a JDK (Debian: openjdk-17-jdk-headless)")
    return SparkCluster().start()
