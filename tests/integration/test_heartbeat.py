"""Heavy writes to an unpublished table do not make the slot hold WAL; heartbeat messages are private."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.http import metric, scrape, status
from tests.support.kafka import list_topics
from tests.support.postgres import current_wal_lsn, slot_confirmed_flush_lsn
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

WRITE_SECONDS = 15.0
MAX_WRITE_SECONDS = 90.0
# The bound on retained WAL: what the writer produces in about two seconds (status updates every
# 0.5 s, keepalives, the walsender reading behind a busy writer), at least 96 MiB. The writer's
# rate varies tenfold with the machine (180 MiB/s of WAL seen on a quiet one, far less on a busy
# one), so the bound follows the measured rate, and the writer goes on past WRITE_SECONDS (up to
# MAX_WRITE_SECONDS) until it wrote three bounds' worth; a slot that is not advanced retains all.
RETAINED_BOUND = 96 * 1024 * 1024
RETAINED_SECONDS = 2.0


def test_unpublished_write_load_does_not_make_the_slot_retain_wal(pg_dsn: str, kafka_broker: Broker,
                                                                   topic_prefix: str) -> None:
    # given: a published table that stays quiet and an unpublished one that is written heavily
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE published (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE unpublished (id bigint, v text)")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.published", "PGBRIDGE_SNAPSHOT__MODE": "never"})
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None
        wait_until(lambda: status(port, "/readyz") == 200, timeout=60, message="never ready")
        start = current_wal_lsn(pg_dsn)
        # when: WRITE_SECONDS of writes to the unpublished table
        stop = threading.Event()

        def write() -> None:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                while not stop.is_set():
                    conn.execute("INSERT INTO unpublished SELECT g, repeat('x', 500) FROM generate_series(1, 2000) g")

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        retained = []
        started = time.monotonic()
        while (time.monotonic() - started < WRITE_SECONDS
               or (current_wal_lsn(pg_dsn) - start < 3 * RETAINED_BOUND
                   and time.monotonic() - started < MAX_WRITE_SECONDS)):
            time.sleep(0.5)
            confirmed = slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0
            retained.append(current_wal_lsn(pg_dsn) - confirmed)
        stop.set()
        writer.join(30)
        elapsed = time.monotonic() - started
        written = current_wal_lsn(pg_dsn) - start
        # then: the retained WAL stayed bounded while far more was written
        print(f"wrote {written / 2**20:.0f} MiB of WAL in {elapsed:.0f} s; "
              f"retained at most {max(retained) / 2**20:.1f} MiB")
        assert written > 3 * RETAINED_BOUND, "the workload wrote too little WAL to show anything"
        bound = max(RETAINED_BOUND, written * RETAINED_SECONDS / elapsed)
        assert max(retained[len(retained) // 4:]) < bound, (bound, retained)
        end = current_wal_lsn(pg_dsn)
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) >= end, timeout=30,
                   message="the idle slot never caught up with the server")
        assert metric(scrape(port), "pgbridge_events_total", table="public.published", op="c") == 0
        assert bridge.terminate() == 0, bridge.log()


def test_heartbeat_messages_move_the_slot_and_are_not_published(pg_dsn: str, kafka_broker: Broker,
                                                                topic_prefix: str) -> None:
    # given: heartbeats every 0.5 s in a database without any other traffic
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE published (id int PRIMARY KEY)")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.published", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_POSTGRES__HEARTBEAT_INTERVAL_S": "0.5"})
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None
        wait_until(lambda: status(port, "/readyz") == 200, timeout=60, message="never ready")
        first = slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0
        # then: heartbeats are written, the slot follows them, and nothing reaches {prefix}.messages
        wait_until(lambda: metric(scrape(port), "pgbridge_heartbeats_total") >= 4, timeout=30,
                   message="no heartbeats written")
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) > first, timeout=30,
                   message="the slot never moved past a heartbeat")
        assert f"{topic_prefix}.messages" not in list_topics(kafka_broker.bootstrap)
        assert bridge.terminate() == 0, bridge.log()
