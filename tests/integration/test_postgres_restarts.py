"""Postgres going away under a running workload: a fast shutdown, an immediate shutdown (crash
recovery on start) and the walsender terminated with ``pg_terminate_backend``. Each time pgbridge
reconnects with backoff, ``/readyz`` says 503 while Postgres is down and 200 once it streams again,
and in the end the topic replays to exactly the table: nothing lost, nothing invented."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.churn import create_filled_table
from tests.support.http import metric, scrape, status
from tests.support.postgres import (
    PgCluster,
    PgClusterFactory,
    RetryingWriter,
    create_database,
    slot_confirmed_flush_lsn,
    wal_insert_lsn,
)
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TABLE = "public.items"
ROWS = 1000


def _wait_or_log(bridge: BridgeProcess, predicate: Callable[[], bool], timeout: float, message: str) -> float:
    """Wait for ``predicate``; on timeout the failure carries the end of the bridge's log."""
    started = time.monotonic()
    try:
        wait_until(predicate, timeout=timeout, interval=0.1, message=message)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; bridge log:\n{bridge.log()[-4000:]}") from None
    return time.monotonic() - started


def _readyz(bridge: BridgeProcess, want: int, what: str, timeout: float) -> float:
    port = bridge.http_port
    assert port is not None
    return _wait_or_log(bridge, lambda: status(port, "/readyz") == want, timeout, f"/readyz never {want} {what}")


def _streaming_the_workload(dsn: str, bridge: BridgeProcess) -> None:
    """Wait until what the workload commits from now on is confirmed: the bridge streams under load."""
    mark = wal_insert_lsn(dsn)
    slot = bridge.env["PGBRIDGE_POSTGRES__SLOT"]
    _wait_or_log(bridge, lambda: (slot_confirmed_flush_lsn(dsn, slot) or 0) > mark, 60,
                 "the workload's changes are not confirmed")


def _reconnects(bridge: BridgeProcess) -> float:
    assert bridge.http_port is not None
    return metric(scrape(bridge.http_port), "pgbridge_reconnects_total", target="postgres")


def _outage(cluster: PgCluster, dsn: str, bridge: BridgeProcess, mode: str) -> str:
    """Stop Postgres with ``mode``, see /readyz go 503, start it, see /readyz 200 again."""
    _streaming_the_workload(dsn, bridge)
    before = _reconnects(bridge)
    cluster.stop(mode)
    down = _readyz(bridge, 503, f"after a {mode} shutdown", timeout=30)
    # reconnect attempts meet a server that is gone before it comes back
    _wait_or_log(bridge, lambda: _reconnects(bridge) > before, 60,
                 f"no reconnect attempt while Postgres was down after a {mode} shutdown")
    cluster.start()
    up = _readyz(bridge, 200, f"after the start following a {mode} shutdown", timeout=90)
    return f"{mode}: 503 after {down:.1f}s, 200 {up:.1f}s after start"


def test_postgres_restarts_lose_nothing(pg_version: int, pg_cluster_factory: PgClusterFactory,
                                        kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a cluster of the test's own, a filled table, a streaming bridge and a running workload
    cluster = pg_cluster_factory(pg_version)
    create_database(cluster, "app")
    dsn = cluster.dsn("app")
    create_filled_table(dsn, TABLE, ROWS)
    env = bridge_env(dsn, kafka_broker.bootstrap, topic_prefix, extra={"PGBRIDGE_POSTGRES__TABLES": TABLE})
    writer = RetryingWriter(dsn, ROWS)
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None
        bridge.wait_confirmed(dsn, topic_prefix, timeout=60, waiting_for="the initial snapshot to finish")
        _readyz(bridge, 200, "at start", timeout=30)
        writer.start()
        try:
            # when: a fast shutdown, an immediate one (crash recovery), a terminated walsender
            notes = [_outage(cluster, dsn, bridge, "fast"), _outage(cluster, dsn, bridge, "immediate")]
            reconnects = _reconnects(bridge)
            _streaming_the_workload(dsn, bridge)
            killed = cluster.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_replication")
            assert killed, "no walsender to terminate"
            wait_until(lambda: metric(scrape(port), "pgbridge_reconnects_total", target="postgres") > reconnects,
                       timeout=30, interval=0.2, message="no reconnect after the walsender was terminated")
            back = _readyz(bridge, 200, "after the walsender was terminated", timeout=60)
            notes.append(f"walsender terminated: 200 {back:.1f}s after the reconnect")
            _streaming_the_workload(dsn, bridge)
        finally:
            writer.stop()
        assert writer.committed > 100, f"the workload barely ran ({writer.committed} transactions)"
        # then: the bridge catches up, and the topic replays to exactly the table
        wait_caught_up(dsn, topic_prefix, timeout=60)
        events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.{TABLE}", topic_prefix,
                             min_count=ROWS, timeout=60)
        got, want = replay(events), table_state(dsn, TABLE, ("id",))
        assert not diff_states(got, want), diff_states(got, want)
        assert metric(scrape(port), "pgbridge_reconnects_total", target="postgres") >= 3
        assert bridge.terminate() == 0, bridge.log()
    print(f"PG{pg_version}: {writer.committed} transactions ({writer.failures} writer reconnects); "
          + "; ".join(notes))
