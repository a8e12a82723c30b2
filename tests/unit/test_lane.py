"""The insert lane (``pgbridge/lane.py``) publishes what the stages publish, byte for byte.

Each scenario is a stream of XLogData frames run through the real streaming loop
(``Session.run``) with the real decoder, assembler, encoder and dispatcher twice: once with the
lane, once without it. The records handed to the producer (topic, key, value, unit, and what
``describe`` would name if Kafka refused the record), the per-table metrics and the received LSN
must be the same, and the lane must have taken the rows it is for, so a lane that quietly hands
everything to the stages fails here too.
"""

from __future__ import annotations

import pathlib
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import generate_latest

from pgbridge import lane as lane_module
from pgbridge.ack.progress import ProgressReporter
from pgbridge.ack.tracker import AckTracker, Unit
from pgbridge.assemble.capture import CaptureFilter
from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.config import KafkaConfig
from pgbridge.decode.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    Truncate,
    TupleData,
    Update,
)
from pgbridge.decode.pgoutput import PgoutputDecoder
from pgbridge.encode import plan as plan_module
from pgbridge.encode.envelope import ChangeEncoder
from pgbridge.encode.types import EncodeError
from pgbridge.encode.wire import SingleObjectRegistrar
from pgbridge.lane import InsertLane
from pgbridge.lsn import Lsn
from pgbridge.metrics import Metrics
from pgbridge.pipeline import Session
from pgbridge.publish.delivery import Deliveries
from pgbridge.publish.dispatch import Dispatcher
from pgbridge.publish.oversize import RecordOrigin
from pgbridge.publish.routing import PublishFilter, TopicRouter
from pgbridge.publish.transactions import Position
from pgbridge.source.monitor import SlotIdentity
from pgbridge.source.selection import TableSelection
from tests.support.batches import BatchStream
from tests.support.kernels import compiled
from tests.support.pgoutput_builder import encode_message
from tests.unit.encode.avro_helpers import SchemaLog, relation


@pytest.fixture(autouse=True)
def _kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lane exists only with both kernels: imported directly, whatever ``PGBRIDGE_PURE_PYTHON``
    says, and a failure naming the fix when they are not built (as every kernel test,
    tests/support/kernels.py)."""
    monkeypatch.setattr(lane_module, "_decode_kernel", compiled("pgbridge.decode._native"))
    monkeypatch.setattr(plan_module, "_native", compiled("pgbridge.encode._native"))

INT8, TEXT, NUMERIC, TIMESTAMPTZ, BOOL = 20, 25, 1700, 1184, 16
ITEMS = relation(("id", INT8, -1, True), ("name", TEXT), ("price", NUMERIC, (10 << 16 | 2) + 4),
                 ("at", TIMESTAMPTZ), ("ok", BOOL), identity="d", name="items", rel_id=16384)
# the same table after ALTER TABLE ADD COLUMN: a new Relation version
ITEMS_V2 = relation(("id", INT8, -1, True), ("name", TEXT), ("price", NUMERIC, (10 << 16 | 2) + 4),
                    ("at", TIMESTAMPTZ), ("ok", BOOL), ("note", TEXT), identity="d", name="items", rel_id=16384)
LOG = relation(("line", TEXT), identity="n", name="log", rel_id=16390)  # no key: a null record key


class _Topics:
    def __init__(self) -> None:
        self.ensured: set[str] = set()

    def ensure(self, topic: str) -> None:
        self.ensured.add(topic)


class _Transactions:
    """Exactly-once's Kafka transactions as the dispatcher drives them: every ``every``-th row's
    ``split_due`` says a huge transaction is due a part commit; what is committed and held is logged."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.asked = 0
        self.log: list[tuple[str, Any]] = []

    def ensure_open(self) -> None:
        pass

    def wrote(self, records: int, nbytes: int) -> None:
        self.log.append(("wrote", (records, nbytes)))

    def hold(self, unit: Unit) -> None:
        self.log.append(("hold", unit.pending))

    def boundary(self, position: Position) -> bool:
        self.log.append(("boundary", position))
        return False

    def split_due(self) -> bool:
        self.asked += 1
        return self.asked % self.every == 0

    def commit_part(self, position: Position) -> None:
        self.log.append(("part", position))


