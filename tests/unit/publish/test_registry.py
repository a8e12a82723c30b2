"""Registry mode against the Schema Registry test double: ids, framing, compatibility, error classes."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_writer
from pydantic import SecretStr

from pgbridge.config import SchemaRegistryConfig
from pgbridge.consumer import RegistrySchemaStore, UnknownSchema
from pgbridge.errors import ConfigError, FatalError, RegistryUnavailable, SchemaError
from pgbridge.publish.registry import ConfluentRegistrar, public_url, registry_client
from tests.support.ports import free_port
from tests.support.registry_double import RegistryDouble, compatibility_errors, reader_errors


def _row(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Value", "namespace": "t.public.items",
            "fields": [{"name": n, "type": ["null", t], "default": None} for n, t in fields]}


V1 = _row(("id", "int"), ("v", "int"))
V2_ADDED = _row(("id", "int"), ("v", "int"), ("note", "string"))
V2_WIDENED = _row(("id", "int"), ("v", "long"))
V2_RETYPED = _row(("id", "int"), ("v", "string"))


@pytest.fixture
def registry() -> Iterator[RegistryDouble]:
    with RegistryDouble() as double:
        yield double


@pytest.fixture
def client(registry: RegistryDouble) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": registry.url, "max.retries": 0}) as c:
        yield c


_OPEN: list[ConfluentRegistrar] = []


@pytest.fixture(autouse=True)
def _close_registrars() -> Iterator[None]:
    """Every registrar a test connects is closed after it: an open HTTP session is a ResourceWarning."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def _registrar(url: str, **extra: Any) -> ConfluentRegistrar:
    registrar = ConfluentRegistrar.connect(SchemaRegistryConfig(url=url, timeout_s=2, **extra))
    _OPEN.append(registrar)
    return registrar


# --- the double through confluent-kafka's own client ----------------------------------------------


def test_the_same_schema_gets_the_same_id_in_every_subject(registry: RegistryDouble,
                                                           client: SchemaRegistryClient) -> None:
    first = client.register_schema("a-value", Schema(json.dumps(V1), "AVRO"))
    with SchemaRegistryClient({"url": registry.url}) as other_client:
        again = other_client.register_schema("a-value", Schema(json.dumps(V1), "AVRO"))
    other = client.register_schema("b-value", Schema(json.dumps(V1), "AVRO"))
    assert first == again == other
    assert registry.subjects() == {"a-value": [first], "b-value": [first]}
    stored = client.get_schema(first).schema_str
    assert stored is not None and json.loads(stored) == V1
    latest = client.get_latest_version("a-value")
    assert (latest.version, latest.schema_id) == (1, first)
    assert client.get_subjects() == ["a-value", "b-value"]
    assert ("POST", "/subjects/a-value/versions?normalize=False") in list(registry.requests())


def test_backward_compatibility_accepts_added_nullable_fields_and_promotions(client: SchemaRegistryClient) -> None:
    ids = [client.register_schema("s-value", Schema(json.dumps(s), "AVRO")) for s in (V1, V2_ADDED)]
    assert ids == [1, 2]
    assert client.test_compatibility("s-value", Schema(json.dumps(V2_WIDENED), "AVRO")) is True
    assert client.test_compatibility("s-value", Schema(json.dumps(V2_RETYPED), "AVRO")) is False
    assert client.get_compatibility() == "BACKWARD"


def test_an_incompatible_schema_is_a_409_with_the_registrys_reason(client: SchemaRegistryClient) -> None:
    client.register_schema("s-value", Schema(json.dumps(V1), "AVRO"))
    with pytest.raises(SchemaRegistryError) as caught:
        client.register_schema("s-value", Schema(json.dumps(V2_RETYPED), "AVRO"))
    assert caught.value.http_status_code == 409 and caught.value.error_code == 409
    assert 'incompatible with an earlier schema for subject "s-value"' in caught.value.error_message
    assert 'reader union ["null", "string"] has no branch for writer type "int"' in caught.value.error_message
    client.set_compatibility("s-value", "NONE")
    assert client.register_schema("s-value", Schema(json.dumps(V2_RETYPED), "AVRO")) == 2


