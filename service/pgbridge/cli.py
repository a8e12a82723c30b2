"""Command line: run / check / schemas / status / config / slot drop / demo.

Exit 0 ok, 2 configuration or usage error, 1 any other failure; errors are one line on stderr.
``--config`` and ``--debug`` are global: accepted before or after the command.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import signal
import sys
import textwrap
import threading
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from pgbridge import __version__
from pgbridge.config import Settings, load_settings
from pgbridge.errors import ConfigError, PgbridgeError
from pgbridge.logs import configure_logging, redact

if TYPE_CHECKING:
    import psycopg

    from pgbridge.config import PostgresConfig

log = logging.getLogger("pgbridge")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2

# `slot drop` waits this long by default for a slot still held by a stopping pgbridge.
DEFAULT_DROP_TIMEOUT_S = 30.0

_ENVIRONMENT = """\
environment:
  PGBRIDGE_POSTGRES__DSN             required: libpq connection string or URI of the source database
  PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS  required: Kafka bootstrap servers (host:port,...)
  PGBRIDGE_CONFIG                    YAML configuration file (the same as --config)
  PGBRIDGE_<SECTION>__<KEY>          any other setting, e.g. PGBRIDGE_POSTGRES__TABLES=public.orders;
                                     the environment overrides the file (README: Configuration,
                                     or `pgbridge config` for the values in force)
  PGBRIDGE_<SECTION>__<KEY>_FILE     read that setting from a file (a mounted secret)
  PGBRIDGE_PURE_PYTHON=1             run the pure-Python code instead of the compiled kernels
"""

_EXAMPLES = """\
examples:
  export PGBRIDGE_POSTGRES__DSN='postgresql://replicator:secret@db:5432/app'
  export PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS='kafka:9092'
  pgbridge check                       # every prerequisite of run, one line per problem with its fix
  pgbridge run                         # stream until SIGTERM / SIGINT
  pgbridge status                      # slot, lag, leader, snapshot progress
  pgbridge --config pgbridge.yaml config
  pgbridge demo --seconds 30           # throwaway Postgres + broker, no configuration

exit status: 0 success, 2 configuration or usage error, 1 any other failure
"""

# command -> (one-line help, description, examples)
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("stream until SIGTERM/SIGINT",
            "Stream the publication's changes to Kafka until SIGTERM or SIGINT; then stop reading, flush "
            "Kafka, confirm the last safe LSN and exit 0. With ha.leader_election (the default) a second "
            "replica stands by until the first stops.",
            "  pgbridge run\n  pgbridge --config /etc/pgbridge/pgbridge.yaml run"),
    "check": ("verify every prerequisite of run",
              "Validate the configuration, reach Postgres, Kafka and the Schema Registry, and check "
              "wal_level, slots, the publication and the replica identity of each published table. "
              "Prints one line per problem with its fix; exit 0 only if run can start.",
              "  pgbridge check\n  pgbridge check --config pgbridge.yaml --debug"),
    "schemas": ("print the Avro schemas run would use",
                "Print, as JSON, the topic and the Avro key and value schemas of every published table (with "
                "schema_registry.url set, also their subjects). --subjects prints instead every Schema Registry "
                "subject run uses with its schema, transaction and message topics included: what to register "
                "beforehand with schema_registry.auto_register false.",
                "  pgbridge schemas | jq '.[].topic'\n  pgbridge schemas --subjects | jq -r '.[].subject'"),
    "status": ("slot, lag, leader and snapshot progress",
               "Report where the bridge is, read from Postgres and Kafka (works whether pgbridge runs or "
               "not): the slot and who streams it, the lag in bytes, the replica holding the leader lock, "
               "and the initial snapshot's progress with its rate and ETA.",
               "  pgbridge status\n  pgbridge status --json | jq .slot.lag_bytes"),
    "config": ("print the effective settings (secrets redacted)",
               "Print the settings in force, as YAML: defaults, then the config file, then the environment. "
               "Passwords and other secrets are shown as **********.",
               "  pgbridge config\n  PGBRIDGE_SNAPSHOT__WORKERS=4 pgbridge config --json"),
    "demo": ("throwaway Postgres + broker + live workload",
             "Start a throwaway Postgres and a local Kafka-protocol broker, create sample tables, run the "
             "bridge on a small live workload and print each decoded event. Reads no configuration.",
             "  pgbridge demo\n  pgbridge demo --seconds 30"),
}


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


def _wrap(text: str) -> str:
    """Descriptions are wrapped here: the raw formatter that keeps the epilogs' layout wraps nothing."""
    return textwrap.fill(text, width=100)


