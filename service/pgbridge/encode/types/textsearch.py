"""``tsvector`` and ``tsquery`` from their send forms, as ``tsvectorout`` and ``tsqueryout`` print them."""

from __future__ import annotations

import struct
from typing import Final

from pgbridge.encode.types.base import unpack_int2, unpack_int4

_unpack_uint2 = struct.Struct("!H").unpack


def _cstring_at(raw: bytes, pos: int) -> tuple[str, int]:
    """A NUL-terminated string (``pq_sendstring``) at ``pos`` and the position after its NUL."""
    end = raw.index(b"\x00", pos)
    return raw[pos:end].decode(), end + 1


def _ts_quote(word: str) -> str:
    """A lexeme as ``tsvectorout``/``tsqueryout`` print it: single-quoted, ``'`` and ``\\`` doubled."""
    return "'" + word.replace("'", "''").replace("\\", "\\\\") + "'"


_TSVECTOR_WEIGHTS: Final = ("", "C", "B", "A")  # the top two bits of a position; D prints nothing


def tsvector_text_of_binary(raw: bytes) -> str:
    """``tsvectorsend`` (count; per lexeme its text, NUL, position count, positions with the weight in
    their top two bits) → ``'fat':2A,4 'cat':3``."""
    (count,) = unpack_int4(raw[:4])
    pos, words = 4, []
    for _ in range(count):
        lexeme, pos = _cstring_at(raw, pos)
        (npos,) = _unpack_uint2(raw[pos:pos + 2])
        positions = struct.unpack_from(f"!{npos}H", raw, pos + 2)
        pos += 2 + 2 * npos
        text = _ts_quote(lexeme)
        if positions:
            text += ":" + ",".join(f"{p & 0x3FFF}{_TSVECTOR_WEIGHTS[p >> 14]}" for p in positions)
        words.append(text)
    return " ".join(words)


_QI_VAL: Final = 1
_QI_OPR: Final = 2
_OP_NOT, _OP_AND, _OP_OR, _OP_PHRASE = 1, 2, 3, 4
_TSQUERY_PRIORITY: Final = {_OP_NOT: 4, _OP_AND: 2, _OP_OR: 1, _OP_PHRASE: 3}
_TSQUERY_OPERAND_PRIORITY: Final = 5  # an operand never needs parentheses


def _tsquery_operand(weight: int, prefix: int, word: str) -> str:
    text = _ts_quote(word)
    if weight or prefix:
        text += ":" + ("*" if prefix else "") + "".join(
            letter for bit, letter in ((8, "A"), (4, "B"), (2, "C"), (1, "D")) if weight & bit)
    return text


def tsquery_text_of_binary(raw: bytes) -> str:
    """``tsquerysend`` (item count; items in prefix order, an operator followed by its right then its
    left operand) → ``tsqueryout``'s infix text, with its spacing and parentheses.

    Evaluated right to left with a stack (no recursion, whatever the depth): each entry is the
    text, its operator's priority and whether it is a phrase. A child is parenthesized when its
    priority is below its parent's, or when it is a phrase that is a phrase's right operand.
    """
    (size,) = unpack_int4(raw[:4])
    pos = 4
    items: list[tuple[int, str | int, int]] = []
    for _ in range(size):
        kind = raw[pos]
        if kind == _QI_VAL:
            word, end = _cstring_at(raw, pos + 3)
            items.append((_QI_VAL, _tsquery_operand(raw[pos + 1], raw[pos + 2], word), 0))
            pos = end
        elif kind == _QI_OPR:
            op, distance = raw[pos + 1], 0
            pos += 2
            if op == _OP_PHRASE:
                (distance,) = unpack_int2(raw[pos:pos + 2])
                pos += 2
            elif op not in _TSQUERY_PRIORITY:
                raise ValueError(f"unknown tsquery operator {op}")
            items.append((_QI_OPR, op, distance))
        else:
            raise ValueError(f"unknown tsquery item type {kind}")

    def wrap(child: tuple[str, int, bool], priority: int, right_of_phrase: bool) -> str:
        text, child_priority, phrase = child
        return f"( {text} )" if child_priority < priority or (phrase and right_of_phrase) else text

    stack: list[tuple[str, int, bool]] = []
    for kind, value, distance in reversed(items):
        if kind == _QI_VAL:
            assert isinstance(value, str)
            stack.append((value, _TSQUERY_OPERAND_PRIORITY, False))
            continue
        assert isinstance(value, int)
        priority = _TSQUERY_PRIORITY[value]
        if value == _OP_NOT:
            stack.append(("!" + wrap(stack.pop(), priority, False), priority, False))
            continue
        right, left = stack.pop(), stack.pop()
        phrase = value == _OP_PHRASE
        sign = {_OP_AND: "&", _OP_OR: "|"}.get(value) or ("<->" if distance == 1 else f"<{distance}>")
        stack.append((f"{wrap(left, priority, False)} {sign} {wrap(right, priority, phrase)}", priority, phrase))
    if len(stack) > 1:
        raise ValueError("tsquery items do not form one tree")
    return stack[0][0] if stack else ""
