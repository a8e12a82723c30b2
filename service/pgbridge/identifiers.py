"""SQL identifiers in configuration: ``schema.table`` where either part may be double-quoted.

Postgres folds an unquoted identifier to lower case and keeps a quoted one exactly (``""`` inside
quotes is one ``"``), so ``Public.Orders`` names ``public.orders`` while ``public."Order Items"``
names a table with a capital and a space. Operators copy names from ``psql``, which prints them
quoted whenever they need it; splitting on ``.`` got both the case and dots inside quotes wrong
("relation does not exist"). Pure functions, no I/O: shared by config, which validates and
canonicalises names with them, and by the stages that look tables up by those names.
"""

from __future__ import annotations

import re
from typing import Final

# An unquoted identifier as Postgres reads it (letters incl. non-ASCII, digits, _ and $; not a
# digit or $ first). Written back unquoted only when it is already in folded (lower) case.
_PLAIN: Final = re.compile(r"[^\W\d$][\w$]*", re.UNICODE)
_MAX_LENGTH: Final = 63  # NAMEDATALEN - 1, in bytes


class IdentifierError(ValueError):
    """A table name that is not ``schema.table`` in SQL syntax; the message shows how to write it."""


def _fold(plain: str) -> str:
    # Postgres lower-cases ASCII letters only in an unquoted name (downcase_identifier); other
    # letters keep their case in a UTF-8 database.
    return "".join(ch.lower() if "A" <= ch <= "Z" else ch for ch in plain)


def _read_part(text: str, start: int, whole: str) -> tuple[str, int]:
    """One identifier from ``text[start:]``: its name and the index just after it."""
    if start < len(text) and text[start] == '"':
        out: list[str] = []
        i = start + 1
        while True:
            end = text.find('"', i)
            if end < 0:
                raise IdentifierError(f"table {whole!r}: unterminated quoted identifier")
            out.append(text[i:end])
            if text[end + 1:end + 2] == '"':  # "" inside quotes is one "
                out.append('"')
                i = end + 2
                continue
            name = "".join(out)
            if not name:
                raise IdentifierError(f"table {whole!r}: a quoted identifier must not be empty")
            return name, end + 1
    match = _PLAIN.match(text, start)
    if match is None:
        shown = text[start:start + 10] or "end of text"
        raise IdentifierError(f"table {whole!r}: expected an identifier at {shown!r}; "
                              'quote names with spaces, capitals or punctuation: public."Order Items"')
    return _fold(match.group()), match.end()


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _check_length(name: str, whole: str) -> None:
    if len(name.encode()) > _MAX_LENGTH:
        raise IdentifierError(f"table {whole!r}: identifier {name[:20]!r}... is longer than Postgres' "
                              f"{_MAX_LENGTH} bytes")


def parse_table(text: str) -> tuple[str, str]:
    """``(schema, table)`` as stored in the catalog, from ``schema.table`` in SQL syntax.

    >>> parse_table('public."Order Items"')
    ('public', 'Order Items')
    """
    whole = text
    text = text.strip()
    schema, pos = _read_part(text, 0, whole)
    pos = _skip_space(text, pos)
    if pos >= len(text) or text[pos] != ".":
        raise IdentifierError(f"table {whole!r} must be written schema.table "
                              '(either part may be SQL-quoted: public."Order Items")')
    table, end = _read_part(text, _skip_space(text, pos + 1), whole)
    if end != len(text):
        raise IdentifierError(f"table {whole!r}: unexpected {text[end:]!r} after schema.table; "
                              "quote a name that contains a dot")
    _check_length(schema, whole)
    _check_length(table, whole)
    return schema, table


def quote_ident(name: str) -> str:
    """``name`` as SQL: bare when Postgres would read it back unchanged, else double-quoted."""
    if _PLAIN.fullmatch(name) and _fold(name) == name:
        return name
    return '"' + name.replace('"', '""') + '"'


def table_name(schema: str, table: str) -> str:
    """The canonical written form of a table: ``public.orders``, ``public."Order Items"``.

    It parses back to the same pair (``parse_table``), so it can be stored and compared as text.
    """
    return f"{quote_ident(schema)}.{quote_ident(table)}"


def normalize_table(text: str) -> str:
    """``text`` parsed and written canonically: ``Public.Orders`` -> ``public.orders``."""
    return table_name(*parse_table(text))


def split_table_list(text: str) -> list[str]:
    """A comma list of tables, split on commas outside double quotes (``public."a,b", s.t``)."""
    items: list[str] = []
    current: list[str] = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted  # "" inside quotes toggles twice: still quoted
        if ch == "," and not quoted:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]
