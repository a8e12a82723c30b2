"""CPU time and peak resident memory of one process, read from ``/proc`` (Linux only)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    cpu_s: float  # utime + stime of the process itself (children not included)
    hwm_kb: int  # VmHWM: peak resident set size since the process started
    rss_kb: int  # VmRSS now
    main_thread_cpu_s: float = 0.0  # of which the main thread (pgbridge: the whole pipeline)


@dataclass(frozen=True)
class ProcStat:
    """What ``/proc/PID/stat`` says of one process: when it started and the CPU it has used."""

    started: int  # clock ticks after boot: a pid reused later is another process
    cpu_ticks: int  # utime + stime
    kernel_thread: bool


def parse_stat(text: str) -> ProcStat:
    """Parse ``/proc/PID/stat``. The command name is in parentheses and may contain spaces: split
    after the last ')'."""
    fields = text[text.rindex(")") + 2:].split()
    return ProcStat(started=int(fields[19]), cpu_ticks=int(fields[11]) + int(fields[12]),
                    kernel_thread=bool(int(fields[6]) & 0x00200000))  # PF_KTHREAD


def _cpu_of(stat_path: Path) -> float:
    return parse_stat(stat_path.read_text()).cpu_ticks / TICKS_PER_S


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
