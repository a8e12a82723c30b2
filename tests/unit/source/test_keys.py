"""Key columns are used only when the Relation carries all of them (source/keys.py)."""

from __future__ import annotations

from pgbridge.decode.messages import Column, Relation
from pgbridge.source.keys import usable_key


def _relation(*names: str) -> Relation:
    return Relation(xid=None, rel_id=1, namespace="public", name="t", replica_identity="d",
                    columns=tuple(Column(is_key=False, name=name, type_oid=23, type_modifier=-1) for name in names))


def test_the_catalog_key_in_index_order() -> None:
    assert usable_key(("b", "a"), _relation("a", "b", "c")) == ("b", "a")


def test_a_key_column_missing_from_the_relation_gives_no_key_not_a_partial_one() -> None:
    assert usable_key(("a", "gone"), _relation("a", "b")) == ()


def test_no_key_in_the_catalog_gives_no_key() -> None:
    assert usable_key((), _relation("a")) == ()
