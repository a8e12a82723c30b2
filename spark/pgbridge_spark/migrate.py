"""Convert a Parquet mirror (releases before Delta Lake) into Delta tables the mirror job continues.

``python -m pgbridge_spark.migrate --output /data/mirror`` (or an ``hdfs://`` / ``s3a://`` URI),
with the old job stopped. The old job kept each table as plain Parquet in
``{output}/{schema}.{table}`` with a ``_pgbridge_state.json`` beside it, and its consistent mode
kept ``{output}/_pgbridge/`` (``consistent.json`` and a Parquet ``pending`` folder). For each table:

- a **mirror** table whose rows have key columns is converted in place (``CONVERT TO DELTA``, then
  the properties the job gives its own tables: column mapping by name, deletion vectors, type
  widening), and its state file is deleted. The rows keep their positions
  (``_pgbridge_commit_lsn``, ``_pgbridge_total_order``), so when the Delta job then reads the topics
  from their beginning with a **new checkpoint**, its ``MERGE`` applies only what is newer than a
  row's position: every later change arrives, nothing older overwrites;
- a table **without key columns** is refused: its rows are a multiset, and replaying the topics
  would count them twice. Re-snapshot it (docs/spark.md, "Migrating from the Parquet mirror");
- a **changelog** table (``batch_id=N`` folders) is refused too: replaying would append every
  change again. Build the changelog anew under a new ``--output``;
- a table that is already Delta is left alone, so the command can be run again after a failure.

The old ``_pgbridge/`` control folder (its ``pending`` is not a Delta table) is deleted once every
table converted: its positions belong to the old checkpoint, and the Delta job keeps its pending
rows as a Delta table at the same path.
``--dry-run`` prints the plan and changes nothing. Exit status 0 when everything was converted (or
already was), 3 when some table was refused (the others are converted), 1 on a setup error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from pgbridge_spark.consistent import CONTROL_DIR
from pgbridge_spark.delta_tables import MissingDelta, convert_parquet, is_table, require
from pgbridge_spark.formats import table_uri
from pgbridge_spark.packages import MissingJars

STATE_FILE: Final = "_pgbridge_state.json"
CHANGELOG_FOLDER: Final = "batch_id="
EXIT_REFUSED: Final = 3


class Action(Enum):
    CONVERT = "convert"
    ALREADY_DELTA = "already Delta"
    REFUSE_KEYLESS = "refused: no key columns"
    REFUSE_CHANGELOG = "refused: a changelog"

    @property
    def refused(self) -> bool:
        return self in (Action.REFUSE_KEYLESS, Action.REFUSE_CHANGELOG)


@dataclass(frozen=True)
class Found:
    """What the old job left in one table folder."""

    name: str
    is_delta: bool
    state: str | None  # the text of _pgbridge_state.json, if any
    has_changelog_folders: bool


@dataclass(frozen=True)
class Step:
    name: str
    action: Action
    why: str


def plan(found: Found) -> Step | None:
    """What to do with one folder (``None``: not a table of the old job)."""
    if found.is_delta:
        return Step(found.name, Action.ALREADY_DELTA, "left as it is")
    if found.state is None:
        return None
    if found.has_changelog_folders:
        return Step(found.name, Action.REFUSE_CHANGELOG,
                    "replaying the topics would append every change again: run the changelog job into a new --output")
    try:
        keys = json.loads(found.state).get("key_fields") or []
    except (ValueError, AttributeError):
        keys = []
    if not keys:
        return Step(found.name, Action.REFUSE_KEYLESS,
                    "its rows are a multiset and a replay would count them twice: re-snapshot it (docs/spark.md)")
    return Step(found.name, Action.CONVERT, f"key {', '.join(map(str, keys))}")


class Folders:
    """The output root through Hadoop's FileSystem (local, ``hdfs://``, ``s3a://`` alike)."""

    def __init__(self, spark: Any, output: str) -> None:
        jvm = spark._jvm
        self._jvm = jvm
        self._root = jvm.org.apache.hadoop.fs.Path(output)
        self._fs = self._root.getFileSystem(spark._jsc.hadoopConfiguration())

    def _path(self, *parts: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self._root, "/".join(parts))

    def tables(self) -> list[str]:
        if not self._fs.exists(self._root):
            return []
        names = [s.getPath().getName() for s in self._fs.listStatus(self._root) if s.isDirectory()]
        return sorted(n for n in names if not n.startswith(("_", ".")))

    def read(self, *parts: str) -> str | None:
        path = self._path(*parts)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            scanner = self._jvm.java.util.Scanner(stream, "UTF-8").useDelimiter("\\A")
            return str(scanner.next()) if scanner.hasNext() else ""
        finally:
            stream.close()

    def has_child(self, name: str, prefix: str) -> bool:
        return any(s.getPath().getName().startswith(prefix) for s in self._fs.listStatus(self._path(name)))

    def exists(self, *parts: str) -> bool:
        return bool(self._fs.exists(self._path(*parts)))

    def delete(self, *parts: str) -> None:
        self._fs.delete(self._path(*parts), True)


def survey(spark: Any, output: str, folders: Folders) -> list[Step]:
    steps = []
    for name in folders.tables():
        found = Found(name, is_table(spark, table_uri(output, name)), folders.read(name, STATE_FILE),
                      folders.has_child(name, CHANGELOG_FOLDER))
        step = plan(found)
        if step is not None:
            steps.append(step)
    return steps


def migrate(spark: Any, output: str, *, dry_run: bool = False, echo: Callable[[str], None] = print) -> int:
    """Convert what can be converted under ``output``; the exit status (module docstring)."""
    require(spark)
    folders = Folders(spark, output)
    steps = survey(spark, output, folders)
    refused = [s for s in steps if s.action.refused]
    for step in steps:
        echo(f"{step.name}: {step.action.value} ({step.why})")
        if step.action is Action.CONVERT and not dry_run:
            convert_parquet(spark, table_uri(output, step.name))
            folders.delete(step.name, STATE_FILE)
            echo(f"{step.name}: converted")
    if not steps:
        echo(f"no table of the Parquet mirror under {output}")
    old_control = folders.exists(CONTROL_DIR) and not is_table(spark, table_uri(output, f"{CONTROL_DIR}/pending"))
    if old_control and not refused:
        echo(f"{CONTROL_DIR}/: the old job's control folder {'would be' if dry_run else 'is'} deleted")
        if not dry_run:
            folders.delete(CONTROL_DIR)
    if refused:
        echo(f"{len(refused)} table(s) not converted; start the Delta job with a new --checkpoint once they are "
             "re-snapshotted or moved away")
        return EXIT_REFUSED
    if not dry_run:
        echo("done: start the Delta job with a new --checkpoint (it reads the topics from their beginning)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pgbridge_spark.migrate",
                                     description="Convert a Parquet mirror into Delta tables (stop the old job first).")
    parser.add_argument("--output", required=True, help="the old job's --output (a path or a Hadoop URI)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    parser.add_argument("--master", default=None, help="Spark master (default local[2], or spark-submit's)")
    args = parser.parse_args(argv)
    from pgbridge_spark.session import apply_job_defaults, build_session

    try:
        spark = build_session(args.master or "local[2]", app_name="pgbridge-migrate")
        spark.sparkContext.setLogLevel("ERROR")
        apply_job_defaults(spark)  # Delta's snapshot reads in 2 partitions, not 50
        return migrate(spark, args.output, dry_run=args.dry_run)
    except (MissingJars, MissingDelta) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
