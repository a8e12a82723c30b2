"""``Session.run`` without Postgres or Kafka, for the tests that compare two ways of publishing
the same stream byte for byte (tests/unit/test_compiled_path.py: the stages' row path with the
compiled kernels against the pure-Python path).

The stream is a ``BatchStream`` (tests/support/batches.py) of XLogData frames; the real decoder,
assembler, encoder and dispatcher run; a recording producer keeps every record in order (topic,
key, value, unit, and what ``describe`` would name if Kafka refused it), and optionally a stand-in
for exactly-once's Kafka transactions asks for a part commit every ``split_every`` rows. Here too:
the frame builders, the shared scenario, and ``PublishesAlike``, the checks a comparison makes,
so that its module holds only what differs: how its path is switched on and counted, the counts
it must reach, and its own tests.
"""

from __future__ import annotations

import abc
import pathlib
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import generate_latest

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
from pgbridge.encode.envelope import ChangeEncoder
from pgbridge.encode.types import EncodeError
from pgbridge.encode.wire import SingleObjectRegistrar
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
from tests.support.pgoutput_builder import encode_message
from tests.support.relations import relation
from tests.unit.encode.avro_helpers import SchemaLog

INT8, TEXT, NUMERIC, TIMESTAMPTZ, BOOL = 20, 25, 1700, 1184, 16
ITEMS = relation(("id", INT8, -1, True), ("name", TEXT), ("price", NUMERIC, (10 << 16 | 2) + 4),
                 ("at", TIMESTAMPTZ), ("ok", BOOL), identity="d", name="items", rel_id=16384)
# the same table after ALTER TABLE ADD COLUMN: a new Relation version
ITEMS_V2 = relation(("id", INT8, -1, True), ("name", TEXT), ("price", NUMERIC, (10 << 16 | 2) + 4),
                    ("at", TIMESTAMPTZ), ("ok", BOOL), ("note", TEXT), identity="d", name="items", rel_id=16384)
LOG = relation(("line", TEXT), identity="n", name="log", rel_id=16390)  # no key: a null record key
FIRST_LSN = 0x1000_0000
FRAME_LSNS = 0x40  # the WAL each frame takes

ProducedRecord = tuple[str, bytes | None, bytes | None, int, RecordOrigin | None]


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
    """The producer's side the dispatcher uses (through ``Deliveries``), recording every
    record in order."""

    def __init__(self, tracker: AckTracker, transactions: _Transactions | None) -> None:
        self.config = KafkaConfig(bootstrap_servers="127.0.0.1:9")
        self.transactions = transactions
        self.topics = _Topics()
        self.tracker = tracker
        self.records: list[ProducedRecord] = []
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

    def row_producer(self, callback: Callable[..., None], unit: Unit,
                     idle: Callable[[], None]) -> Callable[..., int]:
        """``KafkaPublisher.row_producer``: a change's records for one unit, one record at a time."""
        def produce_records(records: list[tuple[str, bytes | None, bytes | None]],
                            describe: Callable[[str], RecordOrigin] | None = None) -> int:
            for topic, key, value in records:
                self.topics.ensure(topic)
                self.produce(topic, key, value, callback, unit, idle, describe)
            return sum(len(key or b"") + len(value or b"") for _, key, value in records)

        return produce_records


@dataclass
class SessionRun:
    """What one run produced: the records in order, the transactions' log under exactly-once, the
    error that ended it (with ``keep_error``), the metrics' lines, the received LSN, and how many
    rows the path under test took (the caller's count)."""

    records: list[ProducedRecord]
    transactions: list[tuple[str, Any]] | None
    metrics: list[str]
    received: int
    taken: int
    error: str = field(default="")


def session_run(batches: list[list[bytes]], tmp: pathlib.Path, *, taken: Callable[[], int],
                split_every: int | None = None, capture: CaptureFilter | None = None, keep_error: bool = False,
                proto: int = 1, **encoder: Any) -> SessionRun:
    """The stream through ``Session.run`` (pgoutput protocol ``proto``); ``taken`` is read after the run (the caller resets its counter before); with ``keep_error`` an
    exception that ends the run is kept in ``error`` (type and text) beside what was produced before
    it, instead of raised; ``encoder`` goes to the ``ChangeEncoder``."""
    tracker, metrics = AckTracker(), Metrics()
    publisher = _Publisher(tracker, None if split_every is None else _Transactions(split_every))
    session: Any = Session.__new__(Session)
    session.stop = threading.Event()
    session.stream = BatchStream(batches, session.stop)
    session.decoder = PgoutputDecoder(proto)
    session.assembler = TransactionAssembler(memory_bytes=1 << 20, spill_dir=tmp, capture=capture)
    log = SchemaLog()
    deliveries = Deliveries(publisher, tracker, metrics, completed=lambda _: None,  # type: ignore[arg-type]
                            idle=lambda: None)
    session.dispatcher = Dispatcher(
        encoder=ChangeEncoder(topic_prefix="app", router=TopicRouter("app"),
                              database="shop", registrar=SingleObjectRegistrar(log.announce),
                              **encoder),
        deliveries=deliveries, filter=PublishFilter.of(publisher.config), incremental=None)
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
    return SessionRun(
        records=publisher.records,
        transactions=None if publisher.transactions is None else publisher.transactions.log,
        metrics=[line for line in generate_latest(metrics.registry).decode().splitlines()
                 if "_created" not in line],  # creation times differ between runs
        received=session.reporter.received_lsn, taken=taken(), error=error)


