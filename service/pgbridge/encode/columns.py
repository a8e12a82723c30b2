"""Column policies: what a row carries once ``columns.exclude`` / ``hash`` / ``mask`` / ``truncate`` apply.

The policies are Debezium's ``column.exclude.list``, ``column.mask.hash.SHA-256.with.salt``,
``column.mask.with.N.chars`` and ``column.truncate.to.N.chars`` (docs/columns.md). They are applied
*before* encoding, as a view of each Relation version: excluded columns are dropped from the
Relation and from every row image, masked and hashed columns become ``text`` columns whose values
are the mask or the digest, truncated columns keep their type with a shorter value. The encoder
then compiles and writes the view exactly as it would a table with those columns, so the compiled
kernel, the schemas, the key and the ``unrepresentable`` map all follow without a special case,
and a table no policy matches is handed to the encoder untouched (the same objects, the same path).

``PolicyEncoder`` is the ``ChangeEncoder`` that applies a ``ColumnRules``; the pipeline uses it
only when a policy is configured. Pure apart from the encoder's registrar.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from pgbridge.assemble.units import RowChange, TruncateChange
from pgbridge.decode.messages import KIND_BINARY, KIND_TEXT, Column, Relation, TupleData
from pgbridge.encode.envelope import ChangeEncoder, EventContext, KeyResolver, OutRecord, default_key_columns
from pgbridge.encode.types import EncodeError, NumericPolicy, TypeCatalog, TypeCodec, TypeNames, codec_for
from pgbridge.errors import ConfigError
from pgbridge.identifiers import quote_ident

if TYPE_CHECKING:
    from pgbridge.config import ColumnsConfig

Action = Literal["exclude", "hash", "mask", "truncate"]

TEXT_OID: Final = 25  # masked and hashed columns are published as Postgres text
# Types whose value is a character string that truncation shortens (domains over them count too).
TEXT_LIKE_TYPES: Final = frozenset({"text", "varchar", "bpchar", "name", "citext"})
_BINARY_HINT: Final = "set postgres.binary to false, or hash only columns whose text pgbridge can rebuild"


@dataclass(frozen=True, slots=True)
class ColumnRule:
    """What happens to one column: the action, and its length for ``mask`` / ``truncate``."""

    action: Action
    length: int = 0


@dataclass(frozen=True, slots=True)
class ColumnRules:
    """The compiled ``columns`` section. A column's rule is the first action (in the order
    exclude > hash > mask > truncate) with a pattern matching it; within mask or truncate the
    first matching pattern in configuration order gives the length."""

    exclude: tuple[re.Pattern[str], ...] = ()
    hash: tuple[re.Pattern[str], ...] = ()
    mask: tuple[tuple[re.Pattern[str], int], ...] = ()
    truncate: tuple[tuple[re.Pattern[str], int], ...] = ()
    hash_salt: bytes = field(default=b"", repr=False)  # a secret: never in a repr or a log

    @classmethod
    def compile(cls, *, exclude: Sequence[str] = (), hash: Sequence[str] = (), mask: Mapping[str, int] | None = None,
                truncate: Mapping[str, int] | None = None, hash_salt: str = "") -> ColumnRules:
        return cls(tuple(re.compile(p) for p in exclude), tuple(re.compile(p) for p in hash),
                   tuple((re.compile(p), n) for p, n in (mask or {}).items()),
                   tuple((re.compile(p), n) for p, n in (truncate or {}).items()), hash_salt.encode())

    def __bool__(self) -> bool:
        return bool(self.exclude or self.hash or self.mask or self.truncate)

    @classmethod
    def of(cls, config: ColumnsConfig) -> ColumnRules:
        """The ``columns`` section compiled (its validation already refused a bad pattern)."""
        return cls.compile(exclude=config.exclude, hash=config.hash, mask=config.mask, truncate=config.truncate,
                           hash_salt=config.hash_salt.get_secret_value() if config.hash_salt else "")

    def rule_for(self, schema: str, table: str, column: str) -> ColumnRule | None:
        names = column_names(schema, table, column)
        if _matches(self.exclude, names):
            return ColumnRule("exclude")
        if _matches(self.hash, names):
            return ColumnRule("hash")
        length = _first_length(self.mask, names)
        if length is not None:
            return ColumnRule("mask", length)
        length = _first_length(self.truncate, names)
        return None if length is None else ColumnRule("truncate", length)


def column_names(schema: str, table: str, column: str) -> tuple[str, str]:
    """The two spellings a pattern may match in full: the catalog's names joined by dots
    (``public.Order Items.Note``) and the SQL form psql prints (``public."Order Items"."Note"``)."""
    return f"{schema}.{table}.{column}", f"{quote_ident(schema)}.{quote_ident(table)}.{quote_ident(column)}"


def _first_length(sized: Iterable[tuple[re.Pattern[str], int]], names: tuple[str, str]) -> int | None:
    return next((n for p, n in sized if any(p.fullmatch(name) for name in names)), None)


def _matches(patterns: Iterable[re.Pattern[str]], names: tuple[str, str]) -> bool:
    return any(p.fullmatch(name) for p in patterns for name in names)


# --- values ---------------------------------------------------------------------------------------


def mask_value(length: int) -> bytes:
    """Debezium's ``column.mask.with.N.chars``: N asterisks, whatever the value."""
    return b"*" * length


