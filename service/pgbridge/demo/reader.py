"""The demo's reading side: every topic from its beginning, decoded as a registry-less consumer
would, printed in commit order with a count per table at the end.

The topics are read in parallel, so a transaction's END can arrive before its changes do. The END's
``event_count`` says how many of them to wait for: a transaction's lines are printed together once
they are all there, BEGIN, its changes and messages, END, never the END first."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import logging
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import Consumer

from pgbridge.consumer import SchemaStore, UnknownSchema
from pgbridge.demo.workload import END_MARKER, MESSAGE_PREFIX, TABLES, TOPIC_PREFIX
from pgbridge.logs import LibrdkafkaLog
from pgbridge.lsn import format_lsn
from pgbridge.publish.topics import (
    assign_existing,
    messages_topic,
    schemas_topic,
    table_topic,
    transactions_topic,
)

log = logging.getLogger(__name__)

# A topic counts as caught up this long after it was assigned.
SETTLE_AFTER_ASSIGN_S: Final = 1.5
# A transaction still missing some of its END's events is printed anyway after this long (a table
# the demo does not read, a record lost to a broker's quirk), so no line is held forever.
INCOMPLETE_LIMIT_S: Final = 5.0
# A line's place among those of one commit LSN (the sort key's second part): BEGIN, the events, END.
BEGIN_RANK: Final = 0
EVENT_RANK: Final = 1
END_RANK: Final = 2


# --- reading and printing -----------------------------------------------------------------------------


@dataclass(order=True)
class _Line:
    sort_key: tuple[int, int, int, int]
    received: float = field(compare=False)
    text: str = field(compare=False)
    transaction: int | None = field(default=None, compare=False)  # its commit LSN; None: outside one


class Printer:
    """Holds decoded events and prints them in commit order, each transaction whole, counting them
    per table. ``clock`` is ``time.monotonic`` but for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._held: list[_Line] = []
        self._sequence = 0
        self._events_seen: Counter[int] = Counter()  # per commit LSN: changes and messages held so far
        self._events_expected: dict[int, int] = {}  # per commit LSN: its END's event_count
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.message_count = 0
        self.transaction_count = 0
        self.end_marker_seen = False

    def add(self, topic: str, key: Any, value: Any) -> None:
        if value is None:
            return  # the tombstone after a delete: it only matters to log compaction
        self._sequence += 1
        transaction: int | None = None
        if topic == transactions_topic(TOPIC_PREFIX):
            sort_key, text = self._boundary(value)
            transaction = int(value["commit_lsn"])
            if value["status"] == "END":
                self.transaction_count += 1
                self._events_expected[transaction] = int(value["event_count"])
        else:
            if topic == messages_topic(TOPIC_PREFIX):
                sort_key, text = self._message(value)
                self.message_count += 1
                if value["prefix"] == MESSAGE_PREFIX and bytes(value["content"]) == END_MARKER.encode():
                    self.end_marker_seen = True
                inside = bool(value["transactional"]) and value.get("transaction") is not None
            else:
                sort_key, text = self._change(key, value)
                source = value["source"]
                self.counts[f"{source['schema']}.{source['table']}"][value["op"]] += 1
                inside = value.get("transaction") is not None
            if inside:
                transaction = sort_key[0]
                self._events_seen[transaction] += 1
        self._held.append(_Line((*sort_key, self._sequence), self._clock(), text, transaction))

    def release(self, *, older_than: float) -> None:
        """Print, in commit order, the held lines up to the first that is not ready: received less
        than ``older_than`` seconds ago, or of a transaction still missing events its END counts
        (for at most ``INCOMPLETE_LIMIT_S``)."""
        now = self._clock()
        self._print_while(lambda line: self._ready(line, now - line.received, older_than))

    def flush(self) -> None:
        """Print, in commit order, all that is held (the demo's end)."""
        self._print_while(lambda line: True)

    def _print_while(self, ready: Callable[[_Line], bool]) -> None:
        self._held.sort()
        printed = 0
        for line in self._held:
            if not ready(line):
                break
            say(line.text)
            printed += 1
            if line.sort_key[1] == END_RANK:  # its transaction is done
                self._forget_up_to(line.sort_key[0])
        del self._held[:printed]

    def _ready(self, line: _Line, age: float, older_than: float) -> bool:
        if age < older_than:
            return False
        if line.transaction is None or age >= INCOMPLETE_LIMIT_S:
            return True
        expected = self._events_expected.get(line.transaction)
        return expected is not None and self._events_seen[line.transaction] >= expected

    def _forget_up_to(self, commit_lsn: int) -> None:
        for counts in (self._events_seen, self._events_expected):
            for lsn in [lsn for lsn in counts if lsn <= commit_lsn]:
                del counts[lsn]

    @staticmethod
    def _boundary(value: dict[str, Any]) -> tuple[tuple[int, int, int], str]:
        commit_lsn = int(value["commit_lsn"])
        if value["status"] == "BEGIN":
            return (commit_lsn, BEGIN_RANK, 0), f"BEGIN  xid={value['xid']}  commit_lsn={format_lsn(commit_lsn)}"
        tables = ", ".join(f"{item['data_collection']} {item['event_count']}"
                           for item in value.get("data_collections") or [])
        detail = f" ({tables})" if tables else ""
        count = int(value["event_count"])
        return ((commit_lsn, END_RANK, 0),
                f"END    xid={value['xid']}  {count} event{'' if count == 1 else 's'}{detail}")

    @staticmethod
    def _message(value: dict[str, Any]) -> tuple[tuple[int, int, int], str]:
        content = bytes(value["content"]).decode("utf-8", errors="replace")
        head = f"  msg {value['prefix']:<16} {content!r}"
        transaction = value.get("transaction")
        if value["transactional"] and transaction is not None:
            commit_lsn = int(value["commit_lsn"])
            return ((commit_lsn, EVENT_RANK, int(transaction["total_order"])),
                    f"{head}  commit_lsn={format_lsn(commit_lsn)} total_order={transaction['total_order']}")
        lsn = int(value["lsn"])
        return (lsn, EVENT_RANK, 0), f"{head}  non-transactional lsn={format_lsn(lsn)}"

    @staticmethod
    def _change(key: Any, value: dict[str, Any]) -> tuple[tuple[int, int, int], str]:
        op = value["op"]
        source = value["source"]
        table = f"{source['schema']}.{source['table']}"
        before, after = value.get("before"), value.get("after")
        if op == "u" and before is not None and after is not None:
            changed = {name: (before.get(name), after[name]) for name in after
                       if before.get(name) != after[name]}
            body = "changed {" + ", ".join(f"{name}: {_show(old)} -> {_show(new)}"
                                           for name, (old, new) in changed.items()) + "}"
        elif op in ("c", "r", "u"):
            body = f"after {_summary(after)}"
        elif op == "d":
            body = f"before {_summary(before)}"
        else:
            body = ""
        commit_lsn = int(source["commit_lsn"])
        transaction = value.get("transaction")
        if transaction is None:
            where = "snapshot"
            total_order = 0
        else:
            total_order = int(transaction["total_order"])
            where = f"commit_lsn={format_lsn(commit_lsn)} total_order={total_order}"
        return (commit_lsn, EVENT_RANK, total_order), f"  {op}   {table:<15} key {_summary(key):<10} {body}  {where}"

    def summary(self, *, unresolved: int) -> str:
        parts = []
        for table in TABLES:
            ops = self.counts.get(table, Counter())
            detail = " ".join(f"{op}={ops[op]}" for op in "rcudt" if ops[op])
            parts.append(f"{table} {sum(ops.values())}" + (f" ({detail})" if detail else ""))
        parts.append(f"messages {self.message_count}")
        parts.append(f"transactions {self.transaction_count}")
        tail = f"; {unresolved} records with an unknown writer schema" if unresolved else ""
        return "pgbridge demo: events seen: " + ", ".join(parts) + tail