class Frames:
    """XLogData frames of messages, each at the next WAL position (of protocol ``proto``; those
    given with ``in_stream`` as messages of a stream block)."""

    def __init__(self, proto: int = 1) -> None:
        self.lsn = FIRST_LSN
        self.proto = proto

    def __call__(self, *messages: Message, in_stream: bool = False) -> list[bytes]:
        frames = []
        for message in messages:
            start, self.lsn = self.lsn, self.lsn + FRAME_LSNS
            frames.append(b"w" + start.to_bytes(8, "big") + self.lsn.to_bytes(8, "big") + bytes(8)
                          + encode_message(message, proto_version=self.proto, in_stream=in_stream))
        return frames


def row(*values: bytes | None) -> TupleData:
    return TupleData(b"".join(b"n" if v is None else b"t" for v in values), tuple(values))


def tx(frames: Frames, xid: int, *changes: Message) -> list[bytes]:
    end = Lsn(frames.lsn + FRAME_LSNS * (len(changes) + 1))
    return frames(Begin(final_lsn=end, commit_ts=800_000_000_000_000 + xid, xid=xid), *changes,
                  Commit(flags=0, commit_lsn=end, end_lsn=Lsn(end + FRAME_LSNS), commit_ts=800_000_000_000_000 + xid))


def insert(rel: Relation, *values: bytes | None) -> Insert:
    return Insert(xid=None, rel_id=rel.rel_id, new=row(*values))


def scenario() -> list[list[bytes]]:
    """44 plain inserts of two tables, rows the kernels leave to Python, an update, a delete, an
    origin, a message, a truncate and a new version of a table mid-stream, in 8 transactions."""
    f = Frames()
    plain = [insert(ITEMS, str(i).encode(), b"item %d" % i, b"%d.50" % i, b"2026-11-25 10:00:00.123456+00",
                    b"t" if i % 2 else b"f") for i in range(1, 40)]
    batches = [
        tx(f, 700, ITEMS, LOG, *plain[:20], insert(LOG, b"hello"), *plain[20:30]),
        # values the kernel leaves to Python: NaN and infinity are unrepresentable, non-ASCII text,
        # a null; then an update and a delete between inserts
        tx(f, 701, insert(ITEMS, b"100", "é".encode(), b"NaN", b"infinity", None),
           insert(ITEMS, b"101", None, None, None, None), plain[30],
           Update(xid=None, rel_id=ITEMS.rel_id, old_kind=None, old=None,
                  new=row(b"1", b"renamed", b"1.50", b"2026-11-25 10:00:00+00", b"t")),
           plain[31], Delete(xid=None, rel_id=ITEMS.rel_id, old_kind="K", old=row(b"2", None, None, None, None)),
           plain[32]),
        # an origin, a transactional message and a truncate among the rows
        tx(f, 702, Origin(origin_lsn=Lsn(0x99), name="eu-west"), plain[33],
           LogicalMessage(xid=None, transactional=True, lsn=Lsn(0x77), prefix="app", content=b"m"), plain[34],
           Truncate(xid=None, options=0, rel_ids=(LOG.rel_id,)), insert(LOG, b"after truncate")),
        # single-row transactions
        *[tx(f, 703 + i, plain[36 + i]) for i in range(3)],
        # the table changes mid-stream: the new version's plan must be used, then and later
        tx(f, 706, plain[35], ITEMS_V2,
           insert(ITEMS_V2, b"200", b"new", b"2.00", b"2026-11-25 11:00:00+00", b"t", b"with note")),
        tx(f, 707, insert(ITEMS_V2, b"201", b"newer", b"3.00", None, b"f", None)),
    ]
    return batches