class _Publisher:
    """The producer's side the dispatcher and the lane use, recording every record in order."""

    def __init__(self, tracker: AckTracker, transactions: _Transactions | None) -> None:
        self.config = KafkaConfig(bootstrap_servers="127.0.0.1:9")
        self.transactions = transactions
        self.topics = _Topics()
        self.tracker = tracker
        self.records: list[tuple[str, bytes | None, bytes | None, int, RecordOrigin | None]] = []
        self._units: dict[int, int] = {}

    def callback_for(self, unit: Unit) -> Callable[..., None]:
        return lambda *_: None

    def produce(self, topic: str, key: bytes | None, value: bytes | None, callback: Callable[..., None], unit: Unit,
                idle: Callable[[], None], describe: Callable[[str], RecordOrigin] | None = None,
                headers: Any = None) -> None:
        assert topic in self.topics.ensured, topic
        if self.transactions is not None:
            self.transactions.ensure_open()
            self.transactions.wrote(1, len(value or b"") + len(key or b""))
        self.tracker.add_record(unit)
        number = self._units.setdefault(id(unit), len(self._units))
        self.records.append((topic, key, value, number, None if describe is None else describe(topic)))

    def produce_all(self, records: list[tuple[str, bytes | None, bytes | None]], callback: Callable[..., None],
                    unit: Unit, idle: Callable[[], None], describe: Callable[[str], RecordOrigin] | None = None) -> int:
        for topic, key, value in records:  # KafkaPublisher.produce_all, one record at a time
            self.topics.ensure(topic)
            self.produce(topic, key, value, callback, unit, idle, describe)
        return sum(len(key or b"") + len(value or b"") for _, key, value in records)


class _CountingLane(InsertLane):
    taken = 0

    def insert(self, frame: bytes) -> Lsn:
        end = super().insert(frame)
        if end:
            _CountingLane.taken += 1
        return end


class _Run:
    def __init__(self, publisher: _Publisher, metrics: Metrics, received: int, taken: int) -> None:
        self.records = publisher.records
        self.transactions = None if publisher.transactions is None else publisher.transactions.log
        self.error = ""
        self.metrics = [line for line in generate_latest(metrics.registry).decode().splitlines()
                        if "_created" not in line]  # creation times differ between runs
        self.received = received
        self.taken = taken


def _run(batches: list[list[bytes]], tmp: pathlib.Path, *, lane: bool, split_every: int | None = None,
         capture: CaptureFilter | None = None, keep_error: bool = False, **encoder: Any) -> _Run:
    """The stream through ``Session.run``; with ``keep_error`` an exception that ends it is kept
    in ``error`` (type and text) beside what was produced before it, instead of raised."""
    tracker, metrics = AckTracker(), Metrics()
    publisher = _Publisher(tracker, None if split_every is None else _Transactions(split_every))
    session: Any = Session.__new__(Session)
    session.stop = threading.Event()
    session.stream = BatchStream(batches, session.stop)
    session.decoder = PgoutputDecoder(1)
    session.assembler = TransactionAssembler(memory_bytes=1 << 20, spill_dir=tmp, capture=capture)
    log = SchemaLog()
    deliveries = Deliveries(publisher, tracker, metrics, completed=lambda _: None,  # type: ignore[arg-type]
                            idle=lambda: None)
    session.dispatcher = Dispatcher(
        encoder=ChangeEncoder(topic_prefix="app", router=TopicRouter("app"),
                              database="shop", registrar=SingleObjectRegistrar(log.announce),
                              **encoder),
        deliveries=deliveries, filter=PublishFilter.of(publisher.config), incremental=None)
    _CountingLane.taken = 0
    session.lane = _CountingLane(assembler=session.assembler, dispatcher=session.dispatcher) if lane else None
    session.reporter = ProgressReporter(tracker, metrics, SlotIdentity(), status_interval_s=10.0, stall_s=60.0)
    session._housekeeping = lambda **_: None
    error = ""
    try:
        session.run()
    except Exception as exc:
        if not keep_error:
            raise
        error = f"{type(exc).__name__}: {exc}"
    finally:
        session.assembler.close()
    run = _Run(publisher, metrics, session.reporter.received_lsn, _CountingLane.taken)
    run.error = error
    return run


