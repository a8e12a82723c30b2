"""Bounded-memory storage for the changes of a transaction whose outcome is not known yet.

Streamed (in-progress) and prepared transactions can be arbitrarily large and must be held until
Postgres says COMMIT, so each one gets a ``SpillBuffer``: changes stay in memory until they exceed
the per-transaction budget, then the whole in-memory run is appended to the transaction's own file
and memory starts empty again. Replay reads the file front to back, one frame at a time, then the
in-memory tail, so order is arrival order and read-back memory is bounded by one frame.

File format: a sequence of frames, each an 8-byte little-endian length and a pickle (protocol 5)
of a list of plain tuples (ints, strings, bytes, None; see ``_encode``). Frames are pickled straight
into the file and unpickled straight from it: a value of hundreds of megabytes goes to disk and
comes back as one ``bytes`` object, never with a second in-memory copy (a pickle in a buffer). Relations are not pickled:
a record holds an index into the buffer's in-memory list of Relation versions, so a schema is
stored once per transaction rather than once per change. The reader refuses any pickle that
names a class or function, so a tampered file cannot run code; files are created mode 0600 and
any ``*.spill`` left in the directory by an earlier process is deleted when a ``SpillStore`` opens it.

Subtransaction aborts: changes of an aborted subxid are removed from memory at once; if a file
exists the subxid is also remembered and its records are skipped on read-back. That is exact,
because Postgres never reuses an xid and sends no change for a subtransaction after aborting it,
and it costs O(1) per abort instead of rewriting a possibly huge file. The price is one int per
aborted subtransaction of a transaction that has spilled, which Postgres itself exceeds by far.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import os
import pickle
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, NoReturn

from pgbridge.assemble.units import MessageChange, RowChange, TruncateChange, TxOrigin
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.errors import ConfigError, FatalError, InvariantError
from pgbridge.lsn import Lsn

BufferedEvent = TxOrigin | RowChange | TruncateChange | MessageChange

CHANGE_OVERHEAD_BYTES: Final = 320
"""Estimated bytes one buffered change costs beyond its column values: the event, its TupleData,
the values tuple, the kinds bytes and the buffer's (subxid, size, event) entry come to about 300
bytes in CPython 3.11+ (measured with tracemalloc). Estimating high only makes a transaction spill
a little earlier; estimating low would break the memory bound."""

COLUMN_OVERHEAD_BYTES: Final = 40
"""Estimated bytes per non-null column value beyond its length: the bytes object's header (33),
rounded up for allocator alignment; every column also costs its 8-byte slot in the values tuple."""

MAX_FRAME_BYTES: Final = 1 << 20
"""Largest run of changes (by the same estimate) pickled as one frame. Read-back holds one frame
in memory, so this caps replay memory even when the in-memory budget is large."""

SPILL_SUFFIX: Final = ".spill"
_FILE_MODE: Final = 0o600  # spilled rows are table data; keep them private to the service user
_PICKLE_PROTOCOL: Final = 5
_FRAME_HEADER = struct.Struct("<Q")
_NO_LENGTH: Final = _FRAME_HEADER.pack(0)  # a frame's length until its pickle is written

# Record tags: the first field of every spilled tuple.
_ROW: Final = 0
_TRUNCATE: Final = 1
_MESSAGE: Final = 2
_ORIGIN: Final = 3

_SPILL_IO_HINT = ("free space in the spill directory, check its permissions, or raise the transaction "
                  "memory budget; Postgres re-sends the transaction after a restart")

_buffer_sequence = itertools.count(1)  # keeps file names unique within the process


def estimate_event_bytes(event: BufferedEvent) -> int:
    """Memory estimate used for the budget: a fixed overhead plus the payload lengths."""
    if isinstance(event, RowChange):
        return CHANGE_OVERHEAD_BYTES + _tuple_bytes(event.old) + _tuple_bytes(event.new)
    if isinstance(event, TruncateChange):
        return CHANGE_OVERHEAD_BYTES + 8 * len(event.relations)
    if isinstance(event, MessageChange):
        return CHANGE_OVERHEAD_BYTES + len(event.prefix) + len(event.content)
    return CHANGE_OVERHEAD_BYTES + len(event.name)


def _tuple_bytes(data: TupleData | None) -> int:
    if data is None:
        return 0
    return sum(len(value) + COLUMN_OVERHEAD_BYTES for value in data.values if value is not None) \
        + 8 * len(data.values)


def remove_stale_spill_files(spill_dir: Path) -> int:
    """Delete every ``*.spill`` file in ``spill_dir``; they belong to a process that is gone."""
    removed = 0
    for path in spill_dir.glob(f"*{SPILL_SUFFIX}"):
        path.unlink(missing_ok=True)
        removed += 1
    return removed


class SpillStore:
    """The spill directory of one assembler plus the totals its metrics report.

    Opening it creates the directory and removes stale spill files: after a restart Postgres
    re-sends every transaction that was not confirmed, so nothing in them is needed.
    """

    def __init__(self, *, spill_dir: Path, memory_bytes: int) -> None:
        if memory_bytes <= 0:
            raise ConfigError(f"transaction memory budget must be positive, got {memory_bytes} bytes")
        try:
            spill_dir.mkdir(parents=True, exist_ok=True)
            remove_stale_spill_files(spill_dir)
        except OSError as exc:
            raise FatalError(f"cannot use spill directory {spill_dir}: {exc.strerror or exc}",
                             hint="make it writable by the pgbridge user or configure another one") from exc
        self.spill_dir = spill_dir
        self.memory_budget = memory_bytes
        self.memory_bytes = 0  # held in memory by all live buffers
        self.spilled_bytes_total = 0  # ever written to spill files; only grows

    def new_buffer(self, xid: int) -> SpillBuffer:
        name = f"{os.getpid()}-{xid}-{next(_buffer_sequence)}{SPILL_SUFFIX}"
        return SpillBuffer(path=self.spill_dir / name, store=self)


class BufferState(enum.Enum):
    FILLING = "filling"  # accepting changes and subtransaction aborts
    REPLAYING = "replaying"  # outcome known, being read back; no more changes
    DISCARDED = "discarded"  # memory released and file deleted


class SpillBuffer:
    """Changes of one transaction in arrival order, each tagged with its (sub)transaction xid."""

    def __init__(self, *, path: Path, store: SpillStore) -> None:
        self.path = path
        self._store = store
        self._state = BufferState.FILLING
        self._memory: list[tuple[int, int, BufferedEvent]] = []  # (subxid, estimated bytes, event)
        self._memory_bytes = 0
        self._file: BinaryIO | None = None
        self._has_file = False
        self._spilled_bytes = 0
        self._aborted_subxids: set[int] = set()
        self._relations: list[Relation] = []  # versions referenced by spilled records
        self._relation_index: dict[int, int] = {}  # id(Relation) -> index into _relations

    @property
    def state(self) -> BufferState:
        return self._state

    @property
    def memory_bytes(self) -> int:
        return self._memory_bytes

    @property
    def spilled_bytes(self) -> int:
        return self._spilled_bytes

    def append(self, subxid: int, event: BufferedEvent) -> None:
        """Add a change; spill the in-memory run once it exceeds the budget."""
        self._require_filling("append a change to")
        size = estimate_event_bytes(event)
        self._memory.append((subxid, size, event))
        self._grow_memory(size)
        if self._memory_bytes > self._store.memory_budget:
            self._spill_memory()

    def drop_subtransaction(self, subxid: int) -> None:
        """Forget every change made by ``subxid`` (its subtransaction rolled back)."""
        self._require_filling("abort a subtransaction of")
        kept = [entry for entry in self._memory if entry[0] != subxid]
        self._grow_memory(sum(size for _, size, _ in kept) - self._memory_bytes)
        self._memory = kept
        if self._has_file:
            self._aborted_subxids.add(subxid)

    def replay(self) -> Iterator[BufferedEvent]:
        """Surviving changes in arrival order, lazily. The buffer stops accepting changes now."""
        self._require_filling("replay")
        self._state = BufferState.REPLAYING
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()  # flushes the last frame
            except OSError as exc:
                raise FatalError(f"cannot write spill file {self.path}: {exc.strerror or exc}",
                                 hint=_SPILL_IO_HINT) from exc
        return self._read_back()

    def discard(self) -> None:
        """Release memory and delete the file; safe to call more than once."""
        if self._state is BufferState.DISCARDED:
            return
        self._state = BufferState.DISCARDED
        # Cleanup must not fail the caller: the data is unwanted, and a file left behind is
        # deleted at the next start-up.
        if self._file is not None:
            file, self._file = self._file, None
            with contextlib.suppress(OSError):
                file.close()
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
        self._grow_memory(-self._memory_bytes)
        self._memory = []
        self._relations = []
        self._relation_index = {}

    def _read_back(self) -> Iterator[BufferedEvent]:
        if self._has_file:
            try:
                reader = self.path.open("rb")
            except OSError as exc:
                raise FatalError(f"cannot read spill file {self.path}: {exc.strerror or exc}",
                                 hint=_SPILL_IO_HINT) from exc
            with reader:
                for record in _read_records(reader, self.path):
                    self._require_replaying()
                    if record[1] not in self._aborted_subxids:
                        yield self._decode(record)
        for _, _, event in self._memory:
            self._require_replaying()
            yield event

    def _spill_memory(self) -> None:
        try:
            self._write_memory()
        except OSError as exc:
            raise FatalError(f"cannot write spill file {self.path}: {exc.strerror or exc}",
                             hint=_SPILL_IO_HINT) from exc

    def _write_memory(self) -> None:
        if self._file is None:
            # Not O_APPEND: each frame's length is written in front of it once it is known.
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
            self._file = os.fdopen(fd, "wb")
            self._has_file = True
        frame: list[tuple[Any, ...]] = []
        frame_bytes = 0
        for subxid, size, event in self._memory:
            frame.append(self._encode(subxid, event))
            frame_bytes += size
            if frame_bytes >= MAX_FRAME_BYTES:
                self._write_frame(self._file, frame)
                frame, frame_bytes = [], 0
        if frame:
            self._write_frame(self._file, frame)
        self._grow_memory(-self._memory_bytes)
        self._memory = []

    def _write_frame(self, file: BinaryIO, records: list[tuple[Any, ...]]) -> None:
        """Pickle ``records`` into the file behind a length written afterwards. The pickler hands a
        large ``bytes`` value to the file as it is (``pickle.dumps`` would copy it into the pickle
        first: a 500 MB value held twice while it spills)."""
        start = file.tell()
        file.write(_NO_LENGTH)
        pickle.Pickler(file, protocol=_PICKLE_PROTOCOL).dump(records)
        end = file.tell()
        file.seek(start)
        file.write(_FRAME_HEADER.pack(end - start - _FRAME_HEADER.size))
        file.seek(end)
        written = end - start
        self._spilled_bytes += written
        self._store.spilled_bytes_total += written

    def _encode(self, subxid: int, event: BufferedEvent) -> tuple[Any, ...]:
        if isinstance(event, RowChange):
            return (_ROW, subxid, event.lsn, event.op, self._relation_ref(event.relation),
                    event.old_kind, _plain_tuple(event.old), _plain_tuple(event.new))
        if isinstance(event, TruncateChange):
            refs = tuple(self._relation_ref(relation) for relation in event.relations)
            return (_TRUNCATE, subxid, event.lsn, event.options, refs)
        if isinstance(event, MessageChange):
            return (_MESSAGE, subxid, event.lsn, event.prefix, event.content)
        return (_ORIGIN, subxid, event.origin_lsn, event.name)

    def _decode(self, record: tuple[Any, ...]) -> BufferedEvent:
        tag = record[0]
        if tag == _ROW:
            _, _, lsn, op, ref, old_kind, old, new = record
            return RowChange(op=op, relation=self._relations[ref], lsn=Lsn(lsn), old_kind=old_kind,
                             old=_tuple_data(old), new=_tuple_data(new))
        if tag == _TRUNCATE:
            _, _, lsn, options, refs = record
            return TruncateChange(relations=tuple(self._relations[ref] for ref in refs),
                                  options=options, lsn=Lsn(lsn))
        if tag == _MESSAGE:
            _, _, lsn, prefix, content = record
            return MessageChange(prefix=prefix, content=content, lsn=Lsn(lsn))
        if tag == _ORIGIN:
            _, _, origin_lsn, name = record
            return TxOrigin(name=name, origin_lsn=Lsn(origin_lsn))
        raise InvariantError(f"spill file {self.path} holds a record with unknown tag {tag!r}")

    def _relation_ref(self, relation: Relation) -> int:
        ref = self._relation_index.get(id(relation))
        if ref is None:
            ref = len(self._relations)
            self._relations.append(relation)  # keeps the object alive, so its id() stays unique
            self._relation_index[id(relation)] = ref
        return ref

    def _grow_memory(self, delta: int) -> None:
        self._memory_bytes += delta
        self._store.memory_bytes += delta

    def _require_filling(self, action: str) -> None:
        if self._state is not BufferState.FILLING:
            raise InvariantError(f"cannot {action} a transaction buffer that is {self._state.value}")

    def _require_replaying(self) -> None:
        # A replay must never end early and look complete: stop loudly if the buffer went away.
        if self._state is not BufferState.REPLAYING:
            raise InvariantError(f"transaction buffer {self.path.name} was {self._state.value} during replay")


def _plain_tuple(data: TupleData | None) -> tuple[bytes, tuple[bytes | None, ...]] | None:
    return None if data is None else (data.kinds, data.values)


def _tuple_data(plain: tuple[bytes, tuple[bytes | None, ...]] | None) -> TupleData | None:
    return None if plain is None else TupleData(kinds=plain[0], values=plain[1])


def _read_records(reader: BinaryIO, path: Path) -> Iterator[tuple[Any, ...]]:
    """Each frame's records, unpickled from the file itself: a large value is read into its own
    ``bytes`` object once (reading the frame into a buffer first would hold it twice), and the
    frame is let go before the next one is read."""
    try:
        size = os.fstat(reader.fileno()).st_size
        while True:
            header = reader.read(_FRAME_HEADER.size)
            if not header:
                return
            if len(header) != _FRAME_HEADER.size:
                raise InvariantError(f"spill file {path} ends inside a frame header")
            (length,) = _FRAME_HEADER.unpack(header)
            start = reader.tell()
            if start + length > size:
                raise InvariantError(f"spill file {path} ends inside a frame ({size - start} of {length} bytes)")
            try:
                records: list[tuple[Any, ...]] = _PlainUnpickler(reader).load()
            except (EOFError, pickle.UnpicklingError) as exc:
                raise InvariantError(f"spill file {path} holds a corrupt frame at byte {start}: {exc}") from None
            if reader.tell() != start + length:
                raise InvariantError(f"spill file {path} holds a frame of {reader.tell() - start} bytes where its "
                                     f"header says {length}")
            yield from records
            del records
    except OSError as exc:
        raise FatalError(f"cannot read spill file {path}: {exc.strerror or exc}", hint=_SPILL_IO_HINT) from exc


class _PlainUnpickler(pickle.Unpickler):
    """Loads only built-in containers and scalars: spilled records never name a class."""

    def find_class(self, module_name: str, global_name: str, /) -> NoReturn:
        raise InvariantError(f"spill file refers to {module_name}.{global_name}; only plain tuples are allowed")