class PublishesAlike(abc.ABC):
    """The checks a comparison makes, written once: a test module subclasses this as a ``Test…``
    class (pytest collects the inherited tests there, not here), says in ``run`` how a stream goes
    through the path under test (``tested``) or the reference path, with ``SessionRun.taken``
    counting the rows the path under test took, and gives the counts its path must reach."""

    scenario_taken: int  # rows of ``scenario()`` the path under test takes
    filtered_taken: int  # the same with only public.items captured

    @abc.abstractmethod
    def run(self, batches: list[list[bytes]], tmp: pathlib.Path, tested: bool, *,
            split_every: int | None = None, capture: CaptureFilter | None = None,
            keep_error: bool = False) -> SessionRun:
        """Each module's own: how a stream goes through its path under test or the reference."""

    def test_the_scenario_is_published_alike(self, tmp_path: pathlib.Path) -> None:
        batches = scenario()
        tested = self.run(batches, tmp_path / "tested", True)
        reference = self.run(batches, tmp_path / "reference", False)
        assert tested.records == reference.records
        assert tested.metrics == reference.metrics
        assert tested.received == reference.received == FIRST_LSN + FRAME_LSNS * sum(len(b) for b in batches)
        assert tested.taken == self.scenario_taken and reference.taken == 0
        assert len(reference.records) == 66  # 8 BEGIN + END pairs, 44 + 2 inserts, an update, a delete and
        # its tombstone, a message, a truncate

    def test_under_exactly_once_a_huge_transaction_splits_at_the_same_rows(self, tmp_path: pathlib.Path) -> None:
        batches = scenario()
        tested = self.run(batches, tmp_path / "tested", True, split_every=7)
        reference = self.run(batches, tmp_path / "reference", False, split_every=7)
        assert tested.taken == self.scenario_taken
        assert tested.records == reference.records
        assert tested.transactions == reference.transactions
        assert reference.transactions is not None and sum(
            1 for what, _ in reference.transactions if what == "part") == 6  # 48 rows

    def test_a_table_the_capture_filter_drops_is_dropped_on_both_paths(self, tmp_path: pathlib.Path) -> None:
        batches = scenario()
        only_items = TableSelection.from_patterns([r"public\.items"])
        tested = self.run(batches, tmp_path / "tested", True, capture=CaptureFilter(only_items))
        reference = self.run(batches, tmp_path / "reference", False, capture=CaptureFilter(only_items))
        assert tested.records == reference.records
        assert tested.taken == self.filtered_taken  # the two rows of public.log are dropped by the filter
        assert not any(topic == "app.public.log" for topic, *_ in reference.records)

    def test_batches_split_anywhere_give_the_same_records(self, tmp_path: pathlib.Path) -> None:
        frames = [frame for batch in scenario() for frame in batch]
        expected = self.run([frames], tmp_path / "one", False).records
        for size in (1, 2, 7):
            split = [frames[i:i + size] for i in range(0, len(frames), size)]
            assert self.run(split, tmp_path / f"by{size}", True).records == expected

    def test_a_bad_value_is_named_the_same_on_both_paths(self, tmp_path: pathlib.Path) -> None:
        f = Frames()
        batches = [tx(f, 800, ITEMS, insert(ITEMS, b"1", b"a", b"1.00", None, b"t"),
                      insert(ITEMS, b"not a number", b"b", b"1.00", None, b"t"))]
        messages = []
        for tested in (True, False):
            with pytest.raises(EncodeError) as raised:
                self.run(batches, tmp_path / str(tested), tested)
            messages.append(str(raised.value))
        assert messages[0] == messages[1] and "public.items.id" in messages[0]

    def test_corrupt_row_frames_end_the_same_way_on_both_paths(self, tmp_path: pathlib.Path) -> None:
        """Bytes flipped, cut or added in a row (never in the 26 bytes of XLogData header and message
        kind): the path under test hands what it cannot read to the reference path's code, so the
        same records come out and the same located error (or none, when the bytes still make a row)
        ends the run. The rows are inserts, an update and a delete with the old key, and an update
        and a delete with the old row (REPLICA IDENTITY FULL)."""
        rng = random.Random(18)
        f = Frames()
        full = relation(("id", INT8, -1, True), ("name", TEXT), identity="f", name="full", rel_id=16400)
        good = tx(f, 1000, ITEMS, full, *[insert(ITEMS, b"%d" % i, b"n%d" % i, b"1.25", None, b"t") for i in range(3)],
                  Update(xid=None, rel_id=ITEMS.rel_id, old_kind="K", old=row(b"1", None, None, None, None),
                         new=row(b"7", b"moved", b"1.25", None, b"t")),
                  Delete(xid=None, rel_id=ITEMS.rel_id, old_kind="K", old=row(b"2", None, None, None, None)),
                  insert(full, b"1", b"a"),
                  Update(xid=None, rel_id=full.rel_id, old_kind="O", old=row(b"1", b"a"), new=row(b"1", b"b")),
                  Delete(xid=None, rel_id=full.rel_id, old_kind="O", old=row(b"1", b"b")))
        errors = 0
        for case in range(240):
            frames = list(good)
            at = rng.randrange(3, 11)  # one of the rows
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
            tested = self.run([frames], tmp_path / f"t{case}", True, keep_error=True)
            reference = self.run([frames], tmp_path / f"r{case}", False, keep_error=True)
            assert (tested.records, tested.error) == (reference.records, reference.error), case
            errors += bool(reference.error)
        assert errors > 80  # most corruptions are caught, and named the same way

    def test_a_record_kafka_refuses_is_described_by_its_table_key_and_position(self, tmp_path: pathlib.Path) -> None:
        f = Frames()
        run = self.run([tx(f, 900, ITEMS, insert(ITEMS, b"42", b"x", b"1.00", None, b"t"))], tmp_path, True)
        assert run.taken == 1
        origin = run.records[1][4]
        assert origin is not None
        assert (origin.table, origin.key, origin.total_order) == ("public.items", "{id=42}", 1)
