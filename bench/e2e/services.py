"""The servers a benchmark run owns: one PostgreSQL 15 cluster and one broker, Apache Kafka (a
single KRaft node, jars from Maven via jvm/fetch.py) by default or Tansu (``--broker tansu``)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pgbridge.embedded.apache_kafka import start_kafka
from pgbridge.embedded.broker import start_broker
from pgbridge.embedded.postgres import PgCluster, start_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: jvm/
from jvm.fetch import classpath


class Broker(Protocol):
    @property
    def bootstrap(self) -> str: ...

    def close(self) -> None: ...

PG_VERSION = 15

# On top of pgbridge.embedded's defaults (wal_level=logical, fsync off): room for a million-row
# run's WAL without a checkpoint storm, and room for several slots. synchronous_commit goes back
# on: with it off, a walsender only sees a commit once the WAL writer flushes it (up to 3 x
# wal_writer_delay = 600 ms later), which would be measured as the bridge's latency. fsync stays
# off, so a commit's flush is a write() to the page cache.
PG_SETTINGS = {
    "synchronous_commit": "on",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "wal_sender_timeout": "60s",
}


@dataclass
class Services:
    cluster: PgCluster
    broker: Broker

    @property
    def bindir(self) -> Path:
        return self.cluster.bindir

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def dsn(self, dbname: str = "postgres") -> str:
        return self.cluster.dsn(dbname)


@contextlib.contextmanager
def running_services(broker_kind: str = "kafka") -> Iterator[Services]:
    cluster = start_cluster(PG_VERSION, settings=PG_SETTINGS)
    try:
        broker: Broker = start_kafka(classpath("kafka"), 1) if broker_kind == "kafka" else start_broker()
        try:
            yield Services(cluster, broker)
        finally:
            broker.close()
    finally:
        cluster.close()
