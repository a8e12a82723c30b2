"""Micro-benchmark of the pgoutput hot path: decode N Insert messages of a typical 5-column row.

Run from the repository root: ``.venv/bin/python bench/decode_bench.py [-n 1000000]``. It reports
messages/s for ``bytes`` payloads and for ``memoryview`` payloads (what ``frames.parse_copy_message``
hands over), through ``PgoutputDecoder.decode`` as the pipeline calls it. One machine's figure is only
comparable with itself: use it to compare changes, not hosts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--count", type=int, default=1_000_000, help="messages per run")
    parser.add_argument("-r", "--repeat", type=int, default=3, help="runs; the best one is reported")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))  # the builder lives with the tests
    from tests.support.pgoutput_builder import encode_message

    from pgbridge.decode.messages import Insert, TupleData
    from pgbridge.decode.pgoutput import PgoutputDecoder

    row = TupleData(b"ttttt", (b"1234567", b"alice@example.com", b"2024-05-01 12:34:56.789+00",
                                b"42.50", b"t"))
    payload = encode_message(Insert(None, 16384, row), proto_version=4)
    print(f"Insert of {len(row.kinds)} text columns, {len(payload)} bytes; {args.count:,} messages, "
          f"best of {args.repeat}, Python {sys.version.split()[0]}")
    for label, buf in (("bytes", payload), ("memoryview", memoryview(payload))):
        decoder = PgoutputDecoder(4)
        decode = decoder.decode
        assert decode(buf) == Insert(None, 16384, row)
        best = float("inf")
        for _ in range(args.repeat):
            started = time.perf_counter()
            for _ in range(args.count):
                decode(buf)
            best = min(best, time.perf_counter() - started)
        print(f"  {label:<10}  {args.count / best:>12,.0f} messages/s  ({best / args.count * 1e9:,.0f} ns each)")


if __name__ == "__main__":
    main()