def _global_options(parser: argparse.ArgumentParser, *, config: bool = True) -> None:
    # SUPPRESS: an option given after the command does not reset one given before it.
    if config:
        parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                            help="YAML configuration file (or PGBRIDGE_CONFIG)")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging and tracebacks on errors")


def _command(sub: argparse._SubParsersAction[_Parser], name: str, *, config: bool = True) -> _Parser:
    summary, description, examples = _COMMANDS[name]
    parser = sub.add_parser(name, help=summary, description=_wrap(description), epilog=f"examples:\n{examples}",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    _global_options(parser, config=config)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pgbridge", description=_wrap("Postgres logical replication (pgoutput) to Kafka as Avro; "
                     "the slot's LSN is confirmed only after Kafka acknowledged every change."),
                     epilog=_ENVIRONMENT + "\n" + _EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pgbridge {__version__}")
    _global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for name in ("run", "check"):
        _command(sub, name)
    _command(sub, "schemas").add_argument("--subjects", action="store_true",
                                          help="every registry subject and its schema, as run names them")
    _command(sub, "status").add_argument("--json", action="store_true", help="machine-readable output")
    _command(sub, "config").add_argument("--json", action="store_true", help="JSON instead of YAML")
    slot = sub.add_parser("slot", help="replication slot administration",
                          description="Replication slot administration.")
    slot_sub = slot.add_subparsers(dest="slot_command", required=True, metavar="SUBCOMMAND", parser_class=_Parser)
    drop = slot_sub.add_parser(
        "drop", help="drop the replication slot (decommission)", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_wrap("Drop the replication slot (and a pending snapshot slot) so Postgres stops keeping WAL "
        "for it. Changes not yet confirmed are lost to Kafka: a new slot starts with a new snapshot. Stop "
        "pgbridge first: a slot in use is waited for up to --timeout, then the command fails."),
        epilog="examples:\n  pgbridge slot drop              # asks for confirmation\n"
        "  pgbridge slot drop --yes --timeout 60   # in a script or a Kubernetes Job")
    _global_options(drop)
    drop.add_argument("--yes", "-y", action="store_true", help="drop without asking (needed without a terminal)")
    drop.add_argument("--timeout", type=float, default=DEFAULT_DROP_TIMEOUT_S, metavar="SECONDS",
                      help=f"give up after this long: connecting, and waiting for a slot still in use "
                      f"(default {DEFAULT_DROP_TIMEOUT_S:.0f})")
    demo = _command(sub, "demo", config=False)
    demo.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: until Ctrl-C)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.debug = bool(getattr(args, "debug", False))
        args.config = getattr(args, "config", None)
        if args.command == "demo" and args.config is not None:
            raise _UsageError("demo reads no configuration (it starts its own Postgres and broker): drop --config")
        if args.command == "slot" and args.timeout <= 0:
            raise _UsageError("--timeout must be a positive number of seconds")
    except _UsageError as exc:
        print(f"error: {exc} (see pgbridge --help)", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return _dispatch(args)
    except ConfigError as exc:
        _report(exc, args.debug)
        return EXIT_CONFIG
    except PgbridgeError as exc:
        _report(exc, args.debug)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:
        _report(exc, args.debug)
        return EXIT_FAILURE


def _report(exc: BaseException, debug: bool) -> None:
    text = exc.one_line() if isinstance(exc, PgbridgeError) else f"{type(exc).__name__}: {exc}"
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    print(redact(f"error: {text}"), file=sys.stderr)


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.config)
    configure_logging("DEBUG" if args.debug else settings.log.level, json_format=settings.log.json_format)
    return settings


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from pgbridge.demo import run_demo

        configure_logging("DEBUG" if args.debug else "INFO")
        return run_demo(seconds=args.seconds)
    settings = _settings(args)
    if args.command == "run":
        return _run(settings)
    if args.command == "check":
        return _check(settings, debug=args.debug)
    if args.command == "schemas":
        return _schemas(settings, subjects=args.subjects)
    if args.command == "status":
        return _status(settings, as_json=args.json, debug=args.debug)
    if args.command == "config":
        return _config(settings, as_json=args.json)
    if args.command == "slot" and args.slot_command == "drop":
        return _slot_drop(settings, yes=args.yes, timeout_s=args.timeout)
    raise _UsageError(f"unknown command {args.command}")


