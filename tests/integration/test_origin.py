"""Replication origins end to end: ``source.origin`` names the origin; ``postgres.origin=none``
(PG 16+) skips changes that arrived by replication."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, change_events, read_events
from tests.support.broker import Broker

# Version-specific: Postgres 16 added pgoutput's origin option; on 15 origin=none is refused.
pytestmark = [pytest.mark.integration, pytest.mark.each_pg_version]


def _write(dsn: str, origin_name: str) -> None:
    """Row 1 as if replicated from ``origin_name`` (a replication origin session), row 2 locally."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_replication_origin_create(%s)", (origin_name,))  # cluster-wide name
        conn.execute("SELECT pg_replication_origin_session_setup(%s)", (origin_name,))
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("SELECT pg_replication_origin_session_reset()")
        conn.execute("INSERT INTO t VALUES (2)")


@pytest.mark.parametrize("origin", ["any", "none"])
def test_origin_is_carried_or_filtered(origin: str, pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        version = conn.info.server_version
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_POSTGRES__ORIGIN": origin})
    if origin == "none" and version < 160000:
        # Postgres 15 cannot filter by origin: asking for it is a clear error, never silently ignored.
        with BridgeProcess(env).start() as bridge:
            assert bridge.process is not None
            assert bridge.process.wait(60) == 1
        assert "postgres.origin=none needs PostgreSQL 16 or later" in bridge.log()
        return
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        _write(pg_dsn, f"upstream_{topic_prefix}")
        events = change_events(read_events(kafka_broker.bootstrap, f"{topic_prefix}.public.t", topic_prefix,
                                           min_count=1 if origin == "none" else 2, timeout=60))
        assert bridge.terminate() == 0, bridge.log()
    got = {e["after"]["id"]: e["source"]["origin"] for e in events}
    assert got == ({1: f"upstream_{topic_prefix}", 2: None} if origin == "any" else {2: None})
