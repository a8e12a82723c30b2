"""Where the CPU of a command goes, by kind of process: for a test run that is CPU-bound.

``make test`` on two cores runs three pytest workers, each with its own servers (Postgres, Kafka,
a Spark session), so its wall time is the CPU all of them ask for divided by two. Shortening it
means taking CPU away, and that needs to know whose it is: the JVMs, the bridge's processes,
pytest itself. This runs a command, reads ``/proc`` every ``--interval`` seconds, and adds up
each process's CPU time (user + system) by kind, from its command line::

    make install && .venv/bin/python bench/suite_cpu.py --output bench/results/suite-cpu.json -- make test

It writes command lines through pgbridge's own redaction (``pgbridge.logs.redact``), so it runs
with the project's virtualenv.

A process that lives less than one interval is missed, and what one uses between its last sample
and its exit too, so the totals are a floor; processes already running when the command starts
count only what they use after that. The kernel's own threads are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from e2e.procstat import TICKS_PER_S, parse_stat

from pgbridge.logs import redact

# (piece of the command line, kind), first match wins: the JVMs by their main class, then the rest.
KINDS: Final = (
    ("kafka.Kafka ", "Apache Kafka broker (JVM)"),
    ("kafka.tools", "Apache Kafka's tools (JVM)"),
    ("spark.app.name=pgbridge-tests", "local Spark session of a pytest worker (JVM)"),
    ("org.apache.spark.deploy.master", "Spark standalone master (JVM)"),
    ("org.apache.spark.deploy.worker", "Spark standalone worker (JVM)"),
    ("CoarseGrainedExecutorBackend", "Spark executor (JVM)"),
    ("SparkSubmit", "other Spark driver (JVM)"),
    ("NameNode", "HDFS (JVM)"),
    ("DataNode", "HDFS (JVM)"),
    ("apicurio", "Schema Registry (JVM)"),
    ("debezium", "Debezium (JVM)"),
    ("pyspark.daemon", "PySpark's Python workers"),
    ("pgbridge_spark", "mirror job's Python driver"),
    ("--hypothesis-profile floor", "unit suite on the minimum versions"),
    ("exec(eval(sys.stdin.readline()))", "pytest-xdist worker"),
    ("-m pytest", "pytest"),
    ("postgres", "Postgres"),  # before pgbridge: a test server's data directory is named pgbridge-...
    ("-m pgbridge", "pgbridge process"),
    ("bin/pgbridge ", "pgbridge process"),
    ("-m pip", "pip"),
    ("moto", "S3 server (moto)"),
    ("prometheus", "Prometheus"),
    ("promtool", "Prometheus"),
    ("mypy", "mypy"),
    ("ruff", "ruff"),
    ("cc1", "C compiler"),
    ("gcc", "C compiler"),
    ("java", "other JVM"),
)


def kind_of(command: str) -> str:
    """The kind of process a command line shows (KINDS), or ``other: <program>``."""
    for piece, kind in KINDS:
        if piece in command:
            return kind
    program = command.split(" ", 1)[0]
    return f"other: {Path(program).name or '?'}"


@dataclass
class Seen:
    command: str
    first_ticks: int
    last_ticks: int

    @property
    def cpu_s(self) -> float:
        """What the process used since it was first seen (or started, if after the first pass)."""
        return (self.last_ticks - self.first_ticks) / TICKS_PER_S


def cpu_by_kind(seen: Iterable[Seen]) -> dict[str, float]:
    """CPU seconds per kind, most first, each process counted from when it was first seen."""
    totals: dict[str, float] = {}
    for process in seen:
        kind = kind_of(process.command)
        totals[kind] = totals.get(kind, 0.0) + process.cpu_s
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:  # the process ended between listing and reading
        return None


def sample(seen: dict[tuple[int, int], Seen], *, first: bool) -> None:
    """One pass over ``/proc``. A process seen for the first time after the first pass counts from
    zero (it started during the command); the command line is read again each time, because a
    launcher script (``spark-class``, ``kafka-run-class``) becomes the JVM it starts by ``exec``."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat_text = _read(f"/proc/{name}/stat")
        if stat_text is None:
            continue
        stat = parse_stat(stat_text)
        if stat.kernel_thread:
            continue
        command = (_read(f"/proc/{name}/cmdline") or "").replace("\0", " ").strip()
        key = (int(name), stat.started)
        known = seen.get(key)
        if known is None:
            seen[key] = Seen(command, stat.cpu_ticks if first else 0, stat.cpu_ticks)
        else:
            known.last_ticks = stat.cpu_ticks
            known.command = command or known.command


def report(totals: Mapping[str, float], wall_s: float, cpus: int) -> str:
    busy = sum(totals.values())
    lines = [f"{busy:,.0f} CPU s in {wall_s:,.0f} s on {cpus} CPUs: {busy / (wall_s * cpus):.0%} busy"]
    lines += [f"{seconds:9,.0f} s {seconds / busy:6.1%}  {kind}"
              for kind, seconds in totals.items() if seconds >= 1]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--output", type=Path, help="write the totals as JSON here too")
    parser.add_argument("command", nargs="+", help="the command to run, after --")
    args = parser.parse_args()
    seen: dict[tuple[int, int], Seen] = {}
    sample(seen, first=True)
    started = time.monotonic()
    with subprocess.Popen(args.command) as child:
        while child.poll() is None:
            time.sleep(args.interval)
            sample(seen, first=False)
    wall_s = time.monotonic() - started
    totals = cpu_by_kind(seen.values())
    cpus = os.cpu_count() or 1
    print(report(totals, wall_s, cpus))
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({
            "command": [redact(word) for word in args.command], "exit_code": child.returncode,
            "wall_s": round(wall_s, 1), "cpus": cpus,
            "cpu_s_by_kind": {kind: round(seconds, 1) for kind, seconds in totals.items() if seconds >= 0.1},
            "processes": [{"cpu_s": round(p.cpu_s, 1), "command": redact(p.command)}
                          for p in sorted(seen.values(), key=lambda p: -p.cpu_s) if p.cpu_s >= 1],
        }, indent=1) + "\n", encoding="utf-8")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
