"""What a ``kafka.topic_routes`` entry may write (docs/routing.md): the topic names a route can make.

Pure checks shared by the two places that need them: config refuses a route whose template can
never make a valid name when the settings are loaded (``template_problem``), and
publish/routing.py checks each name a route makes for a real table (``routed_name_problem``).
"""

from __future__ import annotations

import re
from typing import Final

_ROUTED_NAME: Final = re.compile(r"[A-Za-z0-9-][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)+")


def routed_name_problem(name: str) -> str | None:
    """Why ``name`` (what a route puts after ``{prefix}.``) cannot be a routed table topic, or None.

    It must be two or more dot-separated parts of Kafka's characters, so it can never be one of
    pgbridge's own topics (``messages``, ``transactions``: one part) and the Spark mirror's
    ``{prefix}\\.[^.]+\\..+`` pattern sees it; and it must not start with ``_``: ``{prefix}._*``
    is internal to pgbridge (contract, Topics)."""
    if name.startswith("_"):
        return f"{name!r} starts with _, and {{prefix}}._* topics are internal to pgbridge"
    if not _ROUTED_NAME.fullmatch(name):
        return (f"{name!r} is not two or more dot-separated parts of A-Z a-z 0-9 . _ - "
                "(e.g. sales.orders)")
    return None


def template_problem(match: str, topic: str) -> str | None:
    """What is wrong with a route as written (before any table is known), or None."""
    try:
        pattern = re.compile(match)
    except re.error as exc:
        return f"match {match!r} is not a regular expression ({exc})"
    references = [int(g) for g in re.findall(r"\\(\d+)", topic)]
    if any(g > pattern.groups for g in references):
        return f"topic {topic!r} refers to a group that match {match!r} does not have ({pattern.groups} groups)"
    literal = re.sub(r"\\\d+", "x", topic)
    if "\\" in literal:
        return f"topic {topic!r}: only \\1, \\2, ... may refer to the match's groups"
    return routed_name_problem(literal)
