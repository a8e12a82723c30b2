"""``postgres.tables``: SQL identifiers, normalized; the failover setting's default."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from pgbridge.config import PostgresConfig


def _config(**values: Any) -> PostgresConfig:
    return PostgresConfig.model_validate({"dsn": "host=x", **values})


def test_tables_are_normalized_and_parsed_exactly() -> None:
    config = _config(tables='Public.Orders, public."Order Items", "My.Schema"."a""b"')
    assert config.tables == ["public.orders", 'public."Order Items"', '"My.Schema"."a""b"']
    assert config.table_pairs == [("public", "orders"), ("public", "Order Items"), ("My.Schema", 'a"b')]


def test_a_list_is_validated_like_the_comma_form() -> None:
    assert _config(tables=['public."a,b"']).table_pairs == [("public", "a,b")]


@pytest.mark.parametrize(("bad", "reason"), [("orders", "must be written schema.table"),
                                             ("a.b.c", "quote a name that contains a dot"),
                                             ('public."open', "unterminated quoted identifier")])
def test_a_malformed_table_is_refused_with_how_to_write_it(bad: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        _config(tables=bad)


def test_failover_slot_defaults_on() -> None:
    assert _config().failover_slot is True
    assert _config(failover_slot=False).failover_slot is False
