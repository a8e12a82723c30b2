"""Helpers for the streamed and two-phase transaction tests: small-work-mem clusters, slot
statistics, the bridge's own metrics, and a streaming topic reader for very large topics."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tests.support.kafka import list_topics
from tests.support.postgres import (
    PgCluster,
    create_database,
    drop_database,
    execute,
    start_cluster,
)
from tests.support.waiting import wait_until

# Postgres streams (or, without streaming, spills) a transaction once its decoded changes exceed
# this; 64kB is the minimum, so a few hundred rows are enough to make a transaction streamed.
SMALL_WORK_MEM = {"logical_decoding_work_mem": "64kB"}


@pytest.fixture(scope="module")
def streaming_cluster(pg_version: int) -> Iterator[PgCluster]:
    """A cluster of the test's Postgres version (tests/conftest.py: 18, or each supported one for a
    test marked ``each_pg_version``) with ``logical_decoding_work_mem=64kB``, shared by a module."""
    cluster = start_cluster(pg_version, settings=SMALL_WORK_MEM)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def streaming_dsn(streaming_cluster: PgCluster) -> Iterator[str]:
    """A fresh database on ``streaming_cluster``; dropped with its slots and prepared transactions."""
    dbname = f"t_{uuid.uuid4().hex[:12]}"
    create_database(streaming_cluster, dbname)
    try:
        yield streaming_cluster.dsn(dbname)
    finally:
        drop_database(streaming_cluster, dbname)


def slot_stream_stats(dsn: str, slot: str) -> dict[str, int]:
    """``pg_stat_replication_slots`` counters of ``slot`` (zeros until the walsender reports)."""
    rows = execute(dsn, "SELECT stream_txns, stream_count, stream_bytes, spill_txns, total_txns "
                        "FROM pg_stat_replication_slots WHERE slot_name = %s", (slot,))
    names = ("stream_txns", "stream_count", "stream_bytes", "spill_txns", "total_txns")
    return dict(zip(names, (int(v or 0) for v in rows[0]), strict=True)) if rows else dict.fromkeys(names, 0)


def wait_for_streaming(dsn: str, slot: str, *, transactions: int, timeout: float = 90.0) -> dict[str, int]:
    """Wait until Postgres reports at least ``transactions`` streamed transactions on ``slot``.

    Slot statistics reach ``pg_stat_replication_slots`` only when the walsender flushes its pending
    statistics, which a busy machine can delay by many seconds: hence the generous timeout.
    """
    def streamed() -> dict[str, int]:
        stats = slot_stream_stats(dsn, slot)
        return stats if stats["stream_txns"] >= transactions else {}
    return wait_until(streamed, timeout=timeout, message=f"{transactions} transactions streamed on {slot}")


def insert_lsn(conn: psycopg.Connection[Any]) -> int:
    """The WAL insert position now, as an int (callable inside an open transaction)."""
    row = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
    assert row is not None
    return int(row[0])


def consume_topic(bootstrap: str, topic: str, handle: Callable[[bytes | None, bytes | None], None], *,
                  count: int, timeout: float, idle: float = 3.0) -> int:
    """Feed every record of partition 0 of ``topic``, in offset order, to ``handle(key, value)``
    without keeping them; returns how many were read. Stops once at least ``count`` were read and
    nothing new came for ``idle`` seconds; fails after ``timeout`` seconds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pgbridge-test-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "allow.auto.create.topics": False, "fetch.wait.max.ms": 100})
    read = 0
    try:
        deadline = time.monotonic() + timeout
        wait_until(lambda: topic in list_topics(bootstrap), timeout=timeout, interval=0.5,
                   message=f"topic {topic} never appeared")
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        last_progress = time.monotonic()
        while True:
            batch = consumer.consume(num_messages=10_000, timeout=0.5)
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.fatal():
                        raise AssertionError(f"reading {topic} failed: {error}")
                    continue
                handle(message.key(), message.value())
                read += 1
            now = time.monotonic()
            if batch:
                last_progress = now
            if read >= count and now - last_progress >= idle:
                return read
            if now > deadline:
                raise AssertionError(f"timed out after {timeout:g}s reading {topic}: {read} of {count} records")
    finally:
        consumer.close()
