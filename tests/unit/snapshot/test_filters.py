"""snapshot.filters: the condition joins every chunk query; the setting is validated and canonical."""

from __future__ import annotations

import pytest

from pgbridge.config import SnapshotConfig, load_settings
from pgbridge.decode.messages import Column, Relation
from pgbridge.errors import ConfigError
from pgbridge.snapshot.chunking import (
    CHUNK_BY_CTID,
    TablePlan,
    chunk_copy_query,
    ctid_chunks,
    key_chunks,
    next_rows_copy_query,
)

RELATION = Relation(xid=None, rel_id=1, namespace="s", name="t", replica_identity="d",
                    columns=(Column(True, "a", 20, -1), Column(False, "c", 25, -1)))
KEYED = TablePlan("s", "t", "key", ("a",), ("bigint",), 100, key_chunks("s.t", [("10",)]))


def test_a_filter_is_anded_in_parentheses_to_the_chunk_range() -> None:
    query = chunk_copy_query(KEYED, RELATION, KEYED.chunks[1], "c = 'x' OR a < 3").as_string(None)
    assert query == ('COPY (SELECT "a", "c" FROM "s"."t" WHERE (ROW("a") > ROW(\'10\'::bigint))'
                     " AND (c = 'x' OR a < 3)) TO STDOUT")


def test_an_unbounded_chunk_or_a_keyless_table_is_filtered_too() -> None:
    assert chunk_copy_query(KEYED, RELATION, KEYED.chunks[0], None).as_string(None).endswith(
        "WHERE ROW(\"a\") <= ROW('10'::bigint)) TO STDOUT")
    ctid = TablePlan("s", "t", CHUNK_BY_CTID, (), (), 100, ctid_chunks("s.t", 1, 4))
    assert chunk_copy_query(ctid, RELATION, ctid.chunks[0], "a > 1").as_string(None).endswith(
        "WHERE (TRUE) AND (a > 1)) TO STDOUT")


def test_incremental_pages_keep_their_key_order_and_limit_under_a_filter() -> None:
    paged = next_rows_copy_query(KEYED, RELATION, ("5",), 100, ("99",), "a % 2 = 0").as_string(None)
    assert ("WHERE (ROW(\"a\") > ROW('5'::bigint) AND ROW(\"a\") <= ROW('99'::bigint)) AND (a % 2 = 0)"
            " ORDER BY \"a\" LIMIT 100") in paged


def test_filter_tables_are_kept_canonical_and_conditions_trimmed() -> None:
    config = SnapshotConfig(filters={"Public.Orders": " id > 5 ", 'public."Order Items"': "qty > 0"})
    assert config.filters == {"public.orders": "id > 5", 'public."Order Items"': "qty > 0"}


@pytest.mark.parametrize(("filters", "message"), [
    ({"orders": "id > 5"}, "orders"),
    ({"public.orders": "  "}, "empty"),
    ({"public.orders": "id > 5", "PUBLIC.ORDERS": "id > 6"}, "named twice"),
])
def test_bad_filter_settings_are_refused_naming_the_setting(filters: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SnapshotConfig(filters=filters)


def test_filters_come_from_the_environment_as_json() -> None:
    env = {"PGBRIDGE_POSTGRES__DSN": "host=x", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092",
           "PGBRIDGE_SNAPSHOT__FILTERS": '{"public.orders": "status = \'open\'"}'}
    assert load_settings(environ=env).snapshot.filters == {"public.orders": "status = 'open'"}
    with pytest.raises(ConfigError, match=r"snapshot\.filters"):
        load_settings(environ={**env, "PGBRIDGE_SNAPSHOT__FILTERS": '{"public.orders": 5}'})
