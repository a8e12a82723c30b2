"""Malformed incremental-snapshot signals: each is refused with a sentence saying why (logged as an
error), nothing is queued or persisted, and ``on_signal`` never raises, so the stream goes on. A
hypothesis run over arbitrary bytes and JSON values pins "never raises"."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgbridge.lsn import Lsn
from pgbridge.metrics import Metrics
from pgbridge.snapshot.incremental import (
    MAX_SIGNAL_BYTES,
    MAX_SIGNAL_TABLES,
    IncrementalSnapshotter,
    SnapshotSignal,
    parse_signal,
    read_signal,
)
from tests.support.progress import MemoryProgress
from tests.support.properties import examples


def _snapshotter() -> tuple[IncrementalSnapshotter, MemoryProgress]:
    progress = MemoryProgress()
    snap = IncrementalSnapshotter(dsn="", slot="s1", publication="p", chunk_rows=10, signal_prefix="pgbridge.signal",
                                  progress=progress, metrics=Metrics(), connect_timeout_s=1)  # type: ignore[arg-type]
    return snap, progress


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


MALFORMED = {
    "not utf-8": (b"\xff\xfe{", "not UTF-8"),
    "not json": (b"{tables: public.a}", "not JSON"),
    "a list": (_json(["execute-snapshot", "public.a"]), "a JSON list, not an object"),
    "a string": (_json("execute-snapshot"), "a JSON str, not an object"),
    "null": (b"null", "a JSON NoneType, not an object"),
    "unknown type": (_json({"type": "drop-everything", "tables": ["public.a"]}), "unknown type 'drop-everything'"),
    "type not a string": (_json({"type": ["execute-snapshot"]}), "unknown type"),
    "no tables": (_json({"type": "execute-snapshot"}), "tables"),
    "empty tables": (_json({"type": "execute-snapshot", "tables": []}), "non-empty"),
    "tables a string": (_json({"type": "execute-snapshot", "tables": "public.a"}), "tables"),
    "table a number": (_json({"type": "execute-snapshot", "tables": [42]}), "tables"),
    "data not an object": (_json({"type": "execute-snapshot", "data": "public.a"}), "tables"),
    "collections not a list": (_json({"type": "execute-snapshot", "data": {"data-collections": 7}}), "tables"),
    "table without schema": (_json({"type": "execute-snapshot", "tables": ["nodot"]}), "malformed table name"),
    "slot a number": (_json({"type": "execute-snapshot", "tables": ["public.a"], "slot": 5}), "\"slot\" is a JSON int"),
    "too many tables": (_json({"type": "execute-snapshot", "tables": [f"s.t{i}" for i in range(MAX_SIGNAL_TABLES + 1)]}),
                        "tables (at most"),
    "huge": (b'{"type":"execute-snapshot","tables":["public.a"],"pad":"' + b"x" * MAX_SIGNAL_BYTES + b'"}',
             "over the 65,536-byte limit"),
    "deeply nested": (b"[" * 30_000 + b"]" * 30_000, "not JSON"),
    "a 5000-digit number": (b'{"type":"execute-snapshot","n":' + b"9" * 5000 + b"}", "not JSON"),
}


@pytest.mark.parametrize(("content", "reason"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_signal_says_why(content: bytes, reason: str) -> None:
    problem = read_signal(content)
    assert isinstance(problem, str) and reason in problem
    assert parse_signal(content) is None


@pytest.mark.parametrize(("content", "reason"), MALFORMED.values(), ids=MALFORMED.keys())
def test_on_signal_logs_an_error_queues_nothing_and_does_not_raise(
        content: bytes, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    snap, progress = _snapshotter()
    with caplog.at_level(logging.ERROR, logger="pgbridge.snapshot.incremental"):
        snap.on_signal(content, Lsn(0x500))
    assert snap.state.queue == [] and snap.state.signal_lsn == 0 and progress.records == {}
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert reason in record.getMessage() and "the stream goes on" in record.getMessage()
    assert record.__dict__["lsn"] == "0/500"
    # a good signal after the bad one is still acted on
    snap.on_signal(_json({"type": "execute-snapshot", "tables": ["public.a"]}), Lsn(0x600))
    assert snap.state.queue == ["public.a"] and snap.state.signal_lsn == 0x600


def test_a_valid_signal_still_parses() -> None:
    assert read_signal(_json({"type": "execute-snapshot", "data": {"data-collections": ["Public.A"]},
                              "slot": "s1"})) == SnapshotSignal(("public.a",), "s1")


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                       max_size=4),
                           max_leaves=20)
signal_like = st.fixed_dictionaries({"type": st.sampled_from(["execute-snapshot", "x"]) | json_values},
                                    optional={"tables": json_values | st.lists(st.text(max_size=30), max_size=4),
                                              "data": json_values, "slot": json_values})


@settings(max_examples=examples(300), derandomize=True, database=None)
@given(content=st.binary(max_size=200) | json_values.map(_json) | signal_like.map(_json))
def test_no_content_makes_on_signal_raise(content: bytes) -> None:
    snap, _progress = _snapshotter()
    snap.on_signal(content, Lsn(0x700))
    signal = read_signal(content)
    if isinstance(signal, str):
        assert snap.state.queue == [] and snap.state.signal_lsn == 0
    else:
        assert snap.state.signal_lsn == 0x700 or signal.slot not in (None, "s1")
