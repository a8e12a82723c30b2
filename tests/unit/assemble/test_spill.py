"""Bounded memory: buffered transactions spill to disk past the budget and read back exactly."""

from __future__ import annotations

import pickle
import stat
import struct
import tracemalloc
from pathlib import Path

import pytest

from pgbridge.assemble.spill import BufferedEvent, SpillStore, remove_stale_spill_files
from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.assemble.units import MessageChange, RowChange, TruncateChange, TxEnd, TxOrigin
from pgbridge.decode.messages import TupleData
from pgbridge.errors import ConfigError, FatalError, InvariantError
from pgbridge.lsn import Lsn
from tests.unit.assemble.scenario import (
    TINY_BUDGET,
    Wal,
    begin_prepare,
    first_value,
    insert,
    relation,
    row,
    stream_abort,
    stream_commit,
    stream_start,
    stream_stop,
)

LARGE = 100_000


def test_large_streamed_transaction_spills_and_reads_back_exactly_in_order(spill_dir: Path) -> None:
    # given: a 1 KiB budget and a 100,000-change transaction streamed in blocks
    assembler = TransactionAssembler(memory_bytes=TINY_BUDGET, spill_dir=spill_dir)
    wal = Wal(assembler)
    wal.feed(relation(), stream_start(100, first=True))
    peak_buffered = 0
    spilled_seen = [0]
    for n in range(LARGE):
        if n and n % 10_000 == 0:
            wal.feed(stream_stop(), stream_start(100))
            spilled_seen.append(assembler.spilled_bytes_total)
        wal.feed(insert(str(n), f"name-{n}", xid=100))
        peak_buffered = max(peak_buffered, assembler.buffered_bytes)
    wal.feed(stream_stop())

    # then: memory stayed within the budget while the spill file grew
    assert peak_buffered <= TINY_BUDGET
    assert spilled_seen == sorted(spilled_seen) and spilled_seen[-1] > spilled_seen[1] > 0
    assert len(list(spill_dir.glob("*.spill"))) == 1

    # when: it commits
    values: list[str] = []
    last: object = None
    for event in assembler.feed(stream_commit(100, 0xFFFF_0000), Lsn(0xFFFF_0000)):
        if isinstance(event, RowChange):
            values.append(first_value(event))
            assert event.new == row(values[-1], f"name-{values[-1]}")
        last = event

    # then: every change came back once, in order, and the file is gone
    assert values == [str(n) for n in range(LARGE)]
    assert isinstance(last, TxEnd)
    assert list(spill_dir.iterdir()) == []
    assert assembler.buffered_bytes == 0
    assembler.close()


HUGE_VALUE = 64 << 20


def test_a_huge_value_is_spilled_and_read_back_without_a_second_copy(spill_dir: Path) -> None:
    """Issue 16 (a 500 MB text value): the value goes to the file and comes back as one bytes object,
    neither side holding a pickle of it too (2x the value) on top of the value itself."""
    store = SpillStore(spill_dir=spill_dir, memory_bytes=TINY_BUDGET)
    buffer = store.new_buffer(100)
    huge = RowChange(op="c", relation=relation(), lsn=Lsn(11), old_kind=None, old=None,
                     new=TupleData(kinds=b"tt", values=(b"2", b"x" * HUGE_VALUE)))
    buffer.append(100, RowChange(op="c", relation=relation(), lsn=Lsn(10), old_kind=None, old=None,
                                 new=row("1", "small")))
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        buffer.append(100, huge)  # over the budget: spilled
        spilling = tracemalloc.get_traced_memory()[1] - held
        assert buffer.memory_bytes == 0 and buffer.spilled_bytes > HUGE_VALUE
        del huge
        tracemalloc.reset_peak()
        held = tracemalloc.get_traced_memory()[0]
        replay = buffer.replay()
        first, second = next(replay), next(replay)
        reading = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    assert spilling < HUGE_VALUE // 4, f"spilling the value allocated {spilling:,} bytes"
    assert HUGE_VALUE <= reading < HUGE_VALUE * 5 // 4, f"reading the value back allocated {reading:,} bytes"
    assert isinstance(first, RowChange) and isinstance(second, RowChange) and second.new is not None
    assert second.new.values == (b"2", b"x" * HUGE_VALUE) and list(replay) == []
    buffer.discard()


