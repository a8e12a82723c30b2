"""A session that keeps updating, deleting and inserting rows of a table until told to stop."""

from __future__ import annotations

import random
import threading

import psycopg
from psycopg import sql


def create_filled_table(dsn: str, table: str, rows: int) -> None:
    """``table (id bigint PRIMARY KEY, v text, n int)`` holding ids 1..rows."""
    schema, name = table.split(".")
    ident = sql.Identifier(schema, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, v text, n int NOT NULL)").format(ident))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'row ' || g, 0 FROM generate_series(1, %s) g").format(ident),
                     (rows,))
        conn.execute(sql.SQL("ANALYZE {}").format(ident))


class Churn(threading.Thread):
    """Small random transactions on ``table`` (updates, deletes, inserts, now and then a key change)."""

    def __init__(self, dsn: str, table: str, id_range: int, *, seed: int, pause_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.target = sql.Identifier(*table.split("."))
        self.id_range = id_range
        self.rnd = random.Random(seed)
        self.pause_s = pause_s
        self.halt = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def _run(self) -> None:
        rnd, ident = self.rnd, self.target
        next_id = self.id_range * 10
        update = sql.SQL("UPDATE {} SET n = n + 1, v = %s WHERE id = %s").format(ident)
        delete = sql.SQL("DELETE FROM {} WHERE id = %s").format(ident)
        insert = sql.SQL("INSERT INTO {} VALUES (%s, %s, 0) ON CONFLICT DO NOTHING").format(ident)
        rekey = sql.SQL("UPDATE {} SET id = %s WHERE id = %s").format(ident)
        with psycopg.connect(self.dsn, autocommit=False) as conn:
            while not self.halt.is_set():
                with conn.cursor() as cur:
                    for _ in range(rnd.randint(1, 10)):
                        choice = rnd.random()
                        target = rnd.randint(1, self.id_range)
                        if choice < 0.6:
                            cur.execute(update, (f"u{self.transactions}", target))
                        elif choice < 0.8:
                            cur.execute(delete, (target,))
                        elif choice < 0.97:
                            cur.execute(insert, (rnd.choice([target, next_id]), f"i{self.transactions}"))
                            next_id += 1
                        else:
                            cur.execute(rekey, (next_id, target))
                            next_id += 1
                conn.commit()
                self.transactions += 1
                if self.pause_s:
                    self.halt.wait(self.pause_s)

    def stop(self) -> int:
        """Stop, raise what went wrong, return the number of committed transactions."""
        self.halt.set()
        self.join(60)
        if self.error is not None:
            raise self.error
        return self.transactions
