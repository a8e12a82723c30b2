"""/readyz and /streamingz flip to 503 when Postgres or Kafka goes away and back to 200 when it
returns, while /healthz stays 200: an outage is not a reason to restart the pod (health.py)."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.http import metric, scrape, status
from tests.support.postgres import PgClusterFactory, create_database
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _flip(port: int, to: int, what: str, timeout: float = 60.0) -> float:
    """Wait until /readyz and /streamingz both answer ``to`` (a single replica with snapshot.mode
    never is either streaming or not connected, so the two agree here)."""
    started = time.monotonic()
    wait_until(lambda: status(port, "/readyz") == to and status(port, "/streamingz") == to, timeout=timeout,
               interval=0.2, message=f"/readyz and /streamingz never {to}: {what}")
    return time.monotonic() - started


def test_readyz_follows_postgres_and_kafka_availability(pg_cluster_factory: PgClusterFactory,
                                                       fresh_broker: Broker, topic_prefix: str) -> None:
    # given: a dedicated cluster (to stop it) and broker (to stop it), and a ready bridge
    cluster = pg_cluster_factory(18)
    create_database(cluster, "app")
    dsn = cluster.dsn("app")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    env = bridge_env(dsn, fresh_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never"})
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None
        _flip(port, 200, "at start")
        # when / then: Postgres stops: not ready, still healthy; back when it returns
        cluster.stop()
        down = _flip(port, 503, "after Postgres stopped", timeout=30)
        assert status(port, "/healthz") == 200
        cluster.start()
        up = _flip(port, 200, "after Postgres came back", timeout=90)
        assert metric(scrape(port), "pgbridge_reconnects_total", target="postgres") >= 1
        # when / then: the walsender is terminated: the bridge reconnects and is ready again
        cluster.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_replication")
        _flip(port, 200, "after the walsender was terminated", timeout=60)
        # when / then: Kafka stops: not ready; back when a broker returns
        fresh_broker.stop()
        kafka_down = _flip(port, 503, "after Kafka stopped", timeout=60)
        assert status(port, "/healthz") == 200
        fresh_broker.restart()
        kafka_up = _flip(port, 200, "after Kafka came back", timeout=120)
        print(f"postgres: 503 after {down:.1f}s, 200 after {up:.1f}s; kafka: 503 after {kafka_down:.1f}s, "
              f"200 after {kafka_up:.1f}s")
        assert bridge.terminate() == 0, bridge.log()
