"""Initial snapshot through the real bridge: chunked, parallel, under concurrent writes, and resumed
after a SIGKILL. In every case replaying the topic per key gives exactly the table's final rows."""

from __future__ import annotations

import os
import re
import time
import urllib.request

import pytest

from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.churn import Churn, create_filled_table
from tests.support.postgres import execute, slot_confirmed_flush_lsn, wal_insert_lsn
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TABLE = "public.items"
# 1M rows is the benchmark's job (bench/snapshot_bench.py); CI on two shared cores runs 200k.
SNAPSHOT_ROWS = int(os.environ.get("PGBRIDGE_TEST_SNAPSHOT_ROWS", "200000"))


def _env(dsn: str, broker: Broker, prefix: str, **extra: str) -> dict[str, str]:
    settings = {"PGBRIDGE_POSTGRES__TABLES": TABLE, "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "10000",
                "PGBRIDGE_SNAPSHOT__WORKERS": "2"}
    settings.update(extra)
    return bridge_env(dsn, broker.bootstrap, prefix, extra=settings)


def _snapshot_rows(bridge: BridgeProcess) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{bridge.http_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("pgbridge_snapshot_rows_total{"))


def _slot_exists(dsn: str, slot: str) -> bool:
    return bool(execute(dsn, "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)))


def _assert_topic_replays_to_table(dsn: str, broker: Broker, prefix: str) -> tuple[int, int]:
    """Replay == table; returns (snapshot reads, distinct keys read)."""
    events = read_events(broker.bootstrap, f"{prefix}.{TABLE}", prefix, min_count=1, timeout=300, idle=3.0)
    got = replay(events)
    want = table_state(dsn, TABLE, ("id",))
    assert not diff_states(got, want), diff_states(got, want)
    reads = [e.key["id"] for e in events if e.value is not None and e.value["op"] == "r"]
    return len(reads), len(set(reads))


@pytest.mark.slow
def test_snapshot_under_concurrent_updates_and_deletes_replays_to_the_final_table(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a filled table and a session that keeps changing it
    create_filled_table(pg_dsn, TABLE, SNAPSHOT_ROWS)
    churn = Churn(pg_dsn, TABLE, SNAPSHOT_ROWS, seed=1)
    churn.start()
    bridge = BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix)).start()
    try:
        # when: the snapshot runs while the churn goes on
        started = time.monotonic()
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=600, waiting_for="the snapshot to finish")
        elapsed = time.monotonic() - started
        # some streaming after the snapshot, still under churn: changes made after it are confirmed
        after_snapshot = wal_insert_lsn(pg_dsn)
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) > after_snapshot, timeout=120,
                   interval=0.2, message="nothing streamed after the snapshot")
        transactions = churn.stop()
        wait_caught_up(pg_dsn, topic_prefix, timeout=300)
        # then
        reads, distinct = _assert_topic_replays_to_table(pg_dsn, kafka_broker, topic_prefix)
        assert bridge.terminate() == 0, bridge.log()
    finally:
        churn.halt.set()
        bridge.kill()
    assert reads == distinct, "without a crash every row is read exactly once"
    logged = re.findall(r"rows_per_s\W+(\d+)", bridge.log())
    print(f"snapshot rows={reads} wall={elapsed:.1f}s (start to slot) rows/s={reads / elapsed:.0f} "
          f"logged rows/s={logged} churn transactions={transactions}")
    assert reads >= SNAPSHOT_ROWS * 0.9


def test_sigkill_mid_snapshot_resumes_and_replays_to_the_final_table(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a snapshot in small chunks under churn
    rows = 300_000
    create_filled_table(pg_dsn, TABLE, rows)
    churn = Churn(pg_dsn, TABLE, rows, seed=2, pause_s=0.002)
    churn.start()
    env = _env(pg_dsn, kafka_broker, topic_prefix, PGBRIDGE_SNAPSHOT__CHUNK_ROWS="1000",
               PGBRIDGE_SNAPSHOT__WORKERS="1")
    bridge = BridgeProcess(env).start(http=True)
    try:
        # when: pgbridge is killed once a few chunks are recorded done, and started again
        try:
            wait_until(lambda: _snapshot_rows(bridge) >= rows // 5, timeout=120, interval=0.05,
                       message="the snapshot never got a fifth of the way")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{bridge.log()[-4000:]}") from None
        bridge.kill()
        assert _slot_exists(pg_dsn, f"{topic_prefix}_snapshot")
        assert not _slot_exists(pg_dsn, topic_prefix), "the snapshot finished before the kill"
        bridge = BridgeProcess(env, log_path=bridge.log_path).start()
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=600, waiting_for="the resumed snapshot to finish")
        churn.stop()
        wait_caught_up(pg_dsn, topic_prefix, timeout=300)
        # then: nothing lost, nothing stale; the second run resumed rather than starting over
        reads, distinct = _assert_topic_replays_to_table(pg_dsn, kafka_broker, topic_prefix)
        assert bridge.terminate() == 0, bridge.log()
    finally:
        churn.halt.set()
        bridge.kill()
    # Only chunks in flight at the kill are read twice (their progress was not yet recorded).
    assert reads - distinct <= 20 * 1000, (reads, distinct)
    resumed = re.search(r"resuming the initial snapshot .*chunks_done=(\d+)", bridge.log())
    assert resumed is not None and int(resumed.group(1)) > 0, "the restart did not resume"
    assert not _slot_exists(pg_dsn, f"{topic_prefix}_snapshot")
    print(f"snapshot reads={reads} distinct keys={distinct} for {rows} rows (chunks re-read after the kill)")
