"""Incremental snapshots while streaming continues (DBLog watermarks): on an SQL signal for a busy
table, and automatically for a table added to the publication at run time. Replaying each topic
per key gives exactly the table's final rows. The pause-, resume- and stop-snapshot signals hold,
release and end a snapshot while the stream goes on."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.abc import Query

from pgbridge.snapshot.incremental import (
    SIGNAL_PAUSE_SNAPSHOT,
    SIGNAL_RESUME_SNAPSHOT,
    SIGNAL_STOP_SNAPSHOT,
    emit_signal_sql,
)
from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.churn import Churn, create_filled_table
from tests.support.http import metric, scrape
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ROWS = 60_000


def _assert_replays(dsn: str, broker: Broker, prefix: str, table: str) -> int:
    events = read_events(broker.bootstrap, f"{prefix}.{table}", prefix, min_count=1, timeout=300, idle=3.0)
    got, want = replay(events), table_state(dsn, table, ("id",))
    assert not diff_states(got, want), diff_states(got, want)
    reads = [e.key["id"] for e in events if e.value is not None and e.value["op"] == "r"]
    assert len(reads) == len(set(reads)), "each row is read at most once"
    return len(reads)


def _wait_done(bridge: BridgeProcess, table: str, timeout: float = 300) -> None:
    try:
        wait_until(lambda: f"incremental snapshot of table done table={table}" in bridge.log()
                   or "skipped" in bridge.log(),
                   timeout=timeout, interval=0.3, message=f"incremental snapshot of {table} never finished")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{bridge.log()[-4000:]}") from None
    assert "skipped" not in bridge.log(), bridge.log()[-4000:]


def test_incremental_snapshot_of_a_busy_table_on_signal_replays_to_the_final_table(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: streaming only (no initial snapshot), a filled table under constant churn
    create_filled_table(pg_dsn, "public.busy", ROWS)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.busy", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "2000"})
    bridge = BridgeProcess(env).start()
    churn = Churn(pg_dsn, "public.busy", ROWS, seed=3)
    try:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        churn.start()
        # when: the operator signals a snapshot of the table
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(emit_signal_sql(["public.busy"]))
        _wait_done(bridge, "public.busy")
        churn.stop()
        wait_caught_up(pg_dsn, topic_prefix, timeout=300)
        # then: snapshot reads and stream events together are exactly the table
        reads = _assert_replays(pg_dsn, kafka_broker, topic_prefix, "public.busy")
        assert bridge.terminate() == 0, bridge.log()
    finally:
        churn.halt.set()
        bridge.kill()
    assert reads > ROWS * 0.5
    print(f"incremental reads={reads} churn transactions={churn.transactions}")


def test_table_added_to_the_publication_at_run_time_is_snapshotted_incrementally(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: the bridge streaming one table; a second, filled table not yet published
    create_filled_table(pg_dsn, "public.first", 100)
    create_filled_table(pg_dsn, "public.late", ROWS // 2)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.first", "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "2000",
                            "PGBRIDGE_SNAPSHOT__PUBLICATION_CHECK_S": "1"})
    bridge = BridgeProcess(env).start()
    churn = Churn(pg_dsn, "public.late", ROWS // 2, seed=4)
    try:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=120)
        churn.start()
        # when: the table joins the publication while it keeps changing
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'ALTER PUBLICATION "{topic_prefix}" ADD TABLE public.late')
        _wait_done(bridge, "public.late")
        churn.stop()
        wait_caught_up(pg_dsn, topic_prefix, timeout=300)
        # then
        reads = _assert_replays(pg_dsn, kafka_broker, topic_prefix, "public.late")
        _assert_replays(pg_dsn, kafka_broker, topic_prefix, "public.first")
        assert bridge.terminate() == 0, bridge.log()
    finally:
        churn.halt.set()
        bridge.kill()
    assert reads > 0


CONTROL_ROWS = 20_000


def _signal(dsn: str, *statements: Query) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _reads(broker: Broker, topic: str, prefix: str) -> int:
    """op=r records on the topic now (call after the slot confirmed everything committed)."""
    events = read_events(broker.bootstrap, topic, prefix, min_count=0, timeout=60, idle=2.0)
    return sum(1 for e in events if e.value is not None and e.value["op"] == "r")


def _settle(dsn: str, slot: str, marker: int) -> None:
    """A change committed now and everything before it confirmed: the bridge provably went on."""
    _signal(dsn, f"INSERT INTO public.calm VALUES ({marker}, 'marker', 0)")
    wait_caught_up(dsn, slot, timeout=120)


def test_pause_holds_an_incremental_snapshot_durably_and_resume_completes_it(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a streaming bridge (no initial snapshot) and a table of many small chunks
    create_filled_table(pg_dsn, "public.calm", CONTROL_ROWS)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.calm", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "200"})
    topic = f"{topic_prefix}.public.calm"
    bridge = BridgeProcess(env).start(http=True)
    try:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        # when: a snapshot is requested and paused at once
        _signal(pg_dsn, emit_signal_sql(["public.calm"]), emit_signal_sql([], kind=SIGNAL_PAUSE_SNAPSHOT))
        wait_until(lambda: "incremental snapshot paused" in bridge.log(), timeout=60, message="never paused")
        assert bridge.http_port is not None
        assert metric(scrape(bridge.http_port), "pgbridge_incremental_snapshot_paused") == 1
        # then: once the chunk in flight is through, nothing more is read while paused
        _settle(pg_dsn, topic_prefix, CONTROL_ROWS * 100)
        held = _reads(kafka_broker, topic, topic_prefix)
        _settle(pg_dsn, topic_prefix, CONTROL_ROWS * 100 + 1)
        assert _reads(kafka_broker, topic, topic_prefix) == held < CONTROL_ROWS
        # when: restarted, still paused; then resumed
        assert bridge.terminate() == 0, bridge.log()[-4000:]
        bridge = BridgeProcess(env, log_path=bridge.log_path).start(http=True)
        wait_until(lambda: "incremental snapshots are paused" in bridge.log(), timeout=60,
                   message="the pause did not survive the restart")
        _settle(pg_dsn, topic_prefix, CONTROL_ROWS * 100 + 2)
        assert _reads(kafka_broker, topic, topic_prefix) == held
        _signal(pg_dsn, emit_signal_sql([], kind=SIGNAL_RESUME_SNAPSHOT))
        _wait_done(bridge, "public.calm")
        assert bridge.http_port is not None
        assert metric(scrape(bridge.http_port), "pgbridge_incremental_snapshot_paused") == 0
        wait_caught_up(pg_dsn, topic_prefix, timeout=120)
        # then: the snapshot completed: every row read once, replay == table (the three markers too:
        # the restarted bridge planned the table again, after they were inserted)
        reads = _assert_replays(pg_dsn, kafka_broker, topic_prefix, "public.calm")
        assert reads == CONTROL_ROWS + 3
        assert bridge.terminate() == 0, bridge.log()[-4000:]
    finally:
        bridge.kill()


def test_stop_ends_an_incremental_snapshot_and_streaming_goes_on(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a streaming bridge and a snapshot of a table of many small chunks under way
    create_filled_table(pg_dsn, "public.calm", CONTROL_ROWS)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.calm", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "200"})
    topic = f"{topic_prefix}.public.calm"
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        # when: a stop of every table follows the request
        _signal(pg_dsn, emit_signal_sql(["public.calm"]), emit_signal_sql([], kind=SIGNAL_STOP_SNAPSHOT))
        wait_until(lambda: "incremental snapshot stopped" in bridge.log(), timeout=60, message="never stopped")
        # then: the snapshot reads no more, and changes keep streaming
        _settle(pg_dsn, topic_prefix, CONTROL_ROWS * 100)
        stopped = _reads(kafka_broker, topic, topic_prefix)
        _settle(pg_dsn, topic_prefix, CONTROL_ROWS * 100 + 1)
        events = read_events(kafka_broker.bootstrap, topic, topic_prefix, min_count=stopped + 2, timeout=60)
        assert sum(1 for e in events if e.value is not None and e.value["op"] == "r") == stopped < CONTROL_ROWS
        inserted = [e.key["id"] for e in events if e.value is not None and e.value["op"] == "c"]
        assert inserted == [CONTROL_ROWS * 100, CONTROL_ROWS * 100 + 1]
        assert "incremental snapshot of table done" not in bridge.log()
        assert bridge.terminate() == 0, bridge.log()[-4000:]
