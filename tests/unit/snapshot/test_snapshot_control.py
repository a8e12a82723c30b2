"""stop-snapshot, pause-snapshot and resume-snapshot signals (snapshot/incremental.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pgbridge.encode.envelope import OutRecord
from pgbridge.lsn import Lsn
from pgbridge.metrics import Metrics
from pgbridge.snapshot.incremental import (
    IncrementalSnapshotter,
    IncrementalState,
    SnapshotSignal,
    _PendingChunk,
    read_signal,
)
from tests.support.progress import MemoryProgress


def _snapshotter() -> tuple[IncrementalSnapshotter, MemoryProgress, Metrics]:
    progress, metrics = MemoryProgress(), Metrics()
    snap = IncrementalSnapshotter(dsn="", slot="s1", publication="p", chunk_rows=10, signal_prefix="pgbridge.signal",
                                  progress=progress, metrics=metrics, connect_timeout_s=1)  # type: ignore[arg-type]
    return snap, progress, metrics


def _signal(kind: str, *tables: str, **extra: Any) -> bytes:
    body: dict[str, Any] = {"type": kind, **extra}
    if tables:
        body["tables"] = list(tables)
    return json.dumps(body).encode()


def _paused_gauge(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value("pgbridge_incremental_snapshot_paused")
    assert value is not None
    return value


def test_control_signals_parse_in_both_signal_forms() -> None:
    assert read_signal(_signal("stop-snapshot")) == SnapshotSignal((), None, "stop-snapshot")
    assert read_signal(_signal("stop-snapshot", "Public.A")) == SnapshotSignal(("public.a",), None, "stop-snapshot")
    debezium = {"type": "stop-snapshot", "data": {"data-collections": ["public.a"], "type": "INCREMENTAL"}}
    assert read_signal(json.dumps(debezium).encode()) == SnapshotSignal(("public.a",), None, "stop-snapshot")
    assert read_signal(_signal("pause-snapshot", slot="s1")) == SnapshotSignal((), "s1", "pause-snapshot")
    assert read_signal(_signal("resume-snapshot")) == SnapshotSignal((), None, "resume-snapshot")


@pytest.mark.parametrize(("content", "reason"), [
    (_signal("stop-snapshot", tables="public.a"), "a stop-snapshot signal whose \"tables\" is not a list"),
    (_signal("stop-snapshot", "nodot"), "a stop-snapshot signal with a malformed table name"),
    (_signal("pause-snapshot", slot=3), "a pause-snapshot signal whose \"slot\" is a JSON int"),
    (_signal("halt-snapshot"), "expected one of execute-snapshot, stop-snapshot, pause-snapshot, resume-snapshot"),
])
def test_malformed_control_signals_say_why(content: bytes, reason: str) -> None:
    problem = read_signal(content)
    assert isinstance(problem, str) and reason in problem


def test_pause_holds_the_queue_durably_and_resume_releases_it() -> None:
    snap, progress, metrics = _snapshotter()
    snap.on_signal(_signal("execute-snapshot", "public.a"), Lsn(100))
    snap.on_signal(_signal("pause-snapshot"), Lsn(200))
    assert snap.state.paused and progress.flushes == 2 and _paused_gauge(metrics) == 1
    assert progress.records["s1/incremental"]["paused"] is True
    # a paused snapshotter reads nothing (tick would need a database connection to read a chunk)
    snap.tick(lambda *_: pytest.fail("read while paused"), lambda _: ("id",))
    # a restart stays paused
    restarted, _, restarted_metrics = _snapshotter()
    restarted.load({"s1/incremental": progress.records["s1/incremental"]})
    assert restarted.state.paused and restarted.state.queue == ["public.a"]
    assert _paused_gauge(restarted_metrics) == 1
    restarted.on_signal(_signal("resume-snapshot"), Lsn(300))
    assert not restarted.state.paused and _paused_gauge(restarted_metrics) == 0
    # decoded again after a restart, an old pause is not acted on twice
    restarted.on_signal(_signal("pause-snapshot"), Lsn(200))
    assert not restarted.state.paused


def test_a_chunk_between_its_watermarks_completes_while_paused() -> None:
    snap, _, _ = _snapshotter()
    snap.state.queue = ["public.a"]
    snap._pending = _PendingChunk(token="tok", table="public.a", buffer={b"1": OutRecord("t", b"1", b"v")},
                                  next_after=["1"], last=False)
    snap.on_signal(_signal("pause-snapshot"), Lsn(100))
    snap.on_watermark(json.dumps({"kind": "low", "token": "tok"}).encode())
    assert snap.on_watermark(json.dumps({"kind": "high", "token": "tok"}).encode()) == \
        ("public.a", [OutRecord("t", b"1", b"v")])


def test_stop_of_listed_tables_keeps_the_others_and_abandons_the_head_chunk() -> None:
    snap, progress, _ = _snapshotter()
    snap.state = IncrementalState(["public.a", "public.b", "public.c"], ["5"], 0)
    snap._pending = _PendingChunk(token="tok", table="public.a", buffer={}, next_after=["9"], last=False)
    snap.window_table = "public.a"
    snap.on_signal(_signal("stop-snapshot", "public.a", "public.c"), Lsn(100))
    assert snap.state.queue == ["public.b"] and snap.state.after is None
    assert snap._pending is None and snap.window_table is None
    assert progress.records["s1/incremental"]["queue"] == ["public.b"] and progress.flushes == 1
    # the abandoned chunk's high watermark releases nothing
    assert snap.on_watermark(json.dumps({"kind": "high", "token": "tok"}).encode()) is None


def test_stop_without_tables_stops_everything_and_a_later_execute_starts_again() -> None:
    snap, _, _ = _snapshotter()
    snap.state = IncrementalState(["public.a", "public.b"], ["5"], 0)
    snap.on_signal(_signal("stop-snapshot"), Lsn(100))
    assert snap.state.queue == [] and not snap.busy
    snap.on_signal(_signal("execute-snapshot", "public.b"), Lsn(200))
    assert snap.state.queue == ["public.b"] and snap.state.after is None


def test_stop_of_a_table_behind_the_head_leaves_the_head_chunk_running() -> None:
    snap, _, _ = _snapshotter()
    snap.state = IncrementalState(["public.a", "public.b"], ["5"], 0)
    pending = _PendingChunk(token="tok", table="public.a", buffer={}, next_after=["9"], last=False)
    snap._pending = pending
    snap.on_signal(_signal("stop-snapshot", "public.b"), Lsn(100))
    assert snap.state.queue == ["public.a"] and snap.state.after == ["5"] and snap._pending is pending
