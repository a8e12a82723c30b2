"""Exactly-once publishing: Postgres transactions inside Kafka transactions, the position beside them.

With ``kafka.exactly_once`` the producer is transactional. What a ``read_committed`` consumer sees
is then decided by three rules, each enforced here:

1. **Whole transactions.** A Kafka transaction carries one or more *consecutive, whole* Postgres
   transactions (and standalone logical messages): it is committed only at a Postgres transaction
   boundary, once ``transaction_max_ms`` passed since it began or ``transaction_max_bytes`` were
   written, or when the stream goes quiet. The one exception is a Postgres transaction that keeps
   one Kafka transaction open past half of ``transaction_timeout_ms`` (a huge transaction): it is
   committed in *parts*, each part a prefix of its events, and only the last part carries its END
   record on ``{prefix}.transactions``. A consumer that needs whole transactions waits for that END
   (its ``event_count`` says how many events belong to the transaction).
2. **The position travels with the data.** Every Kafka transaction ends with one record on the
   internal compacted topic ``{prefix}._offsets`` (key: the slot name) saying how far the stream
   got: ``{"commit_lsn": C, "total_order": N, "complete": true|false}``. It commits atomically with
   the data, so after any crash the last committed ``_offsets`` record is exactly what consumers
   can see. On start, after ``init_transactions`` has fenced any older producer with the same
   ``transactional.id`` (and aborted its open transaction), pgbridge reads it with
   ``read_committed`` and skips every transaction committed at or before ``C`` (for a partial
   ``C``, the events up to ``N``), whatever the slot's ``confirmed_flush_lsn`` says.
3. **Confirm after commit.** Every unit of the ack tracker that a Kafka transaction carries is held
   by one extra pending count, released only when ``commit_transaction`` returned; so the LSN
   confirmed to Postgres never passes a change that is not committed in Kafka.

Progress of work that is not a Postgres transaction travels the same way: a ``before_commit`` hook
produces its records into every Kafka transaction just before ``commit_transaction`` (snapshot
rows: each chunk's position, snapshot/progress.py; the incremental snapshot's cursor).

The ``transactional.id`` is ``pgbridge-{topic_prefix}-{slot}``: stable for a slot and topic prefix,
so a restarted process, or a standby taking over, fences the old one. A fenced producer can never
commit again; pgbridge then stops with ``Fenced`` (exit 1) rather than reconnecting.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, Producer

from pgbridge.ack.tracker import AckTracker, Unit
from pgbridge.errors import BrokerUnavailable, FatalError, TransientError
from pgbridge.lsn import Lsn, format_lsn
from pgbridge.publish.topics import read_compacted

log = logging.getLogger(__name__)

COMMIT_TIMEOUT_S: Final = 60.0
INIT_TIMEOUT_S: Final = 60.0
# The consumer group named when the ``_offsets`` topic is read back (no offsets are committed).
OFFSETS_GROUP: Final = "pgbridge-offsets"
READ_TIMEOUT_S: Final = 60.0
# librdkafka error codes that mean another producer with our transactional.id took over.
FENCED_CODES: Final = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
                                 KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})


class Fenced(FatalError):
    """Another pgbridge with the same ``transactional.id`` took over; this one may not commit again."""


def serve_callbacks(serve: Callable[[float], int], timeout_s: float, raise_if_failed: Callable[[], None],
                    refused: Callable[[KafkaException], Exception]) -> int:
    """``serve(timeout_s)``, a librdkafka call that runs delivery and error callbacks (``flush``,
    ``poll``), with the two ways confluent-kafka reports a fatal producer error (a fenced producer:
    Kafka refuses every record of the open transaction) turned into pgbridge's:

    * it raises the fatal error itself from ``poll``/``flush`` (a ``KafkaException``) instead of
      handing it to the error callback: ``refused`` classifies it (``Fenced``, naming who took
      over);
    * it was seen ending in ``SystemError: <method 'flush' ...> returned NULL without setting an
      exception``: the callbacks have recorded the cause and ``raise_if_failed`` raises it; with
      nothing recorded the ``SystemError`` goes on as it was.

    Raised raw, either ended the process naming librdkafka's internals instead of the takeover."""
    try:
        return int(serve(timeout_s))
    except SystemError:
        raise_if_failed()
        raise
    except KafkaException as exc:
        raise refused(exc) from None


def transactional_id(topic_prefix: str, slot: str) -> str:
    return f"pgbridge-{topic_prefix}-{slot}"


