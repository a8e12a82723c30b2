"""Exactly-once snapshots: pgbridge killed with ``kill -9`` at many points of an initial snapshot
(small chunks, small Kafka transactions, three workers: kills land in the middle of chunks) and of
an incremental snapshot under churn, restarted each time. A ``read_committed`` reader then sees
each snapshot row once (per key for keyed tables, per row for the keyless one) and the replay of
every keyed topic equals its table (snapshot/progress.py says why this holds)."""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgbridge.snapshot.incremental import emit_signal_sql
from tests.support.bridge import BridgeProcess, Event, bridge_env, decode_records, load_schemas
from tests.support.broker import Broker, require_transactions
from tests.support.churn import Churn, create_filled_table
from tests.support.http import metric, scrape
from tests.support.kafka import read_topics
from tests.support.postgres import execute
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

KEYED = "public.keyed"  # bigint key (tests/support/churn.py), churned during the incremental snapshot
PAIRS = "public.pairs"  # composite key: resume points compare as rows
LOOSE = "public.loose"  # no key: read in ctid ranges
KEYED_ROWS, PAIR_ROWS, LOOSE_ROWS = 20_000, 6_000, 4_000
COMMITTED = "pgbridge_kafka_transactions_total"


@pytest.fixture(autouse=True)
def _apache_kafka_only() -> None:
    require_transactions()


def _tables(dsn: str) -> None:
    create_filled_table(dsn, KEYED, KEYED_ROWS)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pairs (k1 int, k2 text, v int, PRIMARY KEY (k1, k2))")
        conn.execute("INSERT INTO pairs SELECT g %% 97, 'k' || g, g FROM generate_series(1, %s) g", (PAIR_ROWS,))
        conn.execute("CREATE TABLE loose (a int, b text)")
        conn.execute("INSERT INTO loose SELECT g, repeat('x', g %% 50) FROM generate_series(1, %s) g",
                     (LOOSE_ROWS,))
        conn.execute("ANALYZE pairs; ANALYZE loose")


def _committed(bridge: BridgeProcess) -> float:
    assert bridge.http_port is not None
    return metric(scrape(bridge.http_port), COMMITTED, outcome="committed")


def _kill_after_commits(bridge: BridgeProcess, commits: float, done: Callable[[], bool]) -> bool:
    """Kill ``bridge`` once it committed ``commits`` Kafka transactions; False (not killed) if
    ``done()`` came first."""
    try:
        reached = wait_until(lambda: "done" if done() else _committed(bridge) >= commits, timeout=120,
                             interval=0.02, message=f"{commits} Kafka transactions never committed")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{bridge.log()[-4000:]}") from None
    if reached == "done":
        return False
    bridge.kill()
    return True


def _kill_mid_incremental(bridge: BridgeProcess, runs: int, commits: int, done: Callable[[], bool]) -> bool:
    """Once this run (the ``runs + 1``-th to log it) works on an incremental snapshot: kill it after
    ``commits`` more Kafka transactions, unless ``done()`` first."""
    wait_until(lambda: bridge.log().count("incremental snapshot of table started") > runs, timeout=120,
               message="the incremental snapshot never started")
    (base,) = wait_until(lambda: (_committed(bridge),), timeout=60, message="no metrics")
    return _kill_after_commits(bridge, base + commits, done)


