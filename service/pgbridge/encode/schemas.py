"""Writer schemas: the shared parts in ``schemas/*.avsc``, composed with each table's row record.

The ``.avsc`` files are the single source of truth for every fixed part of the output (the
envelope's fields, ``source``, ``transaction``, the message and transaction-boundary records).
They are package data (``service/pgbridge/schemas`` links to the top-level ``schemas/``) and are
read through ``importlib.resources``, so an installed wheel finds them as well as a checkout.

Shared named types are referenced by full name (``"pgbridge.Source"``) in the files; ``compose``
replaces the first reference in a schema with the definition, which is what Avro requires of a
self-contained writer schema. Per table, the namespace is ``{prefix}.{schema}.{table}`` made into
valid Avro names (as Debezium does) and holds the records ``Key``, ``Value`` and ``Envelope``.

The encoder writes the envelope's binary form by hand for speed, so ``check_envelope_layout``
compares the loaded files with the layout that code writes and refuses to start on a mismatch:
editing a file without the encoder cannot silently produce records that misdecode.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any, Final

from pgbridge.decode.messages import Column, Relation
from pgbridge.encode.naming import avro_name, define_named_types_once, distinct_avro_names
from pgbridge.encode.renames import field_aliases
from pgbridge.encode.types import NumericPolicy, TypeCatalog, TypeCodec, TypeNames, codec_for
from pgbridge.encode.wire import PRIMITIVES
from pgbridge.errors import ConfigError, SchemaError

Schema = dict[str, Any]

# The key field naming the real table on a topic that holds several tables (``kafka.topic_routes``,
# publish/routing.py): "schema.table", as Debezium's ``__dbz__physicalTableIdentifier``.
TABLE_KEY_FIELD: Final = "__pgbridge_table"
SCHEMA_FILES: Final = ("source", "transaction", "envelope", "message", "message_key",
                       "transaction_boundary", "transaction_key")


# --- loading --------------------------------------------------------------------------------------


@cache
def _load(name: str) -> str:
    try:
        return resources.files("pgbridge").joinpath("schemas", f"{name}.avsc").read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise SchemaError(f"schema file {name}.avsc is missing from the pgbridge package",
                          hint="reinstall pgbridge; the wheel must include pgbridge/schemas/*.avsc") from exc


def load_schema(name: str) -> Schema:
    """A fresh copy of ``schemas/{name}.avsc`` as parsed JSON (callers may modify it)."""
    schema = json.loads(_load(name))
    if not isinstance(schema, dict):
        raise SchemaError(f"{name}.avsc is not an Avro record schema")
    return schema


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


@cache
def _shared_library() -> Mapping[str, str]:
    """Full name → JSON text of the named type each namespaced schema file defines at its top."""
    library = {}
    for name in SCHEMA_FILES:
        schema = load_schema(name)
        if schema.get("namespace"):
            library[_full(schema["name"], schema["namespace"])] = _load(name)
    return library


def compose(schema: Schema, definitions: Mapping[str, Schema] | None = None) -> Schema:
    """Replace the first reference to each shared named type with its definition.

    ``definitions`` adds named types of the caller's own by full name (a table's ``Value``);
    shared types come from ``schemas/``. Later references stay names, so each type is defined
    exactly once, as a self-contained Avro schema requires.
    """
    library = {**{k: json.dumps(v) for k, v in (definitions or {}).items()}, **_shared_library()}
    defined: set[str] = set()

    def walk(node: Any, namespace: str | None) -> Any:
        if isinstance(node, str):
            full = _full(node, namespace)
            if node in PRIMITIVES or full in defined or full not in library:
                return node
            return walk(json.loads(library[full]), namespace)
        if isinstance(node, list):
            return [walk(branch, namespace) for branch in node]
        if not isinstance(node, dict):
            return node
        out = dict(node)
        kind = node["type"]
        if kind in ("record", "error", "enum", "fixed"):
            full = _full(node["name"], node.get("namespace") or namespace)
            defined.add(full)
            if kind in ("record", "error"):
                inner = full.rpartition(".")[0] or None
                out["fields"] = [{**f, "type": walk(f["type"], inner)} for f in node["fields"]]
        elif kind == "array":
            out["items"] = walk(node["items"], namespace)
        elif kind == "map":
            out["values"] = walk(node["values"], namespace)
        else:
            out["type"] = walk(kind, namespace)
        return out

    composed: Schema = walk(schema, schema.get("namespace"))
    return composed


@cache
def shared_schema(name: str) -> str:
    """``schemas/{name}.avsc`` composed (shared types inlined), as JSON text to copy from."""
    return json.dumps(compose(load_schema(name)))


def standalone_schema(name: str) -> Schema:
    """A self-contained writer schema for one of the fixed records (message, boundaries, keys)."""
    schema: Schema = json.loads(shared_schema(name))
    return schema


# --- the envelope layout the encoder writes -------------------------------------------------------

SOURCE_LAYOUT: Final = (("db", "string"), ("schema", "string"), ("table", "string"), ("lsn", "long"),
                        ("commit_lsn", "long"), ("xid", "long"), ("ts_us", "long"),
                        ("snapshot", "boolean"), ("origin", ["null", "string"]))
TRANSACTION_LAYOUT: Final = (("id", "string"), ("total_order", "long"), ("data_collection_order", "long"))
ENVELOPE_LAYOUT: Final = (("before", ["null", "Value"]), ("after", ["null", "Value"]), ("op", "string"),
                          ("source", "pgbridge.Source"), ("transaction", ["null", "pgbridge.Transaction"]),
                          ("unchanged_toast_columns", {"type": "array", "items": "string"}),
                          ("unrepresentable", ["null", {"type": "map", "values": "string"}]))


def _layout(schema: Schema) -> tuple[tuple[str, Any], ...]:
    return tuple((f["name"], f["type"]) for f in schema["fields"])


@cache
def check_envelope_layout() -> None:
    """Raise ``SchemaError`` unless the envelope files have exactly the fields the encoder writes."""
    for name, expected in (("source", SOURCE_LAYOUT), ("transaction", TRANSACTION_LAYOUT),
                           ("envelope", ENVELOPE_LAYOUT)):
        actual = _layout(load_schema(name))
        if actual != expected:
            raise SchemaError(f"schemas/{name}.avsc does not match the layout the encoder writes: "
                              f"{actual} != {expected}",
                              hint="change encode/envelope.py together with the schema file")


# --- names ----------------------------------------------------------------------------------------

def table_namespace(topic_prefix: str, schema: str, table: str) -> str:
    """``{prefix}.{schema}.{table}`` as an Avro namespace; the prefix may itself contain dots."""
    parts = [avro_name(p) for p in topic_prefix.split(".")]
    return ".".join([*parts, avro_name(schema), avro_name(table)])


def field_names(columns: Iterable[Column]) -> tuple[str, ...]:
    """One distinct Avro field name per column, in column order.

    Names that are already valid keep priority, so ``a_b`` stays ``a_b`` even if a column
    ``a-b`` comes first; that one becomes ``a_b_2``.
    """
    return distinct_avro_names([c.name for c in columns])


# --- per-table schemas ----------------------------------------------------------------------------


def column_codecs(relation: Relation, type_names: TypeNames | None, catalog: TypeCatalog | None = None,
                  numeric: NumericPolicy | None = None) -> tuple[TypeCodec, ...]:
    return tuple(codec_for(c.type_oid, c.type_modifier, type_names, catalog, numeric=numeric)
                 for c in relation.columns)


def _field(name: str, column: Column, codec: TypeCodec, key: bool, former: tuple[str, ...] = ()) -> Schema:
    """A row field (``["null", T]``, default null) or a key field (``codec.key_avro``); a column
    renamed before names its earlier names in ``aliases`` (encode/renames.py)."""
    avro = copy.deepcopy(codec.key_avro if key else codec.avro)
    out: Schema = {"name": name, "type": avro if key else ["null", avro]}
    if not key:
        out["default"] = None
    aliases = field_aliases(former, name)
    if aliases:
        out["aliases"] = list(aliases)
    out["pg_type"] = codec.pg_type
    if name != column.name:
        out["pg_name"] = column.name
    out.update(codec.attributes)
    return out


def _fields(names: tuple[str, ...], columns: tuple[Column, ...], codecs: tuple[TypeCodec, ...],
            indexes: Iterable[int], key: bool, aliases: Mapping[str, tuple[str, ...]] | None = None) -> list[Schema]:
    """One field per column at ``indexes`` and no other field (the contract's row record);
    ``aliases`` maps a column name to its earlier names."""
    former = aliases or {}
    return _define_named_types_once([_field(names[i], columns[i], codecs[i], key, former.get(columns[i].name, ()))
                                     for i in indexes])


def _define_named_types_once(fields: list[Schema]) -> list[Schema]:
    """Avro allows one definition per named type in a schema: later uses become references.

    Shared records (``pgbridge.types.Interval``, range and composite records) appear once per
    column using them.
    """
    defined: set[str] = set()
    return [{**f, "type": define_named_types_once(f["type"], defined)} for f in fields]


def row_schema(namespace: str, relation: Relation, codecs: tuple[TypeCodec, ...],
               names: tuple[str, ...], aliases: Mapping[str, tuple[str, ...]] | None = None) -> Schema:
    """The ``Value`` record: every column, every field ``["null", T]`` with default null."""
    return {"type": "record", "name": "Value", "namespace": namespace,
            "fields": _fields(names, relation.columns, codecs, range(len(codecs)), False, aliases)}


def key_schema(namespace: str, relation: Relation, codecs: tuple[TypeCodec, ...], names: tuple[str, ...],
               key_indexes: tuple[int, ...], aliases: Mapping[str, tuple[str, ...]] | None = None) -> Schema | None:
    """The ``Key`` record of the key columns in key order, or ``None`` when there are none.

    Key fields are not nullable: primary-key and replica-identity-index columns are NOT NULL in
    Postgres, and a non-null key keeps compaction and partitioning well defined. The exception is
    a companion type (a ``timestamp`` key may hold ``infinity``): ``["null", T, "string"]``, the
    string branch holding the exact text of a value ``T`` cannot hold, so two such rows keep two
    distinct keys (the envelope's ``unrepresentable`` map does not exist in a key).
    """
    if not key_indexes:
        return None
    return {"type": "record", "name": "Key", "namespace": namespace,
            "fields": _fields(names, relation.columns, codecs, key_indexes, True, aliases)}


def with_table_field(key: Schema) -> Schema:
    """A key schema with ``TABLE_KEY_FIELD`` (a string) first: written first, its bytes are a
    constant prefix of every key of the table, so the encoder appends them to the key's framing."""
    if any(f["name"] == TABLE_KEY_FIELD for f in key["fields"]):
        raise ConfigError(f"a key column of {key.get('namespace')} is named {TABLE_KEY_FIELD}",
                          hint="route this table to a topic of its own")
    return {**key, "fields": [{"name": TABLE_KEY_FIELD, "type": "string"}, *key["fields"]]}


def envelope_schema(namespace: str, row: Schema) -> Schema:
    """The ``Envelope`` (value schema) of a table: ``schemas/envelope.avsc`` with ``Value`` = ``row``."""
    check_envelope_layout()
    template = load_schema("envelope")
    envelope = {"type": template.pop("type"), "name": template.pop("name"), "namespace": namespace, **template}
    return compose(envelope, {f"{namespace}.Value": row})


# --- schema resolution ----------------------------------------------------------------------------

_PROMOTIONS: Final = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
                      ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string")}


def _named_types(schema: Any, namespace: str | None, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, namespace, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            full = _full(schema["name"], schema.get("namespace") or namespace)
            out[full] = schema
            inner = full.rpartition(".")[0] or None
            for f in schema.get("fields", ()):
                _named_types(f["type"], inner, out)
        elif kind == "array":
            _named_types(schema["items"], namespace, out)
        elif kind == "map":
            _named_types(schema["values"], namespace, out)
    return out


def resolution_problem(*, writer: Schema, reader: Schema) -> str | None:
    """Why a consumer holding ``reader`` cannot read data written with ``writer`` under the Avro
    specification's schema resolution rules, or ``None`` when it can.

    Logical types count as part of the type: a ``decimal`` whose scale changed, or a ``long``
    that turned from ``timestamp-micros`` into ``time-micros``, would resolve in bytes but mean
    something else, so it is reported. The tests check the verdicts against fastavro's reader.
    """
    writer_names = _named_types(writer, None, {})
    reader_names = _named_types(reader, None, {})
    seen: set[tuple[str, str]] = set()

    def deref(node: Any, names: dict[str, Any]) -> Any:
        if isinstance(node, str) and node not in PRIMITIVES:
            return names.get(node, node)
        return node

    def kind(node: Any) -> str:
        return node if isinstance(node, str) else "union" if isinstance(node, list) else str(node["type"])

    def logical(node: Any) -> tuple[Any, ...]:
        if isinstance(node, dict) and "logicalType" in node:
            if node["logicalType"] == "decimal":
                return ("decimal", node.get("scale", 0))
            return (node["logicalType"],)
        return ()

    def check(w: Any, r: Any, path: str) -> str | None:
        w, r = deref(w, writer_names), deref(r, reader_names)
        if isinstance(w, list):
            for branch in w:
                problem = check(branch, r, path)
                if problem is not None:
                    return problem
            return None
        if isinstance(r, list):
            for branch in r:
                if check(w, branch, path) is None:
                    return None
            return f"{path}: writer type {kind(w)} matches no branch of the reader's union"
        wk, rk = kind(w), kind(r)
        if wk != rk and (wk, rk) not in _PROMOTIONS:
            return f"{path}: writer type {wk} cannot be read as {rk}"
        if logical(w) != logical(r):
            return f"{path}: logical type changed from {logical(w) or wk} to {logical(r) or rk}"
        if wk in ("record", "error"):
            if w["name"] != r["name"] and w["name"] not in r.get("aliases", ()):
                return f"{path}: record {w['name']} is read as {r['name']}"
            pair = (json.dumps(w, sort_keys=True), json.dumps(r, sort_keys=True))
            if pair in seen:
                return None
            seen.add((pair[0], pair[1]))
            writer_fields = {f["name"]: f for f in w["fields"]}
            for rf in r["fields"]:
                wf = writer_fields.get(rf["name"])
                if wf is None:
                    wf = next((writer_fields[a] for a in rf.get("aliases", ()) if a in writer_fields), None)
                if wf is None:
                    if "default" not in rf:
                        return f"{path}.{rf['name']}: reader field has no value in the writer and no default"
                    continue
                problem = check(wf["type"], rf["type"], f"{path}.{rf['name']}")
                if problem is not None:
                    return problem
            return None
        if wk == "array":
            return check(w["items"], r["items"], f"{path}[]")
        if wk == "map":
            return check(w["values"], r["values"], f"{path}{{}}")
        if wk == "enum":
            missing = set(w["symbols"]) - set(r["symbols"])
            if missing and "default" not in r:
                return f"{path}: enum symbols {sorted(missing)} are unknown to the reader"
        if wk == "fixed" and w.get("size") != r.get("size"):
            return f"{path}: fixed size changed"
        return None

    return check(writer, reader, reader.get("name", "record"))
