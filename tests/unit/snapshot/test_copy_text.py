from __future__ import annotations

from pgbridge.decode.messages import KIND_NULL, KIND_TEXT
from pgbridge.snapshot.initial import parse_copy_lines, unescape_copy_field


def test_copy_text_rows_split_across_chunks_become_tuples() -> None:
    chunks = [b"1\tab", b"c\t\\N\n2\tx\\ty\t", b"z\\\\\n"]
    rows = list(parse_copy_lines(iter(chunks), 3))
    assert rows[0].values == (b"1", b"abc", None)
    assert rows[0].kinds == bytes([KIND_TEXT, KIND_TEXT, KIND_NULL])
    assert rows[1].values == (b"2", b"x\ty", b"z\\")


def test_unescape_handles_every_copy_escape() -> None:
    assert unescape_copy_field(b"a\\nb\\rc\\\\d\\101\\x42") == b"a\nb\rc\\dAB"
    assert unescape_copy_field(b"plain") == b"plain"
