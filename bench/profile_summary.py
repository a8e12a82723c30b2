"""Summarise py-spy collapsed stacks (``bench/run.py --profile DIR``): where the bridge's time goes.

``.venv/bin/python bench/profile_summary.py DIR/narrow_pgbridge.txt [--top 25]`` prints, per
function, the share of samples in which it is on the stack (inclusive) and on top (self), and the
pipeline stages (read, decode, assemble, encode, produce, delivery callbacks, housekeeping) as
inclusive shares of the samples of the replication thread.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

# Stage → a piece of the frame that marks it (py-spy writes ``Class.method (file)``).
STAGES = {
    "read frames (ReplicationStream)": "ReplicationStream.read",
    "decode (PgoutputDecoder)": "PgoutputDecoder.decode (",
    "assemble (TransactionAssembler)": "TransactionAssembler.feed (",
    "encode (ChangeEncoder.encode_row)": "ChangeEncoder.encode_row (",
    "produce (librdkafka produce + bookkeeping)": "KafkaPublisher.produce",
    "delivery callbacks": "on_delivery (",
    "housekeeping (poll, feedback, metrics)": "Session._housekeeping (",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    stages: Counter[str] = Counter()
    total = 0
    for line in args.stacks.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or "run (pgbridge/pipeline.py" not in stack:
            continue  # idle threads (HTTP server) and samples outside the streaming loop
        count = int(count_text)
        total += count
        frames = [frame.split(":")[0] + ")" if ":" in frame else frame for frame in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
        for stage, marker in STAGES.items():
            if any(marker in frame for frame in frames):
                stages[stage] += count
    if not total:
        raise SystemExit("no samples inside the streaming loop")
    print(f"{total} samples in Session.run\n\nstage (inclusive)")
    for stage in STAGES:
        print(f"  {100 * stages[stage] / total:5.1f}%  {stage}")
    print("\nself time, top functions")
    for frame, count in own.most_common(args.top):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    print("\ninclusive, top functions")
    for frame, count in inclusive.most_common(args.top):
        print(f"  {100 * count / total:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
