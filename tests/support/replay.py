"""Replay a table topic into the table's final state, and compare it with Postgres.

Order: by ``source.commit_lsn``; at equal commit LSN snapshot reads (``op r``) come before
stream events, then ``transaction.total_order``, then the Kafka offset. That is "latest by commit
order, snapshot reads before stream events of the same row": an initial snapshot's reads carry the
slot's consistent point, an incremental chunk's reads the high watermark's LSN, and every stream
event that must win over them commits after that. Duplicates (re-published after a crash) are
identical and replay to the same state. Tombstones carry nothing to order by and are skipped; the
delete before each tombstone does the work.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql

from tests.support.bridge import Event
from tests.support.postgres import slot_confirmed_flush_lsn, wal_insert_lsn
from tests.support.waiting import wait_until

RowKey = tuple[tuple[str, Any], ...]


def row_key(key: dict[str, Any] | None) -> RowKey:
    assert key is not None, "replay needs keyed tables"
    return tuple(sorted(key.items()))


def replay_order(event: Event) -> tuple[int, int, int, int]:
    value = event.value
    assert value is not None
    transaction = value["transaction"] or {}
    return (value["source"]["commit_lsn"], 0 if value["op"] == "r" else 1,
            transaction.get("total_order", 0), event.offset)


def replay(events: Iterable[Event]) -> dict[RowKey, dict[str, Any]]:
    """The table as the topic describes it: key → row (``after``)."""
    state: dict[RowKey, dict[str, Any]] = {}
    changes = sorted((e for e in events if e.value is not None), key=replay_order)
    for event in changes:
        value = event.value
        assert value is not None
        op = value["op"]
        if op == "t":
            state.clear()
            continue
        key = row_key(event.key)
        if op in ("r", "c", "u"):
            before = value["before"]
            if op == "u" and before is not None:
                old = row_key({name: before[name] for name, _ in key})
                if old != key:
                    state.pop(old, None)
            state[key] = value["after"]
        elif op == "d":
            state.pop(key, None)
        else:
            raise AssertionError(f"unexpected op {op!r}")
    return state


def table_state(dsn: str, table: str, key_columns: tuple[str, ...]) -> dict[RowKey, dict[str, Any]]:
    """The table's current rows in the same shape (values as psycopg returns them)."""
    schema, name = table.split(".")
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, name)))
        return {tuple(sorted((k, row[k]) for k in key_columns)): dict(row) for row in cur.fetchall()}


def diff_states(got: dict[RowKey, dict[str, Any]], want: dict[RowKey, dict[str, Any]],
                limit: int = 5) -> str:
    """Empty when equal; otherwise a short description of the first differences."""
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    wrong = [k for k in want if k in got and got[k] != want[k]]
    if not (missing or extra or wrong):
        return ""
    return (f"{len(missing)} missing (e.g. {missing[:limit]}), {len(extra)} extra (e.g. {extra[:limit]}), "
            f"{len(wrong)} differ (e.g. {[(k, got[k], want[k]) for k in wrong[:limit]]})")


def wait_caught_up(dsn: str, slot: str, *, timeout: float) -> None:
    """Wait until the slot confirmed every commit so far (``wal_insert_lsn``): they are all in Kafka."""
    target = wal_insert_lsn(dsn)
    started = time.monotonic()
    wait_until(lambda: (slot_confirmed_flush_lsn(dsn, slot) or 0) >= target, timeout=timeout,
               interval=0.5, message=f"slot {slot} never confirmed {target:X} ({time.monotonic() - started:.0f}s)")
