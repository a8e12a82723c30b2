"""Whether ``ALTER COLUMN ... TYPE`` converts a column's old values exactly: the retype table.

"Exactly" means every value the old type can hold becomes a value of the new type that stands for
the same thing, so a consumer may keep old and new records side by side: ``integer → bigint`` yes,
``bigint → integer`` no (values may not fit), ``varchar(10) → varchar(20)`` or ``→ text`` yes,
``text → varchar(n)`` no (values may be too long), ``char(n) → text`` no (the cast drops trailing
blanks), ``numeric(p,s)`` only to a type with at least as many digits on both sides of the point,
``timestamp ↔ timestamptz`` no (the meaning depends on the session's TimeZone). Any type to
``text`` (or unbounded ``varchar``) keeps its exact text form, except ``char(n)``. Everything not
in the table answers False: "not known to be exact". The answer is about Postgres' default
conversion; a ``USING`` expression may do anything, and the trigger cannot see it.

Pure: types are compared by OID (built-in OIDs are fixed across versions) and ``atttypmod``.
"""

from __future__ import annotations

from typing import Final

from pgbridge.decode.ddl import DdlColumn

INT8: Final = 20
INT2: Final = 21
INT4: Final = 23
TEXT: Final = 25
JSON: Final = 114
FLOAT4: Final = 700
FLOAT8: Final = 701
BPCHAR: Final = 1042
VARCHAR: Final = 1043
DATE: Final = 1082
TIME: Final = 1083
TIMESTAMP: Final = 1114
TIMESTAMPTZ: Final = 1184
INTERVAL: Final = 1186
TIMETZ: Final = 1266
BIT: Final = 1560
VARBIT: Final = 1562
NUMERIC: Final = 1700
JSONB: Final = 3802

# Decimal digits an integer type needs (its largest magnitude), for a numeric(p,s) target.
_INTEGER_DIGITS: Final = {INT2: 5, INT4: 10, INT8: 19}
# Conversions between different types that keep every value (default casts).
_WIDENING: Final = frozenset({
    (INT2, INT4), (INT2, INT8), (INT4, INT8),
    (INT2, FLOAT4), (INT2, FLOAT8), (INT4, FLOAT8),  # within the float's 24 / 53-bit mantissa
    (FLOAT4, FLOAT8),
    (VARCHAR, TEXT), (JSONB, JSON), (DATE, TIMESTAMP),
})
# Types whose typmod is a fractional-seconds precision (-1: the default, 6).
_PRECISION_TYPES: Final = frozenset({TIME, TIMETZ, TIMESTAMP, TIMESTAMPTZ})
_TYPMOD_HEADER: Final = 4  # VARHDRSZ, added to a length or numeric typmod


def _numeric(typmod: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of a ``numeric`` typmod; ``None`` for unconstrained."""
    if typmod < _TYPMOD_HEADER:
        return None
    packed = typmod - _TYPMOD_HEADER
    scale = packed & 0x7FF
    if scale >= 0x400:  # Postgres 15+ allows a negative scale, stored as 11-bit two's complement
        scale -= 0x800
    return packed >> 16, scale


def _fits_numeric(digits_before: int, scale: int, target_typmod: int) -> bool:
    """Whether values with ``digits_before`` integer digits and ``scale`` decimals fit ``target_typmod``."""
    target = _numeric(target_typmod)
    if target is None:
        return True
    precision, target_scale = target
    return target_scale >= scale and precision - target_scale >= digits_before


def _same_type(oid: int, before: int, after: int) -> bool:
    """A change of typmod only (``varchar(10) → varchar(20)``, ``numeric(10,2) → numeric(12,2)``)."""
    if before == after or (after == -1 and oid != BPCHAR):
        return True
    if oid in (VARCHAR, VARBIT):
        return before != -1 and after >= before
    if oid == NUMERIC:
        source = _numeric(before)
        return source is not None and _fits_numeric(source[0] - source[1], source[1], after)
    if oid in _PRECISION_TYPES:
        return after >= (6 if before == -1 else before)
    return False  # char(n), bit(n), interval fields...: a different typmod changes values


def converts_exactly(before: DdlColumn, after: DdlColumn) -> bool:
    """Whether ``before``'s values all convert exactly to ``after``'s type (see the module docstring)."""
    old, new = before.type_oid, after.type_oid
    if old == new:
        return _same_type(old, before.typmod, after.typmod)
    if (new == TEXT or (new == VARCHAR and after.typmod == -1)) and old != BPCHAR:
        return True  # the value's own text form, unchanged
    if (old, new) in _WIDENING:
        return True
    if old in _INTEGER_DIGITS and new == NUMERIC:
        return _fits_numeric(_INTEGER_DIGITS[old], 0, after.typmod)
    return False