def _run(settings: Settings) -> int:
    from pgbridge.health import Health, wedged_after_s
    from pgbridge.http import serve
    from pgbridge.metrics import Metrics
    from pgbridge.supervisor import run_forever

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stop requested", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = Metrics()
    health = Health(wedged_after_s=wedged_after_s(stall_s=settings.watchdog.stall_s,
                                                  delivery_timeout_ms=settings.kafka.delivery_timeout_ms,
                                                  standby_retry_s=settings.ha.standby_retry_s))
    server = serve(settings.http.host, settings.http.port, metrics, health) if settings.http.port else None
    _tune_collector()
    try:
        run_forever(settings, metrics, health, stop)
    finally:
        if server is not None:
            server.shutdown()
    log.info("stopped")
    return EXIT_OK


# The cyclic collector's first-generation threshold while streaming (CPython's default is 700).
COLLECT_AFTER_ALLOCATIONS = 50_000


def _tune_collector() -> None:
    """Keep the cyclic garbage collector off the row path.

    Every row allocates a handful of container objects (the change, its records, librdkafka's
    delivery report) that reference counting frees; none forms a cycle. With CPython's default
    threshold the collector still ran every 700 net allocations and, every hundred runs, walked the
    whole heap (modules, configuration, schemas): 7 % of the streaming thread's samples in a native
    profile of the narrow benchmark (docs/benchmarks.md). ``gc.freeze`` moves what exists now (what
    lives as long as the process) out of every collection, and a first-generation threshold of
    ``COLLECT_AFTER_ALLOCATIONS`` runs the collector seventy times less often; cyclic garbage, when
    some appears (a failed session's objects), is still collected.
    """
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(COLLECT_AFTER_ALLOCATIONS, middle, oldest)


def _quiet_librdkafka(debug: bool) -> None:
    if not debug:  # the verdict lines say what failed; librdkafka's retries would bury them
        logging.getLogger("librdkafka").setLevel(logging.CRITICAL)


def _check(settings: Settings, *, debug: bool) -> int:
    from pgbridge.check import run_checks

    _quiet_librdkafka(debug)
    problems = run_checks(settings)
    for problem in problems:
        print(problem.line(), file=sys.stdout)
    errors = [p for p in problems if p.severity == "error"]
    if not errors:
        print("ok: everything pgbridge run needs is in place")
    return EXIT_FAILURE if errors else EXIT_OK


def _status(settings: Settings, *, as_json: bool, debug: bool) -> int:
    from pgbridge.status import gather, render

    _quiet_librdkafka(debug)
    status = gather(settings)
    print(status.to_json() if as_json else "\n".join(render(status)))
    return EXIT_OK


def _config(settings: Settings, *, as_json: bool) -> int:
    from pgbridge.config import effective_settings

    effective = effective_settings(settings)
    if as_json:
        print(json.dumps(effective, indent=2))
    else:
        import yaml

        print("# pgbridge's settings in force: defaults < config file < environment; secrets as **********")
        print(yaml.safe_dump(effective, sort_keys=False, default_flow_style=False).rstrip())
    return EXIT_OK


def _confirm(question: str) -> bool:
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _slot_drop(settings: Settings, *, yes: bool, timeout_s: float) -> int:
    from pgbridge.source import slots
    from pgbridge.source.connection import safe_target

    pg = settings.postgres
    dsn = pg.dsn.get_secret_value()
    pending = slots.pending_slot(pg.slot)
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigError(f"refusing to drop slot {pg.slot} without confirmation",
                              hint="pass --yes (in a script or Job), or run it in a terminal to be asked")
        if not _confirm(f"Drop replication slot {pg.slot} (and {pending}) on {safe_target(dsn)}? Changes not "
                        "yet confirmed will not reach Kafka, and the next run starts a new snapshot."):
            print("not dropped", file=sys.stderr)
            return EXIT_FAILURE
    with slots.connect_sql(dsn, connect_timeout_s=min(pg.connect_timeout_s, timeout_s)) as conn:
        # A hung server or lock must not hang a decommission script: each statement is bounded too.
        conn.execute(f"SET statement_timeout = {max(1, int(timeout_s * 1000))}")
        dropped = slots.drop_slot(conn, pg.slot, wait_s=timeout_s)
        slots.drop_slot(conn, pending, wait_s=timeout_s)
    print(f"slot {pg.slot} {'dropped' if dropped else 'did not exist'}")
    return EXIT_OK


