"""Throwaway Apache Kafka (KRaft) brokers and clusters on loopback ports, for tests and benchmarks.

Unlike Tansu (``broker.py``), this is the broker users run: logs on disk, real transactions and
isolation, replication with ``min.insync.replicas``, leader election. Every node is a combined
broker + controller (``process.roles=broker,controller``) with a static voter set, so one node is
a whole cluster and three nodes give RF=3 with a quorum that survives one loss.

The jars are not pgbridge's: the caller passes a class path (the repository's ``jvm/fetch.py``
fetches Apache Kafka's with Maven). Faults the tests need are methods of ``KafkaNode``:
``kill()`` (SIGKILL, the log stays on disk), ``start()`` again (a restart that keeps the log),
``pause()`` / ``resume()`` (SIGSTOP / SIGCONT).

Security tests add listeners beside the PLAINTEXT one (which stays the inter-broker listener and what
readiness probes use): ``listeners={"MTLS": "SSL", "SCRAM": "SASL_SSL"}`` gives every node a port per
name (``node.listener_address(name)``, ``cluster.bootstrap_for(name)``); their TLS and SASL settings
are ordinary ``overrides`` (``listener.name.mtls.ssl.client.auth=required``, ...). ``scram_users``
creates SCRAM-SHA-512 credentials when the storage is formatted (``--add-scram``), the KRaft way:
there is no ZooKeeper to write them to, and a broker cannot create them before it is running.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pgbridge.embedded import EmbeddedError
from pgbridge.embedded._process import ServerProcess, remove_stale_dirs, wait_for
from pgbridge.embedded.ports import free_port

HOST: Final = "127.0.0.1"
START_TIMEOUT_S: Final = 90.0
_DIR_PREFIX: Final = "pgbridge-kafka-"
# A 2-core machine runs Postgres, pgbridge and up to three of these: small heaps, the serial GC
# (fewer threads), no JIT tiers past C1 for controllers would slow the data path, so JIT stays.
_JVM_OPTIONS: Final = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
                       "-Djava.awt.headless=true")
_LOG4J2: Final = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""

_live: set[KafkaCluster] = set()
_live_lock = threading.Lock()


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (what ``random-uuid`` prints).

    Never one starting with ``-``: ``kafka-storage format -t -xyz`` reads it as an option and fails
    (one start in 64); Kafka's own ``Uuid.randomUuid`` draws again for the same reason.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def node_properties(node_id: int, port: int, voters: str, log_dir: Path, controller_port: int,
                    size: int, overrides: dict[str, str] | None = None,
                    extra_listeners: Mapping[str, tuple[str, int]] | None = None) -> dict[str, str]:
    """``server.properties`` of one combined node; replication settings follow the cluster size.

    ``extra_listeners`` maps a listener name to its security protocol and port; each is added to
    ``listeners``, ``advertised.listeners`` and the protocol map (the PLAINTEXT listener stays).

    A cluster of three or more gets RF 3 and ``min.insync.replicas=2`` for every topic and for the
    internal ones, so ``acks=all`` means two copies; a single node gets 1 everywhere.
    """
    replicas = str(min(3, size))
    min_isr = "2" if size >= 3 else "1"
    extra = dict(extra_listeners or {})
    bound = "".join(f",{name}://{HOST}:{port}" for name, (_, port) in extra.items())
    mapped = "".join(f",{name}:{protocol}" for name, (protocol, _) in extra.items())
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}{bound}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}{bound}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,"
                                          f"SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL{mapped}",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "3",
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        # Tests restart nodes often: give a stopped broker's leadership away quickly, and let a
        # restarted one take its preferred leadership back without waiting five minutes.
        "controlled.shutdown.enable": "true",
        "leader.imbalance.check.interval.seconds": "5",
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1000",
        "log.segment.bytes": str(64 * 1024 * 1024),
    }
    props.update(overrides or {})
    return props


class KafkaNode:
    """One broker+controller JVM of a ``KafkaCluster``."""

    def __init__(self, cluster: KafkaCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.port = free_port()
        self.controller_port = free_port()
        self.listener_ports = {name: free_port() for name in cluster.listeners}
        self.dir = cluster.workdir / f"node-{node_id}"
        self.log_dir = self.dir / "data"
        self.config_path = self.dir / "server.properties"
        self.log_path = self.dir / "server.log"
        self._process = ServerProcess(self.log_path)

    def __repr__(self) -> str:
        return f"<KafkaNode {self.node_id} {HOST}:{self.port} {'running' if self.running else 'stopped'}>"

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def listener_address(self, name: str) -> str:
        """``host:port`` of the extra listener ``name`` (see the module docstring)."""
        return f"{HOST}:{self.listener_ports[name]}"

    @property
    def running(self) -> bool:
        return self._process.running

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def write_config(self, voters: str, overrides: dict[str, str]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        props = node_properties(self.node_id, self.port, voters, self.log_dir, self.controller_port,
                                len(self.cluster.nodes), overrides,
                                {name: (protocol, self.listener_ports[name])
                                 for name, protocol in self.cluster.listeners.items()})
        self.config_path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))

    def format(self, cid: str) -> None:
        done = subprocess.run(self.cluster.java("kafka.tools.StorageTool", "format", "-t", cid,
                                                "-c", str(self.config_path), "--ignore-formatted",
                                                *scram_arguments(self.cluster.scram_users)),
                              capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise EmbeddedError(f"formatting Kafka node {self.node_id} failed:\n{done.stdout}{done.stderr}")

    def start(self) -> None:
        """Start the JVM on its existing log (a restart keeps every record); does not wait."""
        if self.running:
            raise EmbeddedError(f"{self!r} is already running")
        self._process.start(self.cluster.java("kafka.Kafka", str(self.config_path)), cwd=self.dir,
                            banner=f"starting node {self.node_id}")

    def kill(self) -> None:
        """SIGKILL (``kill -9``): no controlled shutdown, the log stays as the crash left it."""
        self._process.kill()

    def stop(self) -> None:
        """SIGTERM and wait: a controlled shutdown that hands leadership away first."""
        self.resume()  # a paused JVM would never handle SIGTERM
        self._process.terminate(60)

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, nothing answers."""
        self._process.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._process.signal(signal.SIGCONT)

    def log_tail(self, lines: int = 40) -> str:
        return self._process.log_tail(lines)


