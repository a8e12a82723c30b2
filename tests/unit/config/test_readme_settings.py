"""Every setting is documented: each field of every section of ``Settings`` has its environment
variable in the README's configuration table (the first column, ``key (env form)``)."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from pgbridge.config import Settings, env_name

README = Path(__file__).resolve().parents[3] / "README.md"


def _settings(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The leaf settings: every field, sections walked into (a field's alias is its key)."""
    leaves: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        key = (*path, field.alias or name)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            leaves.extend(_settings(field.annotation, key))
        else:
            leaves.append(key)
    return leaves


def _table_variables() -> set[str]:
    """The variables named in the first column of the table under ``## Configuration``."""
    section = README.read_text(encoding="utf-8").split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `PGBRIDGE_")]
    return {name.rstrip("_") for cell in cells for name in re.findall(r"PGBRIDGE_[A-Z0-9_]+", cell)}


def test_the_walk_finds_every_section() -> None:
    sections = {leaf[0] for leaf in _settings(Settings)}
    assert sections == set(Settings.model_fields)
    assert ("log", "json") in _settings(Settings) and ("postgres", "dsn") in _settings(Settings)


def test_every_setting_has_a_row_in_the_readme_configuration_table() -> None:
    documented = _table_variables()
    missing = [env_name(leaf) for leaf in _settings(Settings) if env_name(leaf) not in documented]
    assert missing == [], f"add these to README.md's configuration table: {', '.join(missing)}"
