"""Debezium's PostgreSQL connector in a Kafka Connect standalone worker, from Maven Central.

``jvm/debezium/pom.xml`` names Debezium 3.6.3's PostgreSQL connector and Apache Kafka Connect 4.3.1
(runtime, JSON converter; Jetty 12 for its REST server comes with it); ``jvm/fetch.py`` has Maven
copy them and their dependencies into the local cache once. Java 17 is the system's.

The worker runs ``org.apache.kafka.connect.cli.ConnectStandalone`` with the JSON converter and
schemas disabled. ``ConnectWorker`` only writes the properties files and runs the JVM: the caller
chooses the connector's properties (the benchmark tunes throughput, the differential test chooses
the representation) and waits for the slot to be active. Shared by ``bench/debezium/connect.py``
and ``tests/integration/test_debezium_differential.py``.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from jvm.fetch import fetch

from pgbridge.embedded.ports import free_port

CONNECTOR_CLASS: Final = "io.debezium.connector.postgresql.PostgresConnector"

LOG4J2: Final = """\
status = warn
appender.file.type = Console
appender.file.name = OUT
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
"""


def ensure_jars() -> Path:
    """The class path directory: Debezium and Kafka Connect, fetched once into the JVM cache."""
    return fetch("debezium")


def connection_properties(dsn: str) -> dict[str, str]:
    """The connector's ``database.*`` properties for a libpq DSN (password-less test clusters)."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(dsn)
    return {
        "database.hostname": str(info.get("host", "127.0.0.1")),
        "database.port": str(info.get("port", "5432")),
        "database.user": str(info.get("user", "postgres")),
        "database.password": str(info.get("password", "")),
        "database.dbname": str(info.get("dbname", "postgres")),
    }


def worker_properties(bootstrap: str, work: Path) -> dict[str, str]:
    """A standalone worker: JSON converter without schemas, offsets in ``work``, a free REST port."""
    return {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": str(work / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "listeners": f"http://127.0.0.1:{free_port()}",
        "plugin.discovery": "only_scan",
    }


def properties_text(properties: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in properties.items())


class ConnectWorker:
    """One ``ConnectStandalone`` JVM running one connector; its output goes to ``work/connect.log``."""

    def __init__(self, work: Path, worker: Mapping[str, str], connector: Mapping[str, str]) -> None:
        self.work = work
        self.worker = dict(worker)
        self.connector = dict(connector)
        self.log_path = work / "connect.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        libs = ensure_jars()
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "worker.properties").write_text(properties_text(self.worker))
        (self.work / "connector.properties").write_text(properties_text(self.connector))
        (self.work / "log4j2.properties").write_text(LOG4J2)
        command = ["java", f"-Dlog4j2.configurationFile={self.work / 'log4j2.properties'}",
                   "-cp", f"{libs}/*", "org.apache.kafka.connect.cli.ConnectStandalone",
                   str(self.work / "worker.properties"), str(self.work / "connector.properties")]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.work)
        return self.process

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (Connect flushes and commits offsets), SIGKILL if it does not exit in time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def __enter__(self) -> ConnectWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
