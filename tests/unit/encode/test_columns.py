"""Column policies (encode/columns.py): matching, precedence, the values and schemas they publish.

Records are decoded the way a consumer would (writer schema from ``_schemas`` by fingerprint) and
checked byte for byte against fastavro; the package's kernel fixture runs each test with the
compiled kernel and with the Python path.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from pgbridge.assemble.units import RowChange, TruncateChange
from pgbridge.config import load_settings
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode import ChangeEncoder, EventContext, OutRecord, SingleObjectRegistrar
from pgbridge.encode.columns import (
    ColumnRule,
    ColumnRules,
    PolicyEncoder,
    column_names,
    encoder_for,
    hash_value,
    table_problem,
    table_view,
    truncate_value,
)
from pgbridge.encode.types import codec_for
from pgbridge.errors import ConfigError
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import TopicRouter
from tests.unit.encode.avro_helpers import SchemaLog, fastavro_bytes, relation

INT4, TEXT, VARCHAR, BPCHAR, TIMESTAMPTZ, JSONB = 23, 25, 1043, 1042, 1184, 3802
SALT = "pepper"
CTX = EventContext(commit_lsn=0x100, xid=7, ts_us=1_700_000_000_000_000, origin=None, total_order=1,
                   collection_order=1)

USERS = relation(("id", INT4, -1, True), ("email", TEXT), ("name", VARCHAR, 20 + 4), ("ssn", TEXT),
                 ("seen", TIMESTAMPTZ), ("notes", TEXT), name="users")


def text_row(*values: bytes | None) -> TupleData:
    return TupleData(bytes(ord("n") if v is None else ord("t") for v in values), values)


ROW = text_row(b"1", b"ann@example.org", "Ånnä Ünïcødé".encode(), b"123-45-6789", b"infinity", None)


def rules(**options: Any) -> ColumnRules:
    return ColumnRules.compile(hash_salt=SALT, **options)


def sha(text: str) -> str:
    return hashlib.sha256((SALT + text).encode()).hexdigest()


class Harness:
    def __init__(self, column_rules: ColumnRules, **kwargs: Any) -> None:
        self.log = SchemaLog()
        self.encoder = encoder_for(column_rules)(topic_prefix="p", router=TopicRouter("p"), database="db",
                                                 registrar=SingleObjectRegistrar(self.log.announce), **kwargs)

    def decode(self, records: list[OutRecord]) -> list[tuple[Any, Any]]:
        out = []
        for record in records:
            for data in (record.key, record.value):
                if data is not None:
                    assert fastavro_bytes(self.log.schema_of(data), self.log.decode(data, logical=False)) == data[10:]
            out.append((self.log.decode(record.key), self.log.decode(record.value, logical=False)))
        return out

    def change(self, op: str, rel: Relation = USERS, *, new: TupleData | None = None,
               old: TupleData | None = None) -> list[tuple[Any, Any]]:
        change = RowChange(op, rel, Lsn(0x50), "O" if old is not None else None, old, new)  # type: ignore[arg-type]
        return self.decode(self.encoder.encode_row(change, CTX))

    def row_fields(self, rel: Relation = USERS) -> dict[str, Any]:
        value = self.encoder.value_schema(rel)
        row = next(f for f in value["fields"] if f["name"] == "before")["type"][1]
        return {f["name"]: f for f in row["fields"]}


# --- matching and precedence ----------------------------------------------------------------------


def test_patterns_match_in_full_the_catalog_names_or_their_sql_quoted_form() -> None:
    r = rules(exclude=[r"public\.users\.ssn", r'public\."Order Items"\."Note"'])
    assert r.rule_for("public", "users", "ssn") == ColumnRule("exclude")
    assert r.rule_for("public", "users", "ssn2") is None  # in full: no prefix match
    assert r.rule_for("other", "users", "ssn") is None
    assert r.rule_for("public", "Order Items", "Note") == ColumnRule("exclude")
    assert column_names("public", "Order Items", "Note") == ("public.Order Items.Note", 'public."Order Items"."Note"')
    assert rules(mask={r"public\.Order Items\..*": 3}).rule_for("public", "Order Items", "Note") == ColumnRule("mask", 3)


def test_exclude_wins_over_hash_over_mask_over_truncate() -> None:
    every = {"exclude": [r".*\.a"], "hash": [r".*\.(a|b)"], "mask": {r".*\.(a|b|c)": 4},
             "truncate": {r".*\.(a|b|c|d)": 2}}
    r = rules(**every)
    assert [r.rule_for("s", "t", c) for c in "abcde"] == [
        ColumnRule("exclude"), ColumnRule("hash"), ColumnRule("mask", 4), ColumnRule("truncate", 2), None]


def test_the_first_mask_pattern_in_configuration_order_gives_the_length() -> None:
    assert rules(mask={r".*\.x": 2, r".*": 5}).rule_for("s", "t", "x") == ColumnRule("mask", 2)


def test_rules_are_false_when_empty_and_their_repr_never_shows_the_salt() -> None:
    assert not ColumnRules.compile(hash_salt=SALT)
    assert rules(hash=[".*"]) and SALT not in repr(rules(hash=[".*"]))


# --- values ---------------------------------------------------------------------------------------


def test_truncation_counts_characters_not_bytes() -> None:
    text = "Ånnä Ünïcødé"
    assert truncate_value(text.encode(), 4) == "Ånnä".encode()
    assert truncate_value(text.encode(), 40) == text.encode()
    assert truncate_value("😀😀😀".encode(), 2) == "😀😀".encode()
    assert truncate_value(b"abc", 0) == b""


def test_the_hash_is_lowercase_hex_sha256_of_salt_then_text() -> None:
    assert hash_value(b"pepper", b"x") == hashlib.sha256(b"pepperx").hexdigest().encode()
    assert hash_value(b"", "é".encode()).decode() == hashlib.sha256("é".encode()).hexdigest()


# --- records and schemas --------------------------------------------------------------------------


def test_excluded_columns_are_absent_from_both_images_their_schema_and_unrepresentable() -> None:
    h = Harness(rules(exclude=[r"public\.users\.(ssn|seen)"]))
    [(key, value)] = h.change("u", new=ROW, old=ROW)
    expected = {"id": 1, "email": "ann@example.org", "name": "Ånnä Ünïcødé", "notes": None}
    assert key == {"id": 1}
    assert value["before"] == expected and value["after"] == expected
    assert value["unrepresentable"] is None  # seen = infinity would be listed if it were published
    assert list(h.row_fields()) == ["id", "email", "name", "notes"]


def test_an_unmatched_table_goes_through_the_plain_encoder_path_unchanged() -> None:
    plain, policy = Harness(ColumnRules()), Harness(rules(exclude=[r"other\..*"]))
    assert type(plain.encoder) is ChangeEncoder and isinstance(policy.encoder, PolicyEncoder)
    assert table_view(USERS, rules(exclude=[r"other\..*"]), ("id",), lambda c: codec_for(c.type_oid, -1)) is None
    change = RowChange("c", USERS, Lsn(0x50), None, None, ROW)
    assert policy.encoder.encode_row(change, CTX) == plain.encoder.encode_row(change, CTX)
    assert policy.log.records == plain.log.records


def test_masked_values_are_n_asterisks_in_a_nullable_string_field_and_null_stays_null() -> None:
    h = Harness(rules(mask={r".*\.(ssn|seen|notes)": 6}))
    [(_, value)] = h.change("c", new=ROW)
    assert value["after"]["ssn"] == "******" and value["after"]["seen"] == "******"
    assert value["after"]["notes"] is None
    assert value["unrepresentable"] is None  # the timestamp infinity is masked, not unrepresentable
    fields = h.row_fields()
    assert fields["seen"]["type"] == ["null", "string"] and fields["seen"]["pg_type"] == "text"


def test_truncated_text_keeps_its_type_and_loses_characters_beyond_n() -> None:
    h = Harness(rules(truncate={r".*\.(name|email)": 4}))
    [(_, value)] = h.change("c", new=ROW)
    assert value["after"]["name"] == "Ånnä" and value["after"]["email"] == "ann@"
    assert h.row_fields()["name"]["pg_type"] == "varchar" and h.row_fields()["name"]["pg_length"] == 20


def test_truncating_a_column_that_is_not_text_is_refused_naming_it() -> None:
    h = Harness(rules(truncate={r".*\.seen": 4}))
    with pytest.raises(ConfigError, match=r"public\.users\.seen of type timestamptz, which is not text"):
        h.change("c", new=ROW)


def test_excluding_a_key_column_is_refused_naming_it() -> None:
    h = Harness(rules(exclude=[r".*\.id"]))
    with pytest.raises(ConfigError, match=r"public\.users\.id, a Kafka key column"):
        h.encoder.value_schema(USERS)
    problem = table_problem(USERS, rules(exclude=[r".*\.id"]), ("id",), lambda c: codec_for(c.type_oid, -1))
    assert problem is not None and "columns.hash" in problem[1]


def test_hashed_columns_including_the_key_are_salted_sha256_of_the_text_and_deletes_keep_the_key() -> None:
    h = Harness(rules(hash=[r".*\.(id|email|notes)"]))
    [(key, value)] = h.change("c", new=ROW)
    assert key == {"id": sha("1")}
    assert value["after"]["id"] == sha("1") and value["after"]["email"] == sha("ann@example.org")
    assert value["after"]["notes"] is None
    delete = h.change("d", old=text_row(b"1", None, None, None, None, None))
    assert [k for k, _ in delete] == [{"id": sha("1")}, {"id": sha("1")}]  # delete, then its tombstone
    assert h.encoder.key_schema(USERS) is not None
    assert h.encoder.key_schema(USERS)["fields"][0]["type"] == "string"  # type: ignore[index]


def test_a_binary_value_is_hashed_from_its_postgres_text() -> None:
    h = Harness(rules(hash=[r".*\.id"]))
    binary = TupleData(b"bnnnnn", ((1).to_bytes(4, "big"), None, None, None, None, None))
    [(key, value)] = h.change("c", new=binary)
    assert key == {"id": sha("1")} and value["after"]["id"] == sha("1")


def test_snapshot_reads_and_truncates_use_the_policies_too() -> None:
    h = Harness(rules(exclude=[r".*\.ssn"], mask={r".*\.email": 1}))
    [(_, value)] = h.decode([h.encoder.encode_snapshot_row(USERS, ROW, CTX)])
    assert value["op"] == "r" and "ssn" not in value["after"] and value["after"]["email"] == "*"
    [(_, truncate)] = h.decode([h.encoder.encode_truncate(TruncateChange((USERS,), 0, Lsn(0x60)), USERS, CTX)])
    assert truncate["op"] == "t"
    assert h.log.schema_of(h.encoder.encode_truncate(TruncateChange((USERS,), 0, Lsn(0x60)), USERS, CTX).value or b"") \
        == h.encoder.value_schema(USERS)


def test_the_kernel_and_the_python_path_write_the_same_bytes_for_a_policy_table() -> None:
    every = rules(exclude=[r".*\.notes"], hash=[r".*\.id"], mask={r".*\.ssn": 3}, truncate={r".*\.name": 2})
    native, python = Harness(every), Harness(every, native=False)
    for op, new, old in (("c", ROW, None), ("u", ROW, ROW), ("d", None, ROW)):
        change = RowChange(op, USERS, Lsn(0x50), "O" if old else None, old, new)  # type: ignore[arg-type]
        assert native.encoder.encode_row(change, CTX) == python.encoder.encode_row(change, CTX)


# --- configuration --------------------------------------------------------------------------------

BASE = {"PGBRIDGE_POSTGRES__DSN": "postgresql://x", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092"}


def test_the_columns_section_reads_json_from_the_environment() -> None:
    settings = load_settings(environ={**BASE, "PGBRIDGE_COLUMNS__EXCLUDE": r'["public\\.t\\.a"]',
                                      "PGBRIDGE_COLUMNS__MASK": r'{"public\\.t\\.b": 3}',
                                      "PGBRIDGE_COLUMNS__TRUNCATE": r'{"public\\.t\\.c": 0}',
                                      "PGBRIDGE_COLUMNS__HASH": r'["public\\.t\\.d"]',
                                      "PGBRIDGE_COLUMNS__HASH_SALT": SALT})
    r = ColumnRules.of(settings.columns)
    assert [r.rule_for("public", "t", c) for c in "abcd"] == [
        ColumnRule("exclude"), ColumnRule("mask", 3), ColumnRule("truncate", 0), ColumnRule("hash")]
    assert SALT not in repr(settings)


@pytest.mark.parametrize(("env", "message"), [
    ({"PGBRIDGE_COLUMNS__HASH": '["x"]'}, "columns.hash needs columns.hash_salt"),
    ({"PGBRIDGE_COLUMNS__EXCLUDE": '["a("]'}, "is not a Python regex"),
    ({"PGBRIDGE_COLUMNS__MASK": '{"a": 0}'}, "columns.mask"),
    ({"PGBRIDGE_COLUMNS__TRUNCATE": '{"a": -1}'}, "columns.truncate"),
])
def test_bad_column_settings_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(environ={**BASE, **env})