def test_corrupt_spill_frame_is_an_error_naming_the_file(spill_dir: Path) -> None:
    store = SpillStore(spill_dir=spill_dir, memory_bytes=1)
    buffer = store.new_buffer(100)
    buffer.append(100, MessageChange(prefix="p", content=b"x", lsn=Lsn(1)))
    replay = buffer.replay()
    data = buffer.path.read_bytes()
    buffer.path.write_bytes(data[:8] + b"\x00" * (len(data) - 8))  # the length intact, the pickle not

    with pytest.raises(InvariantError, match=f"spill file {buffer.path} holds a corrupt frame"):
        list(replay)
    buffer.discard()


def test_spilled_bytes_total_keeps_growing_after_buffers_are_released(spill_dir: Path) -> None:
    assembler = TransactionAssembler(memory_bytes=TINY_BUDGET, spill_dir=spill_dir)
    wal = Wal(assembler)
    wal.feed(relation(), stream_start(100, first=True), *[insert(str(n), xid=100) for n in range(100)],
             stream_stop(), stream_abort(100))
    after_first = assembler.spilled_bytes_total

    wal.feed(stream_start(200, first=True), *[insert(str(n), xid=200) for n in range(100)], stream_stop())
    list(wal.feed(stream_commit(200, 0x9000)))

    assert 0 < after_first < assembler.spilled_bytes_total
    assembler.close()


def test_every_event_kind_survives_a_round_trip_through_the_spill_file(spill_dir: Path) -> None:
    store = SpillStore(spill_dir=spill_dir, memory_bytes=1)  # every change goes to disk
    buffer = store.new_buffer(100)
    items, orders = relation(), relation(16390, "orders")
    events: list[BufferedEvent] = [
        TxOrigin(name="up", origin_lsn=Lsn(5)),
        RowChange(op="c", relation=items, lsn=Lsn(10), old_kind=None, old=None, new=row("1", None)),
        RowChange(op="u", relation=orders, lsn=Lsn(11), old_kind="O", old=row("1", "x"), new=row("1", "y")),
        RowChange(op="d", relation=items, lsn=Lsn(12), old_kind="K", old=row("1", None), new=None),
        TruncateChange(relations=(items, orders), options=3, lsn=Lsn(13)),
        MessageChange(prefix="p", content=b"\x00\xff", lsn=Lsn(14)),
    ]
    for event in events:
        buffer.append(100, event)
    assert buffer.memory_bytes == 0 and buffer.spilled_bytes > 0

    replayed = list(buffer.replay())

    assert replayed == events
    # relations are stored once per transaction and come back as the very same objects
    assert isinstance(replayed[1], RowChange) and isinstance(replayed[2], RowChange)
    assert replayed[1].relation is items and replayed[2].relation is orders
    buffer.discard()
    assert not buffer.path.exists()


def test_subtransaction_abort_drops_spilled_and_in_memory_changes_alike(spill_dir: Path) -> None:
    store = SpillStore(spill_dir=spill_dir, memory_bytes=TINY_BUDGET)
    buffer = store.new_buffer(100)
    items = relation()
    for n in range(200):
        buffer.append(100 + n % 4, RowChange(op="c", relation=items, lsn=Lsn(n), old_kind=None, old=None,
                                             new=row(str(n))))
    assert buffer.spilled_bytes > 0 and buffer.memory_bytes > 0  # part on disk, part in memory

    buffer.drop_subtransaction(102)
    buffer.drop_subtransaction(103)

    replayed = [event.lsn for event in buffer.replay() if isinstance(event, RowChange)]
    assert replayed == [n for n in range(200) if n % 4 in (0, 1)]
    buffer.discard()


def test_spill_files_are_removed_when_the_assembler_closes(spill_dir: Path) -> None:
    assembler = TransactionAssembler(memory_bytes=TINY_BUDGET, spill_dir=spill_dir)
    wal = Wal(assembler)
    wal.feed(relation(),
             stream_start(100, first=True), *[insert(str(n), xid=100) for n in range(50)], stream_stop(),
             stream_start(200, first=True), *[insert(str(n), xid=200) for n in range(50)], stream_stop(),
             stream_start(400, first=True), *[insert(str(n), xid=400) for n in range(50)], stream_stop())
    assembler.feed(stream_commit(400, 0x8000), Lsn(0x8000))  # committed, replay never consumed
    wal.feed(begin_prepare(300, "gid", 0x9000), *[insert(str(n)) for n in range(50)])  # left open
    assert len(list(spill_dir.glob("*.spill"))) == 4

    assembler.close()

    assert list(spill_dir.iterdir()) == []
    assert assembler.buffered_bytes == 0


