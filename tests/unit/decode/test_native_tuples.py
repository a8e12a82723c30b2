"""The compiled TupleData reader (``decode/_native.pyx``) agrees with the Python loop on any bytes.

Well-formed column data must give the same kinds, values and end offset; anything else must make
the kernel hand back to the Python loop (``None``), which then raises the located error, so the
decoder's behaviour on corrupt input does not depend on whether the kernel is built.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pgbridge.decode import pgoutput
from pgbridge.errors import DecodeError
from tests.support.kernels import compiled


@pytest.fixture(autouse=True)
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Overrides the package's two-way fixture: these tests compare the two ways themselves."""
    monkeypatch.setattr(pgoutput, "_native", compiled("pgbridge.decode._native"))
    yield "native"


def python_tuple(buf: bytes, pos: int, count: int) -> tuple[object, ...]:
    saved = pgoutput._native
    pgoutput._native = None
    try:
        data, end = pgoutput._tuple(buf, pos, count, "I")
        return ("ok", data.kinds, data.values, end)
    except DecodeError as exc:
        return ("error", str(exc))
    finally:
        pgoutput._native = saved


def native_tuple(buf: bytes, pos: int, count: int) -> tuple[object, ...]:
    try:
        data, end = pgoutput._tuple(buf, pos, count, "I")
        return ("ok", data.kinds, data.values, end)
    except DecodeError as exc:
        return ("error", str(exc))


column = st.one_of(
    st.binary(max_size=30).map(lambda v: b"t" + struct.pack("!I", len(v)) + v),
    st.binary(max_size=30).map(lambda v: b"b" + struct.pack("!I", len(v)) + v),
    st.just(b"n"), st.just(b"u"),
)


@given(st.lists(column, max_size=12), st.binary(max_size=4), st.integers(0, 3))
def test_well_formed_columns_read_alike(columns: list[bytes], prefix: bytes, extra: int) -> None:
    buf = prefix + b"".join(columns)
    result = native_tuple(buf, len(prefix), len(columns))
    assert result == python_tuple(buf, len(prefix), len(columns))
    assert result[0] == "ok"
    # asking for more columns than there are is a truncation either way
    assert native_tuple(buf, len(prefix), len(columns) + 1 + extra) == python_tuple(
        buf, len(prefix), len(columns) + 1 + extra)


@given(st.binary(max_size=64), st.integers(0, 8), st.integers(0, 20))
@example(b"t\xff\xff\xff\xff", 0, 1)  # a length that overruns by 4 GiB
@example(b"x", 0, 1)  # an unknown kind byte
@example(b"t\x00\x00\x00\x05abc", 0, 1)  # a value cut short
def test_any_bytes_decode_or_fail_alike(buf: bytes, pos: int, count: int) -> None:
    assert native_tuple(buf, pos, count) == python_tuple(buf, pos, count)
