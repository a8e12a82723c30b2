"""Types outside the builtin table known only from the catalog: enums, text-like types, ``hstore``.

Each is published as Postgres's text. In binary, a type whose send function sends that text
(``textsend`` for ``citext``, ``enum_send``, ...) is read as it is and ``hstore`` is printed from
its send form; any other type stops with an ``EncodeError`` (pgbridge cannot know its format).
"""

from __future__ import annotations

from typing import Final

from pgbridge.encode.types.base import TypeCodec, text_codec, unpack_int4, utf8_text_codec
from pgbridge.source.type_catalog import PgTypeInfo

# C send functions whose binary form is the value's text in the client encoding.
_TEXT_SEND: Final = frozenset({"textsend", "enum_send", "varcharsend", "bpcharsend", "xml_send", "json_send"})


def hstore_text_of_binary(raw: bytes) -> str:
    """``hstore_send`` (count, then length-prefixed keys and values, -1 for NULL) → ``hstore_out``."""
    def quoted(b: bytes) -> str:
        return '"' + b.decode().replace("\\", "\\\\").replace('"', '\\"') + '"'

    (count,) = unpack_int4(raw[:4])
    pos = 4
    pairs = []
    for _ in range(count):
        (klen,) = unpack_int4(raw[pos:pos + 4])
        key = raw[pos + 4:pos + 4 + klen]
        pos += 4 + klen
        (vlen,) = unpack_int4(raw[pos:pos + 4])
        pos += 4
        if vlen < 0:
            pairs.append(f"{quoted(key)}=>NULL")
        else:
            pairs.append(f"{quoted(key)}=>{quoted(raw[pos:pos + vlen])}")
            pos += vlen
    return ", ".join(pairs)


def catalog_text_codec(name: str, info: PgTypeInfo) -> TypeCodec:
    """The codec of a base or enum type from the catalog, published as its text."""
    if info.send in _TEXT_SEND or info.kind == "e":
        return utf8_text_codec(name)
    if info.send == "hstore_send":
        return text_codec(name, hstore_text_of_binary)
    return text_codec(name)