def _show(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value[:16].hex() + ("..." if len(value) > 16 else "")
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    return "null" if value is None else str(value)


def _summary(row: Any) -> str:
    if row is None:
        return "null"
    if not isinstance(row, dict):
        return _show(row)
    return "{" + ", ".join(f"{name}={_show(value)}" for name, value in row.items()) + "}"


class Reader:
    """Reads the demo's topics from the beginning, decoding with the writer schemas in ``_schemas``.

    Partitions are assigned explicitly (no consumer group) once a topic exists, found with a
    metadata request for *all* topics: naming a missing topic would make Tansu create it. Topics
    are read in parallel, so a record can arrive before the ``_schemas`` record of its writer
    schema; it waits until that arrives (``_schemas`` is read continuously, which is the "re-read
    ``_schemas`` on an unknown fingerprint" a registry-less consumer needs).
    """

    def __init__(self, bootstrap: str, printer: Printer) -> None:
        self._printer = printer
        self._store = SchemaStore()
        self._schemas_topic = schemas_topic(TOPIC_PREFIX)
        self._wanted = [self._schemas_topic, transactions_topic(TOPIC_PREFIX), messages_topic(TOPIC_PREFIX),
                        *(table_topic(TOPIC_PREFIX, *table.split(".", 1)) for table in TABLES)]
        self._assigned: set[str] = set()
        self._last_assigned_at = time.monotonic()
        self._next_metadata = 0.0
        self._parked: list[tuple[str, bytes | None, bytes | None]] = []
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap,
            # Required by the client; with assign() and no commits it never joins a group.
            "group.id": f"pgbridge-demo-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
        }, logger=LibrdkafkaLog())

    def settled(self) -> bool:
        """Whether every topic is assigned and the last one has had time to be read from its start."""
        return (len(self._assigned) == len(self._wanted)
                and time.monotonic() - self._last_assigned_at >= SETTLE_AFTER_ASSIGN_S)

    @property
    def unresolved(self) -> int:
        return len(self._parked)

    def poll(self, timeout: float) -> int:
        """Read for up to ``timeout`` seconds; return how many records arrived."""
        now = time.monotonic()
        if len(self._assigned) < len(self._wanted) and now >= self._next_metadata:
            self._assign_existing()
            self._next_metadata = now + 0.2
        count = 0
        deadline = now + timeout
        while True:
            message = self._consumer.poll(max(0.0, min(0.1, deadline - time.monotonic())))
            if message is not None and message.error() is None:
                count += 1
                self._handle(str(message.topic()), message.key(), message.value())
            elif message is not None:
                log.debug("consumer error", extra={"error": str(message.error())})
            if time.monotonic() >= deadline:
                return count

    def drain(self, *, idle: float, limit: float) -> None:
        """Read until nothing arrived for ``idle`` seconds, at most ``limit`` seconds."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.poll(idle) == 0:
                return

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._consumer.close()

    def _assign_existing(self) -> None:
        if assign_existing(self._consumer, self._wanted, self._assigned, timeout=2.0):
            self._last_assigned_at = time.monotonic()

    def _handle(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        if topic == self._schemas_topic:
            if key is not None and value is not None:
                self._store.add(key, value)
                parked, self._parked = self._parked, []
                for record in parked:
                    self._decode(*record)
            return
        self._decode(topic, key, value)

    def _decode(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        try:
            decoded_key = self._store.decode(key)
            decoded_value = self._store.decode(value)
        except UnknownSchema:
            self._parked.append((topic, key, value))
            return
        self._printer.add(topic, decoded_key, decoded_value)


def say(text: str) -> None:
    print(text, flush=True)


def warn(text: str) -> None:
    print(f"pgbridge demo: {text}", file=sys.stderr, flush=True)
