from __future__ import annotations

import json
from typing import Any

from pgbridge.ack.tracker import AckTracker
from pgbridge.encode.envelope import OutRecord
from pgbridge.lsn import Lsn
from pgbridge.metrics import Metrics
from pgbridge.publish.transactions import BatchPolicy, KafkaTransactions
from pgbridge.snapshot.incremental import (
    IncrementalSnapshotter,
    IncrementalState,
    _PendingChunk,
    parse_signal,
    watermark_prefix,
)
from tests.support.progress import MemoryProgress
from tests.support.transactions_double import TransactionalProducer


def _snapshotter() -> tuple[IncrementalSnapshotter, MemoryProgress]:
    progress = MemoryProgress()
    snap = IncrementalSnapshotter(dsn="", slot="s1", publication="p", chunk_rows=10, signal_prefix="pgbridge.signal",
                                  progress=progress, metrics=Metrics(), connect_timeout_s=1)  # type: ignore[arg-type]
    return snap, progress


def _signal(*tables: str, **extra: Any) -> bytes:
    return json.dumps({"type": "execute-snapshot", "tables": list(tables), **extra}).encode()


def test_signals_parse_and_junk_is_ignored() -> None:
    signal = parse_signal(_signal("public.a", "s.b"))
    assert signal is not None and signal.tables == ("public.a", "s.b")
    assert parse_signal(b"not json") is None
    assert parse_signal(b'{"type":"drop-snapshot"}') is None
    assert parse_signal(b'{"type":"execute-snapshot","tables":["nodot"]}') is None
    assert watermark_prefix("pgbridge.signal") == "pgbridge.watermark"


def test_a_signal_is_persisted_before_returning_and_acted_on_once() -> None:
    snap, progress = _snapshotter()
    snap.on_signal(_signal("public.a"), Lsn(100))
    assert snap.state.queue == ["public.a"] and progress.flushes == 1
    assert progress.records["s1/incremental"]["signal_lsn"] == 100
    snap.on_signal(_signal("public.b"), Lsn(100))  # the same signal decoded again after a restart
    snap.on_signal(_signal("public.b", slot="other"), Lsn(200))  # meant for another pgbridge
    assert snap.state.queue == ["public.a"]
    snap.on_signal(_signal("public.a", "public.b"), Lsn(300))
    assert snap.state.queue == ["public.a", "public.b"]


def test_new_publication_tables_are_queued_only_after_the_known_set_exists() -> None:
    snap, _ = _snapshotter()
    snap.check_publication(["public.a"], snapshot_new=True)
    assert snap.state.queue == [] and snap.known_tables == {"public.a"}
    snap.check_publication(["public.a", "public.b"], snapshot_new=True)
    assert snap.state.queue == ["public.b"]
    snap.check_publication(["public.a", "public.b", "public.c"], snapshot_new=False)
    assert snap.state.queue == ["public.b"] and snap.known_tables == {"public.a", "public.b", "public.c"}


def _record(key: bytes) -> OutRecord:
    return OutRecord("t", key, b"v" + key)


def test_keys_changed_between_the_watermarks_are_dropped_from_the_chunk() -> None:
    snap, _ = _snapshotter()
    snap._pending = _PendingChunk(token="tok", table="public.a",
                                  buffer={k: _record(k) for k in (b"1", b"2", b"3")}, next_after=["3"], last=False)
    low = json.dumps({"kind": "low", "token": "tok"}).encode()
    high = json.dumps({"kind": "high", "token": "tok"}).encode()
    assert snap.on_watermark(json.dumps({"kind": "high", "token": "other"}).encode()) is None
    assert snap.on_watermark(low) is None
    assert snap.window_table == "public.a"
    snap.drop_keys([b"2", None])
    released = snap.on_watermark(high)
    assert released == ("public.a", [_record(b"1"), _record(b"3")])
    assert snap.window_table is None


def test_a_truncate_between_the_watermarks_drops_the_whole_chunk() -> None:
    snap, _ = _snapshotter()
    snap._pending = _PendingChunk(token="tok", table="public.a", buffer={b"1": _record(b"1")},
                                  next_after=None, last=True)
    snap.on_watermark(json.dumps({"kind": "low", "token": "tok"}).encode())
    snap.drop_all()
    assert snap.on_watermark(json.dumps({"kind": "high", "token": "tok"}).encode()) == ("public.a", [])


def test_state_survives_json() -> None:
    state = IncrementalState(["public.a"], ["5", "x"], 42)
    assert IncrementalState.from_json(json.loads(json.dumps(state.to_json()))) == state
    assert IncrementalState.from_json(None) == IncrementalState()


def test_exactly_once_the_cursor_moves_with_the_rows_into_their_kafka_transaction() -> None:
    # given: exactly-once, a chunk of public.a between its watermarks
    progress, producer = MemoryProgress(), TransactionalProducer()
    tracker = AckTracker()
    transactions = KafkaTransactions(producer, tracker, offsets_topic="p._offsets", slot="s1",  # type: ignore[arg-type]
                                     policy=BatchPolicy(max_age_s=60, max_bytes=1 << 30, split_after_s=300))
    snap = IncrementalSnapshotter(dsn="", slot="s1", publication="p", chunk_rows=10, signal_prefix="pgbridge.signal",
                                  progress=progress, metrics=Metrics(), connect_timeout_s=1,  # type: ignore[arg-type]
                                  transactions=transactions)
    snap.state.queue = ["public.a"]
    snap._pending = _PendingChunk(token="tok", table="public.a", buffer={b"1": _record(b"1")},
                                  next_after=["9"], last=False)
    # when: the high watermark's transaction produces the rows and the Kafka transaction commits
    unit = tracker.open_unit()
    transactions.hold(unit)
    snap.on_watermark(json.dumps({"kind": "low", "token": "tok"}).encode())
    snap.on_watermark(json.dumps({"kind": "high", "token": "tok"}).encode())
    snap.chunk_produced(unit)
    assert snap.state.after == ["9"] and progress.records == {}  # moved, not yet written anywhere
    transactions.commit()
    # then: the cursor is committed with the rows; nothing went around the transaction
    (committed,) = producer.committed
    assert [(topic, key, json.loads(value or b"")["after"]) for topic, key, value in committed] == [
        ("p._snapshot", b"s1/incremental", ["9"])]
    assert progress.records == {} and progress.flushes == 0
    # ... a signal inside a transaction goes into it too; with none open, straight to the store
    transactions.ensure_open()
    snap.on_signal(_signal("public.b"), Lsn(100))
    assert progress.records == {} and producer.open == []
    transactions.commit()
    assert json.loads(producer.committed[1][0][2] or b"")["queue"] == ["public.a", "public.b"]
    snap.check_publication(["public.a"], snapshot_new=True)
    snap.check_publication(["public.a", "public.c"], snapshot_new=True)
    assert progress.records["s1/incremental"]["queue"] == ["public.a", "public.b", "public.c"]
    assert progress.flushes >= 2
