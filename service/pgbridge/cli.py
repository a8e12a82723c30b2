"""Command line: run / check / schemas / slot drop / demo. Exit 0 ok, 2 configuration, 1 failure."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from pgbridge import __version__
from pgbridge.config import Settings, load_settings
from pgbridge.errors import ConfigError, PgbridgeError
from pgbridge.logs import configure_logging, redact

log = logging.getLogger("pgbridge")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pgbridge", description="Postgres logical replication to Kafka as Avro")
    parser.add_argument("--version", action="version", version=f"pgbridge {__version__}")
    common = _Parser(add_help=False)
    common.add_argument("--config", help="YAML configuration file (or PGBRIDGE_CONFIG)")
    common.add_argument("--debug", action="store_true", help="tracebacks and debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("run", parents=[common], help="stream until SIGTERM/SIGINT")
    sub.add_parser("check", parents=[common], help="verify every prerequisite of run")
    sub.add_parser("schemas", parents=[common], help="print the Avro schemas run would use")
    slot = sub.add_parser("slot", help="replication slot administration")
    slot_sub = slot.add_subparsers(dest="slot_command", required=True, parser_class=_Parser)
    slot_sub.add_parser("drop", parents=[common], help="drop the replication slot (decommission)")
    demo = sub.add_parser("demo", parents=[common], help="throwaway Postgres + broker + live workload")
    demo.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: until Ctrl-C)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(f"error: {exc} (see pgbridge --help)", file=sys.stderr)
        return EXIT_CONFIG
    debug = bool(getattr(args, "debug", False))
    try:
        return _dispatch(args)
    except ConfigError as exc:
        _report(exc, debug)
        return EXIT_CONFIG
    except PgbridgeError as exc:
        _report(exc, debug)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:
        _report(exc, debug)
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
        from pgbridge.check import run_checks

        if not args.debug:  # the verdict lines say what failed; librdkafka's retries would bury them
            logging.getLogger("librdkafka").setLevel(logging.CRITICAL)
        problems = run_checks(settings)
        for problem in problems:
            print(problem.line(), file=sys.stdout)
        errors = [p for p in problems if p.severity == "error"]
        if not errors:
            print("ok: everything pgbridge run needs is in place")
        return EXIT_FAILURE if errors else EXIT_OK
    if args.command == "schemas":
        return _schemas(settings)
    if args.command == "slot" and args.slot_command == "drop":
        from pgbridge.source import slots

        with slots.connect_sql(settings.postgres.dsn.get_secret_value()) as conn:
            dropped = slots.drop_slot(conn, settings.postgres.slot)
            slots.drop_slot(conn, f"{settings.postgres.slot}_snapshot"[:63])
        print(f"slot {settings.postgres.slot} {'dropped' if dropped else 'did not exist'}")
        return EXIT_OK
    raise _UsageError(f"unknown command {args.command}")


def _run(settings: Settings) -> int:
    from pgbridge.http import serve
    from pgbridge.metrics import Metrics
    from pgbridge.pipeline import Health, run_forever

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stop requested", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = Metrics()
    health = Health()
    server = serve(settings.http.host, settings.http.port, metrics, health) if settings.http.port else None
    try:
        run_forever(settings, metrics, health, stop)
    finally:
        if server is not None:
            server.shutdown()
    log.info("stopped")
    return EXIT_OK


def _schemas(settings: Settings) -> int:
    from pgbridge.encode.envelope import ChangeEncoder
    from pgbridge.encode.wire import SingleObjectRegistrar
    from pgbridge.pipeline import numeric_policy
    from pgbridge.source import slots
    from pgbridge.source.type_catalog import CatalogTypes

    pg = settings.postgres
    with slots.connect_sql(pg.dsn.get_secret_value(), connect_timeout_s=pg.connect_timeout_s) as conn:
        tables = slots.published_tables(conn, pg.publication) if slots.publication_exists(conn, pg.publication) \
            else [tuple(t.split(".", 1)) for t in (pg.tables or [])]
        if not tables:
            raise ConfigError(f"publication {pg.publication} does not exist and postgres.tables is not set",
                              hint="create the publication or set postgres.tables")

        def keys(relation: object) -> tuple[str, ...]:
            return slots.key_columns(conn, relation.rel_id)  # type: ignore[attr-defined]

        # The same type catalog as ``run``, so composites, domains and enums print as run writes them.
        encoder = ChangeEncoder(topic_prefix=settings.kafka.topic_prefix, database=conn.info.dbname,
                                registrar=SingleObjectRegistrar(lambda _fp, _schema: None), key_resolver=keys,
                                type_catalog=CatalogTypes(conn), numeric=numeric_policy(settings.types))
        output = []
        for schema, table in tables:
            relation = slots.relation_from_catalog(conn, str(schema), str(table), pg.publication)
            output.append({"table": f"{schema}.{table}", "topic": encoder.topic_for(relation),
                           "key": encoder.key_schema(relation), "value": encoder.value_schema(relation)})
    json.dump(output, sys.stdout, indent=2)
    print()
    return EXIT_OK
