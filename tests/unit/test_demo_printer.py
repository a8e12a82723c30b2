"""The demo's printer: each transaction printed whole and in commit order, whatever order its
records arrive in from the topics it reads in parallel."""

from __future__ import annotations

from typing import Any

import pytest

from pgbridge.demo.reader import INCOMPLETE_LIMIT_S, Printer
from pgbridge.demo.workload import TOPIC_PREFIX
from pgbridge.publish.topics import messages_topic, table_topic, transactions_topic

TRANSACTIONS = transactions_topic(TOPIC_PREFIX)
MESSAGES = messages_topic(TOPIC_PREFIX)
ORDERS = table_topic(TOPIC_PREFIX, "shop", "orders")
WINDOW = 0.4


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def boundary(status: str, commit_lsn: int, events: int = 0) -> dict[str, Any]:
    return {"status": status, "xid": commit_lsn // 16, "commit_lsn": commit_lsn, "event_count": events,
            "data_collections": [{"data_collection": "shop.orders", "event_count": events}] if events else None}


def change(commit_lsn: int, total_order: int | None, order_id: int) -> dict[str, Any]:
    return {"op": "c" if total_order else "r", "before": None, "after": {"id": order_id},
            "source": {"schema": "shop", "table": "orders", "commit_lsn": commit_lsn},
            "transaction": None if total_order is None else {"total_order": total_order}}


def message(commit_lsn: int, total_order: int) -> dict[str, Any]:
    return {"prefix": "pgbridge-demo", "content": b"hello", "transactional": True, "commit_lsn": commit_lsn,
            "transaction": {"total_order": total_order}}


def printed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line.split()[0] + (" " + line.split("commit_lsn=")[1] if "commit_lsn=" in line else "")
            for line in capsys.readouterr().out.splitlines()]


def test_an_end_that_arrives_before_its_changes_waits_for_them(capsys: pytest.CaptureFixture[str]) -> None:
    # given a transaction's BEGIN and END read before its two changes and its message
    clock = Clock()
    printer = Printer(clock)
    printer.add(TRANSACTIONS, None, boundary("BEGIN", 0x100))
    printer.add(TRANSACTIONS, None, boundary("END", 0x100, events=3))
    printer.add(ORDERS, {"id": 1}, change(0x100, 1, 1))
    clock.now += 1.0

    # when the printer releases with the window long past: nothing, two of three events are missing
    printer.release(older_than=WINDOW)
    assert capsys.readouterr().out == ""

    # then the missing events arrive, and the whole transaction comes out in order
    printer.add(MESSAGES, None, message(0x100, 3))
    printer.add(ORDERS, {"id": 2}, change(0x100, 2, 2))
    clock.now += WINDOW
    printer.release(older_than=WINDOW)
    assert printed(capsys) == ["BEGIN 0/100", "c 0/100 total_order=1", "c 0/100 total_order=2",
                               "msg 0/100 total_order=3", "END"]


def test_a_complete_transaction_waits_behind_an_earlier_incomplete_one(capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    printer = Printer(clock)
    for lsn in (0x100, 0x200):
        printer.add(TRANSACTIONS, None, boundary("BEGIN", lsn))
        printer.add(TRANSACTIONS, None, boundary("END", lsn, events=1))
    printer.add(ORDERS, {"id": 2}, change(0x200, 1, 2))  # the later one is whole, the earlier is not
    clock.now += 1.0
    printer.release(older_than=WINDOW)
    assert capsys.readouterr().out == ""

    printer.add(ORDERS, {"id": 1}, change(0x100, 1, 1))
    clock.now += 1.0
    printer.release(older_than=WINDOW)
    assert printed(capsys) == ["BEGIN 0/100", "c 0/100 total_order=1", "END",
                               "BEGIN 0/200", "c 0/200 total_order=1", "END"]


def test_a_transaction_missing_events_is_printed_after_the_limit_and_nothing_is_held_forever(
        capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    printer = Printer(clock)
    printer.add(TRANSACTIONS, None, boundary("BEGIN", 0x100))
    printer.add(TRANSACTIONS, None, boundary("END", 0x100, events=2))
    printer.add(ORDERS, {"id": 1}, change(0x100, 1, 1))  # the second event never comes
    clock.now += INCOMPLETE_LIMIT_S - 0.1
    printer.release(older_than=WINDOW)
    assert capsys.readouterr().out == ""

    clock.now += 0.1
    printer.release(older_than=WINDOW)
    assert printed(capsys) == ["BEGIN 0/100", "c 0/100 total_order=1", "END"]


def test_lines_outside_transactions_keep_the_window_and_the_end_prints_everything(
        capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    printer = Printer(clock)
    printer.add(ORDERS, {"id": 7}, change(0x50, None, 7))  # a snapshot row
    printer.release(older_than=WINDOW)
    assert capsys.readouterr().out == ""  # younger than the window

    clock.now += WINDOW
    printer.add(TRANSACTIONS, None, boundary("BEGIN", 0x100))  # incomplete: no END yet
    printer.release(older_than=WINDOW)
    assert printed(capsys) == ["r"]

    printer.flush()
    assert printed(capsys) == ["BEGIN 0/100"]
    assert printer.counts["shop.orders"] == {"r": 1}
