"""The retype table (encode/retype.py): which ALTER COLUMN TYPE keeps every old value exactly."""

from __future__ import annotations

import pytest

from pgbridge.decode.ddl import DdlColumn
from pgbridge.encode import retype as t


def col(oid: int, typmod: int = -1) -> DdlColumn:
    return DdlColumn(attnum=2, name="c", type="?", type_oid=oid, typmod=typmod, not_null=False, key=False)


def varchar(n: int) -> DdlColumn:
    return col(t.VARCHAR, n + 4)


def numeric(precision: int, scale: int) -> DdlColumn:
    return col(t.NUMERIC, ((precision << 16) | (scale & 0x7FF)) + 4)


@pytest.mark.parametrize(("before", "after", "exact"), [
    (col(t.INT4), col(t.INT8), True),
    (col(t.INT2), col(t.INT4), True),
    (col(t.INT8), col(t.INT4), False),
    (col(t.INT4), col(t.INT2), False),
    (col(t.INT4), col(t.FLOAT8), True),
    (col(t.INT4), col(t.FLOAT4), False),
    (col(t.INT8), col(t.FLOAT8), False),
    (col(t.FLOAT4), col(t.FLOAT8), True),
    (col(t.FLOAT8), col(t.FLOAT4), False),
    (col(t.FLOAT8), col(t.NUMERIC), False),
    (col(t.INT4), col(t.NUMERIC), True),
    (col(t.INT4), numeric(10, 0), True),
    (col(t.INT4), numeric(12, 2), True),
    (col(t.INT4), numeric(9, 0), False),
    (col(t.INT8), numeric(19, 0), True),
    (numeric(10, 2), numeric(12, 2), True),
    (numeric(10, 2), numeric(12, 4), True),
    (numeric(10, 2), numeric(10, 3), False),
    (numeric(10, 2), numeric(10, 1), False),
    (numeric(10, 2), col(t.NUMERIC), True),
    (col(t.NUMERIC), numeric(30, 10), False),
    (col(t.TEXT), varchar(10), False),
    (col(t.TEXT), col(t.VARCHAR), True),
    (varchar(10), varchar(20), True),
    (varchar(20), varchar(10), False),
    (varchar(10), col(t.TEXT), True),
    (varchar(10), col(t.VARCHAR), True),
    (col(t.VARCHAR), varchar(10), False),
    (col(t.BPCHAR, 7), col(t.TEXT), False),
    (col(t.BPCHAR, 7), col(t.BPCHAR, 9), False),
    (col(t.BPCHAR, 7), col(t.BPCHAR, 7), True),
    (col(t.INT8), col(t.TEXT), True),
    (col(t.JSONB), col(t.JSON), True),
    (col(t.JSON), col(t.JSONB), False),
    (col(t.DATE), col(t.TIMESTAMP), True),
    (col(t.DATE), col(t.TIMESTAMPTZ), False),
    (col(t.TIMESTAMP), col(t.TIMESTAMPTZ), False),
    (col(t.TIMESTAMPTZ), col(t.TIMESTAMP), False),
    (col(t.TIMESTAMP, 3), col(t.TIMESTAMP), True),
    (col(t.TIMESTAMP), col(t.TIMESTAMP, 3), False),
    (col(t.TIMESTAMP, 3), col(t.TIMESTAMP, 5), True),
    (col(t.TEXT), col(t.INT4), False),
    (col(t.INT4), col(t.BIT, 32), False),
])
def test_retype_exactness(before: DdlColumn, after: DdlColumn, exact: bool) -> None:
    assert t.converts_exactly(before, after) is exact
