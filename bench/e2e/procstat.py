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


def sample(pid: int) -> ProcSample | None:
    """None once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may contain spaces: split after the last ')'.
    fields = stat[stat.rindex(")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])
    hwm = rss = 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return ProcSample(cpu_s=(utime + stime) / _TICKS, hwm_kb=hwm, rss_kb=rss)