class _Frames:
    """XLogData frames of messages, each at the next WAL position."""

    def __init__(self) -> None:
        self.lsn = 0x1000_0000

    def __call__(self, *messages: Message) -> list[bytes]:
        frames = []
        for message in messages:
            start, self.lsn = self.lsn, self.lsn + 0x40
            frames.append(b"w" + start.to_bytes(8, "big") + self.lsn.to_bytes(8, "big") + bytes(8)
                          + encode_message(message, proto_version=1))
        return frames


def _row(*values: bytes | None) -> TupleData:
    return TupleData(b"".join(b"n" if v is None else b"t" for v in values), tuple(values))


def _tx(frames: _Frames, xid: int, *changes: Message) -> list[bytes]:
    end = Lsn(frames.lsn + 0x40 * (len(changes) + 1))
    return frames(Begin(final_lsn=end, commit_ts=800_000_000_000_000 + xid, xid=xid), *changes,
                  Commit(flags=0, commit_lsn=end, end_lsn=Lsn(end + 0x40), commit_ts=800_000_000_000_000 + xid))


def _insert(rel: Relation, *values: bytes | None) -> Insert:
    return Insert(xid=None, rel_id=rel.rel_id, new=_row(*values))


def _scenario() -> list[list[bytes]]:
    f = _Frames()
    plain = [_insert(ITEMS, str(i).encode(), b"item %d" % i, b"%d.50" % i, b"2026-11-25 10:00:00.123456+00",
                     b"t" if i % 2 else b"f") for i in range(1, 40)]
    batches = [
        _tx(f, 700, ITEMS, LOG, *plain[:20], _insert(LOG, b"hello"), *plain[20:30]),
        # values the kernel leaves to Python: NaN and infinity are unrepresentable, non-ASCII text,
        # a null; then an update and a delete (the stages' own rows) between lane rows
        _tx(f, 701, _insert(ITEMS, b"100", "é".encode(), b"NaN", b"infinity", None),
            _insert(ITEMS, b"101", None, None, None, None), plain[30],
            Update(xid=None, rel_id=ITEMS.rel_id, old_kind=None, old=None,
                   new=_row(b"1", b"renamed", b"1.50", b"2026-11-25 10:00:00+00", b"t")),
            plain[31], Delete(xid=None, rel_id=ITEMS.rel_id, old_kind="K", old=_row(b"2", None, None, None, None)),
            plain[32]),
        # an origin, a transactional message and a truncate among the rows
        _tx(f, 702, Origin(origin_lsn=Lsn(0x99), name="eu-west"), plain[33],
            LogicalMessage(xid=None, transactional=True, lsn=Lsn(0x77), prefix="app", content=b"m"), plain[34],
            Truncate(xid=None, options=0, rel_ids=(LOG.rel_id,)), _insert(LOG, b"after truncate")),
        # single-row transactions
        *[_tx(f, 703 + i, plain[36 + i]) for i in range(3)],
        # the table changes mid-stream: the lane must use the new version's plan, then and later
        _tx(f, 706, plain[35], ITEMS_V2,
            _insert(ITEMS_V2, b"200", b"new", b"2.00", b"2026-11-25 11:00:00+00", b"t", b"with note")),
        _tx(f, 707, _insert(ITEMS_V2, b"201", b"newer", b"3.00", None, b"f", None)),
    ]
    return batches


def test_the_lane_publishes_what_the_stages_publish(tmp_path: pathlib.Path) -> None:
    batches = _scenario()
    with_lane = _run(batches, tmp_path / "lane", lane=True)
    stages = _run(batches, tmp_path / "stages", lane=False)
    assert with_lane.records == stages.records
    assert with_lane.metrics == stages.metrics
    assert with_lane.received == stages.received == 0x1000_0000 + 0x40 * sum(len(b) for b in batches)
    # the plain rows and the log rows went through the lane; the NaN/é row, the update and the
    # delete did not
    assert with_lane.taken == 44 and stages.taken == 0
    assert len(stages.records) == 66  # 8 BEGIN + END pairs, 44 + 2 inserts, an update, a delete and
    # its tombstone, a message, a truncate


