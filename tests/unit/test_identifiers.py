"""``schema.table`` in SQL syntax: parsed as Postgres reads it, written back so it parses the same."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.identifiers import (
    IdentifierError,
    normalize_table,
    parse_table,
    quote_ident,
    split_table_list,
    table_name,
)


@pytest.mark.parametrize(("text", "expected"), [
    ('public."Order Items"', ("public", "Order Items")),
    ('"My.Schema"."a""b"', ("My.Schema", 'a"b')),
    ("Public.Orders", ("public", "orders")),
    ("public.orders", ("public", "orders")),
    ('public."Ünïcode 表"', ("public", "Ünïcode 表")),
    ("s_1.t$2", ("s_1", "t$2")),
    ("  public . orders ", ("public", "orders")),
    ('"A"."B"', ("A", "B")),
])
def test_parse_table(text: str, expected: tuple[str, str]) -> None:
    assert parse_table(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("orders", "must be written schema.table"),
    ("a.b.c", "quote a name that contains a dot"),
    ('public."Order Items', "unterminated quoted identifier"),
    ('public.""', "must not be empty"),
    ("public.", "expected an identifier"),
    ("public.Order Items", "unexpected"),
    ("1abc.t", "expected an identifier"),
    ("public." + "x" * 64, "longer than"),
])
def test_parse_table_refuses_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(IdentifierError, match=message):
        parse_table(text)


def test_canonical_form_quotes_only_when_needed() -> None:
    assert table_name("public", "orders") == "public.orders"
    assert table_name("public", "Order Items") == 'public."Order Items"'
    assert table_name("My.Schema", 'a"b') == '"My.Schema"."a""b"'
    assert normalize_table("Public.Orders") == "public.orders"
    assert quote_ident("1st") == '"1st"'


def test_split_table_list_keeps_commas_inside_quotes() -> None:
    assert split_table_list('public."a,b", s.t ,, "x"",y".z') == ['public."a,b"', "s.t", '"x"",y".z']


names = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)


@given(names, names)
def test_canonical_form_parses_back_to_the_same_names(schema: str, table: str) -> None:
    assert parse_table(table_name(schema, table)) == (schema, table)
