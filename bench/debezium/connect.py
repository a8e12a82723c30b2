"""Debezium's PostgreSQL connector in a Kafka Connect standalone worker, from Maven Central.

``jvm/debezium/pom.xml`` names Debezium 3.6.3's PostgreSQL connector and Apache Kafka Connect 4.3.1
(runtime, JSON converter; Jetty 12 for its REST server comes with it); ``jvm/fetch.py`` has Maven
copy them and their dependencies into the local cache once. Java 17 is the system's.

The worker runs ``org.apache.kafka.connect.cli.ConnectStandalone`` with the JSON converter and
schemas disabled (cheaper than Avro, as in the issue's reference run). ``tuned`` sets the producer
and Debezium's queue the way the issue's reference figures were taken; ``tuned=False`` keeps
Connect's defaults. The slot and the publication are created by the harness beforehand, so the
connector is streaming as soon as its slot is active.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from e2e.systems import wait_slot_active

from pgbridge.embedded.ports import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: jvm/
from jvm.fetch import fetch

TUNED_WORKER = {
    "producer.linger.ms": "10",
    "producer.batch.size": "524288",
    "producer.buffer.memory": "134217728",
    "producer.max.request.size": "10485760",
}
TUNED_CONNECTOR = {
    "max.batch.size": "10240",
    "max.queue.size": "40960",
    "poll.interval.ms": "50",
}

LOG4J2 = """\
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


def ensure_jars(cache_dir: Path) -> Path:
    """The class path directory: Debezium and Kafka Connect from Maven (``jvm/debezium/pom.xml``),
    fetched once into the JVM cache (``cache_dir`` is kept for callers; the jars live there)."""
    del cache_dir
    return fetch("debezium")


class Debezium:
    key = "debezium"
    label = "Debezium 3.6.3 (Connect standalone, JSON)"

    def __init__(self, cache_dir: Path, *, tuned: bool = True) -> None:
        self.cache_dir = cache_dir
        self.tuned = tuned
        self.process: subprocess.Popen[bytes] | None = None
        self.libs: Path | None = None
        self.log_path = Path()
        if not tuned:
            self.label += ", default producer"

    def prepare(self) -> None:
        self.libs = ensure_jars(self.cache_dir)

    def topic(self, prefix: str, table: str) -> str:
        return f"{prefix}.public.{table}"

    def start(self, dsn: str, bootstrap: str, *, prefix: str, slot: str, publication: str, table: str,
              log_dir: Path) -> None:
        from psycopg.conninfo import conninfo_to_dict

        if self.libs is None:
            self.prepare()
        assert self.libs is not None
        info = conninfo_to_dict(dsn)
        work = log_dir / prefix
        work.mkdir(parents=True, exist_ok=True)
        worker = {
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
        if self.tuned:
            worker.update(TUNED_WORKER)
        connector = {
            "name": prefix,
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "tasks.max": "1",
            "database.hostname": str(info.get("host", "127.0.0.1")),
            "database.port": str(info.get("port", "5432")),
            "database.user": str(info.get("user", "postgres")),
            "database.password": "",
            "database.dbname": str(info.get("dbname", "postgres")),
            "topic.prefix": prefix,
            "plugin.name": "pgoutput",
            "slot.name": slot,
            "publication.name": publication,
            "publication.autocreate.mode": "disabled",
            "table.include.list": f"public.{table}",
            "snapshot.mode": "no_data",
            "topic.creation.default.replication.factor": "1",
            "topic.creation.default.partitions": "1",
        }
        if self.tuned:
            connector.update(TUNED_CONNECTOR)
        (work / "worker.properties").write_text("".join(f"{k}={v}\n" for k, v in worker.items()))
        (work / "connector.properties").write_text("".join(f"{k}={v}\n" for k, v in connector.items()))
        (work / "log4j2.properties").write_text(LOG4J2)
        command = ["java", f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}",
                   "-cp", f"{self.libs}/*", "org.apache.kafka.connect.cli.ConnectStandalone",
                   str(work / "worker.properties"), str(work / "connector.properties")]
        self.log_path = work / "connect.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=work)
        wait_slot_active(dsn, slot, self.process, self.log_path)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def prepare_decoding(self, bootstrap: str, prefix: str) -> None:
        pass

    def commit_us(self, value: bytes) -> int:
        source = json.loads(value)["source"]
        return int(source.get("ts_us") or source["ts_ms"] * 1000)

    def extra(self) -> dict[str, object]:
        return {"tuned": self.tuned}

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