def _captured_tables(conn: psycopg.Connection[tuple[object, ...]], pg: PostgresConfig) -> list[tuple[str, str]]:
    """The tables ``run`` would capture: the publication's, as the in-stream filter keeps them; before
    the publication exists, what ``run`` would create it for (``postgres.tables``, or the tables
    ``postgres.table_include``/``table_exclude`` select now)."""
    from pgbridge.source import slots
    from pgbridge.source.publication import resolve_selection
    from pgbridge.source.selection import pattern_selection, stream_filter

    if slots.publication_exists(conn, pg.publication):
        return slots.published_tables(conn, pg.publication, stream_filter(pg))
    if pg.table_pairs:
        return pg.table_pairs
    patterns = pattern_selection(pg)
    if patterns is not None:
        return resolve_selection(conn, patterns)
    raise ConfigError(f"publication {pg.publication} does not exist and neither postgres.tables nor "
                      "postgres.table_include/table_exclude is set",
                      hint="create the publication, or set postgres.tables or the include/exclude patterns")


def _schemas(settings: Settings, *, subjects: bool = False) -> int:
    from pgbridge.decode.messages import Relation
    from pgbridge.encode.columns import ColumnRules, encoder_for
    from pgbridge.encode.schema_change import schema_change_schemas
    from pgbridge.encode.wire import SingleObjectRegistrar
    from pgbridge.pipeline import numeric_policy
    from pgbridge.publish.routing import TopicRouter
    from pgbridge.publish.topics import schema_changes_topic
    from pgbridge.source import slots
    from pgbridge.source.keys import message_keys
    from pgbridge.source.type_catalog import CatalogTypes

    pg = settings.postgres
    with slots.connect_sql(pg.dsn.get_secret_value(), connect_timeout_s=pg.connect_timeout_s) as conn:
        tables = _captured_tables(conn, pg)

        configured_keys = message_keys(settings.kafka)

        def keys(relation: Relation) -> tuple[str, ...]:
            configured = configured_keys.get((relation.namespace, relation.name))
            return configured if configured is not None else slots.key_columns(conn, relation.rel_id)

        # The same type catalog, key columns and column policies as ``run``, so the schemas printed
        # are the ones run writes.
        encoder = encoder_for(ColumnRules.of(settings.columns))(
            topic_prefix=settings.kafka.topic_prefix, database=conn.info.dbname,
            registrar=SingleObjectRegistrar(lambda _fp, _schema: None), key_resolver=keys,
            type_catalog=CatalogTypes(conn), numeric=numeric_policy(settings.types),
            router=TopicRouter.of(settings.kafka, [(str(s), str(t)) for s, t in tables]),
            subject_strategy=settings.schema_registry.subject_name_strategy)
        output: list[dict[str, Any]] = []
        registered: dict[str, tuple[str, dict[str, Any]]] = {}  # subject -> (topic, schema), as run meets them
        for schema, table in tables:
            relation = slots.relation_from_catalog(conn, str(schema), str(table), pg.publication)
            key, value, topic = encoder.key_schema(relation), encoder.value_schema(relation), encoder.topic_for(relation)
            entry = {"table": f"{schema}.{table}", "topic": topic, "key": key, "value": value}
            key_subject, value_subject = encoder.subjects(relation)
            if settings.schema_registry.url:
                entry.update(key_subject=key_subject, value_subject=value_subject)
            output.append(entry)
            if key_subject is not None and key is not None:
                registered.setdefault(key_subject, (topic, key))
            registered.setdefault(value_subject, (topic, value))
        fixed_schemas = encoder.fixed_schemas()
        if pg.ddl_events:
            fixed_schemas += schema_change_schemas(encoder, schema_changes_topic(settings.kafka.topic_prefix))
        for fixed_topic, subject, fixed in fixed_schemas:
            registered.setdefault(subject, (fixed_topic, fixed))
    if subjects:
        output = [{"subject": subject, "topic": topic, "schema": schema}
                  for subject, (topic, schema) in registered.items()]
    json.dump(output, sys.stdout, indent=2)
    print()
    return EXIT_OK
