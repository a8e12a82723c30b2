"""Postgres → pgbridge → broker → mirror job in changelog mode (local[2]) → every change once, in order.

One scenario: inserts, an update, a delete, a multi-row transaction across two tables, a truncate;
then changes written while the job runs continuously, the job stopped mid-stream, its last
micro-batch replayed (commit mark lost) and pgbridge's records re-published. The changelog read
back holds each committed change exactly once per ``(commit_lsn, total_order)``, with its op,
key, before/after values and positions, and per table in ``(commit_lsn, total_order)`` order it is
the workload's sequence of changes.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import read_table, run_available_now
from tests.spark.test_mirror_end_to_end import republish
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.postgres import wait_published
from tests.support.waiting import wait_until

# Delta commits cost Spark jobs; a shared 2-core machine runs them slowly
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]

TABLES = ("public.accounts", "public.events")
SCHEMA = """
CREATE TABLE accounts (id int PRIMARY KEY, name text NOT NULL, balance numeric(10,2));
ALTER TABLE accounts REPLICA IDENTITY FULL;
CREATE TABLE events (id int PRIMARY KEY, v text);
"""
STREAMED = 12  # transactions written while the job runs continuously

# (op, key id, before, after) per table in commit order; rows as (id, name, balance) / (id, v)
Change = tuple[str, int | None, tuple[Any, ...] | None, tuple[Any, ...] | None]


def workload(dsn: str) -> tuple[dict[str, list[Change]], int]:
    """The changes, as expected per table, and the position of the multi-row transaction's
    accounts insert within it (its ``total_order``)."""
    d = Decimal
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO accounts VALUES (1, 'ann', 10.00)")
        conn.execute("INSERT INTO accounts VALUES (2, 'bob', 20.00)")
        conn.execute("UPDATE accounts SET balance = 15.00 WHERE id = 1")
        conn.execute("DELETE FROM accounts WHERE id = 2")
        with conn.transaction():  # multi-row, both tables interleaved
            conn.execute("INSERT INTO events VALUES (1, 'a'), (2, 'b'), (3, 'c')")
            conn.execute("INSERT INTO accounts VALUES (3, 'cy', 30.00)")
            conn.execute("UPDATE events SET v = 'b2' WHERE id = 2")
            conn.execute("DELETE FROM events WHERE id = 3")
        conn.execute("TRUNCATE events")
        conn.execute("INSERT INTO events VALUES (4, 'after truncate')")
    accounts: list[Change] = [
        ("c", 1, None, (1, "ann", d("10.00"))),
        ("c", 2, None, (2, "bob", d("20.00"))),
        ("u", 1, (1, "ann", d("10.00")), (1, "ann", d("15.00"))),
        ("d", 2, (2, "bob", d("20.00")), None),
        ("c", 3, None, (3, "cy", d("30.00"))),
    ]
    events: list[Change] = [
        ("c", 1, None, (1, "a")), ("c", 2, None, (2, "b")), ("c", 3, None, (3, "c")),
        ("u", 2, None, (2, "b2")),  # default replica identity: no old row
        ("d", 3, (3, None), None),  # ... and only the key of a deleted one
        ("t", None, None, None),
        ("c", 4, None, (4, "after truncate")),
    ]
    return {"public.accounts": accounts, "public.events": events}, 4


def streamed_work(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(STREAMED):
            with conn.transaction():
                conn.execute("INSERT INTO events VALUES (%s, %s)", (100 + i, f"e{i}"))
                conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")
            time.sleep(0.25)  # pacing: the changes spread over several micro-batches


def streamed_changes() -> dict[str, list[Change]]:
    return {
        "public.accounts": [("u", 1, (1, "ann", Decimal(15 + i).quantize(Decimal("0.01"))),
                             (1, "ann", Decimal(16 + i).quantize(Decimal("0.01")))) for i in range(STREAMED)],
        "public.events": [("c", 100 + i, None, (100 + i, f"e{i}")) for i in range(STREAMED)],
    }


def changelog(output: Path, table: str) -> list[dict[str, Any]]:
    """The changelog of ``schema.table`` (every ``batch_id=N/``), in (commit_lsn, total_order) order."""
    _, rows = read_table(output / table)
    return sorted(rows, key=lambda r: (r["commit_lsn"], r["total_order"]))


def values(row: dict[str, Any] | None, columns: tuple[str, ...]) -> tuple[Any, ...] | None:
    return None if row is None else tuple(row[c] for c in columns)


def assert_changelog(output: Path, table: str, columns: tuple[str, ...], expected: list[Change]) -> list[Any]:
    rows = changelog(output, table)
    positions = Counter((r["commit_lsn"], r["total_order"]) for r in rows)
    repeated = {p: n for p, n in positions.items() if n > 1}
    assert not repeated, f"{table}: changes written more than once: {repeated}"
    got = [(r["op"], None if r["key"] is None else r["key"]["id"], values(r["before"], columns),
            values(r["after"], columns)) for r in rows]
    assert got == expected, f"{table}: changelog {got} != workload {expected}"
    for r in rows:
        assert r["source"]["commit_lsn"] == r["commit_lsn"], r
        assert r["source"]["schema"] + "." + r["source"]["table"] == table, r
        assert r["transaction"] is not None and r["transaction"]["total_order"] == r["total_order"], r
        assert r["topic"].endswith("." + table) and r["offset"] >= 0 and r["batch_id"] is not None, r
        assert r["unchanged_toast_columns"] == [], r
    return rows


def test_changelog_holds_every_change_once_in_commit_order_through_a_replayed_batch(
        spark: Any, pg_dsn: str, apache_kafka: Broker, topic_prefix: str, tmp_path: Path) -> None:
    # given: the tables, the bridge, a changelog job reading a few records per micro-batch
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": ",".join(TABLES)})
    output, checkpoint = tmp_path / "changelog", tmp_path / "checkpoint"
    config = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix, output=str(output),
                          checkpoint=str(checkpoint), mode="changelog",
                          # the Python decoder end to end (the other Spark tests run the default, jvm)
                          decoder="python", max_offsets_per_trigger=8, trigger_seconds=0.5)
    batches: list[int] = []
    job = MirrorJob(spark, config, on_batch=lambda batch_id, result: batches.append(batch_id))
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        # when: the workload, then one run of the job over everything published
        expected, accounts_order = workload(pg_dsn)
        wait_published(pg_dsn, topic_prefix)
        run_available_now(job)
        # then: the multi-row transaction spans micro-batches and both tables, positions shared
        assert len(batches) >= 2, batches
        accounts = assert_changelog(output, "public.accounts", ("id", "name", "balance"), expected["public.accounts"])
        events = assert_changelog(output, "public.events", ("id", "v"), expected["public.events"])
        multi = [r for r in events if r["commit_lsn"] == accounts[-1]["commit_lsn"]]
        assert [r["total_order"] for r in multi] == [1, 2, 3, 5, 6] and accounts[-1]["total_order"] == accounts_order
        assert {r["transaction"]["id"] for r in [*multi, accounts[-1]]} == {accounts[-1]["transaction"]["id"]}

        # when: the job runs continuously and is stopped mid-stream, then started again (a new job
        # object) with its last micro-batch replayed (commit mark lost) and pgbridge's records
        # re-published
        first_run = len(batches)
        query = job.start()
        writer = threading.Thread(target=streamed_work, args=(pg_dsn,))
        writer.start()
        wait_until(lambda: len(batches) >= first_run + 2, timeout=600,  # a Delta batch is many Spark jobs
                   message="micro-batches while the workload runs")
        query.stop()
        writer.join()
        wait_published(pg_dsn, topic_prefix)
        last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        planned = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
        for name in (str(last), f".{last}.crc"):
            (checkpoint / "commits" / name).unlink(missing_ok=True)
        assert republish(apache_kafka.bootstrap, f"{topic_prefix}.public.accounts", 0) > 0
        restarted = len(batches)
        run_available_now(MirrorJob(spark, config, on_batch=lambda batch_id, result: batches.append(batch_id)))
        # then: the replay ran and wrote nothing twice; the whole changelog is the workload's
        if planned == last:
            assert batches[restarted] == last, (batches, last)
        for table in TABLES:
            expected[table] += streamed_changes()[table]
        assert_changelog(output, "public.accounts", ("id", "name", "balance"), expected["public.accounts"])
        assert_changelog(output, "public.events", ("id", "v"), expected["public.events"])
        assert job.decoder_counts["python"] > 0 and job.decoder_counts["jvm"] == 0, job.decoder_counts
        assert bridge.terminate() == 0, bridge.log()
    shutil.rmtree(tmp_path, ignore_errors=True)
