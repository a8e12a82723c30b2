"""``postgres.tables`` after the publication exists: one pgbridge created (marked by its comment) is
altered at start to publish exactly the listed tables, and a table added to the list is streamed (its
rows from before the restart by the incremental snapshot of a table new in the publication); someone
else's publication that differs stops the start, and ``pgbridge check``, with the exact
``ALTER PUBLICATION`` to run."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, change_events, read_events
from tests.support.broker import Broker
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TABLES = "CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY); CREATE TABLE c (id int PRIMARY KEY)"


def _env(pg_dsn: str, broker: Broker, prefix: str, tables: str) -> dict[str, str]:
    return bridge_env(pg_dsn, broker.bootstrap, prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": tables, "PGBRIDGE_HA__LEADER_ELECTION": "false",
        "PGBRIDGE_SNAPSHOT__PUBLICATION_CHECK_S": "1"})


def _published(pg_dsn: str, publication: str) -> list[str]:
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s "
                            "ORDER BY 1", (publication,)).fetchall()
    return [str(row[0]) for row in rows]


def test_a_table_added_to_postgres_tables_is_published_and_streamed_after_a_restart(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: pgbridge created the publication for a and b, and streamed
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLES)
    with BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, "public.a,public.b")).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO a VALUES (1)")
        read_events(kafka_broker.bootstrap, f"{topic_prefix}.public.a", topic_prefix, min_count=1)
        assert bridge.terminate() == 0
    assert _published(pg_dsn, topic_prefix) == ["public.a", "public.b"]
    # when: a row lands in c while pgbridge is stopped, and it restarts with c listed too
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO c VALUES (1)")
    with BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, "public.a,public.b,public.c")).start() as bridge:
        wait_until(lambda: "publication altered to postgres.tables" in bridge.log(), timeout=60,
                   message="publication never altered")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO c VALUES (2)")
        events = change_events(read_events(kafka_broker.bootstrap, f"{topic_prefix}.public.c", topic_prefix,
                                           min_count=2, timeout=90))
        assert bridge.terminate() == 0
    log = bridge.log()
    # then: c is published, its earlier row read by the incremental snapshot and the new one streamed
    assert _published(pg_dsn, topic_prefix) == ["public.a", "public.b", "public.c"]
    seen = {(e["op"], e["after"]["id"]) for e in events}
    assert {("r", 1), ("c", 2)} <= seen <= {("r", 1), ("c", 2), ("r", 2)}, events  # the snapshot may read 2 too
    assert "added=['public.c'] dropped=[]" in log, log
    assert "publication mode" in log and "managed_by_pgbridge=True" in log and "mode=filtered" in log

    # and: a table taken off the list is dropped from the publication at the next start
    with BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, "public.a,public.c")).start() as bridge:
        wait_until(lambda: "publication altered to postgres.tables" in bridge.log(), timeout=60,
                   message="publication never altered")
        assert bridge.terminate() == 0
    assert _published(pg_dsn, topic_prefix) == ["public.a", "public.c"]


def test_someone_elses_publication_that_differs_stops_run_and_check_with_the_statement(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a DBA's publication of a and b
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"{TABLES}; CREATE PUBLICATION {topic_prefix} FOR TABLE a, b")
    env = _env(pg_dsn, kafka_broker, topic_prefix, "public.a,public.b,public.c")
    statement = f"ALTER PUBLICATION {topic_prefix} ADD TABLE public.c;"
    # when: pgbridge runs with c listed too
    run = subprocess.run([sys.executable, "-m", "pgbridge", "run"], env=env, capture_output=True, text=True,
                         timeout=120)
    # then: it stops with the statement, and leaves the publication alone
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"publication {topic_prefix} is not pgbridge's" in run.stderr and statement in run.stderr, run.stderr
    assert _published(pg_dsn, topic_prefix) == ["public.a", "public.b"]
    check = subprocess.run([sys.executable, "-m", "pgbridge", "check"], capture_output=True, text=True, timeout=120,
                           env={**{k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}, **env})
    assert check.returncode == 1
    [line] = [line for line in check.stdout.splitlines() if "differs from postgres.tables" in line]
    assert line.startswith("error:") and f"fix: as its owner: {statement}" in line
    # a table it has and the list lacks too: one SET TABLE
    run = subprocess.run([sys.executable, "-m", "pgbridge", "run"], capture_output=True, text=True, timeout=120,
                         env={**env, "PGBRIDGE_POSTGRES__TABLES": "public.a,public.c"})
    assert f"ALTER PUBLICATION {topic_prefix} SET TABLE public.a, public.c;" in run.stderr, run.stderr
