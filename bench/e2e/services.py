"""The servers a benchmark run owns: one PostgreSQL 15 cluster and one Tansu broker."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pgbridge.embedded.broker import Broker, start_broker
from pgbridge.embedded.postgres import PgCluster, start_cluster

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
def running_services() -> Iterator[Services]:
    cluster = start_cluster(PG_VERSION, settings=PG_SETTINGS)
    try:
        broker = start_broker()
        try:
            yield Services(cluster, broker)
        finally:
            broker.close()
    finally:
        cluster.close()