def test_compatibility_levels_follow_avro_resolution() -> None:
    assert reader_errors(writer=V1, reader=V2_WIDENED) == []  # int → long promotes
    assert reader_errors(writer=V2_WIDENED, reader=V1) != []  # long → int does not
    assert reader_errors(writer=V2_ADDED, reader=V1) == []  # a writer field the reader lacks is skipped
    no_default = {**V1, "fields": [*V1["fields"], {"name": "x", "type": "int"}]}
    assert reader_errors(writer=V1, reader=no_default) == ["/x: reader field x has no default and the writer "
                                                           "has no such field"]
    assert compatibility_errors("FORWARD", V2_WIDENED, [V1]) != []
    assert compatibility_errors("FULL", V2_ADDED, [V1]) == []
    assert compatibility_errors("BACKWARD", V2_RETYPED, [V1, V2_ADDED]) != []
    assert compatibility_errors("BACKWARD", V1, [V2_RETYPED, V2_ADDED]) == []
    assert compatibility_errors("BACKWARD_TRANSITIVE", V1, [V2_RETYPED, V2_ADDED]) != []
    assert compatibility_errors("NONE", V2_RETYPED, [V1]) == []


def test_nested_unions_and_named_records_resolve_by_full_name() -> None:
    def envelope(row: dict[str, Any], name: str = "Envelope") -> dict[str, Any]:
        return {"type": "record", "name": name, "namespace": "t.public.items",
                "fields": [{"name": "before", "type": ["null", row], "default": None},
                           {"name": "after", "type": ["null", "Value"], "default": None}]}

    assert reader_errors(writer=envelope(V1), reader=envelope(V2_ADDED)) == []
    assert reader_errors(writer=envelope(V1), reader=envelope(V2_RETYPED))
    assert reader_errors(writer=envelope(V1), reader=envelope(V1, "Other")) == [
        ": reader name t.public.items.Other does not match writer name t.public.items.Envelope"]


# --- ConfluentRegistrar ----------------------------------------------------------------------------


def test_registrar_frames_with_byte_zero_and_the_big_endian_id(registry: RegistryDouble) -> None:
    registry.register("seed", {"type": "string"})  # id 1, so the table's schema gets id 2
    registrar = _registrar(registry.url)
    header = registrar.header_for("t.public.items-value", V1)
    assert header == b"\x00\x00\x00\x00\x02"
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(V1), {"id": 7, "v": None})
    store = RegistrySchemaStore({"url": registry.url})
    assert store.decode(header + body.getvalue()) == {"id": 7, "v": None}
    assert store.decode(header + body.getvalue(), reader_schema=V2_ADDED) == {"id": 7, "v": None, "note": None}
    assert store.schema(2) == V1 and store.decode(None) is None
    with pytest.raises(UnknownSchema):
        store.decode(b"\x00\x00\x00\x00\x63" + body.getvalue())
    with pytest.raises(ValueError, match="Confluent wire format"):
        store.decode(b"\xc3\x01" + bytes(8))
    registrar.close()
    store.close()


