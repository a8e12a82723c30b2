"""`pgbridge status`'s arithmetic: snapshot percentage, rate and ETA from progress records."""

from __future__ import annotations

from typing import Any

from pgbridge.snapshot.progress import done_key, header_key, plan_key
from pgbridge.status import SlotStatus, SnapshotStatus, Status, initial_snapshot, render

SLOT = "s"


def _records(rows: dict[str, tuple[int, int]], done: dict[str, list[int]], consistent: int = 7,
             ) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {
        header_key(SLOT): {"consistent_lsn": consistent, "tables": list(rows)}}
    for table, (estimate, chunks) in rows.items():
        records[plan_key(SLOT, table)] = {"consistent_lsn": consistent,
                                          "plan": {"rows_estimate": estimate, "chunks": [[None, None]] * chunks}}
    for table, indexes in done.items():
        for index in indexes:
            records[done_key(SLOT, table, index)] = {"consistent_lsn": consistent}
    return records


def test_without_a_plan_there_is_no_running_snapshot() -> None:
    assert initial_snapshot({}, {}, SLOT, now_ms=0) is None


def test_percentage_weights_chunks_by_their_tables_row_estimates() -> None:
    records = _records({"a": (1000, 10), "b": (3000, 3)}, {"a": [0, 1, 2, 3, 4], "b": [0]})
    stamps = {header_key(SLOT): 0, done_key(SLOT, "a", 4): 10_000, done_key(SLOT, "b", 0): 15_000}
    progress = initial_snapshot(records, stamps, SLOT, now_ms=20_000)
    assert progress is not None
    assert progress.rows_done_estimate == 500 + 1000 and progress.rows_estimate == 4000
    assert progress.percent == 37.5
    assert progress.rows_per_s == 100.0  # 1500 rows in 15 s
    assert progress.eta_s == 25.0  # 2500 rows left
    assert progress.last_chunk_age_s == 5.0


def test_before_the_first_chunk_there_is_no_rate_and_no_eta() -> None:
    progress = initial_snapshot(_records({"a": (100, 2)}, {}), {header_key(SLOT): 0}, SLOT, now_ms=1000)
    assert progress is not None and progress.percent == 0.0
    assert progress.rows_per_s is None and progress.eta_s is None
    line = "\n".join(render(Status(SlotStatus("s", False), None, progress)))
    assert "rate and ETA after the first chunk" in line


def test_tables_without_statistics_count_chunks() -> None:
    progress = initial_snapshot(_records({"a": (0, 4)}, {"a": [0]}), {}, SLOT, now_ms=0)
    assert progress is not None and progress.percent == 25.0


def test_chunks_of_an_earlier_attempt_do_not_count() -> None:
    records = _records({"a": (100, 2)}, {})
    records[done_key(SLOT, "a", 0)] = {"consistent_lsn": 6}  # written for another consistent point
    progress = initial_snapshot(records, {}, SLOT, now_ms=0)
    assert progress is not None and progress.percent == 0.0


def test_render_says_when_the_snapshot_state_is_unknown() -> None:
    lines = render(Status(SlotStatus("s", True, lag_bytes=2048, confirmed_flush_lsn="0/1", server_lsn="0/801"),
                          None, SnapshotStatus("unknown", detail="Kafka at k:9092 is unreachable")))
    assert "lag       2.0 KiB (2048 bytes)" in "\n".join(lines)
    assert lines[-1] == "snapshot  initial snapshot unknown: Kafka at k:9092 is unreachable"
