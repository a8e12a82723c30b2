"""Transaction-consistent mirrors: after every micro-batch the mirrored tables together show a
state Postgres had. Transfers move amounts between rows of two tables in single transactions, so
the total over both is constant in Postgres; micro-batches are cut small (maxOffsetsPerTrigger)
so they end in the middle of transactions; after each one the mirrored total is the constant.
"""

from __future__ import annotations

import random
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.consistent import PENDING
from pgbridge_spark.mirror import BatchResult, MirrorJob
from pgbridge_spark.progress import TableProgress
from tests.spark.mirror_support import assert_mirrored, read_table
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.postgres import wait_published

# Delta commits cost Spark jobs; a shared 2-core machine runs them slowly
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]

ACCOUNTS = 20
TOTAL = Decimal("20000.00")


def transfers(dsn: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(count):
            amount = Decimal(rng.randint(1, 5000)) / 100
            # from one table to the other, touching a third row now and then
            source, target = rng.sample(["checking", "savings"], 2)
            rows = (rng.randrange(ACCOUNTS), rng.randrange(ACCOUNTS))
            moved = rng.randrange(ACCOUNTS) if rng.random() < 0.2 else None
            while True:  # two writers lock rows in either order: Postgres aborts one of a deadlock, retried
                try:
                    with conn.transaction():
                        conn.execute(f"UPDATE {source} SET amount = amount - %s WHERE id = %s", (amount, rows[0]))
                        conn.execute(f"UPDATE {target} SET amount = amount + %s WHERE id = %s", (amount, rows[1]))
                        if moved is not None:
                            conn.execute("UPDATE checking SET amount = amount - 1 WHERE id = %s", (moved,))
                            conn.execute("UPDATE savings SET amount = amount + 1 WHERE id = %s", (moved,))
                    break
                except psycopg.errors.DeadlockDetected:
                    continue


def mirrored_total(output: Path) -> tuple[Decimal, int]:
    total, rows = Decimal(0), 0
    for table in ("public.checking", "public.savings"):
        if (output / table).exists():
            values = [r["amount"] for r in read_table(output / table)[1]]
            total += sum(values, Decimal(0))
            rows += len(values)
    return total, rows


def pending_history(spark: Any, output: Path) -> list[tuple[str, int | None, int | None, int]]:
    """Per commit of ``_pgbridge/pending``, oldest first: the operation, the cut and the records
    held as its progress records them, and the rows it holds at that version."""
    path = str(output / PENDING)
    out = []
    for row in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect():
        progress = TableProgress.from_metadata(row["userMetadata"])
        held = spark.read.format("delta").option("versionAsOf", row["version"]).load(path).count()
        out.append((row["operation"], progress.cut, progress.pending, held))
    return out


def test_every_micro_batch_shows_a_committed_state(spark: Any, pg_dsn: str, apache_kafka: Broker,
                                                   topic_prefix: str, tmp_path: Path) -> None:
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE checking (id int PRIMARY KEY, amount numeric(14,2) NOT NULL)")
        conn.execute("CREATE TABLE savings (id int PRIMARY KEY, amount numeric(14,2) NOT NULL)")
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.checking,public.savings",
                            "PGBRIDGE_SNAPSHOT__MODE": "never"})
    output = tmp_path / "mirror"
    config = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix, output=str(output),
                          checkpoint=str(tmp_path / "checkpoint"), consistent=True,
                          max_offsets_per_trigger=37, trigger_seconds=0.5)
    observed: list[tuple[int, int | None, Decimal, int]] = []

    def check(batch_id: int, result: BatchResult) -> None:
        total, rows = mirrored_total(output)
        observed.append((batch_id, result.cut, total, rows))

    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.transaction():
            half = TOTAL / 2 / ACCOUNTS
            for table in ("checking", "savings"):
                conn.execute(f"INSERT INTO {table} SELECT g, %s FROM generate_series(0, {ACCOUNTS - 1}) g", (half,))
        # when: transfers run while the job mirrors in small micro-batches
        query = MirrorJob(spark, config, on_batch=check).start()
        try:
            writers = [threading.Thread(target=transfers, args=(pg_dsn, 20, seed)) for seed in (1, 2)]
            for writer in writers:
                writer.start()
            for writer in writers:
                writer.join()
            with psycopg.connect(pg_dsn) as conn:
                row = conn.execute("SELECT (SELECT sum(amount) FROM checking) + (SELECT sum(amount) FROM savings)"
                                   ).fetchone()
            assert row is not None and row[0] == TOTAL
            wait_published(pg_dsn, topic_prefix)
            # every record in Kafka processed and committed, the last transactions' ends included
            # (polling the tables instead would run Spark jobs beside the stream's own)
            query.processAllAvailable()
        finally:
            query.stop()
        # ... and one more transaction, whose micro-batch ends where the transaction does, after one
        # that left nothing past its cut. The job is stopped while it is published: a running query
        # could start a micro-batch between the transaction's records on its two topics.
        caught_up = len(observed)
        with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.transaction():
            conn.execute("UPDATE checking SET amount = amount - 1 WHERE id = 0")
            conn.execute("UPDATE savings SET amount = amount + 1 WHERE id = 0")
        wait_published(pg_dsn, topic_prefix)
        query = MirrorJob(spark, config, on_batch=check).start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert bridge.terminate() == 0, bridge.log()
    for table in ("public.checking", "public.savings"):
        assert_mirrored(pg_dsn, output, table)
    # ... the pending table's every commit records the records it holds; a batch with none past its
    # cut after one that left none is a commit without data
    history = pending_history(spark, output)
    assert all(pending == held for _, _, pending, held in history), history
    assert any(pending for _, _, pending, _ in history), f"no micro-batch ended inside a transaction: {history}"
    last_cut = observed[-1][1]
    assert len(observed) > caught_up and last_cut is not None and last_cut > (observed[caught_up - 1][1] or 0)
    assert history[-1][:3] == ("SET TBLPROPERTIES", last_cut, 0), history
    # then: every micro-batch left either nothing or a state with the constant total
    assert len(observed) >= 5, observed
    assert any(cut is not None and rows for _, cut, _, rows in observed)
    bad = [o for o in observed if o[3] and o[2] != TOTAL]
    assert not bad, f"micro-batches showing half a transaction: {bad[:5]}"
    cuts = [cut or 0 for _, cut, _, _ in observed]
    assert cuts == sorted(cuts)