def hash_value(salt: bytes, text: bytes) -> bytes:
    """Lowercase hex SHA-256 of ``UTF-8(salt) || UTF-8(value's Postgres text)``."""
    return hashlib.sha256(salt + text).hexdigest().encode()


def truncate_value(text: bytes, length: int) -> bytes:
    """The first ``length`` characters (not bytes) of a UTF-8 text."""
    decoded = text.decode()
    return text if len(decoded) <= length else decoded[:length].encode()


def is_text_like(codec: TypeCodec) -> bool:
    base = str(codec.attributes.get("pg_base_type", codec.pg_type))
    return base.rpartition(".")[2] in TEXT_LIKE_TYPES or codec.pg_type.rpartition(".")[2] in TEXT_LIKE_TYPES


Transform = Callable[[int, bytes], bytes]
"""``(kind, raw)`` of a non-null value → the text bytes published instead."""


def _transform(rule: ColumnRule, codec: TypeCodec, salt: bytes, label: str) -> Transform:
    def text_of(kind: int, raw: bytes) -> bytes:
        if kind == KIND_TEXT or is_text_like(codec):
            return bytes(raw)
        if codec.text_of_binary is None:
            raise EncodeError(f"cannot hash {label}: pgbridge cannot rebuild the text of a binary {codec.pg_type}",
                              hint=_BINARY_HINT)
        return codec.text_of_binary(bytes(raw)).encode()

    if rule.action == "mask":
        masked = mask_value(rule.length)
        return lambda kind, raw: masked
    if rule.action == "hash":
        return lambda kind, raw: hash_value(salt, text_of(kind, raw))
    length = rule.length
    return lambda kind, raw: truncate_value(bytes(raw), length)


# --- the view of one Relation version -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableView:
    """A Relation version as the policies publish it: ``relation`` (kept columns, masked and hashed
    ones as ``text``) and, per kept column, its source position and value transform."""

    relation: Relation
    steps: tuple[tuple[int, Transform | None], ...]

    def project(self, row: TupleData) -> TupleData:
        """``row`` as the view's row: excluded values dropped, non-null values transformed (sent as
        text); nulls and unchanged-TOAST markers stay what they are."""
        kinds = row.kinds
        values = row.values
        out_kinds = bytearray()
        out_values: list[bytes | None] = []
        for i, transform in self.steps:
            kind = kinds[i]
            raw = values[i]
            if transform is not None and raw is not None and kind in (KIND_TEXT, KIND_BINARY):
                raw = transform(kind, raw)
                kind = KIND_TEXT
            out_kinds.append(kind)
            out_values.append(raw)
        return TupleData(bytes(out_kinds), tuple(out_values))

    def project_optional(self, row: TupleData | None) -> TupleData | None:
        return None if row is None else self.project(row)


CodecOf = Callable[[Column], TypeCodec]


def table_view(relation: Relation, rules: ColumnRules, key_columns: Sequence[str], codec_of: CodecOf) -> TableView | None:
    """The view of ``relation`` under ``rules``, ``None`` when no rule matches any of its columns.

    Raises ``ConfigError`` for a configuration this table cannot take: an excluded key column (the
    Kafka key would lose it) or a truncation of a column that is not text."""
    table = f"{relation.namespace}.{relation.name}"
    columns: list[Column] = []
    steps: list[tuple[int, Transform | None]] = []
    matched = False
    for i, column in enumerate(relation.columns):
        rule = rules.rule_for(relation.namespace, relation.name, column.name)
        if rule is None:
            columns.append(column)
            steps.append((i, None))
            continue
        matched = True
        label = f"{table}.{column.name}"
        if rule.action == "exclude":
            if column.name in key_columns:
                raise ConfigError(f"columns.exclude matches {label}, a Kafka key column of {table}",
                                  hint="narrow the pattern; a key column can be hashed (columns.hash) instead")
            continue
        codec = codec_of(column)
        if rule.action == "truncate" and not is_text_like(codec):
            raise ConfigError(f"columns.truncate matches {label} of type {codec.pg_type}, which is not text",
                              hint="truncate only text, varchar, bpchar or citext columns; narrow the pattern")
        if rule.action in ("mask", "hash"):
            column = replace(column, type_oid=TEXT_OID, type_modifier=-1)
        columns.append(column)
        steps.append((i, _transform(rule, codec, rules.hash_salt, label)))
    if not matched:
        return None
    return TableView(replace(relation, columns=tuple(columns)), tuple(steps))


