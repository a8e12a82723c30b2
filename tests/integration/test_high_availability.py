"""Two replicas of one slot: one streams, one stands by; SIGKILL the active one and the standby
takes over within TAKEOVER_BOUND_S with nothing lost."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import psycopg
import pytest

from pgbridge.metrics import RECEIVED_LSN
from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.http import metric, scrape, status
from tests.support.kafka import read_topic
from tests.support.postgres import execute, server_clock, wait_published
from tests.support.transactions import insert_lsn
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

# ha.standby_retry_s (1 s) + connect + START_REPLICATION, with room for a loaded CI machine.
TAKEOVER_BOUND_S = 10.0


def refused_lock_polls_since(dsn: str, mark: datetime) -> int:
    """Leader-lock connections of this database that polled the lock after ``mark`` and hold none.

    A standby polls ``pg_try_advisory_lock`` on its own connection every ``ha.standby_retry_s``; one
    seen here polled after ``mark`` and was refused: the positive signal that makes "the standby
    stays a standby" more than "nothing happened yet".
    """
    rows = execute(
        dsn,
        "SELECT count(*) FROM pg_stat_activity a WHERE a.datname = current_database()"
        " AND a.application_name = 'pgbridge-leader' AND a.query LIKE 'SELECT pg_try_advisory_lock(%%'"
        " AND a.query_start > %s"
        " AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted)",
        (mark,),
    )
    return int(rows[0][0])


def _wal_insert_lsn(dsn: str) -> int:
    """The WAL insert position now: a replica whose received LSN is past it read what came before."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return insert_lsn(conn)


def test_the_standby_takes_over_when_the_active_replica_is_killed(pg_dsn: str, kafka_broker: Broker,
                                                                  topic_prefix: str) -> None:
    # given: two replicas with the same configuration
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never"})
    first = BridgeProcess(env).start(http=True)
    second = BridgeProcess(env).start(http=True)
    replicas = [first, second]
    try:
        ports = [r.http_port for r in replicas]
        assert None not in ports

        def one_streaming() -> BridgeProcess | None:
            streaming = [r for r in replicas if status(r.http_port or 0, "/streamingz") == 200]
            return streaming[0] if len(streaming) == 1 else None

        active = wait_until(one_streaming, timeout=60, message="exactly one replica should stream")
        standby = second if active is first else first
        assert standby.http_port is not None and active.http_port is not None
        standby_port, active_port = standby.http_port, active.http_port
        # the standby stays a standby: it polled the lock after the active replica took it, was refused
        elected = server_clock(pg_dsn)
        wait_until(lambda: refused_lock_polls_since(pg_dsn, elected) > 0, timeout=30,
                   message="the standby never polled the leader lock after the election")
        # a healthy standby is Ready (it does its job: rollouts complete, the PDB counts it) but not streaming
        assert status(standby_port, "/streamingz") == 503
        assert status(standby_port, "/readyz") == 200
        assert status(active_port, "/readyz") == 200
        assert metric(scrape(standby_port), "pgbridge_leader") == 0
        assert metric(scrape(active_port), "pgbridge_leader") == 1

        committed: list[int] = []
        stop = threading.Event()

        def workload() -> None:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                i = 0
                while not stop.is_set():
                    i += 1
                    conn.execute("INSERT INTO t VALUES (%s)", (i,))
                    committed.append(i)
                    time.sleep(0.005)  # pacing the workload, not a wait

        writer = threading.Thread(target=workload, daemon=True)
        writer.start()
        # the active replica is streaming the workload when it dies
        wait_until(lambda: len(committed) >= 100, timeout=60, message="the workload never got going")
        streaming = _wal_insert_lsn(pg_dsn)
        wait_until(lambda: metric(scrape(active_port), RECEIVED_LSN) > streaming, timeout=60,
                   message="the active replica never read the workload")
        # when: the active replica dies without any chance to clean up
        active.kill()
        killed = time.monotonic()
        wait_until(lambda: status(standby_port, "/streamingz") == 200, timeout=60, interval=0.1,
                   message="the standby never took over")
        takeover = time.monotonic() - killed
        # the new leader streams the workload before it stops
        taken_over = _wal_insert_lsn(pg_dsn)
        wait_until(lambda: metric(scrape(standby_port), RECEIVED_LSN) > taken_over, timeout=60,
                   message="the new leader never read the workload")
        stop.set()
        writer.join(30)
        # then: fast takeover, and every committed row is in Kafka once the new leader confirmed it
        # (the replayed records count towards min_count, so reading alone could end before the last rows)
        print(f"takeover after {takeover:.2f}s")
        assert takeover < TAKEOVER_BOUND_S
        wait_published(pg_dsn, topic_prefix)
        records = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.t", min_count=len(committed),
                             timeout=120, idle=2.0)
        store = load_schemas(kafka_broker.bootstrap, topic_prefix)
        ids = {store.decode(r.value)["after"]["id"] for r in records if r.value is not None}
        assert set(committed) <= ids, sorted(set(committed) - ids)[:10]
        assert standby.terminate() == 0, standby.log()
    finally:
        for replica in replicas:
            replica.kill()


def test_a_lost_lease_session_is_counted_as_a_postgres_reconnect_and_streaming_resumes(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    """The leader lock's own Postgres session ending (here its backend terminated; in production a
    restart or a network cut, which the replication connection may notice second) tears the session
    down like any transient Postgres failure: counted in ``pgbridge_reconnects_total{target=
    "postgres"}``, the lock taken again, streaming resumed, nothing lost."""
    # given: one streaming replica
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never"})
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=60, message="the replica never streamed")
        execute(pg_dsn, "INSERT INTO t VALUES (1)")
        wait_published(pg_dsn, topic_prefix)
        before = metric(scrape(port), "pgbridge_reconnects_total", target="postgres")
        # when: the lock's session is terminated, the replication connection left alone
        terminated = execute(pg_dsn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                                     " WHERE datname = current_database() AND application_name = 'pgbridge-leader'")
        assert terminated[0][0] == 1
        # then: counted as a Postgres reconnect, the lock taken again and streaming resumed
        wait_until(lambda: metric(scrape(port), "pgbridge_reconnects_total", target="postgres") > before,
                   timeout=30, message=f"a lost lease session was not counted as a reconnect:\n{bridge.log()}")
        wait_until(lambda: "leadership lost; standing by" in bridge.log(), timeout=10,
                   message="the lost lease session did not stand the replica by")
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=TAKEOVER_BOUND_S,
                   message="the replica never streamed again")
        execute(pg_dsn, "INSERT INTO t VALUES (2)")
        wait_published(pg_dsn, topic_prefix)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    rows = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.t", min_count=2, timeout=30)
    assert sorted(store.decode(r.value)["after"]["id"] for r in rows if r.value is not None) == [1, 2]