def test_replay_interrupted_by_close_fails_loudly_instead_of_ending_early(spill_dir: Path) -> None:
    assembler = TransactionAssembler(memory_bytes=TINY_BUDGET, spill_dir=spill_dir)
    wal = Wal(assembler)
    wal.feed(relation(), stream_start(100, first=True), *[insert(str(n), xid=100) for n in range(50)],
             stream_stop())
    replay = iter(assembler.feed(stream_commit(100, 0x9000), Lsn(0x9000)))
    next(replay), next(replay)

    assembler.close()

    with pytest.raises(InvariantError, match="during replay"):
        next(replay)


def test_stale_spill_files_are_removed_at_start_and_other_files_kept(spill_dir: Path) -> None:
    spill_dir.mkdir()
    (spill_dir / "4242-100-1.spill").write_bytes(b"left by a crashed process")
    (spill_dir / "notes.txt").write_text("not ours")

    TransactionAssembler(memory_bytes=TINY_BUDGET, spill_dir=spill_dir).close()

    assert sorted(p.name for p in spill_dir.iterdir()) == ["notes.txt"]
    assert remove_stale_spill_files(spill_dir) == 0


def test_spill_directory_is_created_if_missing(tmp_path: Path) -> None:
    spill_dir = tmp_path / "a" / "b"
    TransactionAssembler(memory_bytes=TINY_BUDGET, spill_dir=spill_dir).close()
    assert spill_dir.is_dir()


def test_unusable_spill_directory_is_a_fatal_error_naming_it(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "spill"
    not_a_directory.write_text("")

    with pytest.raises(FatalError, match="cannot use spill directory") as raised:
        TransactionAssembler(memory_bytes=TINY_BUDGET, spill_dir=not_a_directory)
    assert str(not_a_directory) in str(raised.value) and raised.value.hint is not None


def test_spill_files_are_private_to_the_service_user(spill_dir: Path) -> None:
    store = SpillStore(spill_dir=spill_dir, memory_bytes=1)
    buffer = store.new_buffer(100)
    buffer.append(100, MessageChange(prefix="p", content=b"secret", lsn=Lsn(1)))

    assert stat.S_IMODE(buffer.path.stat().st_mode) == 0o600
    buffer.discard()


def test_spill_file_naming_a_class_is_refused_on_read_back(spill_dir: Path) -> None:
    store = SpillStore(spill_dir=spill_dir, memory_bytes=1)
    buffer = store.new_buffer(100)
    buffer.append(100, MessageChange(prefix="p", content=b"x", lsn=Lsn(1)))
    replay = buffer.replay()  # the writer is closed now; reading starts lazily
    payload = pickle.dumps([(2, 100, 1, "p", Path("/etc/passwd"))], protocol=5)  # needs a global
    buffer.path.write_bytes(struct.pack("<Q", len(payload)) + payload)

    with pytest.raises(InvariantError, match="only plain tuples"):
        list(replay)
    buffer.discard()


def test_truncated_spill_file_is_an_error_not_a_shorter_transaction(spill_dir: Path) -> None:
    store = SpillStore(spill_dir=spill_dir, memory_bytes=1)
    buffer = store.new_buffer(100)
    for n in range(3):
        buffer.append(100, MessageChange(prefix="p", content=b"x", lsn=Lsn(n)))
    replay = buffer.replay()  # the writer is closed now; reading starts lazily
    buffer.path.write_bytes(buffer.path.read_bytes()[:-5])

    with pytest.raises(InvariantError, match="ends inside a frame"):
        list(replay)
    buffer.discard()


def test_memory_budget_must_be_positive(spill_dir: Path) -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        TransactionAssembler(memory_bytes=0, spill_dir=spill_dir)


def test_buffer_accepts_no_changes_once_replay_started(spill_dir: Path) -> None:
    buffer = SpillStore(spill_dir=spill_dir, memory_bytes=TINY_BUDGET).new_buffer(100)
    buffer.replay()
    with pytest.raises(InvariantError, match="replaying"):
        buffer.append(100, MessageChange(prefix="p", content=b"x", lsn=Lsn(1)))