def _slot_exists(dsn: str, slot: str) -> bool:
    return bool(execute(dsn, "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)))


def _reads(events: list[Event]) -> list[dict[str, Any]]:
    return [e.value for e in events if e.value is not None and e.value["op"] == "r"]


def _twice(counts: Counter[Any]) -> int:
    return sum(n - 1 for n in counts.values() if n > 1)


def test_kill_9_mid_chunk_of_initial_and_incremental_snapshots_shows_each_row_once(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: three tables, exactly-once, chunks of 2,500 rows read by three workers into Kafka
    # transactions of about 16 kB (a few hundred rows), so most commits end in the middle of a chunk
    _tables(pg_dsn)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": f"{KEYED},{PAIRS},{LOOSE}", "PGBRIDGE_SNAPSHOT__MODE": "initial",
        "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "2500", "PGBRIDGE_SNAPSHOT__WORKERS": "3",
        "PGBRIDGE_KAFKA__EXACTLY_ONCE": "true", "PGBRIDGE_KAFKA__TRANSACTION_MAX_BYTES": "16384",
        "PGBRIDGE_KAFKA__TRANSACTION_MAX_MS": "100", "PGBRIDGE_HA__LEADER_ELECTION": "false"})
    rnd = random.Random(25)
    bridge = BridgeProcess(env)
    churn = Churn(pg_dsn, KEYED, KEYED_ROWS, seed=5, pause_s=0.01)
    initial_kills = incremental_kills = 0
    try:
        # when: killed after a few Kafka transactions of each run, until the snapshot completes
        while initial_kills < 6:
            bridge = BridgeProcess(env, log_path=bridge.log_path).start(http=True)
            if not _kill_after_commits(bridge, rnd.randint(1, 6), lambda: _slot_exists(pg_dsn, topic_prefix)):
                break
            initial_kills += 1
        if not bridge.alive():
            bridge = BridgeProcess(env, log_path=bridge.log_path).start(http=True)
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=180, waiting_for="the initial snapshot to finish")
        # ... then an incremental snapshot of both keyed tables under churn, killed the same way
        churn.start()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(emit_signal_sql([KEYED, PAIRS]))

        def incremental_done() -> bool:
            log = bridge.log()
            return all(f"incremental snapshot of table done table={t}" in log for t in (KEYED, PAIRS))

        while incremental_kills < 4:
            if not _kill_mid_incremental(bridge, incremental_kills, rnd.randint(2, 12), incremental_done):
                break
            incremental_kills += 1
            bridge = BridgeProcess(env, log_path=bridge.log_path).start(http=True)
        wait_until(incremental_done, timeout=180, interval=0.2, message="the incremental snapshot never finished")
        churn.stop()
        wait_caught_up(pg_dsn, topic_prefix, timeout=180)
        topics = [f"{topic_prefix}.{table}" for table in (KEYED, PAIRS, LOOSE)]
        records = read_topics(kafka_broker.bootstrap, topics, min_count=1, timeout=180)
        store = load_schemas(kafka_broker.bootstrap, topic_prefix)
        assert bridge.terminate() == 0, bridge.log()[-4000:]
    finally:
        churn.halt.set()
        bridge.kill()

    # then: for a read_committed reader each snapshot row is there once ...
    events = {table: decode_records(store, records[f"{topic_prefix}.{table}"]) for table in (KEYED, PAIRS, LOOSE)}
    initial_lsn = min(v["source"]["commit_lsn"] for v in _reads(events[LOOSE]))
    twice: dict[str, int] = {}
    for table in (KEYED, PAIRS):
        reads = Counter((v["source"]["commit_lsn"] == initial_lsn, tuple(sorted(e.key.items())))
                        for e in events[table] if e.value is not None and e.value["op"] == "r"
                        for v in [e.value])
        twice[table] = _twice(reads)
        initial = sum(1 for (first, _) in reads if first)
        assert initial == {KEYED: KEYED_ROWS, PAIRS: PAIR_ROWS}[table], f"{table}: {initial} keys in the initial snapshot"
    loose = Counter((v["after"]["a"], v["after"]["b"]) for v in _reads(events[LOOSE]))
    twice[LOOSE] = _twice(loose)
    print(f"kills initial={initial_kills} incremental={incremental_kills} rows visible twice={twice}")
    assert twice == dict.fromkeys((KEYED, PAIRS, LOOSE), 0), f"rows visible twice: {twice}"
    # ... the keyless table is exactly its rows, and every keyed topic replays to its table
    assert set(loose) == {(a, "x" * (a % 50)) for a in range(1, LOOSE_ROWS + 1)}
    for table, key in ((KEYED, ("id",)), (PAIRS, ("k1", "k2"))):
        got, want = replay(events[table]), table_state(pg_dsn, table, key)
        assert not diff_states(got, want), f"{table}: {diff_states(got, want)}"
    # ... and the kills did land in the middle of chunks: restarts resumed chunks from a key
    resumed = sum(int(n) for n in re.findall(r"resuming the initial snapshot .*chunks_resumed=(\d+)", bridge.log()))
    assert initial_kills >= 3 and incremental_kills >= 2, (initial_kills, incremental_kills)
    assert resumed > 0, "no restart resumed a chunk from its middle"
    print(f"kills initial={initial_kills} incremental={incremental_kills} chunks resumed mid-way={resumed} "
          f"churn transactions={churn.transactions} rows visible twice=0")
