"""``pgbridge demo``: a newcomer's first command shows real decoded changes and leaves nothing behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEMO_SECONDS = 15
# Startup (initdb, broker, snapshot) plus the workload plus the orderly stop, with room to spare.
DEMO_TIMEOUT_S = 240
SERVER_NAMES = {"postgres", "tansu"}
EVENT_LINE = re.compile(r"^\s+(?P<op>[rcudt])\s+(?P<table>shop\.\w+)\s+key ", re.MULTILINE)
BEGIN_LINE = re.compile(r"^BEGIN\s+xid=\d+\s+commit_lsn=(?P<lsn>\S+)$")
END_LINE = re.compile(r"^END\s+xid=\d+\s+(?P<count>\d+) events?")
IN_TRANSACTION = re.compile(r"^\s+(?:[cudt]|msg)\s.*\scommit_lsn=(?P<lsn>\S+) total_order=\d+$")


def transactions_not_whole(output: str) -> list[str]:
    """The transactions printed otherwise than whole: BEGIN, then every event its END counts (each
    with the BEGIN's commit LSN), then END."""
    wrong: list[str] = []
    current: str | None = None
    seen = 0
    for line in output.splitlines():
        if (begin := BEGIN_LINE.match(line)) is not None:
            current, seen = begin["lsn"], 0
        elif (event := IN_TRANSACTION.match(line)) is not None:
            if event["lsn"] != current:
                wrong.append(f"outside its transaction: {line.strip()}")
            seen += 1
        elif (end := END_LINE.match(line)) is not None:
            if current is None or int(end["count"]) != seen:
                wrong.append(f"{line.strip()} after {seen} events of BEGIN commit_lsn={current}")
            current = None
    return wrong


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(command name, parent pid, start time in clock ticks) from /proc, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text.rpartition(")")[2].split()
    if fields[0] in ("Z", "X"):
        return None
    return name, int(fields[1]), int(fields[19])


def _server_descendants(root: int) -> dict[tuple[int, int], str]:
    """(pid, start time) → command name of every postgres/tansu process below ``root``."""
    children: dict[int, list[int]] = defaultdict(list)
    info: dict[int, tuple[str, int, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            info[int(entry.name)] = stat
            children[stat[1]].append(int(entry.name))
    found: dict[tuple[int, int], str] = {}
    todo = list(children[root])
    while todo:
        pid = todo.pop()
        todo.extend(children[pid])
        if info[pid][0] in SERVER_NAMES:
            found[(pid, info[pid][2])] = info[pid][0]
    return found


def _still_running(pid: int, started: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[2] == started


def test_demo_prints_decoded_changes_of_both_tables_and_leaves_nothing_running(tmp_path: Path) -> None:
    # given an environment whose PGBRIDGE_* settings point elsewhere: the demo must ignore them
    env = {key: value for key, value in os.environ.items() if not key.startswith("PGBRIDGE_")}
    env["PGBRIDGE_POSTGRES__DSN"] = "host=192.0.2.1 connect_timeout=1"
    env["PGBRIDGE_KAFKA__TOPIC_PREFIX"] = "elsewhere"
    stdout_path, stderr_path = tmp_path / "demo.out", tmp_path / "demo.err"

    # when the demo runs for a while, watching which servers it starts
    with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
        demo = subprocess.Popen(
            [sys.executable, "-m", "pgbridge", "demo", "--seconds", str(DEMO_SECONDS)],
            cwd=REPO, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        servers: dict[tuple[int, int], str] = {}
        deadline = time.monotonic() + DEMO_TIMEOUT_S
        try:
            while demo.poll() is None and time.monotonic() < deadline:
                servers.update(_server_descendants(demo.pid))
                time.sleep(0.2)  # sampling the demo's child processes while it runs
        finally:
            if demo.poll() is None:
                demo.kill()
            returncode = demo.wait(30)
    output, errors = stdout_path.read_text(), stderr_path.read_text()
    context = f"stdout:\n{output[-4000:]}\nstderr:\n{errors[-4000:]}"

    # then it stopped cleanly by itself and printed inserts, updates and deletes of both tables
    assert time.monotonic() < deadline, f"the demo did not finish within {DEMO_TIMEOUT_S}s\n{context}"
    assert returncode == 0, context
    ops: dict[str, set[str]] = defaultdict(set)
    for match in EVENT_LINE.finditer(output):
        ops[match["table"]].add(match["op"])
    for table in ("shop.customers", "shop.orders"):
        assert {"r", "c", "u", "d"} <= ops[table], f"{table}: {sorted(ops[table])}\n{context}"
    assert re.search(r"^BEGIN\s+xid=\d+\s+commit_lsn=[0-9A-F]+/[0-9A-F]+$", output, re.MULTILINE), context
    assert transactions_not_whole(output) == [], context
    assert re.search(r"^\s+msg\s+pgbridge-demo\s+'end of workload'", output, re.MULTILINE), context
    assert "events seen: shop.customers" in output.splitlines()[-1], context
    assert "elsewhere" not in output and "192.0.2.1" not in output + errors, context

    # and none of the servers it started, nor their temporary directories, survived it
    assert set(servers.values()) == SERVER_NAMES, f"servers seen below the demo: {servers}\n{context}"
    survivors = [pid for pid, started in servers if _still_running(pid, started)]
    assert survivors == [], f"still running after the demo exited: {survivors}\n{context}"
    leftovers = [
        path
        for base in {Path(tempfile.gettempdir()), Path("/tmp")}
        for prefix in ("pgbridge-pg-", "pgbridge-tansu-", "pgbridge-demo-spill-")
        for path in base.glob(f"{prefix}{demo.pid}-*")
    ]
    assert leftovers == [], f"temporary directories left behind: {leftovers}"
