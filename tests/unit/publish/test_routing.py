"""``kafka.skipped_operations`` and ``kafka.tombstones_on_delete``: what a change publishes."""

from __future__ import annotations

import pytest

from pgbridge.config import KafkaConfig, load_settings
from pgbridge.encode.envelope import OutRecord
from pgbridge.errors import ConfigError
from pgbridge.publish.routing import PublishFilter, row_records

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
