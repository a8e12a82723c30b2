"""The stall watchdog: a stream that stops moving without any error is reported, and cleared when it moves.

Two stalls no error reveals: the walsender stops sending (SIGSTOP on its backend: the socket stays
open, the server keeps writing WAL) and the broker stops answering (SIGSTOP: connections open, no
acknowledgement). In each, within ``watchdog.stall_s`` (plus one slot check and one housekeeping
tick), ``/readyz`` answers 503 with the reason, ``pgbridge_stalled{kind}`` is 1 and the log names
the positions; after SIGCONT all three clear and every row arrives.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, decode_records, load_schemas
from tests.support.broker import Broker
from tests.support.http import get, metric, scrape, status
from tests.support.kafka import read_topic
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

STALL_S = 3.0
SLOT_CHECK_S = 0.5
# the stall must be reported within its timeout plus one slot check, a housekeeping tick and a scrape
REPORT_WITHIN_S = STALL_S + SLOT_CHECK_S + 4.0


@contextmanager
def _writing(dsn: str, first_id: int) -> Iterator[list[int]]:
    """Insert a row every 100 ms until the block ends, so the server's WAL keeps moving; yields the ids."""
    ids: list[int] = []
    done = threading.Event()

    def run() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            next_id = first_id
            while not done.is_set():
                conn.execute("INSERT INTO t VALUES (%s)", (next_id,))
                ids.append(next_id)
                next_id += 1
                done.wait(0.1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield ids
    finally:
        done.set()
        thread.join(10)


def _env(dsn: str, bootstrap: str, prefix: str) -> dict[str, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    return bridge_env(dsn, bootstrap, prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never",
        "PGBRIDGE_WATCHDOG__STALL_S": str(STALL_S), "PGBRIDGE_POSTGRES__SLOT_CHECK_INTERVAL_S": str(SLOT_CHECK_S)})


def _stalled(port: int, kind: str) -> float:
    return metric(scrape(port), "pgbridge_stalled", kind=kind)


def _wait_reported(port: int, kind: str) -> float:
    started = time.monotonic()
    wait_until(lambda: _stalled(port, kind) == 1.0, timeout=REPORT_WITHIN_S + 20, interval=0.2,
               message=f"pgbridge_stalled{{kind={kind}}} never 1")
    return time.monotonic() - started


def _wait_cleared(port: int, kind: str) -> float:
    started = time.monotonic()
    wait_until(lambda: _stalled(port, kind) == 0.0 and status(port, "/readyz") == 200, timeout=60, interval=0.2,
               message=f"the {kind} stall was never cleared")
    return time.monotonic() - started


def _rows(bootstrap: str, prefix: str, count: int) -> set[int]:
    records = read_topic(bootstrap, f"{prefix}.public.t", min_count=count, timeout=60)
    events = decode_records(load_schemas(bootstrap, prefix), records)
    return {int(event.value["after"]["id"]) for event in events if event.value is not None}


def test_a_stuck_walsender_is_reported_as_a_source_stall_and_cleared(pg_dsn: str, kafka_broker: Broker,
                                                                     topic_prefix: str) -> None:
    # given: a ready bridge whose stream carries rows
    env = _env(pg_dsn, kafka_broker.bootstrap, topic_prefix)
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=60, message="never streaming")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                               (topic_prefix,)).fetchone()
        assert row is not None and row[0] is not None
        walsender = int(row[0])
        # when: the walsender freezes while the server keeps writing WAL
        os.kill(walsender, signal.SIGSTOP)
        try:
            with _writing(pg_dsn, 1) as ids:
                # then: a source stall, reported within its time, with the reason on /readyz
                took = _wait_reported(port, "source")
                code, body = get(port, "/readyz")
                assert took <= REPORT_WITHIN_S, f"reported after {took:.1f}s"
                assert code == 503 and "stalled: the server has WAL up to" in body, body
                assert _stalled(port, "delivery") == 0.0
        finally:
            os.kill(walsender, signal.SIGCONT)
        # then: moving again clears it, and every row written during the stall arrives
        cleared = _wait_cleared(port, "source")
        assert _rows(kafka_broker.bootstrap, topic_prefix, len(ids)) == set(ids)
        log = bridge.log()
        assert "stream stalled" in log and "received_lsn" in log
        assert "stream moving again" in log
        print(f"source stall reported after {took:.1f}s (stall_s={STALL_S}), cleared {cleared:.1f}s after SIGCONT")
        assert bridge.terminate() == 0, bridge.log()


def test_a_frozen_broker_is_reported_as_a_delivery_stall_and_cleared(pg_dsn: str, fresh_broker: Broker,
                                                                     topic_prefix: str) -> None:
    # given: a ready bridge on a broker of its own
    env = _env(pg_dsn, fresh_broker.bootstrap, topic_prefix)
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=60, message="never streaming")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO t VALUES (0)")  # its topics exist before the broker freezes
        assert _rows(fresh_broker.bootstrap, topic_prefix, 1) == {0}
        broker_pid = fresh_broker.pid
        assert broker_pid is not None
        # when: the broker freezes (connections open, nothing answers) while rows are written
        os.kill(broker_pid, signal.SIGSTOP)
        try:
            with _writing(pg_dsn, 1) as ids:
                # then: a delivery stall, reported within its time, not ready
                took = _wait_reported(port, "delivery")
                assert took <= REPORT_WITHIN_S, f"reported after {took:.1f}s"
                code, body = get(port, "/readyz")
                assert code == 503, body
        finally:
            os.kill(broker_pid, signal.SIGCONT)
        # then: acknowledgements clear it; every row arrives
        cleared = _wait_cleared(port, "delivery")
        assert _rows(fresh_broker.bootstrap, topic_prefix, len(ids) + 1) == {0, *ids}
        assert "records wait for Kafka" in bridge.log()
        print(f"delivery stall reported after {took:.1f}s (stall_s={STALL_S}), cleared {cleared:.1f}s after SIGCONT")
        assert bridge.terminate() == 0, bridge.log()
