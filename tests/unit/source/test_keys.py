"""Key columns are used only when the Relation carries all of them (source/keys.py)."""

from __future__ import annotations

from pgbridge.source.keys import usable_key
from tests.support.relations import relation as _relation


def test_the_catalog_key_in_index_order() -> None:
    assert usable_key(("b", "a"), _relation("a", "b", "c")) == ("b", "a")


def test_a_key_column_missing_from_the_relation_gives_no_key_not_a_partial_one() -> None:
    assert usable_key(("a", "gone"), _relation("a", "b")) == ()


def test_no_key_in_the_catalog_gives_no_key() -> None:
    assert usable_key((), _relation("a")) == ()


def test_a_key_column_renamed_since_the_relation_is_found_by_its_flag_in_catalog_order() -> None:
    # the catalog (now) says (ident, b); the Relation (from before RENAME COLUMN id TO ident) has id
    relation = _relation(("b", 23, -1, True), ("id", 23, -1, True), "c")
    assert usable_key(("ident", "b"), relation) == ("id", "b")


def test_a_renamed_key_column_is_not_guessed_without_replica_identity_default() -> None:
    assert usable_key(("ident",), _relation("id", "c", key=2, identity="f")) == ()
    assert usable_key(("ident", "b"), _relation("id", "c", key=1)) == ()
