"""Debezium's PostgreSQL connector as a benchmarked system (the worker itself: ``tests/support/debezium.py``).

The worker runs ``org.apache.kafka.connect.cli.ConnectStandalone`` with the JSON converter and
schemas disabled (cheaper than Avro, as in the issue's reference run). ``tuned`` sets the producer
and Debezium's queue the way the issue's reference figures were taken; ``tuned=False`` keeps
Connect's defaults. The slot and the publication are created by the harness beforehand, so the
connector is streaming as soon as its slot is active.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from e2e.systems import wait_slot_active

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: jvm/, tests/
from tests.support.debezium import (
    CONNECTOR_CLASS,
    ConnectWorker,
    connection_properties,
    ensure_jars,
    worker_properties,
)

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


class Debezium:
    key = "debezium"
    label = "Debezium 3.6.3 (Connect standalone, JSON)"

    def __init__(self, cache_dir: Path, *, tuned: bool = True) -> None:
        self.cache_dir = cache_dir  # kept for callers; the jars live in the JVM cache (jvm/fetch.py)
        self.tuned = tuned
        self.worker: ConnectWorker | None = None
        self.log_path = Path()
        if not tuned:
            self.label += ", default producer"

    def prepare(self) -> None:
        ensure_jars()

    def topic(self, prefix: str, table: str) -> str:
        return f"{prefix}.public.{table}"

    def start(self, dsn: str, bootstrap: str, *, prefix: str, slot: str, publication: str, table: str,
              log_dir: Path) -> None:
        work = log_dir / prefix
        worker = worker_properties(bootstrap, work)
        if self.tuned:
            worker.update(TUNED_WORKER)
        connector = {
            "name": prefix,
            "connector.class": CONNECTOR_CLASS,
            "tasks.max": "1",
            **connection_properties(dsn),
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
        self.worker = ConnectWorker(work, worker, connector)
        self.log_path = self.worker.log_path
        process = self.worker.start()
        wait_slot_active(dsn, slot, process, self.log_path)

    @property
    def pid(self) -> int:
        assert self.worker is not None and self.worker.process is not None
        return self.worker.process.pid

    def prepare_decoding(self, bootstrap: str, prefix: str) -> None:
        pass

    def commit_us(self, value: bytes) -> int:
        source = json.loads(value)["source"]
        return int(source.get("ts_us") or source["ts_ms"] * 1000)

    def extra(self) -> dict[str, object]:
        return {"tuned": self.tuned}

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
