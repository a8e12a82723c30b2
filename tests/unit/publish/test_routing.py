"""``kafka.skipped_operations``, ``kafka.tombstones_on_delete`` and ``kafka.topic_routes``: what a
change publishes, and where."""

from __future__ import annotations

import json

import pytest

from pgbridge.assemble.units import RowChange
from pgbridge.config import KafkaConfig, TopicRoute, load_settings
from pgbridge.decode.messages import TupleData
from pgbridge.encode.envelope import ChangeEncoder, EventContext, OutRecord
from pgbridge.encode.schemas import TABLE_KEY_FIELD, with_table_field
from pgbridge.encode.wire import SingleObjectRegistrar
from pgbridge.errors import ConfigError, FatalError
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import PublishFilter, Route, TopicRouter, row_records
from pgbridge.topic_routes import template_problem
from tests.unit.encode.avro_helpers import SchemaLog, relation

BASE = {"PGBRIDGE_POSTGRES__DSN": "host=x", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092"}
DELETE = [OutRecord("p.public.t", b"k", b"delete"), OutRecord("p.public.t", b"k", None)]


def test_skipped_operations_default_to_none_unlike_debeziums_t() -> None:
    config = KafkaConfig(bootstrap_servers="k")
    assert config.skipped_operations == []
    assert PublishFilter.of(config) == PublishFilter(frozenset(), True)


def test_skipped_operations_are_read_from_the_comma_form_of_the_environment() -> None:
    settings = load_settings(environ={**BASE, "PGBRIDGE_KAFKA__SKIPPED_OPERATIONS": "u, d"})
    publish = PublishFilter.of(settings.kafka)
    assert [op for op in "cudt" if publish.skips(op)] == ["u", "d"]


def test_none_is_debeziums_spelling_of_no_skipped_operation() -> None:
    settings = load_settings(environ={**BASE, "PGBRIDGE_KAFKA__SKIPPED_OPERATIONS": "none"})
    assert settings.kafka.skipped_operations == []


@pytest.mark.parametrize("bad", ["r", "x", "c,insert"])
def test_an_unknown_operation_is_a_configuration_error_naming_the_field(bad: str) -> None:
    with pytest.raises(ConfigError, match="skipped_operations"):
        load_settings(environ={**BASE, "PGBRIDGE_KAFKA__SKIPPED_OPERATIONS": bad})


def test_a_delete_keeps_its_tombstone_by_default() -> None:
    assert row_records(DELETE, "d", True) == DELETE


def test_without_tombstones_a_delete_is_its_delete_record_alone() -> None:
    assert row_records(DELETE, "d", False) == DELETE[:1]


def test_a_keyless_delete_is_unchanged() -> None:
    keyless = [OutRecord("p.public.t", None, b"delete")]
    assert row_records(keyless, "d", False) == keyless


def test_the_old_key_tombstone_of_a_key_change_stays() -> None:
    key_change = [OutRecord("p.public.t", b"old", None), OutRecord("p.public.t", b"new", b"update")]
    assert row_records(key_change, "u", False) == key_change


# --- topic routes ---------------------------------------------------------------------------------


def _routes(*pairs: tuple[str, str]) -> list[TopicRoute]:
    return [TopicRoute(match=match, topic=topic) for match, topic in pairs]


def test_the_first_matching_route_names_the_topic_with_its_groups() -> None:
    router = TopicRouter("app", _routes((r"public\.orders_(\d+)", r"sales.orders"),
                                        (r"(\w+)\.(\w+)", r"cdc.\1_\2")))
    assert router.topic_of("public", "orders_2024") == "app.sales.orders"
    assert router.topic_of("inventory", "items") == "app.cdc.inventory_items"


def test_a_table_no_route_matches_keeps_the_contracts_topic() -> None:
    router = TopicRouter("app", _routes((r"public\.orders", "sales.orders")))
    assert router.topic_of("public", "orders_archive") == "app.public.orders_archive"  # whole-name match
    assert router.route("Sales", "Order Items") == Route("app.Sales.Order_Items", False)


def test_without_routes_every_table_keeps_its_own_keys() -> None:
    router = TopicRouter("app", [], [("public", "a b"), ("public", "a_b")])
    assert router.route("public", "a b") == router.route("public", "a_b") == Route("app.public.a_b", False)


def test_a_topic_several_known_tables_share_gets_the_table_key_field() -> None:
    tables = [("public", "orders_1"), ("public", "orders_2"), ("public", "items")]
    router = TopicRouter("app", _routes((r"public\.orders_\d+", "sales.orders")), tables)
    assert router.route("public", "orders_1") == Route("app.sales.orders", True)
    assert router.route("public", "items") == Route("app.public.items", False)
    assert router.shared_topics() == {"app.sales.orders": ["public.orders_1", "public.orders_2"]}


def test_a_route_onto_another_tables_own_topic_shares_it() -> None:
    router = TopicRouter("app", _routes((r"public\.a", "public.b")), [("public", "a"), ("public", "b")])
    assert router.route("public", "b") == Route("app.public.b", True)


def test_a_new_table_landing_on_a_topic_held_alone_stops_with_a_restart_hint() -> None:
    router = TopicRouter("app", _routes((r"public\.orders_\d+", "sales.orders")), [("public", "orders_1")])
    assert router.route("public", "orders_1") == Route("app.sales.orders", False)
    with pytest.raises(FatalError, match=r"public\.orders_2 is routed onto app\.sales\.orders") as stopped:
        router.route("public", "orders_2")
    assert stopped.value.hint is not None and "restart pgbridge" in stopped.value.hint


@pytest.mark.parametrize(("match", "topic", "reason"), [
    (r"public\.(\w+)", "_internal.x", "internal to pgbridge"),
    (r"public\.(\w+)", "orders", "two or more dot-separated parts"),
    (r"public\.(\w+)", "sales.ord ers", "two or more dot-separated parts"),
    (r"public\.(\w+)", r"sales.\2", "refers to a group"),
    (r"public\.(\w+", "sales.x", "not a regular expression"),
    (r"public\.(\w+)", r"sales.\g<1>", r"only \\1"),
])
def test_a_route_that_cannot_make_a_valid_topic_is_refused_at_load(match: str, topic: str, reason: str) -> None:
    assert template_problem(match, topic) is not None
    with pytest.raises(ConfigError, match=f"kafka.topic_routes.*{reason}"):
        load_settings(environ={**BASE, "PGBRIDGE_KAFKA__TOPIC_ROUTES": json.dumps([{"match": match,
                                                                                       "topic": topic}])})


def test_a_group_that_expands_to_an_invalid_name_is_refused_naming_the_table_and_route() -> None:
    router = TopicRouter("app", _routes((r"(\w*)\.(.*)", r"\1.\2")))
    with pytest.raises(ConfigError, match=r"sends public\.a b to an invalid topic") as refused:
        router.topic_of("public", "a b")
    assert refused.value.hint is not None and "(\\w*)" in refused.value.hint
    with pytest.raises(ConfigError, match="starts with _"):
        router.topic_of("_private", "t")


def test_the_table_key_field_comes_first_and_a_colliding_column_is_refused() -> None:
    key = {"type": "record", "name": "Key", "namespace": "app.public.t", "fields": [{"name": "id", "type": "long"}]}
    assert [f["name"] for f in with_table_field(key)["fields"]] == [TABLE_KEY_FIELD, "id"]
    with pytest.raises(ConfigError, match=TABLE_KEY_FIELD):
        with_table_field(with_table_field(key))


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_two_tables_on_one_topic_keep_distinct_keys_that_name_their_table(native: bool) -> None:
    log = SchemaLog()
    router = TopicRouter("app", _routes((r"public\.shard_\d", "sales.orders")),
                         [("public", "shard_1"), ("public", "shard_2")])
    encoder = ChangeEncoder(topic_prefix="app", database="db", registrar=SingleObjectRegistrar(log.announce),
                            router=router, native=native)
    context = EventContext(commit_lsn=1, xid=2, ts_us=3, origin=None, total_order=1, collection_order=1)
    records = []
    for rel_id, name in [(1, "shard_1"), (2, "shard_2")]:
        table = relation(("id", 20, -1, True), ("v", 25), name=name, rel_id=rel_id)
        change = RowChange("c", table, Lsn(10), None, None, TupleData(b"tt", (b"7", b"x")))
        records.extend(encoder.encode_row(change, context))
    assert [r.topic for r in records] == ["app.sales.orders"] * 2
    assert [log.decode(r.key) for r in records] == [{TABLE_KEY_FIELD: "public.shard_1", "id": 7},
                                                    {TABLE_KEY_FIELD: "public.shard_2", "id": 7}]
    # the value still says the real table
    assert [log.decode(r.value)["source"]["table"] for r in records] == ["shard_1", "shard_2"]
