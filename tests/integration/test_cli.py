"""The command line as an operator meets it: `python -m pgbridge ...` in a child process, against real
Postgres and Kafka (the commands that need no server: tests/unit/test_cli.py)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time

import psycopg
import pytest
from confluent_kafka import Producer

from pgbridge.snapshot.chunking import CHUNK_BY_KEY, TablePlan, key_chunks
from pgbridge.snapshot.progress import done_key, header_key, incremental_key, plan_key, progress_topic
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.cli import clean_env, pgbridge
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _slot(dsn: str, slot: str) -> tuple[bool, int | None] | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()
    return None if row is None else (bool(row[0]), None if row[1] is None else int(row[1]))


def _create_slot(dsn: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


def test_slot_drop_asks_for_confirmation_and_needs_yes_without_a_terminal(pg_dsn: str) -> None:
    env = clean_env(PGBRIDGE_POSTGRES__DSN=pg_dsn, PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS="unused:9092",
                    PGBRIDGE_POSTGRES__SLOT="to_drop")
    _create_slot(pg_dsn, "to_drop")
    refused = pgbridge("slot", "drop", env=env)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert _slot(pg_dsn, "to_drop") is not None

    def answered(answer: str) -> subprocess.CompletedProcess[str]:
        controller, terminal = pty.openpty()
        try:
            os.write(controller, answer.encode())
            return pgbridge("slot", "drop", env=env, stdin=terminal)
        finally:
            os.close(controller)
            os.close(terminal)

    kept = answered("n\n")
    assert kept.returncode == 1 and "Drop replication slot to_drop" in kept.stderr and "[y/N]" in kept.stderr
    assert _slot(pg_dsn, "to_drop") is not None
    dropped = answered("y\n")
    assert dropped.returncode == 0, dropped.stderr
    assert "slot to_drop dropped" in dropped.stdout
    assert _slot(pg_dsn, "to_drop") is None


def test_slot_drop_waits_for_a_slot_in_use_and_gives_up_after_its_timeout(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY)")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.items"})
    bridge = BridgeProcess(env).start()
    try:
        wait_until(lambda: (_slot(pg_dsn, topic_prefix) or (False, None))[0], timeout=90,
                   message=f"slot never active: {bridge.log()}")
        started = time.monotonic()
        busy = pgbridge("slot", "drop", "--yes", "--timeout", "2", env=env)
        assert busy.returncode == 1, busy.stderr
        assert f"replication slot {topic_prefix} is still in use by pid" in busy.stderr
        assert "after waiting 2s" in busy.stderr
        assert time.monotonic() - started < 30
        # A drop started while pgbridge stops waits for the slot to be released, then drops it.
        with subprocess.Popen([sys.executable, "-m", "pgbridge", "slot", "drop", "--yes", "--timeout", "60"],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as waiting:
            assert bridge.terminate() == 0
            out, err = waiting.communicate(timeout=90)
        assert waiting.returncode == 0, err
        assert f"slot {topic_prefix} dropped" in out
        assert _slot(pg_dsn, topic_prefix) is None
    finally:
        bridge.kill()


def test_status_reports_the_slot_its_lag_and_the_leader(pg_dsn: str, kafka_broker: Broker,
                                                         topic_prefix: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO items SELECT g, 'x' FROM generate_series(1, 100) g")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.items"})
    before = pgbridge("status", env=env)
    assert before.returncode == 0, before.stderr
    assert f"slot      {topic_prefix}: does not exist" in before.stdout
    assert "leader    none" in before.stdout
    assert "initial snapshot not started" in before.stdout
    bridge = BridgeProcess(env).start()
    try:
        wait_until(lambda: (_slot(pg_dsn, topic_prefix) or (False, None))[0], timeout=90,
                   message=f"slot never active: {bridge.log()}")
        running = json.loads(wait_until(
            lambda: (r := pgbridge("status", "--json", env=env)).returncode == 0 and '"complete"' in r.stdout
            and r.stdout, timeout=60, message="status never saw the snapshot complete"))
        slot_pid = _slot(pg_dsn, topic_prefix)
        assert running["slot"]["active"] is True and running["slot"]["active_pid"] == slot_pid[1]  # type: ignore[index]
        assert running["leader"] is not None and running["leader"]["client"].startswith("pgbridge-leader")
        assert running["snapshot"]["state"] == "complete"
        text = pgbridge("status", env=env).stdout
        assert "active, streamed by pid" in text and "leader    pid" in text
        assert bridge.terminate() == 0
    finally:
        bridge.kill()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO items SELECT g, repeat('y', 1000) FROM generate_series(101, 2000) g")
    stopped = json.loads(pgbridge("status", "--json", env=env).stdout)
    assert stopped["slot"]["active"] is False and stopped["leader"] is None
    assert stopped["slot"]["lag_bytes"] > 1_000_000  # the rows written since pgbridge stopped
    assert "lag       " in pgbridge("status", env=env).stdout


def test_status_reports_a_running_snapshots_percentage_rate_and_eta(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # The progress records a running initial snapshot writes (snapshot/progress.py), at known times:
    # plan at t0; orders 2 of 4 chunks (400 rows) done at t0+10 s; lines 3 of 6 (600 rows) at t0+20 s.
    slot, consistent, t0 = topic_prefix, 12345, int(time.time() * 1000) - 60_000
    plans = {"public.orders": (400, 4), "public.lines": (600, 6)}
    records: list[tuple[str, dict[str, object], int]] = []
    for table, (rows, chunks) in plans.items():
        schema, name = table.split(".")
        plan = TablePlan(schema, name, CHUNK_BY_KEY, ("id",), ("integer",), rows,
                         key_chunks(table, [(str(i * 100),) for i in range(1, chunks)]))
        records.append((plan_key(slot, table), {"consistent_lsn": consistent, "plan": plan.to_json()}, t0))
    records.append((header_key(slot), {"consistent_lsn": consistent, "tables": list(plans)}, t0))
    records += [(done_key(slot, "public.orders", i), {"consistent_lsn": consistent}, t0 + 10_000) for i in (0, 1)]
    records += [(done_key(slot, "public.lines", i), {"consistent_lsn": consistent}, t0 + 20_000) for i in (0, 1, 2)]
    records.append((incremental_key(slot), {"queue": ["public.later"], "after": None, "signal_lsn": 0}, t0))
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for key, value, stamp in records:
        producer.produce(progress_topic(topic_prefix), json.dumps(value).encode(), key.encode(), timestamp=stamp)
    assert producer.flush(30) == 0
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix)
    result = pgbridge("status", "--json", env=env)
    assert result.returncode == 0, result.stderr
    snapshot = json.loads(result.stdout)["snapshot"]
    assert snapshot["state"] == "running"
    assert snapshot["percent"] == 50.0  # (200 + 300) of 1000 estimated rows
    assert snapshot["rows_per_s"] == 25.0  # 500 rows in the 20 s from the plan to the last chunk
    assert snapshot["eta_s"] == 20.0  # 500 rows left at that rate
    assert snapshot["incremental_queue"] == ["public.later"]
    text = pgbridge("status", env=env).stdout
    assert "initial snapshot running: 50.0% (5 of 10 chunks, ~500 of ~1000 rows), 25 rows/s, ETA 20s" in text
    assert "public.lines: 3/6 chunks" in text
