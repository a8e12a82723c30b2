"""Every metric of the contract moves as it should, through the real bridge."""

from __future__ import annotations

import math

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.http import metric, scrape, status
from tests.support.kafka import read_topic
from tests.support.postgres import slot_confirmed_flush_lsn, wal_insert_lsn
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TABLE = "public.t"


def test_contract_metrics_follow_the_workload(pg_dsn: str, fresh_broker: Broker, topic_prefix: str) -> None:
    # given: a bridge whose walsender streams transactions over 64 kB and buffers at most 16 kB in memory
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    dsn = make_conninfo(pg_dsn, options="-c logical_decoding_work_mem=64kB")
    env = bridge_env(dsn, fresh_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": TABLE, "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_BUFFER__MEMORY_BYTES": str(16 * 1024),
                            "PGBRIDGE_POSTGRES__SLOT_CHECK_INTERVAL_S": "0.5",
                            "PGBRIDGE_KAFKA__DELIVERY_TIMEOUT_MS": "2000"})
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=60, message="never streaming")
        first = scrape(port)
        assert metric(first, "pgbridge_streaming") == 1
        assert metric(first, "pgbridge_leader") == 1

        # when: 20 single-row transactions, then an update and a delete
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for i in range(20):
                conn.execute("INSERT INTO t VALUES (%s, %s)", (i, "x" * 100))
            conn.execute("UPDATE t SET v = 'y' WHERE id = 1")
            conn.execute("DELETE FROM t WHERE id = 2")
        end = wal_insert_lsn(pg_dsn)

        # then: events, bytes, transactions and latency are counted; the confirmed LSN catches up
        def counted() -> bool:
            s = scrape(port)
            return (metric(s, "pgbridge_events_total", table=TABLE, op="c") == 20
                    and metric(s, "pgbridge_events_total", table=TABLE, op="u") == 1
                    and metric(s, "pgbridge_events_total", table=TABLE, op="d") == 1)

        wait_until(counted, timeout=60, message="events_total never counted the workload")
        wait_until(lambda: metric(scrape(port), "pgbridge_confirmed_flush_lsn") >= end, timeout=30,
                   message="confirmed_flush_lsn never reached the end of the workload")
        wait_until(lambda: metric(scrape(port), "pgbridge_commit_to_ack_seconds_count") >= 22, timeout=30,
                   message="commit_to_ack_seconds never observed every transaction")
        s = scrape(port)
        assert metric(s, "pgbridge_transactions_total", outcome="committed") >= 22
        assert metric(s, "pgbridge_event_bytes_total", table=TABLE) > 20 * 100
        assert 0 < metric(s, "pgbridge_commit_to_ack_seconds_sum") < 22 * 30
        assert metric(s, "pgbridge_received_lsn") >= end - 1024  # the last commit's start is below end
        assert metric(s, "pgbridge_server_wal_lsn") >= metric(s, "pgbridge_confirmed_flush_lsn")
        assert metric(s, "pgbridge_kafka_queue_depth") == 0
        assert metric(s, "pgbridge_kafka_delivery_errors_total") == 0
        wait_until(lambda: slot_confirmed_flush_lsn(pg_dsn, topic_prefix) ==
                   metric(scrape(port), "pgbridge_confirmed_flush_lsn"),
                   timeout=30, message="the slot never showed the confirmed LSN the metric reports")
        # idle: the keepalive rule confirms the server position, so the lag drains to zero
        wait_until(lambda: metric(scrape(port), "pgbridge_replication_lag_bytes") == 0, timeout=30,
                   message="replication lag never drained while idle")
        # slot safety (the shared cluster has no max_slot_wal_keep_size)
        s = scrape(port)
        assert metric(s, "pgbridge_slot_wal_status", status="reserved") == 1
        assert metric(s, "pgbridge_slot_safe_wal_size_bytes") == math.inf
        assert metric(s, "pgbridge_slot_invalidation_forecast_seconds") == math.inf
        assert metric(s, "pgbridge_slot_retained_wal_bytes") > 0

        # when: a large transaction stays open, so Postgres streams it and pgbridge buffers it
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("INSERT INTO t SELECT g, repeat('z', 200) FROM generate_series(1000, 4000) g")
            wait_until(lambda: metric(scrape(port), "pgbridge_buffered_bytes") > 0, timeout=30,
                       message="buffered_bytes never rose for an open streamed transaction")
            wait_until(lambda: metric(scrape(port), "pgbridge_spilled_bytes_total") > 0, timeout=30,
                       message="a streamed transaction over buffer.memory_bytes never spilled")
            conn.commit()
        # then: once committed and delivered the buffer is empty again
        wait_until(lambda: metric(scrape(port), "pgbridge_events_total", table=TABLE, op="c") == 20 + 3001,
                   timeout=60, message="the large transaction was never counted")
        wait_until(lambda: metric(scrape(port), "pgbridge_buffered_bytes") == 0, timeout=30,
                   message="buffered_bytes did not return to 0")

        # when: the broker goes away and a change is committed
        fresh_broker.stop()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO t VALUES (-1, 'during the outage')")
        # then: the delivery fails (2 s delivery timeout), is counted, and the session reconnects
        wait_until(lambda: metric(scrape(port), "pgbridge_kafka_delivery_errors_total") >= 1, timeout=60,
                   message="delivery_errors_total never counted the failed delivery")
        wait_until(lambda: metric(scrape(port), "pgbridge_reconnects_total", target="kafka") >= 1, timeout=60,
                   message="reconnects_total{target=kafka} never moved")
        fresh_broker.restart()
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=120, message="never streaming again")
        records = read_topic(fresh_broker.bootstrap, f"{topic_prefix}.public.t", min_count=1, timeout=120)
        assert records, "the change committed during the outage was not redelivered"
        assert bridge.terminate() == 0, bridge.log()
    assert "streaming started" in bridge.log()
