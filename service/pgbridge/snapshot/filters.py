"""``snapshot.filters``: per table, a SQL condition that snapshot reads must satisfy.

Debezium's ``snapshot.select.statement.overrides`` replaces a table's whole snapshot SELECT; pgbridge
takes only the condition (``"public.orders": "created_at > now() - interval '90 days'"``) and adds
``AND (<condition>)`` to every chunk query of the initial and incremental snapshots, so chunking by
key ranges, resume and the DBLog watermarks work unchanged. Streaming is not filtered: every change
of the table after the snapshot is published, whatever the condition says (as in Debezium).

The condition is operator configuration, trusted like the DSN, and is sent as written. It is checked
once at start (and by ``pgbridge check``): the table must be captured, and
``EXPLAIN SELECT 1 FROM <table> WHERE (<condition>)`` must succeed, which parses it, resolves its
columns and functions and refuses a second statement, without running it.
"""

from __future__ import annotations

from collections.abc import Mapping

import psycopg
from psycopg import sql

from pgbridge.errors import ConfigError
from pgbridge.identifiers import parse_table, table_name
from pgbridge.source import slots
from pgbridge.source.selection import TableSelection

FIX_CONDITION = "write a SQL boolean condition over the table's columns, e.g. \"id > 1000\""


def filter_problems(conn: psycopg.Connection[tuple[object, ...]], publication: str,
                    filters: Mapping[str, str], selection: TableSelection | None = None) -> list[tuple[str, str]]:
    """``(problem, fix)`` for each filter whose table is not captured (published, and selected by
    ``selection``) or whose condition Postgres rejects; empty when every filter can be used."""
    if not filters:
        return []
    captured = {table_name(schema, name) for schema, name in slots.published_tables(conn, publication, selection)}
    problems: list[tuple[str, str]] = []
    for table, condition in filters.items():
        if table not in captured:
            problems.append((f"snapshot.filters names {table}, which is not captured (publication {publication}"
                             f"{'' if selection is None else ' and postgres.table_include/table_exclude'})",
                             f"remove it from snapshot.filters or capture it: ALTER PUBLICATION {publication} "
                             f"ADD TABLE {table};"))
            continue
        error = condition_error(conn, table, condition)
        if error is not None:
            problems.append((f"snapshot.filters condition of {table} is invalid: {error}", FIX_CONDITION))
    return problems


def condition_error(conn: psycopg.Connection[tuple[object, ...]], table: str, condition: str) -> str | None:
    """Postgres' one-line objection to ``condition`` on ``table``, or ``None``. Runs only EXPLAIN
    (nothing is read) in a transaction that is rolled back."""
    query = sql.SQL("EXPLAIN SELECT 1 FROM {} WHERE ({})").format(sql.Identifier(*parse_table(table)),
                                                                  sql.SQL(condition))
    try:
        with conn.transaction(force_rollback=True):
            # binary=True forces the extended protocol, which refuses a second statement
            conn.execute(query, binary=True)
    except psycopg.errors.SyntaxError as exc:
        return f"syntax error ({exc.diag.message_primary})"
    except psycopg.OperationalError:
        raise
    except psycopg.Error as exc:
        return str(exc.diag.message_primary or exc).strip()
    return None


def validate_filters(conn: psycopg.Connection[tuple[object, ...]], publication: str,
                     filters: Mapping[str, str], selection: TableSelection | None = None) -> None:
    """At start: the first unusable filter as a ``ConfigError`` (exit 2), before any slot work."""
    problems = filter_problems(conn, publication, filters, selection)
    if problems:
        problem, fix = problems[0]
        raise ConfigError(problem, hint=fix)


def with_filter(condition: sql.Composable, row_filter: str | None) -> sql.Composable:
    """``condition AND (row_filter)``; ``condition`` alone without a filter."""
    if row_filter is None:
        return condition
    return sql.SQL("({}) AND ({})").format(condition, sql.SQL(row_filter))
