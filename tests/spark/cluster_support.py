"""Helpers of the cluster tests: a test's folder on distributed storage (HDFS or S3 through s3a),
and the mirror job submitted to the standalone cluster as a user submits it.

``Store`` hides which storage a test runs on: the job gets URIs (``uri``), the test looks at the
files the job left (``names``, ``read``) through the storage's own HTTP interface, never through
a local path. ``Submission`` is one ``spark-submit`` of ``spark/pgbridge_spark/mirror.py`` in its
own session, so ``kill()`` takes the whole driver (the SparkSubmit JVM and its Python) down at once,
as a lost driver machine would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pgbridge_spark.progress import TableProgress
from tests.support.hdfs import Hdfs
from tests.support.s3 import S3Server
from tests.support.spark_cluster import SparkCluster

MIRROR_APP = Path(__file__).resolve().parents[2] / "spark" / "pgbridge_spark" / "mirror.py"


@dataclass(frozen=True)
class Store:
    """A test's own folder on distributed storage. Paths are relative to it (``a/b``)."""

    root: str  # hdfs://127.0.0.1:PORT/folder or s3a://bucket
    names: Callable[[str], list[str]]  # names directly inside a folder; [] if it does not exist
    read: Callable[[str], bytes]
    conf: Mapping[str, str] = field(default_factory=dict)  # Spark settings to reach it
    jars: Sequence[Path] = ()  # jars Spark needs to reach it

    def uri(self, path: str) -> str:
        return f"{self.root}/{path}"


def hdfs_store(hdfs: Hdfs, folder: str) -> Store:
    return Store(root=f"{hdfs.uri}/{folder}", names=lambda path: hdfs.list_names(f"/{folder}/{path}"),
                 read=lambda path: hdfs.read(f"/{folder}/{path}"))


def s3_store(s3: S3Server, bucket: str, jars: Sequence[Path]) -> Store:
    s3.create_bucket(bucket)

    def names(path: str) -> list[str]:
        prefix = f"{path.strip('/')}/"
        return sorted({key[len(prefix):].split("/", 1)[0] for key in s3.list_keys(bucket, prefix)})

    return Store(root=f"s3a://{bucket}", names=names, read=lambda path: s3.read(bucket, path),
                 conf=s3.spark_conf(), jars=tuple(jars))


def numbered(names: list[str]) -> set[int]:
    """The batch numbers among a checkpoint folder's file names (``0``, ``1``, ...; not ``.0.crc``)."""
    return {int(name) for name in names if name.isdigit()}


def delta_versions(store: Store, table: str) -> list[str]:
    """The commit files of a Delta table's log (``00000000000000000003.json``, ...)."""
    return [name for name in store.names(f"{table}/_delta_log") if name.endswith(".json")]


def delta_transactions(store: Store, table: str,
                       read_before: dict[str, list[tuple[str, int]]] | None = None) -> list[tuple[str, int]]:
    """Every ``txn`` action (app id, version) in a Delta table's log, one per commit that had one:
    a micro-batch committed twice to the same table shows here twice. ``read_before`` keeps each
    commit file's actions between calls (a commit file is written once, whole), so that a caller
    polling the log reads only the new ones from the storage's servers, which share the machine
    with the job under test."""
    found = []
    for name in delta_versions(store, table):
        path = f"{table}/_delta_log/{name}"
        if read_before is not None and path in read_before:
            found.extend(read_before[path])
            continue
        actions = [(str(action["txn"]["appId"]), int(action["txn"]["version"]))
                   for action in map(json.loads, store.read(path).decode().splitlines()) if "txn" in action]
        if read_before is not None:
            read_before[path] = actions
        found.extend(actions)
    return found


def iceberg_batches(store: Store, table: str) -> list[tuple[str, int]]:
    """(app id, batch) of every snapshot of an Iceberg table (Hadoop catalog layout) whose summary
    holds the job's progress: a micro-batch committed twice to the same table shows here twice. Read
    from the newest metadata file (``metadata/vN.metadata.json``), which lists every snapshot."""
    versions = [int(name[1:].split(".", 1)[0]) for name in store.names(f"{table}/metadata")
                if name.startswith("v") and name.endswith(".metadata.json")]
    if not versions:
        return []
    metadata = json.loads(store.read(f"{table}/metadata/v{max(versions)}.metadata.json"))
    found = []
    for snapshot in metadata.get("snapshots", []):
        progress = TableProgress.found_in(snapshot.get("summary", {}).get("pgbridge.progress"))
        if progress is not None and progress.app is not None and progress.batch is not None:
            found.append((progress.app, progress.batch))
    return found


@dataclass
class Submission:
    """One ``spark-submit`` of the mirror job on ``cluster``; its output kept in ``log_path``."""

    cluster: SparkCluster
    command: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Submission:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command, env=self.cluster.env(), stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def kill(self) -> None:
        """``kill -9`` of the driver: the SparkSubmit JVM and its Python child together."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the mirror job did not finish within {timeout:g} s:\n{self.log()[-4000:]}"
                                 ) from None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> Submission:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def mirror_command(cluster: SparkCluster, store: Store, jars: Sequence[Path], args: Sequence[str]) -> list[str]:
    """``spark-submit --master <cluster> --jars ... mirror.py args``: the job exactly as a user submits
    it to a cluster, with the storage's settings."""
    return cluster.submit_command(MIRROR_APP, args, conf=store.conf, jars=[*jars, *store.jars])
