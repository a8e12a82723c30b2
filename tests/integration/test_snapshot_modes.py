"""snapshot.mode and snapshot.filters through the real bridge and Apache Kafka:
``initial_only`` exits after the rows and a later ``never`` start streams from the snapshot's
consistent point; ``no_data`` publishes topics and writer schemas but no rows; ``when_needed`` takes
a new snapshot after the slot was invalidated, where ``initial`` refuses it; filters thin the initial
and incremental snapshots but not the stream, and bad ones are named by ``check`` and ``run``."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from pgbridge.snapshot.incremental import emit_signal_sql
from tests.support.bridge import BridgeProcess, bridge_env, decode_records, load_schemas, read_events
from tests.support.broker import Broker
from tests.support.churn import Churn, create_filled_table
from tests.support.cli import pgbridge
from tests.support.kafka import list_topics, read_topic
from tests.support.postgres import PgClusterFactory, create_database, execute, slot_confirmed_flush_lsn
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TABLE = "public.items"
ROWS = 5000
EXIT_TIMEOUT_S = 300.0


def _env(dsn: str, broker: Broker, prefix: str, mode: str, **extra: str) -> dict[str, str]:
    settings = {"PGBRIDGE_POSTGRES__TABLES": TABLE, "PGBRIDGE_SNAPSHOT__MODE": mode,
                "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "500"}
    settings.update(extra)
    return bridge_env(dsn, broker.bootstrap, prefix, extra=settings)


def _wait_exit(bridge: BridgeProcess) -> int:
    assert bridge.process is not None
    try:
        return bridge.process.wait(EXIT_TIMEOUT_S)
    except Exception:
        raise AssertionError(f"the bridge did not exit:\n{bridge.log()[-4000:]}") from None


def _wal_status(dsn: str, slot: str) -> str | None:
    rows = execute(dsn, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    return None if not rows else str(rows[0][0])


def _ops(values: list[dict[str, Any] | None]) -> list[str]:
    return [value["op"] for value in values if value is not None]


def test_initial_only_exits_after_the_rows_and_a_never_start_streams_on_without_loss_or_duplicates(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a filled table kept busy through both runs
    create_filled_table(pg_dsn, TABLE, ROWS)
    churn = Churn(pg_dsn, TABLE, ROWS, seed=11, pause_s=0.005)
    churn.start()
    topic = f"{topic_prefix}.{TABLE}"
    try:
        # when: snapshot.mode=initial_only runs
        first = BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, "initial_only")).start()
        with first:
            code = _wait_exit(first)
        # then: it exited 0 after the snapshot, streamed nothing, and kept the slot at its consistent point
        assert code == 0, first.log()[-4000:]
        assert "snapshot.mode=initial_only: stopping without streaming" in first.log()
        consistent = slot_confirmed_flush_lsn(pg_dsn, topic_prefix)
        assert consistent is not None, "initial_only must keep the slot"
        snapshot = read_events(kafka_broker.bootstrap, topic, topic_prefix, min_count=1, timeout=120, idle=3.0)
        assert set(_ops([e.value for e in snapshot])) == {"r"}, "initial_only streamed changes"
        reads = [e.key["id"] for e in snapshot if e.value is not None]
        assert len(reads) == len(set(reads)) > ROWS // 2
        assert {e.value["source"]["commit_lsn"] for e in snapshot if e.value is not None} == {consistent}

        # when: the churn goes on, then a start with snapshot.mode=never
        wait_until(lambda: (churn.transactions > 50), timeout=60, message="the churn made no progress")
        second = BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, "never")).start()
        with second:
            churn.stop()
            wait_caught_up(pg_dsn, topic_prefix, timeout=300)
            events = read_events(kafka_broker.bootstrap, topic, topic_prefix, min_count=len(snapshot) + 1,
                                 timeout=120, idle=3.0)
            assert second.terminate() == 0, second.log()[-4000:]
    finally:
        churn.halt.set()
    # then: it streamed from the consistent point: no new reads, every change once, replay == table
    changes = [e.value for e in events if e.value is not None and e.value["op"] != "r"]
    assert len([e for e in events if e.value is not None and e.value["op"] == "r"]) == len(reads)
    assert changes, "nothing was streamed"
    assert min(v["source"]["commit_lsn"] for v in changes) > consistent
    positions = [(v["source"]["commit_lsn"], v["transaction"]["total_order"]) for v in changes]
    assert len(positions) == len(set(positions)), "a change was published twice"
    got, want = replay(events), table_state(pg_dsn, TABLE, ("id",))
    assert not diff_states(got, want), diff_states(got, want)


def test_no_data_publishes_topics_and_writer_schemas_but_no_rows(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: two filled tables, and an outbox table (whose rows never reach a table topic)
    create_filled_table(pg_dsn, TABLE, 100)
    create_filled_table(pg_dsn, "public.others", 10)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, "
                     "type text, payload jsonb)")
    env = _env(pg_dsn, kafka_broker, topic_prefix, "no_data",
               PGBRIDGE_POSTGRES__TABLES=f"{TABLE},public.others,public.outbox",
               PGBRIDGE_OUTBOX__TABLES="public.outbox")
    with BridgeProcess(env).start() as bridge:
        # when: snapshot.mode=no_data starts
        wait_until(lambda: "topics and writer schemas published" in bridge.log(), timeout=120,
                   message="no_data never announced the tables")
        # then: both topics exist and the writer schemas are in _schemas before any change
        topics = {f"{topic_prefix}.{TABLE}", f"{topic_prefix}.public.others"}
        existing = list_topics(kafka_broker.bootstrap)
        assert topics <= existing
        assert f"{topic_prefix}.public.outbox" not in existing
        store = load_schemas(kafka_broker.bootstrap, topic_prefix)
        # when: one change after the start
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO public.items VALUES (1000, 'new', 0)")
        wait_caught_up(pg_dsn, topic_prefix, timeout=120)
        records = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.{TABLE}", min_count=1, timeout=60, idle=2.0)
        others = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.others", timeout=10, idle=1.0)
        assert bridge.terminate() == 0, bridge.log()[-4000:]
    # then: the change alone is on the topic (no snapshot rows), decodable with the schemas read before it
    events = decode_records(store, records)
    assert _ops([e.value for e in events]) == ["c"]
    assert others == []


# On 15 and 18: how an invalidated slot shows differs (wal_status 'lost' on 15, invalidation_reason on 17+).
@pytest.mark.each_pg_version
def test_when_needed_snapshots_again_after_the_slot_was_invalidated_and_initial_refuses_it(
        pg_version: int, pg_cluster_factory: PgClusterFactory, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a cluster that invalidates slots lagging by more than 1 MB of WAL, and a bridge that
    # snapshotted the table and stopped
    cluster = pg_cluster_factory(pg_version, {"max_slot_wal_keep_size": "1MB", "wal_keep_size": "0"})
    create_database(cluster, "app")
    dsn = cluster.dsn("app")
    create_filled_table(dsn, TABLE, 1000)
    with BridgeProcess(_env(dsn, kafka_broker, topic_prefix, "when_needed")).start() as bridge:
        bridge.wait_confirmed(dsn, topic_prefix, timeout=300, waiting_for="the first snapshot to finish")
        assert bridge.terminate() == 0, bridge.log()[-4000:]

    # when: WAL moves on past the limit while the bridge is stopped
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE filler (x text)")
        conn.execute("UPDATE public.items SET n = n + 1 WHERE id <= 10")

        def invalidated() -> bool:
            conn.execute("INSERT INTO filler VALUES ('x')")
            conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
            return _wal_status(dsn, topic_prefix) == "lost"

        wait_until(invalidated, timeout=120, interval=0.1, message="the slot was never invalidated")

    # then: snapshot.mode=initial refuses the slot with its clear error, in check and in run
    checked = pgbridge("check", env=_env(dsn, kafka_broker, topic_prefix, "initial"), timeout=300)
    assert checked.returncode == 1 and any("was invalidated" in line and "when_needed" in line
                                           for line in checked.stdout.splitlines()), checked.stdout
    with BridgeProcess(_env(dsn, kafka_broker, topic_prefix, "initial")).start() as refused:
        assert _wait_exit(refused) == 1, refused.log()[-4000:]
    assert "was invalidated" in refused.log() and "slot drop" in refused.log()
    # and: check tells that when_needed will recover
    checked = pgbridge("check", env=_env(dsn, kafka_broker, topic_prefix, "when_needed"), timeout=300)
    assert checked.returncode == 0 and any(line.startswith("warning:") and "run drops it" in line
                                           for line in checked.stdout.splitlines()), checked.stdout

    # when: snapshot.mode=when_needed starts, and a change follows
    with BridgeProcess(_env(dsn, kafka_broker, topic_prefix, "when_needed")).start() as bridge:
        wait_until(lambda: _wal_status(dsn, topic_prefix) not in (None, "lost"), timeout=300,
                   message=f"the slot was never recreated: {bridge.log()[-3000:]}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO public.items VALUES (5000, 'after', 0)")
        wait_caught_up(dsn, topic_prefix, timeout=300)
        events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.{TABLE}", topic_prefix, min_count=2001,
                             timeout=120, idle=3.0)
        assert bridge.terminate() == 0, bridge.log()[-4000:]
    # then: it said why, read every row a second time, and streams again
    assert "replication slot was invalidated" in bridge.log()
    ops = _ops([e.value for e in events])
    assert ops.count("r") == 2000 and ops[-1] == "c"
    got, want = replay(events), table_state(dsn, TABLE, ("id",))
    assert not diff_states(got, want), diff_states(got, want)



def test_filters_thin_the_initial_and_incremental_snapshots_but_not_the_stream(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: 1000 rows, a filter keeping the even ids, chunks of 300 rows
    create_filled_table(pg_dsn, TABLE, 1000)
    env = _env(pg_dsn, kafka_broker, topic_prefix, "initial", PGBRIDGE_SNAPSHOT__CHUNK_ROWS="300",
               PGBRIDGE_SNAPSHOT__FILTERS=json.dumps({TABLE: "id % 2 = 0"}))
    topic = f"{topic_prefix}.{TABLE}"
    with BridgeProcess(env).start() as bridge:
        # when: the initial snapshot, a change of an odd row, then an incremental snapshot on signal
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=300, waiting_for="the initial snapshot to finish")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE public.items SET v = 'odd and streamed' WHERE id = 1")
            conn.execute(emit_signal_sql([TABLE], "pgbridge.signal"))
        wait_until(lambda: f"incremental snapshot of table done table={TABLE}" in bridge.log(), timeout=300,
                   message=f"the incremental snapshot never finished: {bridge.log()[-3000:]}")
        wait_caught_up(pg_dsn, topic_prefix, timeout=120)
        events = read_events(kafka_broker.bootstrap, topic, topic_prefix, min_count=1001, timeout=120, idle=3.0)
        assert bridge.terminate() == 0, bridge.log()[-4000:]
    # then: each snapshot read exactly the even rows, and the odd row's update was streamed
    values = [e.value for e in events if e.value is not None]
    reads = [v["after"]["id"] for v in values if v["op"] == "r"]
    assert sorted(reads) == sorted([*range(2, 1001, 2), *range(2, 1001, 2)])
    assert [v["after"]["v"] for v in values if v["op"] == "u"] == ["odd and streamed"]


def test_bad_filters_are_one_line_each_in_check_and_stop_run_with_exit_2(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a captured table and one left out of the publication
    create_filled_table(pg_dsn, TABLE, 10)
    create_filled_table(pg_dsn, "public.outside", 10)
    filters = {TABLE: "id >", "public.outside": "id > 1"}
    env = _env(pg_dsn, kafka_broker, topic_prefix, "initial", PGBRIDGE_SNAPSHOT__FILTERS=json.dumps(filters))
    with BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, "never")).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=120)
        assert bridge.terminate() == 0  # the publication exists from here on
    # when: check, then run, with the bad filters
    checked = pgbridge("check", env=env, timeout=300)
    ran = pgbridge("run", env=env, timeout=300)
    # then: each filter is one line naming it and its fix; run refuses to start
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert any(f"condition of {TABLE} is invalid: syntax error" in line and "fix:" in line for line in lines), lines
    assert any("names public.outside, which is not captured" in line and "ALTER PUBLICATION" in line
               for line in lines), lines
    assert ran.returncode == 2, ran.stdout + ran.stderr
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "snapshot.filters" in errors[0], ran.stderr[-3000:]
    # and: a condition naming a missing column is refused too
    unknown = pgbridge("check", env={**env, "PGBRIDGE_SNAPSHOT__FILTERS": json.dumps({TABLE: "nope > 1"})}, timeout=300)
    assert any(f"condition of {TABLE} is invalid" in line and "nope" in line for line in unknown.stdout.splitlines())
