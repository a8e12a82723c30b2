"""The differential test's normalisation of Debezium's JSON, and that its comparison catches differences."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pytest

from tests.support import debezium_values as dv
from tests.support.debezium_diff import PLACEHOLDER, TableSpec, Tally, compare_table, fold_debezium

ROW = {"id": "int", "code": "text", "v": "text"}
COMMITS = [700, 900]  # pgbridge's commit LSNs: the previous transaction, then the one of the events
SPEC = TableSpec("t", ROW, ("id",), ("id",), ("id",), frozenset({"id", "code"}))


def test_time_values_map_to_what_avro_decodes() -> None:
    assert dv.epoch_days(19782) == date(2024, 2, 29)
    assert dv.micro_time(47655123456) == time(13, 14, 15, 123456)
    assert dv.micro_timestamp(1709212455654321) == datetime(2024, 2, 29, 13, 14, 15, 654321)
    assert dv.zoned_timestamp("2024-02-29T11:14:15.500000Z") == datetime(2024, 2, 29, 11, 14, 15, 500000, tzinfo=UTC)
    with pytest.raises(dv.Unmappable):
        dv.micro_time(86400000000)  # 24:00:00 is no time of day: it is a documented difference instead
    with pytest.raises(dv.Unmappable):
        dv.zoned_timestamp("infinity")


def test_intervals_keep_postgres_fields() -> None:
    assert dv.iso_interval("P1Y2M3DT4H5M6.5S") == {"months": 14, "days": 3, "microseconds": 14706500000}
    assert dv.iso_interval("P0Y0M-1DT0H0M0S") == {"months": 0, "days": -1, "microseconds": 0}
    with pytest.raises(dv.Unmappable):
        dv.iso_interval("1 day")


def test_ranges_and_composites_are_parsed_from_postgres_text() -> None:
    ints = dv.range_of(int)
    assert ints("[1,10)") == {"lower": 1, "upper": 10, "lower_inclusive": True, "upper_inclusive": False,
                              "empty": False}
    assert ints("(,)") == {"lower": None, "upper": None, "lower_inclusive": False, "upper_inclusive": False,
                           "empty": False}
    assert ints("empty")["empty"] is True
    stamps = dv.range_of(dv.local_timestamp_text)
    assert stamps('["2020-01-01 00:00:00","2021-01-01 00:00:00")')["upper"] == datetime(2021, 1, 1)
    pair = dv.composite_of((("a", int), ("b", str)))
    assert pair(b'(7,"se""ven")'.hex()) == {"a": 7, "b": 'se"ven'}
    assert pair(b"(,)".hex()) == {"a": None, "b": None}
    assert pair(b'(,"")'.hex()) == {"a": None, "b": ""}


def test_text_and_number_forms() -> None:
    assert dv.money_value("-$1,234.56") == dv.money("-1234.56") == Decimal("-1234.56")
    assert dv.bits("Cg==") == dv.bits_value("1010") == 10
    assert dv.bits("") == dv.bits_value("0000") == 0  # Debezium drops the width: only the number compares
    assert dv.numeric_text("NAN") == "NaN"
    assert dv.same(dv.floating("NaN"), float("nan"))
    assert dv.same(dv.decimal_text("NAN"), Decimal("NaN"))
    assert not dv.same(1, True)


def _event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, *, lsn: int = 100,
           total_order: int = 1, theirs: bool = False) -> dict[str, Any]:
    source: dict[str, Any] = {"db": "db", "schema": "public", "table": "t", "lsn": lsn, "ts_us": 5, "origin": None}
    if theirs:
        source |= {"txId": 7, "snapshot": "false", "sequence": f'["800","{lsn}"]'}
        tx = {"id": f"7:{lsn}", "total_order": total_order, "data_collection_order": total_order}
        return {"op": op, "before": before, "after": after, "source": source, "transaction": tx}
    source |= {"xid": 7, "commit_lsn": 900, "snapshot": False}
    tx = {"id": "7:900", "total_order": total_order, "data_collection_order": total_order}
    return {"op": op, "before": before, "after": after, "source": source, "transaction": tx,
            "unchanged_toast_columns": [], "unrepresentable": None}


def test_a_key_change_is_folded_into_tombstone_and_update() -> None:
    tally = Tally()
    theirs = [({"id": 2}, _event("d", {"id": 2, "code": "", "v": None}, None, theirs=True)), ({"id": 2}, None),
              ({"id": 3}, _event("c", None, {"id": 3, "code": "c", "v": "y"}, total_order=2, theirs=True))]
    folded = fold_debezium(SPEC, theirs, tally)
    assert [(s.key, None if s.value is None else s.value["op"]) for s in folded] == [({"id": 2}, None),
                                                                                   ({"id": 3}, "u")]
    assert folded[1].value is not None and folded[1].value["transaction"]["total_order"] == 1
    assert tally.key_changes == {(7, "t"): 1}


def test_equal_streams_pass_and_any_other_difference_is_reported() -> None:
    ours = [({"id": 2}, None),
            ({"id": 3}, _event("u", {"id": 2, "code": None, "v": None}, {"id": 3, "code": "c", "v": None}))]
    create = _event("c", None, {"id": 3, "code": "c", "v": None}, total_order=2, theirs=True)
    theirs = [({"id": 2}, _event("d", {"id": 2, "code": "", "v": None}, None, theirs=True)), ({"id": 2}, None),
              ({"id": 3}, create)]
    tally = Tally(commits=COMMITS)
    compare_table(SPEC, ours, theirs, tally)
    assert tally.differences == []
    assert tally.documented == {"key-change": 1, "transaction-id": 1, "old-key-default": 1, "commit-position": 1}
    create["after"]["v"] = "other"
    tally = Tally(commits=COMMITS)
    compare_table(SPEC, ours, theirs, tally)
    assert tally.differences == ["t[1] after.v: value: pgbridge None vs Debezium 'other'"]


def test_a_documented_difference_must_show_exactly() -> None:
    ours = [({"id": 1}, _event("u", None, {"id": 1, "code": "a", "v": None}) | {"unchanged_toast_columns": ["v"]})]
    update = _event("u", None, {"id": 1, "code": "a", "v": PLACEHOLDER}, theirs=True)
    theirs = [({"id": 1}, update)]
    tally = Tally(commits=COMMITS)
    compare_table(SPEC, ours, theirs, tally)
    assert tally.differences == [] and tally.documented["unchanged-toast"] == 1
    update["after"]["v"] = "the real value"
    tally = Tally(commits=COMMITS)
    compare_table(SPEC, ours, theirs, tally)
    assert len(tally.differences) == 1 and "unchanged-toast" in tally.differences[0]


def test_debezium_commit_position_must_lie_between_pgbridge_commits() -> None:
    ours = [({"id": 1}, _event("c", None, {"id": 1, "code": "a", "v": None}))]
    theirs = [({"id": 1}, _event("c", None, {"id": 1, "code": "a", "v": None}, theirs=True))]
    tally = Tally(commits=COMMITS)
    compare_table(SPEC, ours, theirs, tally)
    assert tally.differences == [] and tally.documented["commit-position"] == 1
    tally = Tally(commits=[850, 900])  # the previous commit ends at 800 in Debezium: before pgbridge's 850
    compare_table(SPEC, ours, theirs, tally)
    assert len(tally.differences) == 1 and "commit-position" in tally.differences[0]
