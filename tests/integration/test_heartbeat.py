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
MIN_WRITTEN = 128 * 1024 * 1024
MAX_WRITE_SECONDS = 90.0
# The failure this guards against: a bridge that confirms only positions of published changes
# never moves the slot while only unpublished tables are written, and the slot retains all of it.
# A bridge that confirms the server's position when nothing is outstanding moves it at every
# status interval. The writer is paced to MIN_WRITTEN over WRITE_SECONDS (about 8.5 MiB/s):
# unpaced, it wrote up to 115 MiB/s, and how far the walsender's decoding then trailed depended
# on the machine's load, not on pgbridge (a CI run under load needed over 180 s to decode the
# backlog once the writer stopped). How much the slot retains is printed, not asserted; what is
# asserted is that the confirmed position moves many times while the writer runs and reaches the
# end once it stops. A slow machine writes on past WRITE_SECONDS, up to MAX_WRITE_SECONDS, until
# it wrote MIN_WRITTEN.
MIN_ADVANCES = 5
CATCH_UP_S = 120.0


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
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=60, message="never streaming")
        start = current_wal_lsn(pg_dsn)
        # when: WRITE_SECONDS of writes to the unpublished table
        stop = threading.Event()

        def write() -> None:
            rate = MIN_WRITTEN / WRITE_SECONDS  # bytes of WAL per second
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                began = time.monotonic()
                while not stop.is_set():
                    conn.execute("INSERT INTO unpublished SELECT g, repeat('x', 500) FROM generate_series(1, 2000) g")
                    ahead = (current_wal_lsn(pg_dsn) - start) / rate - (time.monotonic() - began)
                    if ahead > 0:
                        stop.wait(ahead)  # paced: the decoding backlog stays a machine-independent size

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        samples: list[tuple[int, int, int]] = []  # (WAL written so far, retained, confirmed)
        started = time.monotonic()
        while (time.monotonic() - started < WRITE_SECONDS
               or (current_wal_lsn(pg_dsn) - start < MIN_WRITTEN
                   and time.monotonic() - started < MAX_WRITE_SECONDS)):
            time.sleep(0.5)  # the sampling interval of a load that runs for WRITE_SECONDS
            confirmed = slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0
            current = current_wal_lsn(pg_dsn)
            samples.append((current - start, current - confirmed, confirmed))
        stop.set()
        writer.join(30)
        elapsed = time.monotonic() - started
        written = current_wal_lsn(pg_dsn) - start
        # then: the slot advanced all along, and retained a fraction of what was written
        later = samples[len(samples) // 2:]
        advances = len({confirmed for _, _, confirmed in samples}) - 1
        ratio = max(retained / written_then for written_then, retained, _ in later)
        print(f"wrote {written / 2**20:.0f} MiB of WAL in {elapsed:.0f} s; the slot advanced {advances} times; "
              f"retained at most {max(r for _, r, _ in samples) / 2**20:.1f} MiB, "
              f"in the second half at most {ratio:.0%} of the WAL written by then")
        assert written >= MIN_WRITTEN, "the workload wrote too little WAL to show anything"
        assert advances >= MIN_ADVANCES, samples
        end = current_wal_lsn(pg_dsn)
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) >= end, timeout=CATCH_UP_S,
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
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=60, message="never streaming")
        first = slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0
        # then: heartbeats are written, the slot follows them, and nothing reaches {prefix}.messages
        wait_until(lambda: metric(scrape(port), "pgbridge_heartbeats_total") >= 4, timeout=30,
                   message="no heartbeats written")
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) > first, timeout=30,
                   message="the slot never moved past a heartbeat")
        assert f"{topic_prefix}.messages" not in list_topics(kafka_broker.bootstrap)
        assert bridge.terminate() == 0, bridge.log()
