"""Which package may import which: the dependencies point along the data flow, never back.

``pgbridge.config`` is read by every stage, so it imports none of them: a stage builds what it needs
from the settings (``source.selection.stream_filter``, ``ColumnRules.of``, ``source.keys.message_keys``),
and names that config validates are parsed by the neutral ``pgbridge.identifiers``. ``source`` is
the Postgres side and knows nothing of the Avro encoding. Read from the source text with ``ast``,
so an import inside a function or under ``TYPE_CHECKING`` counts as much as one at the top.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pgbridge

PACKAGE = Path(pgbridge.__file__).parent
STAGES = ("source", "decode", "assemble", "encode", "publish", "ack", "snapshot")


def _imported_modules(text: str, package: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``text``, a module of ``package``; ``from a import b``
    gives ``a.b`` as well as ``a``, so ``from pgbridge import source`` is seen as the stage it is."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _imports_of(package: str, prefixes: tuple[str, ...]) -> list[str]:
    """Each import of a module under ``prefixes`` by a module of ``pgbridge.<package>``, as
    ``file:line module``."""
    hits = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        owner = ".".join(parts if path.name == "__init__.py" else parts[:-1])
        for line, module in _imported_modules(path.read_text(encoding="utf-8"), owner):
            if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
                hits.append(f"{path.relative_to(PACKAGE.parent)}:{line} {module}")
    return hits


def test_config_imports_no_pipeline_stage() -> None:
    assert list((PACKAGE / "config").rglob("*.py"))
    assert _imports_of("config", tuple(f"pgbridge.{stage}" for stage in STAGES)) == []


def test_source_imports_nothing_from_encode() -> None:
    assert list((PACKAGE / "source").rglob("*.py"))
    assert _imports_of("source", ("pgbridge.encode",)) == []


def test_encode_imports_nothing_from_publish() -> None:
    # The record type and the key-schema transform are encode's; topic names reach the encoder as
    # a ``RecordTopics`` that publish/routing.py's TopicRouter satisfies.
    assert list((PACKAGE / "encode").rglob("*.py"))
    assert _imports_of("encode", ("pgbridge.publish",)) == []


def test_publish_imports_nothing_from_snapshot() -> None:
    # The snapshot sink is snapshot's (snapshot/sink.py), and the dispatcher sees an incremental
    # snapshot as the ``IncrementalWindow`` it declares.
    assert list((PACKAGE / "publish").rglob("*.py"))
    assert _imports_of("publish", ("pgbridge.snapshot",)) == []


def test_no_two_stages_import_each_other() -> None:
    mutual = [(a, b) for i, a in enumerate(STAGES) for b in STAGES[i + 1:]
              if _imports_of(a, (f"pgbridge.{b}",)) and _imports_of(b, (f"pgbridge.{a}",))]
    assert mutual == []


def test_the_dispatcher_takes_at_most_five_collaborators() -> None:
    # It was a hub of eight; the life of a delivery unit is publish/delivery.py's.
    from pgbridge.publish.dispatch import Dispatcher

    assert len(inspect.signature(Dispatcher.__init__).parameters) - 1 <= 5


def test_every_form_of_import_is_seen() -> None:
    # The rules above pass on an empty list: each way of writing an import must be found.
    text = ("from pgbridge import source\nimport pgbridge.encode.columns\nfrom . import base\n"
            "if TYPE_CHECKING:\n    from ..decode.messages import Relation\n"
            "def f() -> None:\n    from pgbridge.publish.routing import x\n")
    assert set(_imported_modules(text, "pgbridge.config")) >= {
        (1, "pgbridge.source"), (2, "pgbridge.encode.columns"), (3, "pgbridge.config.base"),
        (5, "pgbridge.decode.messages"), (7, "pgbridge.publish.routing")}
