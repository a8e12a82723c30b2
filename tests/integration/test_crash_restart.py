"""pgbridge killed with SIGKILL mid-workload and restarted: nothing lost, duplicates identical."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topic
from tests.support.postgres import slot_confirmed_flush_lsn
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


class Workload(threading.Thread):
    """Random committed transactions; remembers, per xid, the (op, id) sequence it committed."""

    def __init__(self, dsn: str, transactions: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.transactions = transactions
        self.rnd = random.Random(seed)
        self.committed: dict[int, list[tuple[str, int]]] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def _run(self) -> None:
        live: list[int] = []
        next_id = 1
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for n in range(self.transactions):
                ops: list[tuple[str, int]] = []
                size = 3000 if n % 301 == 150 else self.rnd.randint(1, 8)
                rolled_back = self.rnd.random() < 0.05
                with conn.cursor() as cur:
                    cur.execute("BEGIN")
                    xid_row = cur.execute("SELECT txid_current()").fetchone()
                    assert xid_row is not None
                    if size > 100:
                        cur.execute("INSERT INTO items SELECT g, 'bulk', 0 FROM generate_series(%s::bigint, %s::bigint) g",
                                    (next_id, next_id + size - 1))
                        ops.extend(("c", i) for i in range(next_id, next_id + size))
                        created = list(range(next_id, next_id + size))
                        next_id += size
                    else:
                        created = []
                        for _ in range(size):
                            choice = self.rnd.random()
                            if choice < 0.6 or not live:
                                cur.execute("INSERT INTO items VALUES (%s, %s, 0)", (next_id, f"v{next_id}"))
                                ops.append(("c", next_id))
                                created.append(next_id)
                                next_id += 1
                            elif choice < 0.85:
                                target = self.rnd.choice(live)
                                cur.execute("UPDATE items SET n = n + 1 WHERE id = %s", (target,))
                                ops.append(("u", target))
                            else:
                                target = live.pop(self.rnd.randrange(len(live)))
                                cur.execute("DELETE FROM items WHERE id = %s", (target,))
                                ops.append(("d", target))
                    if rolled_back:
                        cur.execute("ROLLBACK")
                        live.extend(i for _, i in ops if _ == "d")  # restore what we thought deleted
                        continue
                    cur.execute("COMMIT")
                live.extend(created)
                time.sleep(0.004)  # spread the workload over several seconds of kills
                self.committed[int(str(xid_row[0])) & 0xFFFFFFFF] = ops


def _decode_all(bootstrap: str, prefix: str, count: int) -> list[dict[str, Any]]:
    records = read_topic(bootstrap, f"{prefix}.public.items", min_count=count, timeout=180, idle=3.0)
    store = load_schemas(bootstrap, prefix)
    return [store.decode(r.value) for r in records if r.value is not None]


def test_sigkill_at_random_points_loses_nothing_and_duplicates_are_identical(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, v text, n int)")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.items", "PGBRIDGE_SNAPSHOT__MODE": "never"})
    bridge = BridgeProcess(env).start()
    try:
        wait_until(lambda: slot_confirmed_flush_lsn(pg_dsn, topic_prefix), timeout=60,
                   message="slot never created")
        workload = Workload(pg_dsn, transactions=1500, seed=7)
        # when: the workload runs while pgbridge is killed and restarted at random moments
        workload.start()
        rnd = random.Random(11)
        kills = 0
        while workload.is_alive() and kills < 4:
            time.sleep(rnd.uniform(0.3, 1.5))
            bridge.kill()
            kills += 1
            bridge = BridgeProcess(env, log_path=bridge.log_path).start()
        workload.join(180)
        assert workload.error is None, workload.error
        assert kills >= 2, "the workload finished before pgbridge could be killed twice"
        expected_total = sum(len(ops) for ops in workload.committed.values())
        events = _decode_all(kafka_broker.bootstrap, topic_prefix, expected_total)
        assert bridge.terminate() == 0, bridge.log()
    finally:
        bridge.kill()

    # then: every committed change is there, in order, and every duplicate equals its first copy
    first_copy: dict[tuple[int, int], dict[str, Any]] = {}
    duplicates = 0
    for event in events:
        key = (event["source"]["commit_lsn"], event["transaction"]["total_order"])
        if key in first_copy:
            duplicates += 1
            assert event == first_copy[key]
        else:
            first_copy[key] = event
    by_xid: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for (_, order), event in first_copy.items():
        by_xid[event["source"]["xid"]].append((order, event))
    got = {xid: [(e["op"], (e["after"] or e["before"])["id"]) for _, e in sorted(items, key=lambda p: p[0])]
           for xid, items in by_xid.items()}
    assert got == workload.committed
    # commit order: first copies sorted by offset have non-decreasing commit_lsn
    seen: set[tuple[int, int]] = set()
    commit_lsns = []
    for event in events:
        key = (event["source"]["commit_lsn"], event["transaction"]["total_order"])
        if key not in seen:
            seen.add(key)
            commit_lsns.append(key)
    assert commit_lsns == sorted(commit_lsns)
    print(f"kills={kills} events={len(events)} duplicates={duplicates}")
