"""Large transactions that Postgres streams before they commit (``logical_decoding_work_mem=64kB``):
rolled-back savepoints and aborted transactions never appear, committed ones come out whole, once,
in commit order, through a small pgbridge buffer that spills to disk."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker, require_transactions
from tests.support.http import metric, scrape
from tests.support.kafka import read_topic
from tests.support.transactions import (
    consume_topic,
    slot_stream_stats,
    streaming_cluster,
    streaming_dsn,
    wait_for_streaming,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
__all__ = ["streaming_cluster", "streaming_dsn"]  # fixtures used by name below

SMALL_BUFFER = str(4 * 1024 * 1024)


def _bridge(dsn: str, broker: Broker, prefix: str, **extra: str) -> BridgeProcess:
    env = bridge_env(dsn, broker.bootstrap, prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.items", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_BUFFER__MEMORY_BYTES": SMALL_BUFFER, **extra})
    bridge = BridgeProcess(env).start(http=True)
    bridge.wait_confirmed(dsn, prefix, timeout=60)
    return bridge


def _insert(conn: psycopg.Connection[Any], first: int, last: int, who: str = "x") -> None:
    conn.execute("INSERT INTO items SELECT g, %s FROM generate_series(%s::bigint, %s::bigint) g",
                 (who, first, last))


def _million_row_transaction(conn: psycopg.Connection[Any]) -> None:
    """One transaction; three savepoints rolled back (one of them with a released savepoint nested
    inside), one released savepoint survives: 1,000,000 surviving rows (``_survivors``)."""
    _insert(conn, 1, 200_000)
    conn.execute("SAVEPOINT s1")
    _insert(conn, 200_001, 210_000)
    conn.execute("ROLLBACK TO SAVEPOINT s1")
    _insert(conn, 210_001, 500_000)
    conn.execute("SAVEPOINT s2")
    _insert(conn, 500_001, 505_000)
    conn.execute("SAVEPOINT s3")
    _insert(conn, 505_001, 510_000)
    conn.execute("RELEASE SAVEPOINT s3")
    conn.execute("ROLLBACK TO SAVEPOINT s2")
    conn.execute("SAVEPOINT s4")
    _insert(conn, 510_001, 700_000)
    conn.execute("RELEASE SAVEPOINT s4")
    _insert(conn, 700_001, 1_000_000)
    conn.execute("SAVEPOINT s5")
    _insert(conn, 1_000_001, 1_010_000)
    conn.execute("ROLLBACK TO SAVEPOINT s5")
    _insert(conn, 1_010_001, 1_030_000)
    conn.commit()


def _survivors() -> Iterator[int]:
    yield from range(1, 200_001)
    yield from range(210_001, 500_001)
    yield from range(510_001, 1_000_001)
    yield from range(1_010_001, 1_030_001)


# Postgres 18 only: the volume, the savepoints and the spill are the same on 15; what streaming does
# differently there (protocol 3 "on" vs 4 "parallel", Stream Abort without its LSN) is covered on both
# by the concurrent test below and by the decoder's unit tests per protocol version.
@pytest.mark.slow
def test_million_row_transaction_with_rolled_back_savepoints_publishes_exactly_the_survivors_once(
        streaming_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given
    with psycopg.connect(streaming_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, who text)")
    with _bridge(streaming_dsn, kafka_broker, topic_prefix) as bridge:
        # when: one transaction; three savepoints rolled back (one of them with a released
        # savepoint nested inside), one released savepoint survives
        with psycopg.connect(streaming_dsn) as conn:
            _million_row_transaction(conn)

        # then: exactly the 1,000,000 surviving rows, in insert order, each once, one transaction.
        # The schemas topic appears with the first record, after Postgres has streamed the whole
        # transaction: on a loaded machine that takes longer than load_schemas' default 30 s.
        store = load_schemas(kafka_broker.bootstrap, topic_prefix, timeout=900)
        expected = _survivors()
        state: dict[str, Any] = {"n": 0, "commit_lsn": None}

        def check(key: bytes | None, value: bytes | None) -> None:
            assert value is not None
            event = store.decode(value)
            state["n"] += 1
            assert event["after"]["id"] == next(expected), f"record {state['n']}"
            assert event["transaction"]["total_order"] == state["n"]
            if state["commit_lsn"] is None:
                state["commit_lsn"] = event["source"]["commit_lsn"]
            assert event["source"]["commit_lsn"] == state["commit_lsn"]

        read = consume_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.items", check,
                             count=1_000_000, timeout=900, idle=5.0)
        assert read == 1_000_000
        assert next(expected, None) is None
        wait_for_streaming(streaming_dsn, topic_prefix, transactions=1)  # Postgres really streamed it
        assert bridge.http_port is not None
        metrics = scrape(bridge.http_port)
        assert metric(metrics, "pgbridge_spilled_bytes_total") > 0, "the 4 MiB buffer never spilled"
        assert metric(metrics, "pgbridge_buffered_bytes") == 0
        assert metric(metrics, "pgbridge_transactions_total", outcome="committed") == 1
        assert bridge.terminate() == 0, bridge.log()


@pytest.mark.each_pg_version  # streaming is protocol 3 "on" on 15, protocol 4 "parallel" on 16+
def test_concurrent_streamed_transactions_come_out_whole_in_commit_order_and_the_aborted_one_never(
        streaming_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given
    with psycopg.connect(streaming_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, who text)")
    batch, rounds = 500, 12
    base = {"a": 0, "b": 100_000, "c": 200_000}
    with _bridge(streaming_dsn, kafka_broker, topic_prefix) as bridge:
        # when: three transactions grow in interleaved batches, small committed transactions pass
        # between them; then C aborts, B commits, A commits
        conns = {who: psycopg.connect(streaming_dsn) for who in base}
        plain = psycopg.connect(streaming_dsn, autocommit=True)
        try:
            for r in range(rounds):
                for who, conn in conns.items():
                    first = base[who] + r * batch + 1
                    _insert(conn, first, first + batch - 1, who)
                plain.execute("INSERT INTO items VALUES (%s, 'plain')", (300_000 + r,))
            conns["c"].rollback()
            conns["b"].commit()
            plain.execute("INSERT INTO items VALUES (400000, 'between')")
            conns["a"].commit()
        finally:
            for conn in conns.values():
                conn.close()
            plain.close()

        # then
        total = 2 * batch * rounds + rounds + 1
        records = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.items", min_count=total,
                             timeout=300, idle=3.0)
        store = load_schemas(kafka_broker.bootstrap, topic_prefix)
        events = [store.decode(r.value) for r in records if r.value is not None]
        assert len(events) == total
        runs: list[tuple[int, list[dict[str, Any]]]] = []
        for event in events:
            commit_lsn = event["source"]["commit_lsn"]
            if not runs or runs[-1][0] != commit_lsn:
                runs.append((commit_lsn, []))
            runs[-1][1].append(event)
        commit_lsns = [commit_lsn for commit_lsn, _ in runs]
        assert commit_lsns == sorted(set(commit_lsns)), "a transaction was split or out of commit order"
        for _, run in runs:
            assert [e["transaction"]["total_order"] for e in run] == list(range(1, len(run) + 1))
        by_who = [(run[0]["after"]["who"], [e["after"]["id"] for e in run]) for _, run in runs]
        assert by_who == [
            *(("plain", [300_000 + r]) for r in range(rounds)),
            ("b", list(range(base["b"] + 1, base["b"] + batch * rounds + 1))),
            ("between", [400_000]),
            ("a", list(range(base["a"] + 1, base["a"] + batch * rounds + 1))),
        ]
        # the two committed transactions are far above 64kB, so Postgres must have streamed them; the
        # aborted one may have been discarded before it was ever streamed
        stats = wait_for_streaming(streaming_dsn, topic_prefix, transactions=2)
        assert stats["stream_count"] > 3, stats  # in several blocks each, interleaved on the wire
        assert bridge.http_port is not None
        metrics = scrape(bridge.http_port)
        assert metric(metrics, "pgbridge_buffered_bytes") == 0
        assert metric(metrics, "pgbridge_transactions_total", outcome="committed") == rounds + 3
        aborted = metric(metrics, "pgbridge_transactions_total", outcome="aborted")
        assert aborted <= 1
        if slot_stream_stats(streaming_dsn, topic_prefix)["stream_txns"] >= 3:
            assert aborted == 1  # Postgres streamed the aborted one too, so its Stream Abort was counted
        assert bridge.terminate() == 0, bridge.log()


@pytest.mark.slow
def test_exactly_once_million_row_transaction_split_in_parts_and_killed_midway_arrives_once(
        streaming_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    """Exactly-once mode, the split rule and a crash inside it: the million-row transaction with
    rolled-back savepoints keeps one Kafka transaction open long enough to be committed in parts
    (transaction timeout 10 s: a part every 5 s); pgbridge is killed -9 after a part committed and
    restarted; a read_committed consumer sees exactly the survivors once, in order."""
    require_transactions()
    # given
    with psycopg.connect(streaming_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, who text)")
    # The split is due once the Kafka transaction is 5 s old (half the smallest timeout the config
    # takes); with the compiled kernels a fast machine publishes the million rows in less, and the
    # transaction is then never split. The Python code (the reference, same bytes) takes about twice
    # as long: the split is certain, and the kill lands inside the transaction.
    extra = {"PGBRIDGE_KAFKA__EXACTLY_ONCE": "true", "PGBRIDGE_KAFKA__TRANSACTION_TIMEOUT_MS": "10000",
             "PGBRIDGE_HA__LEADER_ELECTION": "false", "PGBRIDGE_PURE_PYTHON": "1"}
    bridge = _bridge(streaming_dsn, kafka_broker, topic_prefix, **extra)
    try:
        # when: the same transaction as above
        with psycopg.connect(streaming_dsn) as conn:
            _million_row_transaction(conn)
        # ... and pgbridge dies right after it committed a first part of it
        wait_until(lambda: "huge transaction committed in parts" in bridge.log(), timeout=300,
                   message="the transaction was never split")
        bridge.kill()
        bridge = BridgeProcess(bridge.env, log_path=bridge.log_path).start(http=True)
        # then: exactly the survivors, once each, in order (the restart skipped the committed part)
        store = load_schemas(kafka_broker.bootstrap, topic_prefix)
        expected = _survivors()
        state: dict[str, Any] = {"n": 0}

        def check(key: bytes | None, value: bytes | None) -> None:
            assert value is not None
            event = store.decode(value)
            state["n"] += 1
            assert event["after"]["id"] == next(expected), f"record {state['n']}"
            assert event["transaction"]["total_order"] == state["n"]

        read = consume_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.items", check,
                             count=1_000_000, timeout=900, idle=5.0)
        assert read == 1_000_000
        assert next(expected, None) is None
        assert '"complete":false' in bridge.log(), "the restart did not resume from a committed part"
        assert bridge.terminate() == 0, bridge.log()
    finally:
        bridge.kill()