@dataclass(frozen=True, slots=True)
class Position:
    """How far the committed Kafka transactions got: through ``total_order`` of ``commit_lsn``."""

    commit_lsn: Lsn
    total_order: int = 0
    complete: bool = True

    def to_json(self) -> bytes:
        return json.dumps({"commit_lsn": self.commit_lsn, "commit_lsn_text": format_lsn(self.commit_lsn),
                           "total_order": self.total_order, "complete": self.complete},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Position:
        data = json.loads(raw)
        return cls(Lsn(int(data["commit_lsn"])), int(data.get("total_order", 0)), bool(data.get("complete", True)))

    def skips_transaction(self, commit_lsn: Lsn) -> bool:
        """Whether a transaction committing at ``commit_lsn`` is already whole in Kafka."""
        return commit_lsn < self.commit_lsn or (commit_lsn == self.commit_lsn and self.complete)

    def skips_through(self, commit_lsn: Lsn) -> int:
        """How many leading events of the transaction at ``commit_lsn`` are already in Kafka."""
        if commit_lsn == self.commit_lsn and not self.complete:
            return self.total_order
        return 0


@dataclass(slots=True)
class BatchPolicy:
    """When an open Kafka transaction is committed (pure: the clock and sizes are passed in)."""

    max_age_s: float
    max_bytes: int
    split_after_s: float

    def at_boundary(self, *, age_s: float, nbytes: int) -> bool:
        """At a Postgres transaction boundary: commit once old or big enough."""
        return age_s >= self.max_age_s or nbytes >= self.max_bytes

    def mid_transaction(self, *, age_s: float) -> bool:
        """Inside one Postgres transaction: split it only when the Kafka transaction nears its timeout."""
        return age_s >= self.split_after_s


@dataclass(slots=True)
class _Open:
    started: float
    nbytes: int = 0
    records: int = 0
    units: list[Unit] = field(default_factory=list)
    position: Position | None = None


# What a ``before_commit`` hook is handed: produce (topic, key, value) into the open transaction.
ProduceInto = Callable[[str, bytes, bytes | None], None]
BeforeCommit = Callable[[ProduceInto], None]


def read_position(consumer_settings: dict[str, Any], topic: str, slot: str, *,
                  stop: threading.Event | None = None) -> Position | None:
    """The last committed ``_offsets`` record of ``slot`` (``read_committed``), or None; the read
    ends with ``StopRequested`` once ``stop`` is set."""
    latest = read_compacted({**consumer_settings, "group.id": OFFSETS_GROUP}, topic,
                            timeout_s=READ_TIMEOUT_S, key_prefix=slot, stop=stop)
    value = latest.get(slot)
    return None if value is None else Position.from_json(value)


class KafkaTransactions:
    """The open Kafka transaction of a transactional producer, and when to commit it."""

    def __init__(self, producer: Producer, tracker: AckTracker, *, offsets_topic: str, slot: str,
                 policy: BatchPolicy, on_commit: Callable[[float, int], None] | None = None,
                 raise_if_failed: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._producer = producer
        self._raise_if_failed = raise_if_failed
        self._tracker = tracker
        self._topic = offsets_topic
        self._key = slot.encode()
        self._policy = policy
        self._on_commit = on_commit
        self._clock = clock
        self._open: _Open | None = None
        self._initialised = False
        self._before_commit: list[BeforeCommit] = []
        self.committed = 0

    @property
    def is_open(self) -> bool:
        return self._open is not None

    def init(self) -> None:
        """Register the transactional.id: fences every older producer and aborts its open transaction."""
        if self._initialised:
            return
        try:
            self._producer.init_transactions(INIT_TIMEOUT_S)
        except KafkaException as exc:
            raise classify(exc, "initialising Kafka transactions") from None
        self._initialised = True

    def ensure_open(self) -> None:
        """Begin a Kafka transaction unless one is open (every produce happens inside one)."""
        if self._open is None:
            self.init()
            try:
                self._producer.begin_transaction()
            except KafkaException as exc:
                raise classify(exc, "beginning a Kafka transaction") from None
            self._open = _Open(started=self._clock())

    def before_commit(self, hook: BeforeCommit) -> Callable[[], None]:
        """Call ``hook`` inside every Kafka transaction, just before it commits, so the records it
        produces commit (or abort) with the transaction's data; returns what unregisters it."""
        self._before_commit.append(hook)
        return lambda: self._before_commit.remove(hook)

    def due(self) -> bool:
        """Whether the open transaction is old or big enough to commit at the next boundary
        (snapshot rows: every row is one)."""
        current = self._open
        return current is not None and self._policy.at_boundary(age_s=self._clock() - current.started,
                                                                nbytes=current.nbytes)

    def hold(self, unit: Unit) -> None:
        """``unit`` completes only when the Kafka transaction carrying it has committed."""
        self.ensure_open()
        assert self._open is not None
        self._tracker.add_record(unit)
        self._open.units.append(unit)

    def wrote(self, records: int, nbytes: int) -> None:
        if self._open is not None:
            self._open.records += records
            self._open.nbytes += nbytes

    def boundary(self, position: Position) -> bool:
        """A Postgres transaction (or standalone message) ended at ``position``; commits when due.

        Returns whether it committed.
        """
        current = self._open
        if current is None:
            return False
        current.position = position
        if self._policy.at_boundary(age_s=self._clock() - current.started, nbytes=current.nbytes):
            self.commit()
            return True
        return False

    def split_due(self) -> bool:
        current = self._open
        return current is not None and self._policy.mid_transaction(age_s=self._clock() - current.started)

    def commit_part(self, position: Position) -> None:
        """Commit what a huge Postgres transaction produced so far (``position.complete`` is False)."""
        assert not position.complete
        if self._open is not None:
            self._open.position = position
            self.commit()

    def idle(self) -> None:
        """Between transactions with nothing arriving: commit what is open once it is old enough."""
        current = self._open
        if current is not None and current.position is not None and \
                self._clock() - current.started >= self._policy.max_age_s:
            self.commit()

    def commit(self) -> None:
        """The ``_offsets`` record; every delivery report, any failure raising (the transaction
        stays open, to be aborted); then ``commit_transaction``; then the held units complete."""
        current = self._open
        if current is None:
            return
        started = self._clock()
        try:
            for hook in self._before_commit:
                hook(self._produce_into)
            if current.position is not None:
                self._producer.produce(self._topic, current.position.to_json(), self._key)
            # Every delivery report first: commit_transaction would commit a transaction whose
            # report failed only in our eyes (a "delivered" without an offset, producer.py).
            if serve_callbacks(self._producer.flush, COMMIT_TIMEOUT_S, self._raise_if_failed, _commit_refused):
                raise BrokerUnavailable(f"records of a Kafka transaction not acknowledged within "
                                        f"{COMMIT_TIMEOUT_S:.0f}s; it is aborted and read again from the slot")
            self._raise_if_failed()
            self._producer.commit_transaction(COMMIT_TIMEOUT_S)
        except KafkaException as exc:
            raise _commit_refused(exc) from None
        self._open = None
        self.committed += 1
        if self._on_commit is not None:
            self._on_commit(self._clock() - started, current.records)
        for unit in current.units:
            self._tracker.delivered(unit)

    def _produce_into(self, topic: str, key: bytes, value: bytes | None) -> None:
        self._producer.produce(topic, value, key)

    def abort_checked(self) -> None:
        """Abort what is open, raising what the broker says (``Fenced`` when another producer took over)."""
        if self._open is None:
            return
        self._open = None
        try:
            self._producer.abort_transaction(10.0)
        except KafkaException as exc:
            raise classify(exc, "aborting a Kafka transaction") from None

    def abort(self) -> None:
        """Abort what is open (a failed session): consumers never see it; it is re-read from the slot."""
        if self._open is None:
            return
        self._open = None
        try:
            self._producer.abort_transaction(10.0)
        except KafkaException:
            log.debug("abort_transaction failed while closing", exc_info=True)


def _commit_refused(exc: KafkaException) -> FatalError | TransientError:
    """What a failed commit is, whether its flush or ``commit_transaction`` raised it."""
    return classify(exc, "committing a Kafka transaction")


def classify(exc: KafkaException, doing: str) -> FatalError | TransientError:
    """Fenced → ``Fenced`` (stop); abortable or retriable → transient (session restarts); else fatal."""
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return BrokerUnavailable(f"{doing} failed: {exc}")
    if error.code() in FENCED_CODES:
        return Fenced(f"{doing} failed: another pgbridge with the same transactional.id took over "
                      f"({error.str()})",
                      hint="two processes stream the same slot and topic prefix; the newer one keeps going, "
                      "this one stops without committing anything")
    if error.fatal():
        return FatalError(f"{doing} failed: {error.str()}",
                          hint="check the broker's transaction settings (transaction.state.log.*) and ACLs "
                          "for the transactional.id")
    return BrokerUnavailable(f"{doing} failed: {error.str()}")
