"""Decoding on a standby (source/standby.py): the start-up decision and what a standby without
``postgres.primary_dsn`` turns off. The end-to-end behaviour is tests/integration/test_standby_decoding.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import SecretStr

from pgbridge.config import PostgresConfig
from pgbridge.errors import ConfigError, FatalError
from pgbridge.lsn import Lsn
from pgbridge.metrics import Metrics
from pgbridge.periodic import Heartbeat, PrimaryHeartbeat, PromotionWatch, streaming_jobs
from pgbridge.snapshot.incremental import IncrementalSnapshotter
from pgbridge.source.standby import PrimaryConnection, ServerRole, server_role
from tests.support.ports import free_port
from tests.support.progress import MemoryProgress


class _Conn:
    """What server_role reads: pg_is_in_recovery(), hot_standby_feedback and the server version."""

    def __init__(self, *, recovery: bool, version: int = 180000, feedback: str = "on") -> None:
        self.values = {"pg_is_in_recovery": recovery, "hot_standby_feedback": feedback}
        self.info = SimpleNamespace(server_version=version)

    def execute(self, query: str, params: Any = None) -> Any:
        value = next(v for k, v in self.values.items() if k in query)
        return SimpleNamespace(fetchone=lambda: (value,))


def _config(**extra: Any) -> PostgresConfig:
    return PostgresConfig(dsn=SecretStr("host=standby dbname=app"), **extra)


def _unreachable() -> str:
    return f"host=127.0.0.1 port={free_port()} dbname=app connect_timeout=1"


def test_a_primary_is_not_a_standby_and_writes_to_itself() -> None:
    role = server_role(_Conn(recovery=False), _config())  # type: ignore[arg-type]
    assert role == ServerRole() and role.write_dsn("primary") == "primary"


def test_a_standby_before_16_is_refused_with_the_reason() -> None:
    with pytest.raises(FatalError, match="running Postgres 15: logical decoding on a standby needs Postgres 16"):
        server_role(_Conn(recovery=True, version=150000), _config())  # type: ignore[arg-type]


def test_a_standby_without_primary_dsn_writes_nowhere_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        role = server_role(_Conn(recovery=True, feedback="off"), _config())  # type: ignore[arg-type]
    assert role.standby and role.write_dsn("standby") is None
    assert "hot_standby_feedback off" in caplog.text
    assert "without postgres.primary_dsn: heartbeats and incremental snapshots are off" in caplog.text


def test_a_standby_with_an_unreachable_primary_still_streams(caplog: pytest.LogCaptureFixture) -> None:
    primary = _unreachable()
    role = server_role(_Conn(recovery=True), _config(primary_dsn=SecretStr(primary)))  # type: ignore[arg-type]
    assert role.write_dsn("standby") == primary
    assert "postgres.primary_dsn is unreachable" in caplog.text


def test_streaming_jobs_on_a_standby(caplog: pytest.LogCaptureFixture) -> None:
    pg = _config(heartbeat_interval_s=5)
    sql: Any = object()
    jobs = streaming_jobs(pg, sql, None, Metrics(), 1, standby=True)  # type: ignore[arg-type]
    assert any(isinstance(job, PromotionWatch) for job in jobs)
    assert not any(isinstance(job, Heartbeat) for job in jobs)
    assert "heartbeat_interval_s ignored: on a standby heartbeats are written on the primary" in caplog.text
    primary = PrimaryConnection(_unreachable(), connect_timeout_s=1)
    jobs = streaming_jobs(pg, sql, None, Metrics(), 1, standby=True, primary=primary)  # type: ignore[arg-type]
    assert any(isinstance(job, PrimaryHeartbeat) for job in jobs)
    on_primary = streaming_jobs(pg, sql, None, Metrics(), 1)  # type: ignore[arg-type]
    assert not any(isinstance(job, PromotionWatch | PrimaryHeartbeat) for job in on_primary)


def test_a_heartbeat_on_an_unreachable_primary_warns_once_and_keeps_streaming(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    heartbeat = PrimaryHeartbeat(PrimaryConnection(_unreachable(), connect_timeout_s=1), metrics, 0.001)
    heartbeat(float("inf"))
    heartbeat(float("inf"))
    assert caplog.text.count("heartbeat on the primary failed") == 1
    assert metrics.heartbeats._value.get() == 0


def test_incremental_snapshots_without_a_writable_connection_are_skipped_with_the_fix(
        caplog: pytest.LogCaptureFixture) -> None:
    snap = IncrementalSnapshotter(dsn=None, slot="s1", publication="p", chunk_rows=10, signal_prefix="pgbridge.signal",
                                  progress=MemoryProgress(), metrics=Metrics(), connect_timeout_s=1)  # type: ignore[arg-type]
    snap.on_signal(b'{"type": "execute-snapshot", "tables": ["public.a"]}', Lsn(100))
    assert snap.state.queue == ["public.a"]
    snap.tick(lambda *_: None, lambda _: ())  # type: ignore[arg-type]
    assert snap.state.queue == [] and not snap.busy
    assert "incremental snapshots cannot run on a standby without postgres.primary_dsn" in caplog.text


def test_a_primary_dsn_that_is_a_standby_too_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PrimaryConnection, "get", lambda self: _Conn(recovery=True))
    with pytest.raises(ConfigError, match=r"postgres.primary_dsn \(127.0.0.1:5433/app\) is a standby too"):
        server_role(_Conn(recovery=True),  # type: ignore[arg-type]
                    _config(primary_dsn=SecretStr("host=127.0.0.1 port=5433 dbname=app")))