def test_under_exactly_once_the_lane_splits_a_huge_transaction_where_the_stages_do(tmp_path: pathlib.Path) -> None:
    batches = _scenario()
    with_lane = _run(batches, tmp_path / "lane", lane=True, split_every=7)
    stages = _run(batches, tmp_path / "stages", lane=False, split_every=7)
    assert with_lane.taken == 44
    assert with_lane.records == stages.records
    assert with_lane.transactions == stages.transactions
    assert stages.transactions is not None and sum(1 for what, _ in stages.transactions if what == "part") == 6  # 48 rows


def test_a_table_the_capture_filter_drops_is_left_to_it(tmp_path: pathlib.Path) -> None:
    batches = _scenario()
    only_items = TableSelection.from_patterns([r"public\.items"])
    with_lane = _run(batches, tmp_path / "lane", lane=True, capture=CaptureFilter(only_items))
    stages = _run(batches, tmp_path / "stages", lane=False, capture=CaptureFilter(only_items))
    assert with_lane.records == stages.records
    assert with_lane.taken == 42  # the two rows of public.log are dropped by the filter
    assert not any(topic == "app.public.log" for topic, *_ in stages.records)


def test_batches_split_anywhere_give_the_same_records(tmp_path: pathlib.Path) -> None:
    frames = [frame for batch in _scenario() for frame in batch]
    expected = _run([frames], tmp_path / "one", lane=False).records
    for size in (1, 2, 7):
        split = [frames[i:i + size] for i in range(0, len(frames), size)]
        assert _run(split, tmp_path / f"by{size}", lane=True).records == expected


def test_without_the_kernel_in_the_encoder_the_lane_leaves_every_row_to_the_stages(tmp_path: pathlib.Path) -> None:
    batches = _scenario()
    run = _run(batches, tmp_path / "python", lane=True, native=False)
    assert run.taken == 0
    assert run.records == _run(batches, tmp_path / "stages", lane=False).records


def test_a_bad_value_is_named_by_the_stages_as_without_the_lane(tmp_path: pathlib.Path) -> None:
    f = _Frames()
    batches = [_tx(f, 800, ITEMS, _insert(ITEMS, b"1", b"a", b"1.00", None, b"t"),
                   _insert(ITEMS, b"not a number", b"b", b"1.00", None, b"t"))]
    messages = []
    for lane in (True, False):
        with pytest.raises(EncodeError) as raised:
            _run(batches, tmp_path / str(lane), lane=lane)
        messages.append(str(raised.value))
    assert messages[0] == messages[1] and "public.items.id" in messages[0]


def test_corrupt_insert_frames_end_as_they_do_without_the_lane(tmp_path: pathlib.Path) -> None:
    """Bytes flipped, cut or added in a lane row: the lane hands the frame to the stages, so the same
    records come out and the same located error (or none, when the bytes still make a row) ends
    the run."""
    rng = random.Random(18)
    f = _Frames()
    good = _tx(f, 1000, ITEMS, *[_insert(ITEMS, b"%d" % i, b"n%d" % i, b"1.25", None, b"t") for i in range(3)])
    errors = 0
    for case in range(150):
        frames = list(good)
        at = rng.randrange(2, 5)  # one of the inserts
        frame = bytearray(frames[at])
        kind = rng.random()
        if kind < 0.25:
            del frame[rng.randrange(26, len(frame)):]
        elif kind < 0.5:
            frame += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6)))  # trailing bytes
        else:
            for _ in range(rng.randrange(1, 4)):
                frame[rng.randrange(26, len(frame))] = rng.randrange(256)
        frames[at] = bytes(frame)
        lane = _run([frames], tmp_path / f"l{case}", lane=True, keep_error=True)
        stages = _run([frames], tmp_path / f"s{case}", lane=False, keep_error=True)
        assert (lane.records, lane.error) == (stages.records, stages.error), case
        errors += bool(stages.error)
    assert errors > 50  # most corruptions are caught, and named the same way


def test_a_record_kafka_refuses_is_described_by_its_table_key_and_position(tmp_path: pathlib.Path) -> None:
    f = _Frames()
    run = _run([_tx(f, 900, ITEMS, _insert(ITEMS, b"42", b"x", b"1.00", None, b"t"))], tmp_path, lane=True)
    assert run.taken == 1
    origin = run.records[1][4]
    assert origin is not None
    assert (origin.table, origin.key, origin.total_order) == ("public.items", "{id=42}", 1)
