"""Tables named as Postgres allows (quotes, mixed case, spaces, dots, unicode), listed SQL-quoted in
``postgres.tables``: created in the publication with their exact names, snapshotted, streamed and
snapshotted again on a signal, each on its own topic named per the contract."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgbridge.snapshot.incremental import emit_signal_sql
from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.kafka import list_topics
from tests.support.replay import RowKey, diff_states, replay, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

# (schema, table) as the catalog has them, how postgres.tables lists them, the topic's suffix.
TABLES: list[tuple[tuple[str, str], str, str]] = [
    (("public", "Order Items"), 'public."Order Items"', "public.Order_Items"),
    (("My.Schema", 'a"b'), '"My.Schema"."a""b"', "My.Schema.a_b"),
    (("public", "Ünïcode 表"), 'public."Ünïcode 表"', "public._n_code__"),
    (("public", "mixedcase"), "Public.MixedCase", "public.mixedcase"),  # unquoted: folded
]
ROWS = 50


def _state(dsn: str, schema: str, table: str) -> dict[RowKey, dict[str, Any]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table)))
        return {(("id", row["id"]),): dict(row) for row in cur.fetchall()}


def test_sql_quoted_table_names_are_published_and_replayed_exactly(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: the tables, filled, and a decoy whose name only differs in case from one of them
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier("My.Schema")))
        conn.execute('CREATE TABLE public."MixedCase" (id int PRIMARY KEY, note text)')
        for (schema, table), _, _ in TABLES:
            ident = sql.Identifier(schema, table)
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, note text)").format(ident))
            conn.execute(sql.SQL("INSERT INTO {} SELECT i, 'row ' || i FROM generate_series(1, %s) i")
                         .format(ident), (ROWS,))
        conn.execute('INSERT INTO public."MixedCase" VALUES (1, \'decoy\')')
    listed = ", ".join(written for _, written, _ in TABLES)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={"PGBRIDGE_POSTGRES__TABLES": listed})
    with BridgeProcess(env).start() as bridge:
        # when: the snapshot, then streamed changes, then an incremental snapshot of quoted names
        def slot_exists() -> bool:
            with psycopg.connect(pg_dsn) as check:
                return check.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                                     (topic_prefix,)).fetchone() is not None

        wait_until(slot_exists, timeout=90, interval=0.3, message=f"the initial snapshot never finished: {bridge.log()[-2000:]}")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for (schema, table), _, _ in TABLES:
                ident = sql.Identifier(schema, table)
                conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'new')").format(ident), (ROWS + 1,))
                conn.execute(sql.SQL("UPDATE {} SET note = 'changed' WHERE id <= 5").format(ident))
                conn.execute(sql.SQL("DELETE FROM {} WHERE id = 6").format(ident))
            conn.execute('INSERT INTO public."MixedCase" VALUES (2, \'decoy\')')
            conn.execute(emit_signal_sql(['public."Order Items"', '"My.Schema"."a""b"']))
        wait_until(lambda: "incremental snapshot of table done" in bridge.log()
                   and bridge.log().count("incremental snapshot of table done") >= 2,
                   timeout=90, interval=0.5, message=f"the incremental snapshot never finished: {bridge.log()[-3000:]}")
        wait_caught_up(pg_dsn, topic_prefix, timeout=60)
        # then: one topic per table, named per the contract, replaying exactly to the table
        topics = {t for t in list_topics(kafka_broker.bootstrap) if t.startswith(f"{topic_prefix}.")
                  and not t.startswith(f"{topic_prefix}._")} - {f"{topic_prefix}.transactions",
                                                               f"{topic_prefix}.messages"}
        assert topics == {f"{topic_prefix}.{suffix}" for _, _, suffix in TABLES}
        assert all(re.fullmatch(r"[A-Za-z0-9._-]+", topic) for topic in topics)
        for (schema, table), _, suffix in TABLES:
            events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.{suffix}", topic_prefix,
                                 min_count=ROWS + 3, timeout=60)
            values = [e.value for e in events if e.value is not None]
            assert {(v["source"]["schema"], v["source"]["table"]) for v in values} == {(schema, table)}
            got, want = replay(events), _state(pg_dsn, schema, table)
            assert not diff_states(got, want), f"{schema}.{table}: {diff_states(got, want)}"
            reads = sum(1 for v in values if v["op"] == "r")
            signalled = table in ("Order Items", 'a"b')
            assert reads == ROWS + (ROWS if signalled else 0), f"{schema}.{table}: {reads} snapshot reads"
        assert bridge.terminate() == 0, bridge.log()
