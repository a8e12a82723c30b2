"""Log sequence numbers: one ``Lsn`` type (an int) and its ``X/Y`` text form."""

from __future__ import annotations

from typing import NewType

Lsn = NewType("Lsn", int)

INVALID_LSN = Lsn(0)


def parse_lsn(text: str) -> Lsn:
    """Parse Postgres's ``XXXXXXXX/YYYYYYYY`` form."""
    try:
        high, low = text.strip().split("/")
        value = (int(high, 16) << 32) | int(low, 16)
    except ValueError as exc:
        raise ValueError(f"not an LSN: {text!r} (expected the form 16/B374D848)") from exc
    if not 0 <= value < 1 << 64:
        raise ValueError(f"LSN out of range: {text!r}")
    return Lsn(value)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
