"""Two replicas of one slot: one streams, one stands by; SIGKILL the active one and the standby
takes over within TAKEOVER_BOUND_S with nothing lost."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.http import metric, scrape, status
from tests.support.kafka import read_topic
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

# ha.standby_retry_s (1 s) + connect + START_REPLICATION, with room for a loaded CI machine.
TAKEOVER_BOUND_S = 10.0


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

        def one_ready() -> BridgeProcess | None:
            ready = [r for r in replicas if status(r.http_port or 0, "/readyz") == 200]
            return ready[0] if len(ready) == 1 else None

        active = wait_until(one_ready, timeout=60, message="exactly one replica should be ready")
        standby = second if active is first else first
        assert standby.http_port is not None and active.http_port is not None
        time.sleep(2)  # the standby stays a standby
        assert status(standby.http_port, "/readyz") == 503
        assert metric(scrape(standby.http_port), "pgbridge_leader") == 0
        assert metric(scrape(active.http_port), "pgbridge_leader") == 1

        committed: list[int] = []
        stop = threading.Event()

        def workload() -> None:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                i = 0
                while not stop.is_set():
                    i += 1
                    conn.execute("INSERT INTO t VALUES (%s)", (i,))
                    committed.append(i)
                    time.sleep(0.005)

        writer = threading.Thread(target=workload, daemon=True)
        writer.start()
        time.sleep(2)
        # when: the active replica dies without any chance to clean up
        active.kill()
        killed = time.monotonic()
        wait_until(lambda: status(standby.http_port or 0, "/readyz") == 200, timeout=60, interval=0.1,
                   message="the standby never took over")
        takeover = time.monotonic() - killed
        time.sleep(2)
        stop.set()
        writer.join(30)
        # then: fast takeover, and every committed row is in Kafka
        print(f"takeover after {takeover:.2f}s")
        assert takeover < TAKEOVER_BOUND_S
        records = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.t", min_count=len(committed),
                             timeout=120, idle=2.0)
        store = load_schemas(kafka_broker.bootstrap, topic_prefix)
        ids = {store.decode(r.value)["after"]["id"] for r in records if r.value is not None}
        assert set(committed) <= ids, sorted(set(committed) - ids)[:10]
        assert standby.terminate() == 0, standby.log()
    finally:
        for replica in replicas:
            replica.kill()
