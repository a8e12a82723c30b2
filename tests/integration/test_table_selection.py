"""Which tables are captured (docs/capture.md): ``postgres.table_include`` / ``table_exclude`` decide
the publication pgbridge creates and keeps in sync, ``postgres.publication_mode`` how it is managed,
and the in-stream filter drops what a wider publication carries; ``pgbridge check`` names the
misconfigurations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgbridge.snapshot.incremental import emit_signal_sql
from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.cli import check
from tests.support.kafka import list_topics
from tests.support.postgres import run_sql
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ROWS = 20
DROPPED_LOG = "dropping changes of a table that is in the stream but not selected"



def _fetch(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, params).fetchall()


def _slot_exists(dsn: str, slot: str) -> bool:
    return bool(_fetch(dsn, "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", slot))


def _table_topics(bootstrap: str, prefix: str) -> set[str]:
    """Row-change topics of ``prefix`` (not internal, transactions or messages)."""
    return {t for t in list_topics(bootstrap) if t.startswith(f"{prefix}.") and not t.startswith(f"{prefix}._")} \
        - {f"{prefix}.transactions", f"{prefix}.messages"}


def _published(dsn: str, publication: str) -> set[str]:
    return {f"{s}.{t}" for s, t in _fetch(dsn, "SELECT schemaname, tablename FROM pg_publication_tables"
                                                " WHERE pubname = %s", publication)}


def _assert_replays(bootstrap: str, dsn: str, prefix: str, table: str, keys: tuple[str, ...]) -> list[Any]:
    want = table_state(dsn, table, keys)
    events = read_events(bootstrap, f"{prefix}.{table}", prefix, min_count=len(want), timeout=60)
    got = replay(events)
    assert not diff_states(got, want), f"{table}: {diff_states(got, want)}"
    return events


def _create_tables(dsn: str, *names: str) -> None:
    for name in names:
        run_sql(dsn, f"CREATE TABLE {name} (id int PRIMARY KEY, note text)",
             f"INSERT INTO {name} SELECT i, 'row ' || i FROM generate_series(1, {ROWS}) i")


def test_include_and_exclude_select_the_publication_topics_and_rows(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: public.orders (selected), public.orders_audit (included, then excluded), a partitioned
    # public.events (selected, through its root), other.skipped (not included)
    run_sql(pg_dsn, "CREATE SCHEMA other")
    _create_tables(pg_dsn, "public.orders", "public.orders_audit", "other.skipped")
    run_sql(pg_dsn, "CREATE TABLE public.events (id int, day date, note text, PRIMARY KEY (id, day))"
                 " PARTITION BY RANGE (day)",
         "CREATE TABLE public.events_2025 PARTITION OF public.events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')",
         "CREATE TABLE public.events_2026 PARTITION OF public.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')",
         "INSERT INTO public.events SELECT i, DATE '2025-06-01' + i * 20, 'e' FROM generate_series(1, 20) i")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLE_INCLUDE": r"public\..*",
        "PGBRIDGE_POSTGRES__TABLE_EXCLUDE": r"public\..*_audit",
        "PGBRIDGE_SNAPSHOT__PUBLICATION_CHECK_S": "1"})
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: _slot_exists(pg_dsn, topic_prefix), timeout=90, interval=0.3,
                   message=f"the initial snapshot never finished: {bridge.log()[-2000:]}")
        # then: the publication holds exactly the selection, the partitioned table through its root
        assert _published(pg_dsn, topic_prefix) == {"public.orders", "public.events"}
        # when: changes to every table, and two tables created later: one matching, one excluded
        run_sql(pg_dsn, "INSERT INTO public.orders VALUES (100, 'new')", "UPDATE public.orders SET note = 'x' WHERE id < 5",
             "DELETE FROM public.orders WHERE id = 6", "INSERT INTO public.orders_audit VALUES (100, 'no')",
             "INSERT INTO other.skipped VALUES (100, 'no')",
             "INSERT INTO public.events VALUES (100, '2026-03-01', 'new')",
             "UPDATE public.events SET note = 'moved' WHERE id = 1")
        _create_tables(pg_dsn, "public.late", "public.late_audit")
        wait_until(lambda: "incremental snapshot of table done" in bridge.log(), timeout=90, interval=0.5,
                   message=f"the new matching table was never snapshotted: {bridge.log()[-3000:]}")
        run_sql(pg_dsn, "INSERT INTO public.late VALUES (100, 'streamed')", "DELETE FROM public.late WHERE id = 1",
             "INSERT INTO public.late_audit VALUES (100, 'no')")
        wait_caught_up(pg_dsn, topic_prefix, timeout=60)
        # then: exactly the selected tables' topics, each replaying to its table
        assert _published(pg_dsn, topic_prefix) == {"public.orders", "public.events", "public.late"}
        assert _table_topics(kafka_broker.bootstrap, topic_prefix) == {
            f"{topic_prefix}.public.{name}" for name in ("orders", "events", "late")}
        _assert_replays(kafka_broker.bootstrap, pg_dsn, topic_prefix, "public.orders", ("id",))
        events = _assert_replays(kafka_broker.bootstrap, pg_dsn, topic_prefix, "public.events", ("day", "id"))
        assert {e.value["source"]["table"] for e in events if e.value is not None} == {"events"}
        late = _assert_replays(kafka_broker.bootstrap, pg_dsn, topic_prefix, "public.late", ("id",))
        assert sum(1 for e in late if e.value is not None and e.value["op"] == "r") == ROWS
        assert bridge.terminate() == 0, bridge.log()


def test_all_tables_publication_is_filtered_in_stream(pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: two tables; only public.kept selected, the publication FOR ALL TABLES
    _create_tables(pg_dsn, "public.kept", "public.unselected")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__PUBLICATION_MODE": "all_tables", "PGBRIDGE_POSTGRES__TABLE_INCLUDE": r"public\.kept"})
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: _slot_exists(pg_dsn, topic_prefix), timeout=90, interval=0.3,
                   message=f"the initial snapshot never finished: {bridge.log()[-2000:]}")
        assert _fetch(pg_dsn, "SELECT puballtables FROM pg_publication WHERE pubname = %s", topic_prefix) == [(True,)]
        assert "public.unselected" in _published(pg_dsn, topic_prefix)  # so only the filter can drop it
        # when: a transaction touching both, and one touching only the unselected table
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("INSERT INTO public.unselected VALUES (100, 'no')")
            conn.execute("INSERT INTO public.kept VALUES (100, 'yes')")
            conn.execute("UPDATE public.unselected SET note = 'no' WHERE id = 1")
        run_sql(pg_dsn, "UPDATE public.unselected SET note = 'still no'", "TRUNCATE public.unselected")
        run_sql(pg_dsn, "INSERT INTO public.kept VALUES (101, 'yes')")
        wait_caught_up(pg_dsn, topic_prefix, timeout=60)
        # then: the unselected table appears nowhere; the in-stream filter is what dropped it
        assert _table_topics(kafka_broker.bootstrap, topic_prefix) == {f"{topic_prefix}.public.kept"}
        events = _assert_replays(kafka_broker.bootstrap, pg_dsn, topic_prefix, "public.kept", ("id",))
        streamed = [e.value for e in events if e.value is not None and e.value["op"] == "c"]
        assert [v["transaction"]["total_order"] for v in streamed] == [1, 1]  # as if alone in its transaction
        log = bridge.log()
        assert DROPPED_LOG in log and "public.unselected" in log
        assert log.count(DROPPED_LOG) == 1  # logged once per table
        # when: an operator signal asks for incremental snapshots of both tables
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(emit_signal_sql(["public.unselected", "public.kept"]))
        # then: the selected table is snapshotted, the unselected one refused with a log line
        wait_until(lambda: "cannot snapshot a table that postgres.table_include/table_exclude do not select"
                   in bridge.log(), timeout=60,
                   message="the signal for the unselected table was not refused")
        def snapshot_reads() -> set[int]:
            events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.public.kept", topic_prefix, min_count=1,
                                 timeout=30, idle=0.5)
            return {e.value["after"]["id"] for e in events if e.value is not None and e.value["op"] == "r"}

        # ids 100 and 101 were inserted after the initial snapshot: only an incremental one reads them
        wait_until(lambda: {100, 101} <= snapshot_reads(), timeout=90, interval=1.0,
                   message="the selected table was not snapshotted")
        wait_caught_up(pg_dsn, topic_prefix, timeout=60)
        assert _table_topics(kafka_broker.bootstrap, topic_prefix) == {f"{topic_prefix}.public.kept"}
        assert bridge.terminate() == 0, bridge.log()


def test_disabled_mode_needs_the_publication_and_never_alters_it(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    _create_tables(pg_dsn, "public.kept", "public.unselected")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__PUBLICATION_MODE": "disabled", "PGBRIDGE_POSTGRES__TABLE_INCLUDE": r"public\.kept",
        "PGBRIDGE_SNAPSHOT__MODE": "never"})
    # when: the publication is missing: the bridge fails with the statement to run
    with BridgeProcess(env).start() as bridge:
        assert bridge.process is not None
        assert bridge.process.wait(90) == 1, bridge.log()
        assert (f"CREATE PUBLICATION {topic_prefix} FOR TABLE public.kept WITH (publish_via_partition_root = true);"
                in bridge.log()), bridge.log()
    assert not _fetch(pg_dsn, "SELECT 1 FROM pg_publication WHERE pubname = %s", topic_prefix)
    # when: a DBA made it with more tables than the selection
    run_sql(pg_dsn, f"CREATE PUBLICATION {topic_prefix} FOR TABLE public.unselected")
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: _slot_exists(pg_dsn, topic_prefix), timeout=90, interval=0.3,
                   message=f"the bridge never started: {bridge.log()[-2000:]}")
        run_sql(pg_dsn, "INSERT INTO public.unselected VALUES (100, 'no')")
        run_sql(pg_dsn, f"ALTER PUBLICATION {topic_prefix} ADD TABLE public.kept")
        run_sql(pg_dsn, "INSERT INTO public.kept VALUES (100, 'yes')", "INSERT INTO public.unselected VALUES (101, 'no')")
        wait_caught_up(pg_dsn, topic_prefix, timeout=60)
        # then: pgbridge left the publication as it was and streamed only the selection
        assert _published(pg_dsn, topic_prefix) == {"public.kept", "public.unselected"}
        assert _table_topics(kafka_broker.bootstrap, topic_prefix) == {f"{topic_prefix}.public.kept"}
        events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.public.kept", topic_prefix, min_count=1)
        assert [e.value["after"]["id"] for e in events if e.value is not None] == [100]
        assert DROPPED_LOG in bridge.log()
        assert bridge.terminate() == 0, bridge.log()



def _check_env(dsn: str, bootstrap: str, **extra: str) -> dict[str, str]:
    return {"PGBRIDGE_POSTGRES__DSN": dsn, "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "PGBRIDGE_POSTGRES__PUBLICATION": "pub", **extra}


def test_check_names_each_selection_misconfiguration(pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    _create_tables(pg_dsn, "public.kept")
    bootstrap = kafka_broker.bootstrap
    # patterns that match nothing
    result = check(_check_env(pg_dsn, bootstrap, PGBRIDGE_POSTGRES__TABLE_INCLUDE=r"shop\..*"))
    assert result.returncode == 1
    assert any(r"postgres.table_include shop\..* match no table" in line and "fix:" in line
               for line in result.stdout.splitlines()), result.stdout
    # the selection alone passes: run would create the publication
    result = check(_check_env(pg_dsn, bootstrap, PGBRIDGE_POSTGRES__TABLE_INCLUDE=r"public\..*"))
    assert result.returncode == 0, result.stdout + result.stderr
    # disabled with no publication: the statement to run
    result = check(_check_env(pg_dsn, bootstrap, PGBRIDGE_POSTGRES__TABLE_INCLUDE=r"public\..*",
                               PGBRIDGE_POSTGRES__PUBLICATION_MODE="disabled"))
    assert result.returncode == 1
    assert any("publication_mode is disabled" in line and "CREATE PUBLICATION pub FOR TABLE public.kept" in line
               for line in result.stdout.splitlines()), result.stdout
    # all_tables as a role that is not a superuser: the superuser fix
    user = f"{topic_prefix}_bridge"
    run_sql(pg_dsn, f"CREATE ROLE {user} LOGIN REPLICATION", f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {user}")
    try:
        params = conninfo_to_dict(pg_dsn)
        params["user"] = user
        result = check(_check_env(make_conninfo("", **params), bootstrap,
                                   PGBRIDGE_POSTGRES__PUBLICATION_MODE="all_tables"))
        assert result.returncode == 1
        assert any("FOR ALL TABLES needs a superuser" in line and f"ALTER ROLE {user} SUPERUSER" in line
                   and "CREATE PUBLICATION pub FOR ALL TABLES" in line
                   for line in result.stdout.splitlines()), result.stdout
    finally:
        run_sql(pg_dsn, f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {user}", f"DROP ROLE {user}")
    # postgres.tables together with a pattern: a configuration error naming both keys
    result = check(_check_env(pg_dsn, bootstrap, PGBRIDGE_POSTGRES__TABLES="public.kept",
                               PGBRIDGE_POSTGRES__TABLE_INCLUDE=r"public\..*"))
    assert result.returncode == 2
    assert "postgres.tables and postgres.table_include" in result.stderr


def test_drop_slot_on_stop_drops_it_after_sigterm_and_never_after_a_crash(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    _create_tables(pg_dsn, "public.kept")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.kept", "PGBRIDGE_POSTGRES__DROP_SLOT_ON_STOP": "true"})
    # when: a crash (kill -9) while streaming
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: _slot_exists(pg_dsn, topic_prefix), timeout=90, interval=0.3,
                   message=f"the bridge never started: {bridge.log()[-2000:]}")
        assert "postgres.drop_slot_on_stop is on" in bridge.log()  # warned at start
        run_sql(pg_dsn, "INSERT INTO public.kept VALUES (100, 'before the crash')")
        wait_caught_up(pg_dsn, topic_prefix, timeout=60)
        bridge.kill()
    # then: the slot is still there
    assert _slot_exists(pg_dsn, topic_prefix)
    # when: a restart resumes from it, streams a change, and stops cleanly
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: "replicating" in bridge.log(), timeout=90, interval=0.3,
                   message=f"the bridge never resumed: {bridge.log()[-2000:]}")
        run_sql(pg_dsn, "INSERT INTO public.kept VALUES (101, 'before the stop')")
        wait_caught_up(pg_dsn, topic_prefix, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
        # then: the slot is gone, said in the log, and what was committed before the stop is in Kafka
        assert not _slot_exists(pg_dsn, topic_prefix), bridge.log()
        assert "replication slot dropped on stop" in bridge.log()
    events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.public.kept", topic_prefix, min_count=ROWS + 2)
    assert {100, 101} <= {e.value["after"]["id"] for e in events if e.value is not None}


def _schemas(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}
    return subprocess.run([sys.executable, "-m", "pgbridge", "schemas"], env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


def test_schemas_prints_the_selected_tables(pg_dsn: str, kafka_broker: Broker) -> None:
    # given: three tables, patterns that select two of them, and no publication yet
    _create_tables(pg_dsn, "public.kept", "public.kept_too", "public.dropped")
    patterns = {"PGBRIDGE_POSTGRES__TABLE_INCLUDE": r"public\.kept.*,public\.dropped",
                "PGBRIDGE_POSTGRES__TABLE_EXCLUDE": r"public\.dropped"}
    # when / then: schemas prints what run would capture
    result = _schemas(_check_env(pg_dsn, kafka_broker.bootstrap, **patterns))
    assert result.returncode == 0, result.stderr
    assert [t["table"] for t in json.loads(result.stdout)] == ["public.kept", "public.kept_too"]
    # given: a FOR ALL TABLES publication that publishes the third table too
    run_sql(pg_dsn, "CREATE PUBLICATION pub FOR ALL TABLES")
    try:
        # when / then: only the tables the in-stream filter keeps
        result = _schemas(_check_env(pg_dsn, kafka_broker.bootstrap, PGBRIDGE_POSTGRES__PUBLICATION_MODE="all_tables",
                                     **patterns))
        assert result.returncode == 0, result.stderr
        assert [t["table"] for t in json.loads(result.stdout)] == ["public.kept", "public.kept_too"]
        # ... and without any selection, every table of the publication
        result = _schemas(_check_env(pg_dsn, kafka_broker.bootstrap))
        assert [t["table"] for t in json.loads(result.stdout)] == ["public.dropped", "public.kept", "public.kept_too"]
    finally:
        run_sql(pg_dsn, "DROP PUBLICATION pub")
