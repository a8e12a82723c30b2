"""Two-phase transactions (``PGBRIDGE_POSTGRES__TWO_PHASE=true``, protocol 3+): a prepared
transaction appears only after COMMIT PREPARED, at its commit position, exactly once even when
pgbridge is SIGKILLed in between; ROLLBACK PREPARED leaves no trace; the confirmed LSN never passes
a prepared transaction that is still waiting. Postgres runs with ``logical_decoding_work_mem=64kB``,
so the large prepared transaction is streamed and arrives as Stream Prepare."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker, require_transactions
from tests.support.http import metric, scrape
from tests.support.kafka import read_topic
from tests.support.postgres import execute, run_sql, slot_confirmed_flush_lsn
from tests.support.transactions import (
    insert_lsn,
    streaming_cluster,
    streaming_dsn,
    wait_for_streaming,
)
from tests.support.waiting import wait_until

# Two-phase decoding is protocol 3 on 15 and 4 on 16+ (Stream Prepare inside parallel streaming).
pytestmark = [pytest.mark.integration, pytest.mark.each_pg_version]
__all__ = ["streaming_cluster", "streaming_dsn"]  # fixtures used by name below


def _env(dsn: str, broker: Broker, prefix: str, *, exactly_once: bool = False) -> dict[str, str]:
    return bridge_env(dsn, broker.bootstrap, prefix,
                      extra={"PGBRIDGE_POSTGRES__TABLES": "public.items", "PGBRIDGE_SNAPSHOT__MODE": "never",
                             "PGBRIDGE_POSTGRES__TWO_PHASE": "true",
                             "PGBRIDGE_KAFKA__EXACTLY_ONCE": "true" if exactly_once else "false",
                             "PGBRIDGE_BUFFER__MEMORY_BYTES": str(256 * 1024)})


def _start(env: dict[str, str], dsn: str, prefix: str, log_from: BridgeProcess | None = None) -> BridgeProcess:
    bridge = (BridgeProcess(env, log_path=log_from.log_path) if log_from else BridgeProcess(env)).start(http=True)
    bridge.wait_confirmed(dsn, prefix, timeout=60)
    return bridge


def _prepare(dsn: str, gid: str, statements: list[str]) -> int:
    """Run ``statements`` in a transaction and PREPARE it as ``gid``; returns the WAL insert position
    just before the PREPARE record, which lies after every change of the transaction."""
    with psycopg.connect(dsn) as conn:
        for statement in statements:
            conn.execute(statement)
        before_prepare = insert_lsn(conn)
        conn.execute(f"PREPARE TRANSACTION '{gid}'")
    return before_prepare



def _events(bootstrap: str, prefix: str, count: int, *, idle: float = 2.0) -> list[dict[str, Any]]:
    records = read_topic(bootstrap, f"{prefix}.public.items", min_count=count, timeout=180, idle=idle)
    store = load_schemas(bootstrap, prefix)
    return [store.decode(r.value) for r in records if r.value is not None]


def _first_copies(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events deduplicated by (commit_lsn, total_order), in topic order; duplicates must be identical."""
    first: dict[tuple[int, int], dict[str, Any]] = {}
    for event in events:
        key = (event["source"]["commit_lsn"], event["transaction"]["total_order"])
        if key in first:
            assert event == first[key], "an at-least-once duplicate differs from its first copy"
        else:
            first[key] = event
    return list(first.values())


def _ids(events: list[dict[str, Any]]) -> list[int]:
    return [e["after"]["id"] for e in events]


def _status_sent_after(dsn: str, moment: Any) -> bool:
    """The walsender of the bridge has received a standby status update after ``moment``."""
    rows = execute(dsn, "SELECT reply_time > %s FROM pg_stat_replication", (moment,))
    return bool(rows) and all(row[0] for row in rows)


def _now(dsn: str) -> Any:
    return execute(dsn, "SELECT clock_timestamp()")[0][0]


