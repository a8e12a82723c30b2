"""CPU time and peak resident memory of one process, read from ``/proc`` (Linux only)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    cpu_s: float  # utime + stime of the process itself (children not included)
    hwm_kb: int  # VmHWM: peak resident set size since the process started
    rss_kb: int  # VmRSS now
    main_thread_cpu_s: float = 0.0  # of which the main thread (pgbridge: the whole pipeline)


def _cpu_of(stat_path: Path) -> float:
    stat = stat_path.read_text()
    # The command name is in parentheses and may contain spaces: split after the last ')'.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def sample(pid: int) -> ProcSample | None:
    """None once the process is gone."""
    try:
        cpu = _cpu_of(Path(f"/proc/{pid}/stat"))
        main = _cpu_of(Path(f"/proc/{pid}/task/{pid}/stat"))
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    hwm = rss = 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return ProcSample(cpu_s=cpu, hwm_kb=hwm, rss_kb=rss, main_thread_cpu_s=main)
