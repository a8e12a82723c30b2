"""A real HDFS for the cluster tests: one NameNode and one DataNode, each its own JVM on loopback
ports, from Apache Hadoop's jars (``jvm/hadoop/pom.xml``, fetched by Maven through ``jvm/fetch.py``).

The servers read their settings from a ``core-site.xml`` and ``hdfs-site.xml`` in a configuration
folder first on their class path, as a real deployment does; the NameNode is formatted into a
temporary directory. Ready means: the DataNode registered with the NameNode and the NameNode left
safe mode (read from the NameNode's JMX servlet). Spark reaches it as ``hdfs://127.0.0.1:PORT``
with its own Hadoop client (pyspark's hadoop-client jars, the release the pom names); the tests
look at files through WebHDFS (``list_names``), which needs no Hadoop client in Python.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Final
from xml.sax.saxutils import escape

from jvm.fetch import classpath

from pgbridge.embedded._process import wait_for
from tests.support.daemons import DaemonGroup
from tests.support.ports import free_port

HOST: Final = "127.0.0.1"
START_TIMEOUT_S: Final = 120.0
# Two small servers beside Postgres, Kafka and a Spark cluster on 2 cores: small heaps, serial GC.
_JVM_OPTIONS: Final = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
                       "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true",
                       # Java 17: WebHDFS' JAXB defines classes reflectively (Hadoop's own scripts open it too)
                       "--add-opens=java.base/java.lang=ALL-UNNAMED")
_LOG4J: Final = """\
log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.BlockStateChange=WARN
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
"""


def site_xml(properties: Mapping[str, str]) -> str:
    """A Hadoop ``*-site.xml`` holding ``properties``."""
    body = "".join(f"  <property><name>{escape(name)}</name><value>{escape(value)}</value></property>\n"
                   for name, value in properties.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


class Hdfs:
    """A NameNode and a DataNode; ``uri`` is ``hdfs://127.0.0.1:PORT``. ``close()`` kills both and
    deletes every block."""

    def __init__(self) -> None:
        self.group = DaemonGroup("pgbridge-hdfs-")
        self.rpc_port, self.http_port = free_port(), free_port()
        root = self.group.workdir
        self.conf_dir = root / "conf"
        self.conf_dir.mkdir()
        core = {"fs.defaultFS": self.uri, "hadoop.tmp.dir": str(root / "tmp")}
        hdfs = {
            "dfs.namenode.name.dir": (root / "name").as_uri(),
            "dfs.datanode.data.dir": (root / "data").as_uri(),
            "dfs.namenode.rpc-address": f"{HOST}:{self.rpc_port}",
            "dfs.namenode.http-address": f"{HOST}:{self.http_port}",
            "dfs.namenode.secondary.http-address": f"{HOST}:0",
            "dfs.datanode.address": f"{HOST}:{free_port()}",
            "dfs.datanode.http.address": f"{HOST}:{free_port()}",
            "dfs.datanode.ipc.address": f"{HOST}:{free_port()}",
            "dfs.replication": "1",
            "dfs.permissions.enabled": "false",
            "dfs.namenode.safemode.extension": "0",
            "dfs.namenode.safemode.min.datanodes": "1",
            "dfs.heartbeat.interval": "1",
            "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        }
        (self.conf_dir / "core-site.xml").write_text(site_xml(core))
        (self.conf_dir / "hdfs-site.xml").write_text(site_xml(hdfs))
        (self.conf_dir / "log4j.properties").write_text(_LOG4J)
        # The servers' HTTP servers look their web apps up on the class path; the distribution
        # ships them beside the jars, Maven's jars lack them. Empty ones serve JMX and WebHDFS.
        for app in ("hdfs", "datanode"):
            (self.conf_dir / "webapps" / app).mkdir(parents=True)

    def __repr__(self) -> str:
        return f"<Hdfs {self.uri}>"

    @property
    def uri(self) -> str:
        return f"hdfs://{HOST}:{self.rpc_port}"

    def _java(self, main_class: str, *args: str) -> list[str]:
        java = shutil.which("java") or "java"
        return [java, *_JVM_OPTIONS, "-cp", f"{self.conf_dir}:{classpath('hadoop')}", main_class, *args]

    def start(self) -> Hdfs:
        """Format, start both servers, wait until the DataNode is registered and safe mode is off."""
        with self.group.starting("HDFS"):
            self.group.run("format", self._java("org.apache.hadoop.hdfs.server.namenode.NameNode", "-format",
                                                "-nonInteractive", "-force"), timeout=START_TIMEOUT_S)
            self.group.start("namenode", self._java("org.apache.hadoop.hdfs.server.namenode.NameNode"))
            self.group.start("datanode", self._java("org.apache.hadoop.hdfs.server.datanode.DataNode"))
            wait_for(self._ready, timeout=START_TIMEOUT_S, interval=0.25,
                     what=f"HDFS at {self.uri} to have a live DataNode and leave safe mode")
        return self

    def _jmx(self, bean: str) -> dict[str, Any]:
        query = urllib.parse.quote(f"Hadoop:service=NameNode,name={bean}")
        url = f"http://{HOST}:{self.http_port}/jmx?qry={query}"
        with urllib.request.urlopen(url, timeout=5) as response:
            beans: list[dict[str, Any]] = json.load(response)["beans"]
        return beans[0] if beans else {}

    def _ready(self) -> bool:
        self.group.check_alive()
        try:
            state = self._jmx("FSNamesystemState")
            info = self._jmx("NameNodeInfo")
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return int(state.get("NumLiveDataNodes", 0)) >= 1 and info.get("Safemode") == ""

    def list_names(self, path: str) -> list[str]:
        """Names in the HDFS directory ``path`` (absolute, without the URI), through WebHDFS;
        ``[]`` if it does not exist."""
        url = f"http://{HOST}:{self.http_port}/webhdfs/v1{urllib.parse.quote(path)}?op=LISTSTATUS"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                statuses: list[dict[str, Any]] = json.load(response)["FileStatuses"]["FileStatus"]
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 404:
                return []
            raise
        return sorted(str(status["pathSuffix"]) for status in statuses)

    def read(self, path: str) -> bytes:
        """The content of the HDFS file ``path`` (WebHDFS: the NameNode redirects to the DataNode)."""
        url = f"http://{HOST}:{self.http_port}/webhdfs/v1{urllib.parse.quote(path)}?op=OPEN"
        with urllib.request.urlopen(url, timeout=10) as response:
            body: bytes = response.read()
        return body

    def logs(self) -> str:
        return self.group.logs()

    def close(self) -> None:
        self.group.close()


def start_hdfs() -> Hdfs:
    return Hdfs().start()
