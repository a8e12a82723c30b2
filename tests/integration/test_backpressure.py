"""A paused broker: pgbridge stops reading instead of buffering (kafka.max_in_flight), its memory
stays bounded, and nothing is confirmed until Kafka acknowledges again."""

from __future__ import annotations

import os
import signal
import threading
import time

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.http import metric, scrape, status
from tests.support.postgres import slot_confirmed_flush_lsn, wait_for_status_update, wal_insert_lsn
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

ROW_BYTES = 1000
TRANSACTIONS = 300
ROWS_PER_TRANSACTION = 100  # 300 x 100 x 1 kB: 30 MB of row data written while the broker is paused
MAX_IN_FLIGHT = 500
RSS_GROWTH_BOUND = 15 * 1024 * 1024


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status_file:
        for line in status_file:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_paused_broker_bounds_memory_and_confirms_nothing(pg_dsn: str, fresh_broker: Broker,
                                                           topic_prefix: str) -> None:
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    env = bridge_env(pg_dsn, fresh_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_KAFKA__MAX_IN_FLIGHT": str(MAX_IN_FLIGHT),
                            "PGBRIDGE_KAFKA__DELIVERY_TIMEOUT_MS": "300000"})
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None and bridge.process is not None
        pid = bridge.process.pid
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=60, message="never streaming")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # warm up: topics, schemas, producer
            conn.execute("INSERT INTO t VALUES (0, 'warm')")
        wait_until(lambda: metric(scrape(port), "pgbridge_events_total", table="public.t", op="c") == 1,
                   timeout=60, message="warm-up row not published")
        baseline = _rss(pid)
        broker_pid = fresh_broker.pid
        assert broker_pid is not None
        warm_end = wal_insert_lsn(pg_dsn)
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) >= warm_end, timeout=30,
                   message="warm-up never confirmed")
        # when: the broker is frozen while 30 MB of changes are committed
        os.kill(broker_pid, signal.SIGSTOP)
        try:
            peak = baseline
            errors: list[BaseException] = []
            after_first_commit: list[int] = []

            def write() -> None:
                try:
                    with psycopg.connect(pg_dsn, autocommit=True) as conn:
                        for n in range(TRANSACTIONS):
                            first = 1 + n * ROWS_PER_TRANSACTION
                            conn.execute("INSERT INTO t SELECT g, repeat('x', %s::int)"
                                         " FROM generate_series(%s::int, %s::int) g",
                                         (ROW_BYTES, first, first + ROWS_PER_TRANSACTION - 1))
                            if n == 0:
                                row = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint").fetchone()
                                assert row is not None
                                after_first_commit.append(int(row[0]))
                except BaseException as exc:  # surfaced below
                    errors.append(exc)

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            while writer.is_alive():
                peak = max(peak, _rss(pid))
                time.sleep(0.2)  # the RSS sampling interval, not a wait
            assert not errors, errors
            for _ in range(10):  # and 2 s more of samples: nothing released the held records meanwhile
                peak = max(peak, _rss(pid))
                time.sleep(0.2)
            in_flight = metric(scrape(port), "pgbridge_kafka_queue_depth")
            # the bridge holds records it cannot deliver and has answered Postgres since the writes
            # ended: what it confirmed then is its verdict on them, not a status it had yet to send
            wait_for_status_update(pg_dsn, topic_prefix)
            # then: bounded memory, a full but bounded queue, and nothing confirmed
            # (the walsender may report positions inside the first, still uncommitted transaction,
            # and those are safe to confirm; its commit must not be)
            assert (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) < after_first_commit[0]
            assert bridge.alive(), bridge.log()
        finally:
            os.kill(broker_pid, signal.SIGCONT)
        print(f"rss baseline {baseline / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB, in flight {in_flight:.0f}")
        assert peak - baseline < RSS_GROWTH_BOUND
        assert 0 < in_flight <= MAX_IN_FLIGHT + 1  # + the record waiting for room (counted when offered)
        # when the broker resumes, everything is delivered and confirmed
        end = wal_insert_lsn(pg_dsn)
        wait_until(lambda: metric(scrape(port), "pgbridge_events_total", table="public.t", op="c")
                   == 1 + TRANSACTIONS * ROWS_PER_TRANSACTION, timeout=300, interval=1.0,
                   message="not everything was published after the broker resumed")
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) >= end, timeout=120,
                   message="never confirmed after the broker resumed")
        assert bridge.terminate() == 0, bridge.log()