def _brokers_seen_by(address: str) -> set[int]:
    """Broker ids in the metadata that the node at ``address`` itself answers (empty if it does not)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": address, "socket.connection.setup.timeout.ms": 1000,
                         "log_level": 0})
    try:
        return set(admin.list_topics(timeout=1.0).brokers)
    except KafkaException:
        return set()


def scram_arguments(users: Mapping[str, str]) -> list[str]:
    """``kafka-storage format`` arguments creating a SCRAM-SHA-512 credential per user → password."""
    arguments: list[str] = []
    for user, password in users.items():
        arguments += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
    return arguments


@functools.cache
def _remove_stale_dirs_once() -> None:
    remove_stale_dirs(Path(tempfile.gettempdir()), _DIR_PREFIX)


class KafkaCluster:
    """``size`` combined nodes sharing one KRaft quorum; ``bootstrap`` names every node."""

    def __init__(self, classpath: str, size: int = 1, *, overrides: dict[str, str] | None = None,
                 java: str | None = None, listeners: Mapping[str, str] | None = None,
                 scram_users: Mapping[str, str] | None = None,
                 system_properties: Mapping[str, str] | None = None) -> None:
        if size < 1:
            raise ValueError("a Kafka cluster needs at least one node")
        self.classpath = classpath
        self._java = java or shutil.which("java") or "java"
        self.overrides = dict(overrides or {})
        self.listeners = dict(listeners or {})  # extra listener name -> security protocol
        self.scram_users = dict(scram_users or {})
        # JVM system properties of every node (-Dkey=value), e.g. Kafka 4's
        # org.apache.kafka.sasl.oauthbearer.allowed.urls for an OAUTHBEARER listener's JWKS endpoint
        self.system_properties = dict(system_properties or {})
        _remove_stale_dirs_once()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-"))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        self.nodes: list[KafkaNode] = []
        self.nodes.extend(KafkaNode(self, node_id) for node_id in range(1, size + 1))
        self._closed = False
        with _live_lock:
            _live.add(self)

    def __repr__(self) -> str:
        return f"<KafkaCluster {self.bootstrap} nodes={len(self.nodes)}>"

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes)

    def bootstrap_for(self, listener: str) -> str:
        """Every node's address on the extra listener ``listener``."""
        return ",".join(node.listener_address(listener) for node in self.nodes)

    def java(self, main_class: str, *args: str) -> list[str]:
        return [self._java, *_JVM_OPTIONS, *(f"-D{key}={value}" for key, value in self.system_properties.items()),
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}", "-cp", self.classpath, main_class,
                *args]

    def node(self, node_id: int) -> KafkaNode:
        return next(node for node in self.nodes if node.node_id == node_id)

    def start(self, *, timeout: float = START_TIMEOUT_S) -> None:
        """Format every node's storage with one cluster id, start them, wait until all are in."""
        voters = ",".join(f"{node.node_id}@{HOST}:{node.controller_port}" for node in self.nodes)
        cid = cluster_id()
        for node in self.nodes:
            node.write_config(voters, self.overrides)
            node.format(cid)
        for node in self.nodes:
            node.start()
        self.wait_ready(timeout=timeout)

    def wait_ready(self, *, timeout: float = START_TIMEOUT_S) -> None:
        """Until every running node answers on its own address and the metadata lists them all."""

        def ready() -> bool:
            running = [node for node in self.nodes if node.running]
            for node in self.nodes:
                if node._process.exit_code is not None:
                    raise EmbeddedError(f"Kafka node {node.node_id} exited with "
                                        f"{node._process.exit_code}; log {node.log_path}:\n{node.log_tail()}")
            want = {node.node_id for node in running}
            return all(want <= _brokers_seen_by(node.address) for node in running)

        wait_for(ready, timeout=timeout, interval=0.25, what=f"the Kafka broker(s) on {self.bootstrap}")

    def leader_of(self, topic: str, partition: int = 0, *, timeout: float = 30.0) -> KafkaNode:
        """The node leading ``topic``'s ``partition`` now (metadata from a running node)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        def lookup() -> KafkaNode | None:
            addresses = ",".join(node.address for node in self.nodes if node.running)
            admin = AdminClient({"bootstrap.servers": addresses, "log_level": 0})
            try:
                meta = admin.list_topics(topic, timeout=2.0).topics.get(topic)
            except KafkaException:
                return None
            if meta is None or meta.error is not None or partition not in meta.partitions:
                return None
            leader = meta.partitions[partition].leader
            if leader <= 0 or not self.node(leader).running:
                return None  # no leader yet, or metadata older than the kill
            return self.node(leader)

        found = wait_for(lookup, timeout=timeout, interval=0.25, what=f"the leader of {topic}[{partition}]")
        assert found is not None  # wait_for returns only a truthy value
        return found

    # -- the Broker interface the tests share with Tansu's ---------------------------------------
    @property
    def running(self) -> bool:
        return any(node.running for node in self.nodes)

    @property
    def pid(self) -> int | None:
        """The first node's process id (what a single-node cluster's tests signal)."""
        return self.nodes[0].pid

    def stop(self) -> None:
        """Every node down (SIGKILL): an outage; ``restart()`` brings them back with their logs."""
        for node in self.nodes:
            node.kill()

    def restart(self) -> None:
        for node in self.nodes:
            if not node.running:
                node.start()
        self.wait_ready()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            for node in self.nodes:
                node.kill()
        finally:
            with _live_lock:
                _live.discard(self)
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def start_kafka(classpath: str, size: int = 1, *, overrides: dict[str, str] | None = None,
                listeners: Mapping[str, str] | None = None, scram_users: Mapping[str, str] | None = None,
                system_properties: Mapping[str, str] | None = None) -> KafkaCluster:
    """A started cluster of ``size`` nodes; the caller owns it (``close()``)."""
    cluster = KafkaCluster(classpath, size, overrides=overrides, listeners=listeners, scram_users=scram_users,
                           system_properties=system_properties)
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster


def cleanup() -> None:
    with _live_lock:
        clusters = list(_live)
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.close()


atexit.register(cleanup)

