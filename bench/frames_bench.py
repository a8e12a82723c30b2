"""Micro-benchmark of the streaming loop's row path: XLogData frames through ``Session.run`` to ``produce``.

Run from the repository root: ``.venv/bin/python bench/frames_bench.py [-n 100000] [-r 5]``. Each
workload is one transaction (BEGIN, the table's Relation, N row frames, COMMIT) of a narrow table
``(id bigint primary key, v int, note text, at timestamptz)`` with REPLICA IDENTITY FULL: N inserts, N updates
(old row 'O' and new row) and N deletes (old row 'O'). The frames are built beforehand and handed
over in batches of 1024 memoryviews, as ``ReplicationStream.read_batch`` hands them; the real
decoder, assembler, encoder, dispatcher and ack tracker run, and the producer is a stand-in that
does the Python bookkeeping of ``KafkaPublisher.produce``/``row_producer`` (tracker, topic) and
discards the record. The figure is CPU time (``time.process_time``, all threads: the machine may be
shared, wall time would measure the neighbours) per row, the best of ``-r`` runs; only ``run()`` is
timed. One machine's figure is only comparable with itself: use it to compare changes.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCH = 1024  # ReplicationStream.read_batch's limit
FIRST_LSN = 0x1000_0000
STEP = 0x40  # the WAL each frame takes
WORKLOADS = ("insert", "update", "delete")


class _Stream:
    """``ReplicationStream.read_batch`` over prepared batches; sets ``stop`` once they are read."""

    def __init__(self, batches: list[list[memoryview]], stop: threading.Event) -> None:
        self._batches = iter(batches)
        self._stop = stop

    def read_batch(self, _timeout: float) -> list[memoryview]:
        batch = next(self._batches, None)
        if batch is None:
            self._stop.set()
            return []
        return batch


class _Topics:
    def ensure(self, topic: str, compacted: bool = False) -> None:
        pass


class _Publisher:
    """``KafkaPublisher`` without librdkafka: the tracker and topic bookkeeping, the record discarded."""

    def __init__(self, tracker: Any) -> None:
        from pgbridge.config import KafkaConfig

        self.config = KafkaConfig(bootstrap_servers="127.0.0.1:9")
        self.transactions = None
        self.topics = _Topics()
        self._tracker = tracker
        self._last_topic: str | None = None
        self.records = 0

    def callback_for(self, unit: Any) -> Callable[..., None]:
        return lambda *_: None

    def produce(self, topic: str, key: bytes | None, value: bytes | None, callback: Callable[..., None], unit: Any,
                idle: Callable[[], None], describe: Any = None, headers: Any = None) -> None:
        self._tracker.add_record(unit)
        self.records += 1

    def produce_all(self, records: Sequence[tuple[str, bytes | None, bytes | None]], callback: Callable[..., None],
                    unit: Any, idle: Callable[[], None], describe: Any = None) -> int:
        self._tracker.add_records(unit, len(records))
        nbytes = 0
        for topic, key, value in records:
            if topic is not self._last_topic:
                self.topics.ensure(topic)
                self._last_topic = topic
            if value is not None:
                nbytes += len(value)
            if key is not None:
                nbytes += len(key)
            self.records += 1
        return nbytes

    def row_producer(self, callback: Callable[..., None], unit: Any, idle: Callable[[], None]) -> Callable[..., int]:
        """``KafkaPublisher.row_producer``: one unit's ``produce_all`` (the real one is a closure too)."""
        def produce_records(records: Sequence[tuple[str, bytes | None, bytes | None]], describe: Any = None) -> int:
            return self.produce_all(records, callback, unit, idle, describe)
        return produce_records


