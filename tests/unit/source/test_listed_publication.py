"""The statement that makes a publication publish exactly ``postgres.tables`` (source/publication.py)."""

from __future__ import annotations

from pgbridge.source.publication import ListedDifference

A, B, C = ("public", "a"), ("public", "b"), ("sales", "Order Items")


def test_only_missing_tables_are_added() -> None:
    difference = ListedDifference("pub", [C], [], False, [A, B, C])
    assert difference.statement() == 'ALTER PUBLICATION pub ADD TABLE sales."Order Items";'
    assert difference.describe() == 'it lacks sales."Order Items"'


def test_only_unlisted_tables_are_dropped() -> None:
    difference = ListedDifference("pub", [], [B], False, [A])
    assert difference.statement() == "ALTER PUBLICATION pub DROP TABLE public.b;"
    assert difference.describe() == "it has public.b, which are not listed"


def test_both_ways_is_one_set_table_of_the_whole_list() -> None:
    difference = ListedDifference("My Pub", [C], [B], False, [A, C])
    assert difference.statement() == 'ALTER PUBLICATION "My Pub" SET TABLE public.a, sales."Order Items";'


def test_a_whole_database_publication_is_recreated_for_the_list() -> None:
    difference = ListedDifference("pub", [], [], True, [A], " WITH (publish_via_partition_root = true)")
    assert difference
    assert difference.statement() == ("DROP PUBLICATION pub; CREATE PUBLICATION pub FOR TABLE public.a"
                                      " WITH (publish_via_partition_root = true);")


def test_the_same_tables_are_no_difference() -> None:
    assert not ListedDifference("pub", [], [], False, [A, B])
