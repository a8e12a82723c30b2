"""A workload that remembers what it committed, and the check that a topic holds exactly that.

``Workload`` commits random multi-row transactions (inserts, updates, deletes, now and then a
3,000-row bulk insert, 5 % rolled back) on ``items (id bigint PRIMARY KEY, v text, n int)`` and
keeps, per xid, the ``(op, id)`` sequence of each committed one. ``verify_committed`` checks a
topic's decoded events against it: every committed change present, in its transaction's order,
transactions in commit order, and every re-published copy identical to the first.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from typing import Any

import psycopg

ITEMS_DDL = "CREATE TABLE items (id bigint PRIMARY KEY, v text, n int)"


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

    @property
    def expected_total(self) -> int:
        return sum(len(ops) for ops in self.committed.values())


def verify_committed(events: list[dict[str, Any]], committed: dict[int, list[tuple[str, int]]]) -> int:
    """Assert ``events`` (a table topic's decoded values, in offset order) hold exactly the committed
    changes, in order, duplicates identical; returns the number of duplicates."""
    first_copy: dict[tuple[int, int], dict[str, Any]] = {}
    duplicates = 0
    order: list[tuple[int, int]] = []
    for event in events:
        key = (event["source"]["commit_lsn"], event["transaction"]["total_order"])
        if key in first_copy:
            duplicates += 1
            assert event == first_copy[key], f"duplicate {key} differs from its first copy"
        else:
            first_copy[key] = event
            order.append(key)
    assert order == sorted(order), "first copies are not in commit order"
    by_xid: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for (_, total_order), event in first_copy.items():
        by_xid[event["source"]["xid"]].append((total_order, event))
    got = {xid: [(e["op"], (e["after"] or e["before"])["id"]) for _, e in sorted(items, key=lambda p: p[0])]
           for xid, items in by_xid.items()}
    missing = sorted(set(committed) - set(got))
    phantom = sorted(set(got) - set(committed))
    assert not missing and not phantom, f"{len(missing)} committed transactions missing (e.g. {missing[:5]}), " \
                                        f"{len(phantom)} never committed (e.g. {phantom[:5]})"
    wrong = [xid for xid in committed if got[xid] != committed[xid]]
    assert not wrong, f"{len(wrong)} transactions differ, e.g. xid {wrong[0]}: {got[wrong[0]]} != {committed[wrong[0]]}"
    return duplicates