def test_confluent_kafkas_own_deserializer_reads_what_the_registrar_frames(registry: RegistryDouble,
                                                                          client: SchemaRegistryClient) -> None:
    schema = {**V1, "fields": [*V1["fields"], {"name": "ts", "default": None, "pg_type": "timestamptz",
                                               "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]}]}
    header = _registrar(registry.url).header_for("t.public.items-value", schema)
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(schema), {"id": 1, "v": 2, "ts": 1_700_000_000_000_000})
    deserializer = AvroDeserializer(client)
    value = deserializer(header + body.getvalue(), SerializationContext("t.public.items", MessageField.VALUE))
    assert value == {"id": 1, "v": 2, "ts": datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)}


def test_registrar_rejection_is_a_schema_error_naming_subject_and_reason(registry: RegistryDouble) -> None:
    registry.register("t.public.items-value", V1)
    registry.set_compatibility("FULL", subject="t.public.items-value")
    with pytest.raises(SchemaError) as caught:
        _registrar(registry.url).header_for("t.public.items-value", V2_RETYPED)
    error = caught.value
    assert isinstance(error, FatalError)
    assert "rejected the writer schema for subject t.public.items-value as incompatible" in str(error)
    assert 'new schema cannot read old: /v/1: reader union ["null", "string"] has no branch for writer type "int"' \
        in str(error)
    assert error.hint is not None and f"{registry.url}/config/t.public.items-value" in error.hint
    assert "evolve tables compatibly" in error.hint


def test_registrar_authentication(registry: RegistryDouble) -> None:
    with RegistryDouble(basic_auth=("pgb", "s3cret")) as secured:
        with pytest.raises(FatalError, match="rejected the credentials") as caught:
            _registrar(secured.url)
        assert caught.value.hint is not None and "basic_auth_user_info" in caught.value.hint
        assert not isinstance(caught.value, RegistryUnavailable)
        with pytest.raises(FatalError, match="rejected the credentials") as caught:
            _registrar(secured.url, basic_auth_user_info=SecretStr("pgb:wrong"))
        assert "wrong" not in caught.value.one_line()
        registrar = _registrar(secured.url, basic_auth_user_info=SecretStr("pgb:s3cret"))
        assert registrar.header_for("x-key", V1) == b"\x00\x00\x00\x00\x01"
    registry.inject(403)
    with pytest.raises(FatalError, match=r"denied access: .*\(HTTP 403\)"):
        _registrar(registry.url)


def test_registrar_outages_are_transient(registry: RegistryDouble) -> None:
    with pytest.raises(RegistryUnavailable, match="is unreachable"):
        _registrar(f"http://127.0.0.1:{free_port()}")
    registrar = _registrar(registry.url)
    registry.inject(503, times=2)  # the client retries once, then gives up
    with pytest.raises(RegistryUnavailable, match=r"failed for subject x-value: .*HTTP 503"):
        registrar.header_for("x-value", V1)
    assert registrar.header_for("x-value", V1) == b"\x00\x00\x00\x00\x01"


def test_registry_settings_are_checked_and_credentials_never_shown() -> None:
    with pytest.raises(ConfigError, match=r"basic\.auth\.user\.info"):
        registry_client(SchemaRegistryConfig(url="http://127.0.0.1:1", basic_auth_user_info=SecretStr("nocolon")))
    with pytest.raises(ValueError, match="http"):
        SchemaRegistryConfig(url="registry:8081")
    assert public_url("https://u:p@registry:8081,https://v:q@other") == "https://registry:8081,https://other"
    with pytest.raises(RegistryUnavailable) as caught:
        _registrar(f"http://user:hunter2@127.0.0.1:{free_port()}")
    assert "hunter2" not in caught.value.one_line()


# --- schema_registry.auto_register: false (look up, never register) -------------------------------


def test_lookup_only_frames_with_the_id_the_subject_already_holds(registry: RegistryDouble) -> None:
    schema_id = registry.register("t.public.items-value", V1)
    registrar = _registrar(registry.url, auto_register=False)
    assert registrar.header_for("t.public.items-value", V1) == b"\x00" + schema_id.to_bytes(4, "big")
    assert not [path for method, path in registry.requests() if method == "POST" and path.endswith("/versions")]


@pytest.mark.parametrize("registered", [None, V1], ids=["no subject", "other schema"])
def test_lookup_only_stops_naming_the_subject_when_the_schema_is_not_there(registry: RegistryDouble,
                                                                          registered: Any) -> None:
    if registered is not None:
        registry.register("t.public.items-value", registered)
    registrar = _registrar(registry.url, auto_register=False)
    with pytest.raises(SchemaError) as caught:
        registrar.header_for("t.public.items-value", V2_ADDED)
    assert "t.public.items-value" in str(caught.value) and "auto_register is false" in str(caught.value)
    assert caught.value.hint is not None and "pgbridge schemas --subjects" in caught.value.hint
    assert registry.subjects() == ({} if registered is None else {"t.public.items-value": [1]})
