"""The benchmark workloads: one table each, and the SQL that changes it while a system streams.

Every workload commits ``rows`` changes in transactions of ``tx_rows`` rows, each transaction one
autocommit statement (``INSERT ... SELECT generate_series`` or a ranged ``UPDATE``), so the load
generator costs Postgres work and almost no client CPU. Single-row transactions are sent in
psycopg pipeline mode, so the generator is not bounded by one round trip per commit.
Each change produces exactly one record on the table's topic, in pgbridge and in Debezium alike
(no deletes, no key changes), which is how the harness knows when a run is complete.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import psycopg

NARROW_DDL = "CREATE TABLE {t} (id bigint PRIMARY KEY, a int, b text, c timestamptz, d numeric(12,2))"
# b is 100 characters; d cycles through 10,000.00 distinct values.
NARROW_INSERT = ("INSERT INTO {t} SELECT g, mod(g, 100000), repeat(md5(g::text), 3) || 'abcd', "
                 "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', mod(g, 1000000) / 100.0 "
                 "FROM generate_series(%s::bigint, %s::bigint) AS g")

# 30 columns, about 2 KB of text on the wire: id, 9 ints, 10 texts of 180 characters,
# 5 timestamps, 5 numerics.
_WIDE_COLUMNS = (["id bigint PRIMARY KEY"] + [f"i{n} int" for n in range(1, 10)]
                 + [f"t{n} text" for n in range(1, 11)] + [f"ts{n} timestamptz" for n in range(1, 6)]
                 + [f"n{n} numeric(12,2)" for n in range(1, 6)])
WIDE_DDL = "CREATE TABLE {t} (" + ", ".join(_WIDE_COLUMNS) + ")"
_WIDE_VALUES = (["g"] + [f"mod(g * {n}, 1000003)" for n in range(1, 10)]
                + [f"repeat(md5((g + {n})::text), 5) || 'abcdefghijklmnopqrst'" for n in range(1, 11)]
                + [f"timestamptz '2024-01-01 00:00:00+00' + (g + {n}) * interval '1 second'" for n in range(1, 6)]
                + [f"mod(g * {n}, 1000000) / 100.0" for n in range(1, 6)])
WIDE_INSERT = ("INSERT INTO {t} SELECT " + ", ".join(_WIDE_VALUES)
               + " FROM generate_series(%s::bigint, %s::bigint) AS g")

UPDATE_DDL = NARROW_DDL + "; ALTER TABLE {t} REPLICA IDENTITY FULL"
UPDATE_SQL = ("UPDATE {t} SET a = a + 1, c = c + interval '1 second', d = d + 0.01 "
              "WHERE id BETWEEN %s AND %s")


@dataclass(frozen=True)
class Workload:
    name: str
    label: str
    rows: int  # change events committed (= records expected on the table's topic)
    tx_rows: int  # rows per transaction
    ddl: str
    change_sql: str
    preload_rows: int = 0  # rows inserted before the slot exists (update workload)

    def scaled(self, factor: float) -> Workload:
        if self.tx_rows == self.rows:  # one transaction: it shrinks with the run
            rows = max(1000, int(self.rows * factor))
            return replace(self, rows=rows, tx_rows=rows)
        rows = max(self.tx_rows, int(self.rows * factor) // self.tx_rows * self.tx_rows)
        preload = max(self.tx_rows, int(self.preload_rows * factor)) if self.preload_rows else 0
        return replace(self, rows=rows, preload_rows=preload)

    def prepare(self, dsn: str, table: str) -> None:
        """Create the table and load what must exist before streaming starts."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in self.ddl.format(t=table).split("; "):
                conn.execute(statement)
            if self.preload_rows:
                conn.execute(NARROW_INSERT.format(t=table), (1, self.preload_rows))
                conn.execute(f"VACUUM ANALYZE {table}")

    def ranges(self) -> list[tuple[int, int]]:
        """Inclusive id ranges, one per transaction. Updates cycle over the preloaded ids."""
        out = []
        for start in range(0, self.rows, self.tx_rows):
            if self.preload_rows:
                lo = start % self.preload_rows + 1
                out.append((lo, min(lo + self.tx_rows - 1, self.preload_rows)))
            else:
                out.append((start + 1, start + self.tx_rows))
        return out


@dataclass(frozen=True)
class LoadResult:
    started: float  # wall clock (time.time()) when the first statement was sent
    first_commit: float  # ... when the first transaction had committed
    last_commit: float  # ... and the last
    transactions: int
    rows: int

    @property
    def rows_per_s(self) -> float:
        span = self.last_commit - self.started
        return self.rows / span if span > 0 else float("inf")


def generate(workload: Workload, dsn: str, table: str, rate: float | None = None) -> LoadResult:
    """Commit the workload's changes; returns when the last transaction has committed.

    ``rate`` (rows/s) paces the transactions so that the system under test can keep up, which
    makes "lag after the last commit" the latency of the last transaction rather than the backlog
    an unthrottled generator builds; unpaced by default, as in the issue's reference runs.
    """
    sql = workload.change_sql.format(t=table)
    ranges = workload.ranges()
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = first = time.time()
        if workload.tx_rows == 1 and not rate:
            conn.execute(sql, ranges[0])
            first = time.time()
            for at in range(1, len(ranges), 1000):
                with conn.pipeline(), conn.cursor() as cursor:
                    cursor.executemany(sql, ranges[at:at + 1000])
        elif rate:
            for i, bounds in enumerate(ranges):
                delay = started + i * workload.tx_rows / rate - time.time()
                if delay > 0:
                    time.sleep(delay)
                conn.execute(sql, bounds)
                if i == 0:
                    first = time.time()
        else:
            for i, bounds in enumerate(ranges):
                conn.execute(sql, bounds)
                if i == 0:
                    first = time.time()
        last = time.time()
    return LoadResult(started=started, first_commit=first, last_commit=last, transactions=len(ranges),
                      rows=sum(hi - lo + 1 for lo, hi in ranges))


def standard(rows: int) -> list[Workload]:
    """The issue's five workloads; ``rows`` sizes the narrow one, the others follow it."""
    scale = rows / 1_000_000
    full = [
        Workload("narrow", "narrow rows, 1,000-row txns", 1_000_000, 1000, NARROW_DDL, NARROW_INSERT),
        Workload("bigtx", "narrow rows, one 100,000-row txn", 100_000, 100_000, NARROW_DDL, NARROW_INSERT),
        Workload("single", "narrow rows, single-row txns", 50_000, 1, NARROW_DDL, NARROW_INSERT),
        Workload("wide", "wide rows (30 cols, ~2 KB), 1,000-row txns", 200_000, 1000, WIDE_DDL, WIDE_INSERT),
        Workload("update", "updates, REPLICA IDENTITY FULL, 1,000-row txns", 200_000, 1000, UPDATE_DDL,
                 UPDATE_SQL, preload_rows=100_000),
    ]
    if scale == 1:
        return full
    return [w.scaled(scale) for w in full]
