"""``pgbridge check``: every prerequisite of ``run``, each failure one line that names the fix.

One module per system checked: ``postgres`` (server, slot, publication, tables, grants and the
settings ``run`` would refuse for them), ``kafka`` (brokers, topics, ACLs, the Schema Registry).
"""

from __future__ import annotations

from pgbridge.check.kafka import check_kafka, check_schema_registry
from pgbridge.check.postgres import check_outbox, check_postgres, check_routes, drop_on_stop_problems
from pgbridge.check.problem import Problem
from pgbridge.config import Settings
from pgbridge.errors import PgbridgeError
from pgbridge.source import slots

__all__ = ["Problem", "run_checks"]


def run_checks(settings: Settings) -> list[Problem]:
    """Every finding, Postgres first; a Postgres that cannot be reached is one error and Kafka and the
    registry are still checked, so one run names everything to fix."""
    problems: list[Problem] = drop_on_stop_problems(settings)
    try:
        conn = slots.connect_sql(settings.postgres.dsn.get_secret_value(),
                                 connect_timeout_s=settings.postgres.connect_timeout_s)
    except PgbridgeError as exc:
        problems.append(Problem("error", str(exc), exc.hint or "check postgres.dsn and that Postgres is up"))
    else:
        with conn:
            problems.extend(check_postgres(conn, settings))
            problems.extend(check_routes(conn, settings))
            problems.extend(check_outbox(conn, settings))
    problems.extend(check_kafka(settings))
    problems.extend(check_schema_registry(settings))
    return problems


