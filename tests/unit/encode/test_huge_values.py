"""A row holding a huge text value (issue 16: 500 MB) is encoded with one copy of the value: the
compiled kernel's buffer becomes the record itself instead of being copied into it, and a huge
buffer grows by at most 1 MiB past what it needs instead of doubling."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import pytest

from pgbridge.assemble.units import RowChange
from pgbridge.decode.messages import TupleData
from pgbridge.encode import ChangeEncoder, EventContext, SingleObjectRegistrar, plan
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import TopicRouter
from tests.support.kernels import compiled
from tests.unit.encode.avro_helpers import SchemaLog, relation

HUGE = 32 << 20
DOCS = relation(("id", 23, -1, True), ("body", 25, -1, False), name="docs")
CTX = EventContext(commit_lsn=0x1_0000, xid=7, ts_us=1, origin=None, total_order=2, collection_order=2)


@pytest.fixture(autouse=True)
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Overrides the package's two-way fixture: the kernel is measured, the Python code is the reference."""
    monkeypatch.setattr(plan, "_native", compiled("pgbridge.encode._native"))
    yield "native"


def _insert(body: bytes) -> RowChange:
    return RowChange("c", DOCS, Lsn(0x1_0000), None, None, TupleData(b"tt", (b"2", body)))


def _encoder(log: SchemaLog, *, native: bool) -> ChangeEncoder:
    return ChangeEncoder(topic_prefix="p", router=TopicRouter("p"),
                         database="db", registrar=SingleObjectRegistrar(log.announce),
                         native=native)


def test_the_envelope_of_a_huge_value_is_written_once_and_equals_the_python_encoders() -> None:
    log = SchemaLog()
    encoder = _encoder(log, native=True)
    encoder.encode_row(_insert(b"warm"), CTX)  # the plan and its schemas, outside the measurement
    change = _insert(b"0123456789abcdef" * (HUGE // 16))
    tracemalloc.start()
    try:
        [(_topic, key, value)] = encoder.encode_row(change, CTX)
        allocated = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert HUGE < allocated < HUGE + (2 << 20), f"encoding allocated {allocated:,} bytes for a {HUGE:,}-byte value"
    assert value is not None and len(value) > HUGE
    assert [(key, value)] == [(r.key, r.value) for r in _encoder(log, native=False).encode_row(change, CTX)]
    decoded = log.decode(value, logical=False)
    assert decoded["after"]["id"] == 2 and len(decoded["after"]["body"]) == HUGE


@pytest.mark.parametrize("size", [1023, 1024, 1025, 4096, 70_000, (1 << 20) + 3])
def test_rows_around_the_stack_and_growth_limits_are_written_alike(size: int) -> None:
    log = SchemaLog()
    change = _insert(b"z" * size)
    native = _encoder(log, native=True).encode_row(change, CTX)
    assert native == _encoder(log, native=False).encode_row(change, CTX)
