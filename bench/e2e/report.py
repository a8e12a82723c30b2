"""Results of one benchmark run: per-pass figures, ratios to the anchors, the table, the JSON."""

from __future__ import annotations

import json
import platform
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class PassResult:
    workload: str
    system: str
    rows: int
    load_rows_per_s: float  # how fast the generator committed (an upper bound on what can be seen)
    rows_per_s: float  # first commit -> last record read back from Kafka
    lag_s: float  # last commit -> last record read back from Kafka
    rows_per_s_create_time: float | None  # first commit -> highest Kafka record timestamp
    lag_s_create_time: float | None
    latency_p50_ms: float | None  # Kafka record timestamp - source commit timestamp, sampled records
    latency_p99_ms: float | None
    cpu_s_per_million: float
    peak_rss_mb: float
    record_bytes: float  # average key + value bytes
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Anchor:
    workload: str
    name: str
    rows_per_s: float
    seconds: float
    cpu_s_per_million: float | None = None
    peak_rss_mb: float | None = None
    lag_s: float | None = None  # live anchors: last commit -> everything sent


@dataclass
class RunReport:
    args: dict[str, Any]
    machine: dict[str, Any]
    passes: list[PassResult] = field(default_factory=list)
    anchors: list[Anchor] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    def table(self) -> str:
        head = ("| workload | system | rows | load rows/s | e2e rows/s | lag after last commit s | "
                "commit→Kafka p50 / p99 ms | CPU s per M rows | peak RSS MB | ratios |")
        lines = [head, "|" + " --- |" * 10]
        workloads = list(dict.fromkeys(p.workload for p in self.passes))
        for workload in workloads:
            passes = {p.system: p for p in self.passes if p.workload == workload}
            anchors = {a.name: a for a in self.anchors if a.workload == workload}
            for p in passes.values():
                ratios = []
                if p.system != "debezium" and "debezium" in passes:
                    ratios.append(f"{p.rows_per_s / passes['debezium'].rows_per_s:.2f}x Debezium")
                if p.system == "pgbridge" and "baseline" in passes:
                    ratios.append(f"{p.rows_per_s / passes['baseline'].rows_per_s:.2f}x baseline")
                if "pg_recvlogical" in anchors:
                    ratios.append(f"{100 * p.rows_per_s / anchors['pg_recvlogical'].rows_per_s:.0f}% of pg_recvlogical")
                if "raw producer" in anchors:
                    ratios.append(f"{100 * p.rows_per_s / anchors['raw producer'].rows_per_s:.0f}% of raw producer")
                latency = (f"{p.latency_p50_ms:,.0f} / {p.latency_p99_ms:,.0f}"
                           if p.latency_p50_ms is not None and p.latency_p99_ms is not None else "n/a")
                lines.append(f"| {workload} | {p.system} | {p.rows:,} | {p.load_rows_per_s:,.0f} | "
                             f"{p.rows_per_s:,.0f} | {p.lag_s:.2f} | {latency} | {p.cpu_s_per_million:.1f} | "
                             f"{p.peak_rss_mb:.0f} | {'; '.join(ratios)} |")
            for a in anchors.values():
                cpu = f"{a.cpu_s_per_million:.1f}" if a.cpu_s_per_million is not None else ""
                rss = f"{a.peak_rss_mb:.0f}" if a.peak_rss_mb is not None else ""
                lag = f"{a.lag_s:.2f}" if a.lag_s is not None else ""
                ratio = "anchor"
                if a.name == "spark delta mirror" and "pgbridge" in passes:
                    ratio = f"{a.rows_per_s / passes['pgbridge'].rows_per_s:.2f}x pgbridge"
                lines.append(f"| {workload} | *{a.name}* | | | {a.rows_per_s:,.0f} | {lag} | | {cpu} | {rss} | {ratio} |")
        return "\n".join(lines)


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        models = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
        info["cpu"] = f"{len(models)} x {models[0]}" if models else "?"
        info["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
        mem = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        info["memory"] = mem.split(":", 1)[1].strip()
    except (OSError, StopIteration):
        pass
    return info


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]
