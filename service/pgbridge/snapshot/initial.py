"""Initial snapshot: every published table read inside the slot's exported snapshot.

Rows are read with ``COPY ... TO STDOUT`` in text format, whose field text is exactly what
pgoutput sends for the same values, so snapshot rows go through the same encoder as streamed
rows and land on the same topic with the same writer schema.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final

import psycopg
from psycopg import sql

from pgbridge.decode.messages import KIND_NULL, KIND_TEXT, Relation, TupleData
from pgbridge.errors import PgbridgeError, SourceUnavailable
from pgbridge.metrics import Metrics
from pgbridge.source import slots
from pgbridge.source.connection import build_conninfo

log = logging.getLogger(__name__)

PROGRESS_EVERY_S: Final = 10.0

_ESCAPES: Final = {ord("b"): b"\b", ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t",
                   ord("v"): b"\v", ord("\\"): b"\\"}


class SnapshotInterrupted(PgbridgeError):
    """A stop was requested mid-snapshot; the pending slot makes the next start redo it."""


def unescape_copy_field(field: bytes) -> bytes:
    """Undo COPY text-format escaping of one field (backslash sequences)."""
    if b"\\" not in field:
        return field
    out = bytearray()
    i, n = 0, len(field)
    while i < n:
        ch = field[i]
        if ch != 0x5C or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = field[i + 1]
        if nxt in _ESCAPES:
            out += _ESCAPES[nxt]
            i += 2
        elif 0x30 <= nxt <= 0x37:
            j = i + 1
            while j < n and j < i + 4 and 0x30 <= field[j] <= 0x37:
                j += 1
            out.append(int(field[i + 1:j], 8) & 0xFF)
            i = j
        elif nxt == ord("x") and i + 2 < n:
            j = i + 2
            while j < n and j < i + 4 and chr(field[j]) in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(field[i + 2:j], 16))
            i = j
        else:
            out.append(nxt)
            i += 2
    return bytes(out)


def parse_copy_lines(chunks: Iterator[bytes | memoryview], column_count: int) -> Iterator[TupleData]:
    """Turn COPY text-format data (arbitrary chunk boundaries) into TupleData rows."""
    kinds_all_text = bytes([KIND_TEXT]) * column_count
    rest = b""
    for chunk in chunks:
        data = rest + bytes(chunk)
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            fields = line.split(b"\t")
            if b"\\N" in fields:
                values = tuple(None if f == b"\\N" else unescape_copy_field(f) for f in fields)
                kinds = bytes(KIND_NULL if v is None else KIND_TEXT for v in values)
            else:
                values = tuple(unescape_copy_field(f) for f in fields)
                kinds = kinds_all_text
            yield TupleData(kinds, values)
    if rest:
        raise SourceUnavailable("COPY output ended in the middle of a row")


def run_initial_snapshot(dsn: str, snapshot_name: str, tables: list[tuple[str, str]], publication: str,
                         emit: Callable[[Relation, TupleData], None], *, metrics: Metrics,
                         stop: threading.Event, connect_timeout_s: float) -> int:
    """Read every table in the exported snapshot and hand each row to ``emit``; returns rows read."""
    conninfo = build_conninfo(dsn, replication=False, connect_timeout_s=connect_timeout_s)
    total = 0
    try:
        conn = psycopg.connect(conninfo, autocommit=False)
    except psycopg.OperationalError as exc:
        raise SourceUnavailable(f"snapshot connection failed: {str(exc).strip()}") from None
    with conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
        for schema, table in tables:
            relation = slots.relation_from_catalog(conn, schema, table, publication)
            name = f"{schema}.{table}"
            estimate_row = conn.execute("SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s",
                                        (relation.rel_id,)).fetchone()
            estimate = int(str(estimate_row[0])) if estimate_row else 0
            metrics.snapshot_rows_estimate.labels(name).set(estimate)
            log.info("snapshot of table started", extra={"table": name, "rows_estimate": estimate})
            columns = sql.SQL(", ").join(sql.Identifier(column.name) for column in relation.columns)
            query = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT").format(columns, sql.Identifier(schema, table))
            started = last_report = time.monotonic()
            done = 0
            counter = metrics.snapshot_rows.labels(name)
            with conn.cursor() as cursor, cursor.copy(query) as copy:
                for row in parse_copy_lines(iter(copy), len(relation.columns)):  # type: ignore[arg-type]
                    emit(relation, row)
                    done += 1
                    if done % 1000 == 0:
                        counter.inc(1000)
                        if stop.is_set():
                            raise SnapshotInterrupted(f"snapshot of {name} interrupted by a stop request")
                        now = time.monotonic()
                        if now - last_report >= PROGRESS_EVERY_S:
                            last_report = now
                            log.info("snapshot progress", extra={"table": name, "rows": done,
                                                                 "rows_estimate": estimate})
            counter.inc(done % 1000)
            total += done
            elapsed = max(time.monotonic() - started, 1e-9)
            log.info("snapshot of table done", extra={"table": name, "rows": done,
                                                      "rows_per_s": round(done / elapsed)})
        conn.rollback()
    return total
