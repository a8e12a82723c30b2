"""``postgres.table_include`` / ``table_exclude``: full-match regular expressions over catalog names,
include then exclude, resolved to roots and ordinary tables outside the system schemas."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from pgbridge.config import PostgresConfig
from pgbridge.config.postgres import split_patterns
from pgbridge.source.publication import create_statement
from pgbridge.source.selection import (
    CatalogTable,
    TableSelection,
    is_system_schema,
    select_tables,
    stream_filter,
)


def _config(**values: Any) -> PostgresConfig:
    return PostgresConfig.model_validate({"dsn": "host=x", **values})


def _table(schema: str, name: str, *, partitioned: bool = False, is_partition: bool = False) -> CatalogTable:
    return CatalogTable(schema=schema, name=name, partitioned=partitioned, is_partition=is_partition)


def test_a_pattern_must_match_the_whole_name() -> None:
    selection = TableSelection.from_patterns([r"public\.order"])
    assert selection.matches("public", "order")
    assert not selection.matches("public", "orders")
    assert not selection.matches("xpublic", "order")


def test_include_then_exclude() -> None:
    selection = TableSelection.from_patterns([r"public\..*", r"inventory\.stock"], [r"public\..*_audit"])
    assert selection.matches("public", "orders")
    assert selection.matches("inventory", "stock")
    assert not selection.matches("public", "orders_audit")
    assert not selection.matches("inventory", "other")


def test_no_include_list_selects_everything_but_the_excluded() -> None:
    selection = TableSelection.from_patterns(None, [r".*\.tmp_.*"])
    assert selection.matches("any", "table")
    assert not selection.matches("public", "tmp_load")


def test_names_are_matched_unquoted_as_the_catalog_spells_them() -> None:
    selection = TableSelection.from_patterns([r"public\.Order Items", r"My\.Schema\..*"])
    assert selection.matches("public", "Order Items")
    assert not selection.matches("public", "order items")
    assert selection.matches("My.Schema", 'a"b')


def test_exact_names_select_only_those_pairs() -> None:
    selection = TableSelection.from_names([("My.Schema", "a"), ("public", "b")])
    assert selection.matches("My.Schema", "a")
    assert not selection.matches("My", "Schema.a")
    assert "postgres.tables" in selection.describe()


def test_selection_resolves_to_roots_and_tables_never_partitions_or_system_tables() -> None:
    catalog = [_table("public", "orders"), _table("public", "events", partitioned=True),
               _table("public", "events_2026", is_partition=True), _table("pg_catalog", "pg_class"),
               _table("information_schema", "sql_parts"), _table("pg_temp_3", "scratch"),
               _table("public", "orders_audit")]
    selection = TableSelection.from_patterns(None, [r".*_audit"])
    assert select_tables(catalog, selection) == [("public", "events"), ("public", "orders")]


def test_system_schemas() -> None:
    assert all(is_system_schema(s) for s in ("pg_catalog", "information_schema", "pg_toast", "pg_toast_temp_1"))
    assert not is_system_schema("pg_tempish")
    assert not is_system_schema("public")


def test_comma_list_and_json_array_forms() -> None:
    assert split_patterns(r" public\..* , inv\.a ,") == [r"public\..*", r"inv\.a"]
    config = _config(table_include=r"public\..*,inv\.a", table_exclude='["x{1,3}\\\\.y"]')
    assert config.table_include == [r"public\..*", r"inv\.a"]
    assert config.table_exclude == [r"x{1,3}\.y"]


def test_a_bad_pattern_is_refused_naming_the_key_and_pattern() -> None:
    with pytest.raises(ValidationError, match=r"postgres.table_exclude: '\(' is not a valid regular expression"):
        _config(table_exclude="(")


@pytest.mark.parametrize("other", [{"table_include": "public.a"}, {"table_exclude": "public.a"}])
def test_tables_and_patterns_are_mutually_exclusive(other: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match=r"postgres.tables and postgres.table_(include|exclude) cannot both"):
        _config(tables="public.a", **other)


def test_publication_mode_is_validated() -> None:
    assert _config().publication_mode == "filtered"
    with pytest.raises(ValidationError, match="publication_mode"):
        _config(publication_mode="everything")


def test_the_stream_filter_is_the_patterns_or_the_tables_outside_filtered_mode() -> None:
    assert stream_filter(_config()) is None
    assert stream_filter(_config(tables="public.a")) is None  # filtered: the publication as it is, as before
    exact = stream_filter(_config(tables="public.a", publication_mode="all_tables"))
    assert exact is not None and exact.matches("public", "a") and not exact.matches("public", "b")
    patterns = stream_filter(_config(table_exclude="public.b", publication_mode="disabled"))
    assert patterns is not None and patterns.matches("public", "a") and not patterns.matches("public", "b")


def test_create_statement_is_what_an_operator_runs() -> None:
    assert create_statement("pgbridge", [("public", "Order Items"), ("s", "t")], 150000) == (
        'CREATE PUBLICATION pgbridge FOR TABLE public."Order Items", s.t WITH (publish_via_partition_root = true);')
    assert create_statement("p", None, 150000).startswith("CREATE PUBLICATION p FOR ALL TABLES")
    assert create_statement("p", [], 120000) == "CREATE PUBLICATION p FOR TABLE ...;"
