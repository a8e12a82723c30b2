"""End-to-end benchmark: pgbridge beside Debezium and the physical limits, on the same data.

One command (``make bench`` or ``.venv/bin/python bench/run.py``) starts its own PostgreSQL 15 and
Tansu broker, and for each workload (narrow rows in 1,000-row transactions, one 100,000-row
transaction, single-row transactions, wide rows, updates on a REPLICA IDENTITY FULL table):

1. per system (pgbridge, Debezium): a fresh database with the table and its publication; the
   system is started as its own process and waited for until its slot is active; the workload
   is committed while it streams; a consumer follows the output topic until every record is in;
2. after the pgbridge pass: ``pg_recvlogical`` drains a slot created next to the bridge's, to the
   workload's end LSN (the walsender limit); then a raw producer sends as many records of the
   bridge's average size (the broker limit); then a pass of its own with ``pg_recvlogical``
   streaming live while the workload commits (the floor under any consumer's lag).

With ``--spark``, after each pgbridge pass the Spark Delta mirror job applies that pass's topic
(``e2e/spark_mirror.py``): its rate is reported beside the bridge's.

Measured per pass: end-to-end rows/s from the first commit to the moment the last record was
read back from Kafka, lag after the last commit, commit→Kafka-timestamp latency p50/p99 over
sampled records, CPU seconds per million rows and peak RSS of the system's process. The table is
printed as Markdown; everything is also written as JSON (``--json``). ``--rows`` sizes the run
(the narrow workload's row count; the others scale with it): ``--rows 20000`` checks the harness
in a minute, the default 1,000,000 is the issue's reference size. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import psycopg  # noqa: E402
from e2e import anchors, workloads  # noqa: E402
from e2e.report import Anchor, PassResult, RunReport, machine, percentile  # noqa: E402
from e2e.services import Services, running_services  # noqa: E402
from e2e.spark_mirror import SparkMirror  # noqa: E402
from e2e.systems import Pgbridge, System, sample_or_fail, usage  # noqa: E402
from e2e.tail import TopicTail  # noqa: E402

TABLE = "bench"
LATENCY_SAMPLES = 5000


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def fresh_database(services: Services, name: str, workload: workloads.Workload) -> str:
    with psycopg.connect(services.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    dsn = services.dsn(name)
    workload.prepare(dsn, TABLE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {name} FOR TABLE {TABLE}")
    return dsn


def drop_database(services: Services, name: str) -> None:
    with psycopg.connect(services.dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE database = %s AND NOT active", (name,))
        conn.execute(f"DROP DATABASE IF EXISTS {name}")


def start_profiler(pid: int, out: Path, *, native: bool = False) -> subprocess.Popen[bytes]:
    """py-spy sampling the system's process into collapsed stacks; see bench/profile_summary.py.

    Python frames only by default, without stopping the process; ``native`` adds the C frames
    (librdkafka, the kernels, the collector), which py-spy can only read with the process stopped at
    each sample: the shares hold, the rates of that pass do not."""
    py_spy = Path(sys.executable).with_name("py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
                             "--output", str(out), "--native" if native else "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_pass(services: Services, workload: workloads.Workload, system: System, report: RunReport,
             *, with_anchors: bool, log_dir: Path, profile_dir: Path | None = None, native_stacks: bool = False,
             load_rate: float | None = None, spark: SparkMirror | None = None) -> None:
    name = f"{workload.name}_{system.key}"
    log(f"{workload.name}: {system.label} pass, {workload.rows:,} rows")
    dsn = fresh_database(services, name, workload)
    recv_slot = f"{name}_recv"
    anchors.create_slot(dsn, name)  # the system's own; it streams as soon as the slot is active
    if with_anchors:
        anchors.create_slot(dsn, recv_slot)
    topic = system.topic(name, TABLE)
    try:
        system.start(dsn, services.bootstrap, prefix=name, slot=name, publication=name, table=TABLE, log_dir=log_dir)
        before = sample_or_fail(system.pid)
        profiler = start_profiler(system.pid, profile_dir / f"{name}.txt",
                                  native=native_stacks) if profile_dir else None
        tail = TopicTail(services.bootstrap, topic, workload.rows,
                         sample_every=max(1, workload.rows // LATENCY_SAMPLES)).start()
        load = workloads.generate(workload, dsn, TABLE, rate=load_rate)
        log(f"  loaded at {load.rows_per_s:,.0f} rows/s; waiting for Kafka")
        if not tail.wait(timeout=max(300.0, workload.rows / 1000)):
            raise RuntimeError(f"{system.label}: only {tail.result.count:,} of {workload.rows:,} records "
                               f"reached {topic}")
        after = sample_or_fail(system.pid)
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        end_lsn = anchors.current_lsn(dsn)
        tail.stop()
    finally:
        system.stop()
    result = tail.result
    assert result.last_arrival is not None
    used = usage(before, after)
    system.prepare_decoding(services.bootstrap, name)
    latencies = [ts_ms - system.commit_us(value) / 1000 for ts_ms, value in result.samples]
    created_end = result.max_timestamp_ms / 1000 if result.max_timestamp_ms else None
    span = result.last_arrival - load.first_commit
    passed = PassResult(
        workload=workload.name, system=system.key, rows=workload.rows, load_rows_per_s=load.rows_per_s,
        rows_per_s=workload.rows / span, lag_s=result.last_arrival - load.last_commit,
        rows_per_s_create_time=workload.rows / (created_end - load.first_commit) if created_end else None,
        lag_s_create_time=created_end - load.last_commit if created_end else None,
        latency_p50_ms=percentile(latencies, 0.5), latency_p99_ms=percentile(latencies, 0.99),
        cpu_s_per_million=used.cpu_s / workload.rows * 1e6, peak_rss_mb=used.peak_rss_mb,
        record_bytes=result.byte_count / max(1, result.count),
        extra={**system.extra(), "transactions": load.transactions,
               "main_thread_cpu_s_per_million": used.main_thread_cpu_s / workload.rows * 1e6,
               "loadavg_end": Path("/proc/loadavg").read_text().split()[:3]})
    report.passes.append(passed)
    log(f"  {passed.rows_per_s:,.0f} rows/s, lag {passed.lag_s:.2f} s, CPU {used.cpu_s:.1f} s "
        f"(main thread {used.main_thread_cpu_s:.1f} s), "
        f"peak RSS {used.peak_rss_mb:.0f} MB")
    if with_anchors:
        recv = anchors.pg_recvlogical(services.bindir, dsn, slot=recv_slot, publication=name, end_lsn=end_lsn,
                                      rows=workload.rows)
        report.anchors.append(Anchor(workload.name, "pg_recvlogical", recv.rows_per_s, recv.seconds))
        log(f"  pg_recvlogical: {recv.rows_per_s:,.0f} rows/s")
        raw = anchors.raw_producer(services.bootstrap, f"{name}.raw", count=workload.rows,
                                   size=max(1, round(passed.record_bytes) - 18), key_size=18)
        report.anchors.append(Anchor(workload.name, "raw producer", raw.rows_per_s, raw.seconds,
                                     cpu_s_per_million=(raw.cpu_s or 0) / workload.rows * 1e6,
                                     peak_rss_mb=raw.peak_rss_mb))
        log(f"  raw producer: {raw.rows_per_s:,.0f} records/s")
    if spark is not None and system.key == "pgbridge":
        mirrored = spark.apply(services.bootstrap, name, TABLE, workload.rows)
        report.anchors.append(Anchor(workload.name, "spark delta mirror", mirrored.rows_per_s, mirrored.seconds))
        log(f"  Spark Delta mirror: {mirrored.rows_per_s:,.0f} changes/s "
            f"({mirrored.micro_batches} micro-batches, {mirrored.seconds:.1f} s)")
    drop_database(services, name)


def run_walsender_pass(services: Services, workload: workloads.Workload, report: RunReport,
                       load_rate: float | None) -> None:
    """``pg_recvlogical`` streaming while the workload commits: how soon the walsender itself has
    sent the last change, i.e. the least lag any consumer of a slot can have on this machine."""
    name = f"{workload.name}_walsender"
    log(f"{workload.name}: pg_recvlogical live pass, {workload.rows:,} rows")
    dsn = fresh_database(services, name, workload)
    anchors.create_slot(dsn, name)
    live = anchors.LiveWalsender(services.bindir, dsn, slot=name, publication=name).start()
    try:
        load = workloads.generate(workload, dsn, TABLE, rate=load_rate)
        reached = live.wait_sent(anchors.current_lsn(dsn))
    finally:
        live.stop()
    span = reached - load.first_commit
    report.anchors.append(Anchor(workload.name, "pg_recvlogical live", workload.rows / span, span,
                                 lag_s=reached - load.last_commit))
    log(f"  loaded at {load.rows_per_s:,.0f} rows/s; walsender done {reached - load.last_commit:.2f} s after "
        "the last commit")
    drop_database(services, name)


def make_system(key: str, args: argparse.Namespace) -> System:
    if key == "pgbridge":
        extra = dict(item.split("=", 1) for item in args.pgbridge_env)
        return Pgbridge(source=args.pgbridge_source, extra_env=extra)
    if key == "baseline":
        if args.baseline_source is None:
            raise SystemExit("--systems baseline needs --baseline-source")
        return Pgbridge(source=args.baseline_source, key="baseline")
    if key == "debezium":
        from debezium.connect import Debezium

        return Debezium(cache_dir=args.cache_dir, tuned=not args.debezium_defaults)
    raise SystemExit(f"unknown system {key!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="rows of the narrow workload; the others scale with it (default 1,000,000)")
    parser.add_argument("--workloads", default="narrow,bigtx,single,wide,update",
                        help="comma list of narrow, bigtx, single, wide, update")
    parser.add_argument("--systems", default="pgbridge,debezium",
                        help="comma list of pgbridge, debezium, baseline (see --baseline-source)")
    parser.add_argument("--load-rate", type=float, default=None, metavar="ROWS_PER_S",
                        help="pace the generator (default: as fast as Postgres commits, as in the issue)")
    parser.add_argument("--no-anchors", action="store_true", help="skip pg_recvlogical and the raw producer")
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                        help="Apache Kafka (one KRaft node, jars via Maven) or the in-memory Tansu")
    parser.add_argument("--debezium-defaults", action="store_true",
                        help="Kafka Connect's default producer settings instead of the tuned ones")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "pgbridge-bench",
                        help="where the Debezium jars are unpacked once")
    parser.add_argument("--pgbridge-source", type=Path, default=None,
                        help="run pgbridge from this checkout's service/ (e.g. a git worktree of an older "
                             "commit, to compare before and after) instead of the installed package")
    parser.add_argument("--baseline-source", type=Path, default=None,
                        help="with --systems ...,baseline: a second pgbridge run from this checkout in the same "
                             "run, e.g. git worktree add /tmp/before <commit>")
    parser.add_argument("--pgbridge-env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra PGBRIDGE_* setting for the bridge, e.g. PGBRIDGE_KAFKA__LINGER_MS=20 (repeatable)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="sample pgbridge with py-spy during each pass, collapsed stacks into this directory")
    parser.add_argument("--native-stacks", action="store_true",
                        help="with --profile: C frames too (librdkafka, the kernels, the garbage collector); "
                             "py-spy stops the bridge at each sample, so that pass's rates do not count")
    parser.add_argument("--spark", action="store_true",
                        help="after each pgbridge pass, the Spark Delta mirror applies its topic (local[2])")
    parser.add_argument("--json", type=Path, default=BENCH / "results" / "latest.json")
    args = parser.parse_args()

    chosen = [w for w in workloads.standard(args.rows) if w.name in args.workloads.split(",")]
    systems = [make_system(key, args) for key in args.systems.split(",") if key]
    report = RunReport(args={k: str(v) for k, v in vars(args).items()}, machine=machine())
    log_dir = Path(tempfile.mkdtemp(prefix="pgbridge-bench-logs-"))
    log(f"logs in {log_dir}; load average {report.machine.get('loadavg_start')}")
    for system in systems:
        prepare = getattr(system, "prepare", None)
        if prepare is not None:
            prepare()
    spark = SparkMirror() if args.spark else None
    with running_services(args.broker) as services:
        log(f"PostgreSQL {services.cluster.version} on {services.cluster.port}, {'Apache Kafka' if args.broker == 'kafka' else 'Tansu'} on {services.bootstrap}")
        for workload in chosen:
            for system in systems:
                run_pass(services, workload, system, report, with_anchors=(system.key == "pgbridge"
                                                                           and not args.no_anchors),
                         log_dir=log_dir, profile_dir=args.profile if system.key in ("pgbridge", "baseline") else None,
                         native_stacks=args.native_stacks,
                         load_rate=args.load_rate, spark=spark)
            if not args.no_anchors and "pgbridge" in args.systems.split(","):
                run_walsender_pass(services, workload, report, args.load_rate)
    if spark is not None:
        spark.close()
    report.machine["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    report.save(args.json)
    print(report.table())
    print(f"\nJSON: {args.json}; machine: {report.machine}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