def table_problem(relation: Relation, rules: ColumnRules, key_columns: Sequence[str],
                  codec_of: CodecOf) -> tuple[str, str] | None:
    """``table_view``'s refusal of ``relation`` as (message, fix), for ``pgbridge check``."""
    try:
        table_view(relation, rules, key_columns, codec_of)
    except ConfigError as exc:
        return str(exc), exc.hint or "narrow the columns.* pattern"
    return None


# --- the encoder that applies them ----------------------------------------------------------------

_VIEW_CACHE_SIZE: Final = 4096


class PolicyEncoder(ChangeEncoder):
    """A ``ChangeEncoder`` that encodes each Relation version through its ``TableView``.

    Every entry point that takes a Relation (streamed changes, snapshot rows of the initial,
    incremental and periodic snapshots, truncates, schema look-ups) goes through ``_view``, so
    the policies hold for every record and every published schema alike.
    """

    def __init__(self, *, columns: ColumnRules, key_resolver: KeyResolver | None = None,
                 type_names: TypeNames | None = None, type_catalog: TypeCatalog | None = None,
                 numeric: NumericPolicy | None = None, **kwargs: Any) -> None:
        super().__init__(key_resolver=key_resolver, type_names=type_names, type_catalog=type_catalog,
                         numeric=numeric, **kwargs)
        self._rules = columns
        self._keys_of = key_resolver or default_key_columns
        self._codec_of: CodecOf = lambda c: codec_for(c.type_oid, c.type_modifier, type_names, type_catalog,
                                                      numeric=numeric)
        self._views: dict[int, tuple[Relation, TableView | None]] = {}

    def _view(self, relation: Relation) -> TableView | None:
        entry = self._views.get(id(relation))
        if entry is not None and entry[0] is relation:
            return entry[1]
        view = table_view(relation, self._rules, self._keys_of(relation), self._codec_of)
        if len(self._views) >= _VIEW_CACHE_SIZE:
            self._views.clear()
        self._views[id(relation)] = (relation, view)  # holds the object, so its id stays unique
        return view

    def check_tables(self, relations: Iterable[Relation]) -> None:
        """Refuse at start (``ConfigError``) what the first row of a table would: checked on the
        published tables' catalog definitions, so a misconfiguration never waits for traffic."""
        for relation in relations:
            self._view(relation)

    def _published(self, relation: Relation) -> Relation:
        view = self._view(relation)
        return relation if view is None else view.relation

    def table_of(self, relation: Relation) -> str:
        return super().table_of(self._published(relation))

    def key_schema(self, relation: Relation) -> dict[str, Any] | None:
        return super().key_schema(self._published(relation))

    def value_schema(self, relation: Relation) -> dict[str, Any]:
        return super().value_schema(self._published(relation))

    def encode_row(self, change: RowChange, ctx: EventContext) -> list[OutRecord]:
        view = self._view(change.relation)
        if view is not None:
            change = change._replace(relation=view.relation, old=view.project_optional(change.old),
                                     new=view.project_optional(change.new))
        return super().encode_row(change, ctx)

    def encode_snapshot_row(self, relation: Relation, row: TupleData, ctx: EventContext) -> OutRecord:
        view = self._view(relation)
        if view is not None:
            return super().encode_snapshot_row(view.relation, view.project(row), ctx)
        return super().encode_snapshot_row(relation, row, ctx)

    def encode_truncate(self, change: TruncateChange, relation: Relation, ctx: EventContext) -> OutRecord:
        return super().encode_truncate(change, self._published(relation), ctx)


def encoder_for(rules: ColumnRules) -> Callable[..., ChangeEncoder]:
    """The encoder class to build: the plain ``ChangeEncoder`` when no policy is configured, so
    tables then take exactly the path they take without this module."""
    return functools.partial(PolicyEncoder, columns=rules) if rules else ChangeEncoder