def _frames(kind: str, count: int) -> tuple[list[list[memoryview]], int]:
    """One transaction of ``count`` row frames of ``kind``, in read batches; and the records it makes."""
    from tests.support.pgoutput_builder import encode_message
    from tests.support.relations import relation

    from pgbridge.decode.messages import Begin, Commit, Delete, Insert, TupleData, Update
    from pgbridge.lsn import Lsn

    table = relation(("id", 20, -1, True), ("v", 23), ("note", 25), ("at", 1184), identity="f", name="narrow")

    def row(i: int, v: int) -> TupleData:
        return TupleData(b"tttt", (b"%d" % i, b"%d" % v, b"note %d" % i, b"2026-11-26 10:00:00.123456+00"))

    changes: list[Any]
    if kind == "insert":
        changes = [Insert(None, table.rel_id, row(i, 1)) for i in range(count)]
    elif kind == "update":
        changes = [Update(None, table.rel_id, "O", row(i, 1), row(i, 2)) for i in range(count)]
    else:
        changes = [Delete(None, table.rel_id, "O", row(i, 2)) for i in range(count)]
    end = Lsn(FIRST_LSN + STEP * (count + 3))
    messages = [Begin(final_lsn=end, commit_ts=800_000_000_000_000, xid=700), table, *changes,
                Commit(flags=0, commit_lsn=end, end_lsn=Lsn(end + STEP), commit_ts=800_000_000_000_000)]
    frames = []
    lsn = FIRST_LSN
    for message in messages:
        frames.append(memoryview(b"w" + lsn.to_bytes(8, "big") + (lsn + STEP).to_bytes(8, "big") + bytes(8)
                                 + encode_message(message, proto_version=1)))
        lsn += STEP
    records = count * (2 if kind == "delete" else 1) + 2  # a delete's tombstone; BEGIN and END
    return [frames[i:i + BATCH] for i in range(0, len(frames), BATCH)], records


def _session(batches: list[list[memoryview]], spill: Path) -> tuple[Any, _Publisher]:
    """A ``Session`` as ``open`` leaves it, on the stand-ins, ready to ``run``."""
    from pgbridge.ack.progress import ProgressReporter
    from pgbridge.ack.tracker import AckTracker
    from pgbridge.assemble.transaction import TransactionAssembler
    from pgbridge.decode.pgoutput import PgoutputDecoder
    from pgbridge.encode.envelope import ChangeEncoder
    from pgbridge.encode.wire import SingleObjectRegistrar
    from pgbridge.metrics import Metrics
    from pgbridge.pipeline import Session
    from pgbridge.publish.delivery import Deliveries
    from pgbridge.publish.dispatch import Dispatcher
    from pgbridge.publish.routing import PublishFilter, TopicRouter
    from pgbridge.source.monitor import SlotIdentity

    tracker, metrics = AckTracker(), Metrics()
    publisher = _Publisher(tracker)
    session: Any = Session.__new__(Session)
    session.stop = threading.Event()
    session.stream = _Stream(batches, session.stop)
    session.decoder = PgoutputDecoder(1)
    session.assembler = TransactionAssembler(memory_bytes=1 << 26, spill_dir=spill)
    deliveries = Deliveries(publisher, tracker, metrics, completed=lambda _: None,  # type: ignore[arg-type]
                            idle=lambda: None)
    encoder = ChangeEncoder(topic_prefix="app", router=TopicRouter("app"), database="shop",
                            registrar=SingleObjectRegistrar(lambda _fp, _schema: None),
                            key_resolver=lambda _relation: ("id",))  # the primary key, as KeyColumns names it
    session.dispatcher = Dispatcher(encoder=encoder, deliveries=deliveries,
                                    filter=PublishFilter.of(publisher.config), incremental=None)
    session.reporter = ProgressReporter(tracker, metrics, SlotIdentity(), status_interval_s=10.0, stall_s=60.0)
    session._housekeeping = lambda **_: None
    return session, publisher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--count", type=int, default=100_000, help="rows per transaction")
    parser.add_argument("-r", "--repeat", type=int, default=5, help="runs; the best one is reported")
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    args = parser.parse_args()
    if not set(args.workloads) <= set(WORKLOADS):
        parser.error(f"workloads are {', '.join(WORKLOADS)}")
    sys.path.insert(0, str(ROOT))  # the frame builders live with the tests

    from pgbridge import native

    kernels = sorted(module for module, on in native.status().items() if on)
    print(f"{args.count:,} rows a run, best of {args.repeat}, CPU time, Python {sys.version.split()[0]}, "
          f"compiled kernels: {', '.join(kernels) or 'none'}")
    with TemporaryDirectory() as spill:
        for kind in args.workloads:
            batches, expected = _frames(kind, args.count)
            best = float("inf")
            for _ in range(args.repeat):
                session, publisher = _session(batches, Path(spill))
                started = time.process_time()
                session.run()
                best = min(best, time.process_time() - started)
                session.assembler.close()
                assert publisher.records == expected, (publisher.records, expected)
            print(f"  {kind:<7} {best / args.count * 1e6:6.2f} µs/row  ({args.count / best:>10,.0f} rows/s)")


if __name__ == "__main__":
    main()
