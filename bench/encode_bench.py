"""Micro-benchmark of the encode hot path: ``ChangeEncoder.encode_row`` on a typical 5-column insert.

Run from the repository root: ``.venv/bin/python bench/encode_bench.py [-n 300000]``. The row is
(bigint, int, text of ~100 characters, timestamptz, numeric(12,2)) in pgoutput's text format, as
the assembler hands it over; the figure is records/s of fully framed Kafka values (single-object
header + Avro envelope + key). For reference it also times fastavro's ``schemaless_writer`` on the
same envelope given as ready-made Python values (no text parsing at all), which is the cost the
hand-written writer avoids. One machine's figure is only comparable with itself.
"""

from __future__ import annotations

import argparse
import io
import struct
import sys
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--count", type=int, default=300_000, help="records per run")
    parser.add_argument("-r", "--repeat", type=int, default=3, help="runs; the best one is reported")
    args = parser.parse_args()

    from fastavro import parse_schema, schemaless_writer

    from pgbridge.assemble.units import RowChange
    from pgbridge.decode.messages import Column, Relation, TupleData
    from pgbridge.encode import ChangeEncoder, EventContext, SingleObjectRegistrar
    from pgbridge.lsn import Lsn
    from pgbridge.publish.routing import TopicRouter

    relation = Relation(None, 16384, "public", "orders", "d", (
        Column(True, "id", 20, -1), Column(False, "quantity", 23, -1), Column(False, "note", 25, -1),
        Column(False, "created_at", 1184, -1), Column(False, "amount", 1700, ((12 << 16) | 2) + 4)))
    row = TupleData(b"ttttt", (b"1234567890", b"42", ("lorem ipsum dolor sit amet " * 4)[:100].encode(),
                               b"2024-05-01 12:34:56.789012+00", b"1234567.89"))
    change = RowChange("c", relation, Lsn(0x16_B374_D848), None, None, row)
    ctx = EventContext(commit_lsn=0x16_B374_D900, xid=123456, ts_us=1_714_566_896_789_012, origin=None,
                       total_order=1, collection_order=1)
    encoder = ChangeEncoder(topic_prefix="pgbridge", router=TopicRouter("pgbridge"), database="shop",
                            registrar=SingleObjectRegistrar(lambda _fp, _schema: None))
    encode_row = encoder.encode_row
    (record,) = encode_row(change, ctx)
    assert record.value is not None
    print(f"insert of 5 text columns (bigint, int, text[100], timestamptz, numeric(12,2)) → "
          f"{len(record.value)}-byte value; {args.count:,} records, best of {args.repeat}, "
          f"Python {sys.version.split()[0]}")

    def timed(label: str, run: object) -> None:
        assert callable(run)
        best = float("inf")
        for _ in range(args.repeat):
            started = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - started)
        print(f"  {label:<40} {args.count / best:>10,.0f} records/s  ({best / args.count * 1e9:,.0f} ns each)")

    def encode_rows() -> None:
        for _ in range(args.count):
            encode_row(change, ctx)

    timed("ChangeEncoder.encode_row", encode_rows)

    # The same row as postgres.binary sends it (int8, int4, text, timestamptz, numeric_send of
    # 1234567.89): what the binary format costs the encoder.
    binary_row = TupleData(b"bbbbb", (struct.pack("!q", 1234567890), struct.pack("!i", 42), row.values[2],
                                      struct.pack("!q", 1_714_566_896_789_012 - 946_684_800_000_000),
                                      struct.pack("!HhHH3H", 3, 1, 0, 2, 123, 4567, 8900)))
    binary_change = RowChange("c", relation, Lsn(0x16_B374_D848), None, None, binary_row)
    assert encode_row(binary_change, ctx) == encode_row(change, ctx), "binary and text rows must encode alike"

    def encode_binary_rows() -> None:
        for _ in range(args.count):
            encode_row(binary_change, ctx)

    timed("ChangeEncoder.encode_row, binary row", encode_binary_rows)
    native = ChangeEncoder(topic_prefix="pgbridge", router=TopicRouter("pgbridge"), database="shop",
                           registrar=SingleObjectRegistrar(lambda _fp, _schema: None), native=False).encode_row

    def encode_rows_python() -> None:
        for _ in range(args.count):
            native(change, ctx)

    def encode_binary_rows_python() -> None:
        for _ in range(args.count):
            native(binary_change, ctx)

    timed("  the same without the compiled kernel", encode_rows_python)
    timed("  binary row without the compiled kernel", encode_binary_rows_python)

    parsed = parse_schema(encoder.value_schema(relation))
    after = {"id": 1234567890, "quantity": 42, "note": row.values[2].decode(),  # type: ignore[union-attr]
             "created_at": 1_714_566_896_789_012, "amount": (123456789).to_bytes(4, "big", signed=True)}
    source = {"db": "shop", "schema": "public", "table": "orders", "lsn": 1, "commit_lsn": 2, "xid": 123456,
              "ts_us": ctx.ts_us, "snapshot": False, "origin": None}
    transaction = {"id": "123456:2", "total_order": 1, "data_collection_order": 1}
    # (name, value) tuples pick the union branch without fastavro validating the record first.
    datum: dict[str, Any] = {"before": None, "after": ("pgbridge.public.orders.Value", after), "op": "c",
                             "source": source, "transaction": ("pgbridge.Transaction", transaction),
                             "unchanged_toast_columns": [], "unrepresentable": None}
    buffer = io.BytesIO()

    def fastavro_values() -> None:
        for _ in range(args.count):
            buffer.seek(0)
            buffer.truncate()
            schemaless_writer(buffer, parsed, datum)
            buffer.getvalue()

    timed("fastavro schemaless_writer (value only)", fastavro_values)


if __name__ == "__main__":
    main()
