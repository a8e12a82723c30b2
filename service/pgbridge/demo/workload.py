"""The demo's data and workload: two sample tables and a thread that changes them a few times a second.

``shop.customers`` (REPLICA IDENTITY DEFAULT: deletes carry only the key) and ``shop.orders``
(REPLICA IDENTITY FULL: updates and deletes carry the old row) are seeded so the initial snapshot
has something to read; the workload inserts, updates, deletes, runs multi-statement transactions and
emits logical decoding messages, ending with a marker message the reader waits for.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import threading
import uuid
from collections.abc import Callable
from typing import Any, Final, LiteralString

import psycopg

TOPIC_PREFIX: Final = "demo"
TABLES: Final = ("shop.customers", "shop.orders")
MESSAGE_PREFIX: Final = "pgbridge-demo"
END_MARKER: Final = "end of workload"

# One workload step this often: a handful of events a second, slow enough to read as they scroll.
WORKLOAD_INTERVAL_S: Final = 0.3

SCHEMA_SQL: Final = """
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


# --- workload -----------------------------------------------------------------------------------------


def execute_one(dsn: str, query: LiteralString, params: tuple[Any, ...] = ()) -> None:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(query, params)


class Workload:
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


