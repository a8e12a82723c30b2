"""Malformed incremental-snapshot signals sent through the replication stream, as an operator's typo
or an attacker with EXECUTE on pg_logical_emit_message would: each is logged as an error saying
why, nothing is snapshotted for it, the stream goes on (rows written between them arrive), and a
valid signal afterwards still works."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.churn import create_filled_table
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROWS = 500
# (content, whether it goes in a transaction, a phrase of the error it must cause)
HOSTILE: list[tuple[bytes, bool, str]] = [
    (b"\xff\xfe not utf-8", True, "not UTF-8"),
    (b"{not json", False, "not JSON"),
    (b'["execute-snapshot", "public.items"]', True, "a JSON list, not an object"),
    (b'{"type": "execute-snapshot", "tables": "public.items"}', False, "tables"),
    (b'{"type": "execute-snapshot", "data": 7}', True, "tables"),
    (b'{"type": "execute-snapshot", "tables": ["public.items"], "slot": {"x": 1}}', True, '"slot" is a JSON dict'),
    (b'{"type": "execute-snapshot", "tables": ["a.b.c.d"]}', False, "malformed table name"),
    (b"[" * 30_000 + b"]" * 30_000, True, "not JSON"),
    (b'{"type": "execute-snapshot", "tables": ["public.items"], "pad": "' + b"x" * 200_000 + b'"}', True,
     "over the 65,536-byte limit"),
]


def test_malformed_signals_are_logged_and_skipped_and_the_stream_goes_on(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    create_filled_table(pg_dsn, "public.items", ROWS)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.items", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "200"})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for content, transactional, _reason in HOSTILE:
                conn.execute("SELECT pg_logical_emit_message(%s, 'pgbridge.signal', %s::bytea)",
                             (transactional, content))
                conn.execute("UPDATE items SET n = n + 1 WHERE id = 1")
            # an unknown table is well-formed: refused when its turn comes, the queue moves on
            conn.execute("SELECT pg_logical_emit_message(true, 'pgbridge.signal', "
                         "'{\"type\": \"execute-snapshot\", \"tables\": [\"public.nope\", \"public.items\"]}')")
        wait_until(lambda: "incremental snapshot of table done table=public.items" in bridge.log(),
                   timeout=120, interval=0.3, message="the valid signal after the hostile ones never finished")
        wait_caught_up(pg_dsn, topic_prefix, timeout=60)
        assert bridge.alive(), bridge.log()[-4000:]
        log = bridge.log()
        errors = [line for line in log.splitlines() if "ignoring " in line and "the stream goes on" in line]
        assert len(errors) == len(HOSTILE), "\n".join(errors)
        for (_content, _transactional, reason), line in zip(HOSTILE, errors, strict=True):
            assert reason in line, (reason, line)
            assert len(line) < 1_000, "an error line quotes a bounded preview, never the whole signal"
        assert "not in the publication; skipped" in log and "public.nope" in log
        events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.public.items", topic_prefix,
                             min_count=ROWS, timeout=60, idle=1.0)
        assert not diff_states(replay(events), table_state(pg_dsn, "public.items", ("id",)))
        reads = [e for e in events if e.value is not None and e.value["op"] == "r"]
        assert len(reads) == ROWS, "only the valid signal snapshotted the table, once"
        assert bridge.terminate() == 0, log[-4000:]