@pytest.mark.parametrize("mode", ["at_least_once", "exactly_once"])
def test_prepared_transaction_is_published_once_at_its_commit_position_across_a_sigkill(
        streaming_dsn: str, kafka_broker: Broker, topic_prefix: str, mode: str) -> None:
    if mode == "exactly_once":
        require_transactions()
    dsn, bootstrap = streaming_dsn, kafka_broker.bootstrap
    # given
    run_sql(dsn, "CREATE TABLE items (id bigint PRIMARY KEY, who text)")
    env = _env(dsn, kafka_broker, topic_prefix, exactly_once=mode == "exactly_once")
    bridge = _start(env, dsn, topic_prefix)
    try:
        # when: two transactions are prepared, then ordinary ones commit and are published
        before_p1 = _prepare(dsn, "p1", ["INSERT INTO items VALUES (1, 'p1'), (2, 'p1'), (3, 'p1')"])
        _prepare(dsn, "p2", ["INSERT INTO items VALUES (101, 'p2'), (102, 'p2'), (103, 'p2')"])
        run_sql(dsn, "INSERT INTO items VALUES (201, 'plain')", "INSERT INTO items VALUES (202, 'plain')")
        assert _ids(_events(bootstrap, topic_prefix, 2)) == [201, 202]  # nothing of p1 or p2

        # then: the confirmed LSN stays below the prepared transactions although 202 is acknowledged
        delivered_at = _now(dsn)
        wait_until(lambda: _status_sent_after(dsn, delivered_at), timeout=30,
                   message="no standby status update after 202 was delivered")
        confirmed = slot_confirmed_flush_lsn(dsn, topic_prefix)
        assert confirmed is not None and confirmed <= before_p1

        # when: pgbridge dies while p1 and p2 are prepared, and comes back
        bridge.kill()
        bridge = _start(env, dsn, topic_prefix, log_from=bridge)
        run_sql(dsn, "ROLLBACK PREPARED 'p2'", "INSERT INTO items VALUES (203, 'plain')")
        seen = _ids(_first_copies(_events(bootstrap, topic_prefix, 3)))
        assert seen == [201, 202, 203]  # still nothing of p1 before its COMMIT PREPARED
        run_sql(dsn, "COMMIT PREPARED 'p1'", "INSERT INTO items VALUES (204, 'plain')")
        events = _events(bootstrap, topic_prefix, 7)
        wait_until(lambda: (slot_confirmed_flush_lsn(dsn, topic_prefix) or 0) > before_p1, timeout=30,
                   message="the confirmed LSN did not move past p1 after its COMMIT PREPARED")
        assert bridge.http_port is not None
        metrics = scrape(bridge.http_port)
        assert bridge.terminate() == 0, bridge.log()
    finally:
        bridge.kill()

    # then: p1 exactly once, between 203 and 204 (its commit position); p2 never
    first = _first_copies(events)
    assert _ids(first) == [201, 202, 203, 1, 2, 3, 204]
    if mode == "exactly_once":  # a read_committed reader sees no copy twice, the kill notwithstanding
        assert len(events) == len(first), [(e["source"]["commit_lsn"], e["after"]["id"]) for e in events]
    p1 = first[3:6]
    assert [e["transaction"]["total_order"] for e in p1] == [1, 2, 3]
    assert len({e["source"]["commit_lsn"] for e in p1}) == 1
    commit_lsns = [e["source"]["commit_lsn"] for e in first]
    assert commit_lsns == sorted(commit_lsns)
    assert metric(metrics, "pgbridge_transactions_total", outcome="committed") >= 3
    # after the restart Postgres re-sent both PREPAREs, then p2 was rolled back
    assert metric(metrics, "pgbridge_transactions_total", outcome="prepared") == 2
    assert metric(metrics, "pgbridge_transactions_total", outcome="rolled_back") == 1
    assert metric(metrics, "pgbridge_buffered_bytes") == 0


def test_streamed_prepared_transaction_is_published_whole_after_commit_prepared(
        streaming_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    dsn, bootstrap = streaming_dsn, kafka_broker.bootstrap
    rows = 20_000
    # given
    run_sql(dsn, "CREATE TABLE items (id bigint PRIMARY KEY, who text)")
    env = _env(dsn, kafka_broker, topic_prefix)
    bridge = _start(env, dsn, topic_prefix)
    try:
        # when: a transaction far larger than logical_decoding_work_mem, with a rolled-back
        # savepoint, is prepared (Postgres streams it, then sends Stream Prepare); another large
        # one is prepared and rolled back; pgbridge is killed while the first waits
        insert = "INSERT INTO items SELECT g, '{who}' FROM generate_series({a}, {b}) g"
        before_big = _prepare(dsn, "big", [
            insert.format(who="big", a=1, b=rows // 2),
            "SAVEPOINT s1",
            insert.format(who="big", a=rows + 1, b=rows + 5_000),
            "ROLLBACK TO SAVEPOINT s1",
            insert.format(who="big", a=rows // 2 + 1, b=rows),
        ])
        _prepare(dsn, "doomed", [insert.format(who="doomed", a=100_001, b=100_000 + rows)])
        run_sql(dsn, "INSERT INTO items VALUES (500001, 'plain')")
        assert _ids(_events(bootstrap, topic_prefix, 1)) == [500_001]
        stats = wait_for_streaming(dsn, topic_prefix, transactions=2)
        assert bridge.http_port is not None
        assert metric(scrape(bridge.http_port), "pgbridge_spilled_bytes_total") > 0
        confirmed = slot_confirmed_flush_lsn(dsn, topic_prefix)
        assert confirmed is not None and confirmed <= before_big

        bridge.kill()
        bridge = _start(env, dsn, topic_prefix, log_from=bridge)
        run_sql(dsn, "ROLLBACK PREPARED 'doomed'", "INSERT INTO items VALUES (500002, 'plain')",
             "COMMIT PREPARED 'big'", "INSERT INTO items VALUES (500003, 'plain')")
        events = _events(bootstrap, topic_prefix, rows + 3, idle=3.0)
        assert bridge.terminate() == 0, bridge.log()
    finally:
        bridge.kill()

    # then
    first = _first_copies(events)
    assert _ids(first) == [500_001, 500_002, *range(1, rows + 1), 500_003]
    big = first[2:-1]
    assert [e["transaction"]["total_order"] for e in big] == list(range(1, rows + 1))
    assert {e["after"]["who"] for e in big} == {"big"}
    print(f"slot stats before the kill: {stats}")
