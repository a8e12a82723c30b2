"""Avro names for Postgres names: schemas, tables, columns, composite and range types.

Avro names are ``[A-Za-z_][A-Za-z0-9_]*`` and a name may be defined once per schema; Postgres
names are almost anything. Used by the writer schemas (``schemas``) and by the codecs that build
named records (``types.ranges``, ``types.composite``). A module of its own rather than part of
``schemas``: ``schemas`` asks the type registry for each column's codec, so codecs importing
``schemas`` would make an import cycle.
"""

from __future__ import annotations

import re
from typing import Any, Final

_INVALID_NAME_CHAR: Final = re.compile(r"[^A-Za-z0-9_]")
_VALID_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def avro_name(text: str) -> str:
    """A valid Avro name for ``text``: other characters become ``_``, a leading digit gets ``_``."""
    name = _INVALID_NAME_CHAR.sub("_", text)
    return name if name and not name[0].isdigit() else f"_{name}"


def distinct_avro_names(names: list[str]) -> tuple[str, ...]:
    """One distinct, valid Avro name per input name, in order.

    Names that are already valid keep priority, so ``a_b`` stays ``a_b`` even if ``a-b`` comes
    first; that one becomes ``a_b_2``.
    """
    out: list[str | None] = [n if _VALID_NAME.fullmatch(n) else None for n in names]
    used = {n for n in out if n is not None}
    for i, name in enumerate(names):
        if out[i] is not None:
            continue
        base = candidate = avro_name(name)
        suffix = 2
        while candidate in used:
            candidate = f"{base}_{suffix}"
            suffix += 1
        used.add(candidate)
        out[i] = candidate
    return tuple(n for n in out if n is not None)


def define_named_types_once(node: Any, defined: set[str]) -> Any:
    """``node`` with every named record after its first definition (full names in ``defined``)
    replaced by a reference to it: Avro allows one definition per name in a schema."""
    if isinstance(node, list):
        return [define_named_types_once(n, defined) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "record":
        name, namespace = node["name"], node.get("namespace")
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        if full in defined:
            return full
        defined.add(full)
        return {**node, "fields": [{**f, "type": define_named_types_once(f["type"], defined)} for f in node["fields"]]}
    if node.get("type") == "array":
        return {**node, "items": define_named_types_once(node["items"], defined)}
    return node


def avro_type_name(pg_name: str) -> str:
    """``int4range`` → ``Int4range``: a record name for a Postgres type."""
    cleaned = "".join(c if c.isalnum() else "_" for c in pg_name)
    return cleaned[:1].upper() + cleaned[1:] if cleaned and not cleaned[0].isdigit() else f"T_{cleaned}"
