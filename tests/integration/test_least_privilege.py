"""pgbridge as a role with only ``LOGIN REPLICATION`` and ``SELECT`` on the published tables, the
publication created beforehand by the table owner: the grants are *exactly* the SQL block of
docs/deployment.md ("Least privilege"), run with its names replaced, on Postgres 15 and 18.

One run covers every feature that touches Postgres: the initial snapshot, streaming, an
incremental snapshot on a signal (watermarks emitted by pgbridge itself), heartbeats, slot
monitoring and the HA leader lock; ``pgbridge check`` passes as that role. With a grant missing,
``pgbridge check`` names the exact statement to run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgbridge.metrics import HEARTBEATS_TOTAL, LEADER, SLOT_RETAINED_WAL_BYTES
from pgbridge.snapshot.incremental import emit_signal_sql
from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.cli import check, pgbridge
from tests.support.http import metric, scrape
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

# On 15 and 18: the documented grants are claimed for every supported version, and what a role may
# do is what Postgres versions change (the public schema, predefined roles, replication rights).
pytestmark = [pytest.mark.integration, pytest.mark.each_pg_version, pytest.mark.timeout(240)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
MARKER = "<!-- least-privilege-grants"
ORDERS, CUSTOMERS = 400, 120


def documented_grants() -> list[str]:
    """The statements of the SQL block after the marker in docs/deployment.md, comments dropped."""
    text = DOCS.read_text()
    assert MARKER in text, "docs/deployment.md lost its least-privilege block"
    block = text.split(MARKER, 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    lines = [line.split("--", 1)[0].strip() for line in block.splitlines()]
    return [statement.strip() for statement in " ".join(lines).split(";") if statement.strip()]


@dataclass(frozen=True)
class Roles:
    admin_dsn: str  # the superuser
    owner_dsn: str  # owns schema shop, its tables and the publication
    bridge_dsn: str  # pgbridge's role
    bridge: str


def _as(dsn: str, user: str) -> str:
    params = conninfo_to_dict(dsn)
    params["user"] = user
    return make_conninfo("", **params)


def _run_as(dsn: str, statements: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.fixture
def roles(pg_dsn: str, topic_prefix: str) -> Iterator[Roles]:
    """An owner role with schema ``shop`` (customers, orders, filled), and the bridge role named
    ``topic_prefix`` (also the publication's and the slot's name), not yet created."""
    owner, bridge = f"{topic_prefix}_owner", topic_prefix
    dbname = conninfo_to_dict(pg_dsn)["dbname"]
    _run_as(pg_dsn, [f"CREATE ROLE {owner} LOGIN", f"GRANT CREATE ON DATABASE {dbname} TO {owner}"])
    owner_dsn = _as(pg_dsn, owner)
    _run_as(owner_dsn, [
        "CREATE SCHEMA shop",
        "CREATE TABLE shop.customers (id bigint PRIMARY KEY, name text NOT NULL)",
        "CREATE TABLE shop.orders (id bigint PRIMARY KEY, customer bigint NOT NULL, total numeric(12,2))",
        f"INSERT INTO shop.customers SELECT g, 'c' || g FROM generate_series(1, {CUSTOMERS}) g",
        f"INSERT INTO shop.orders SELECT g, 1 + g % {CUSTOMERS}, g * 1.5 FROM generate_series(1, {ORDERS}) g",
    ])
    try:
        yield Roles(pg_dsn, owner_dsn, _as(pg_dsn, bridge), bridge)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for slot, in conn.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE %s",
                                      (f"{bridge}%",)).fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            for role in (bridge, owner):
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _grant_as_documented(roles: Roles) -> None:
    """Run the documented block: CREATE ROLE as the superuser, the rest as the table owner."""
    statements = [re.sub(r"\bpgbridge\b", roles.bridge, s) for s in documented_grants()]
    _run_as(roles.admin_dsn, [s for s in statements if s.upper().startswith("CREATE ROLE")])
    _run_as(roles.owner_dsn, [s for s in statements if not s.upper().startswith("CREATE ROLE")])


def _emit_message_functions(dsn: str) -> list[str]:
    """Every signature of pg_logical_emit_message on this server, as GRANT/REVOKE spell them."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT p.oid::regprocedure::text FROM pg_proc p "
                            "WHERE p.proname = 'pg_logical_emit_message' ORDER BY 1").fetchall()
    return [str(row[0]) for row in rows]


# Label names a pgbridge series may carry: bounded categories and table names, nothing per row,
# per key or per connection. (``le`` is a histogram bucket's upper bound.)
BOUNDED_LABELS = {"table", "op", "outcome", "target", "compatibility", "status", "kind", "le"}


def _assert_labels_bounded(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], roles: Roles,
                           tables: set[str]) -> None:
    """No label holds a secret, a DSN part or an unbounded value: the names are the bounded ones,
    ``table`` is a published table, and no value mentions the role, host or port."""
    dsn = conninfo_to_dict(roles.bridge_dsn)
    private = {str(dsn["user"]), str(dsn["host"]), str(dsn["port"])}
    for name, labels in samples:
        for label, value in labels:
            assert label in BOUNDED_LABELS, (name, label, value)
            assert label != "table" or value in tables, (name, value)
            assert label == "le" or not any(part in value for part in private), (name, label, value)



def test_the_documented_grants_are_enough_for_every_feature(
        roles: Roles, kafka_broker: Broker, topic_prefix: str) -> None:
    _grant_as_documented(roles)
    with psycopg.connect(roles.bridge_dsn) as conn:  # really unprivileged: no superuser, no ownership
        row = conn.execute("SELECT rolsuper, rolreplication, rolcreaterole FROM pg_roles "
                           "WHERE rolname = current_user").fetchone()
    assert row == (False, True, False)
    env = bridge_env(roles.bridge_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__HEARTBEAT_INTERVAL_S": "1", "PGBRIDGE_POSTGRES__SLOT_CHECK_INTERVAL_S": "1",
        "PGBRIDGE_HA__LEADER_ELECTION": "true", "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "100"})
    checked = check(env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with BridgeProcess(env).start(http=True) as bridge:
        bridge.wait_confirmed(roles.admin_dsn, topic_prefix, waiting_for="its slot, as the least-privileged role")
        _run_as(roles.owner_dsn, [
            "INSERT INTO shop.orders VALUES (100001, 1, 9.99)",
            "UPDATE shop.customers SET name = 'renamed' WHERE id = 2",
            "DELETE FROM shop.orders WHERE id = 3",
            emit_signal_sql(["shop.customers"]).as_string(None),
        ])
        wait_until(lambda: "incremental snapshot of table done table=shop.customers" in bridge.log(),
                   timeout=120, interval=0.3, message="incremental snapshot never finished")
        wait_caught_up(roles.admin_dsn, topic_prefix, timeout=60)
        assert bridge.http_port is not None
        port = bridge.http_port
        wait_until(lambda: metric(scrape(port), HEARTBEATS_TOTAL) > 0, timeout=30,
                   message="no heartbeat as the least-privileged role")
        samples = scrape(port)
        assert metric(samples, LEADER) == 1
        assert (SLOT_RETAINED_WAL_BYTES, ()) in samples
        _assert_labels_bounded(samples, roles, {"shop.orders", "shop.customers"})
        log = bridge.log()
        for table, key_count in (("shop.orders", ORDERS), ("shop.customers", CUSTOMERS)):
            events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.{table}", topic_prefix,
                                 min_count=key_count, timeout=60, idle=1.0)
            assert not diff_states(replay(events), table_state(roles.admin_dsn, table, ("id",))), table
        assert bridge.terminate() == 0, log[-4000:]
    assert "permission denied" not in log and "error" not in log.lower().replace("errors", ""), log[-4000:]


def test_check_names_each_missing_grant(roles: Roles, kafka_broker: Broker, topic_prefix: str) -> None:
    # a login with nothing else: no REPLICATION, no USAGE, no SELECT; the publication not there yet
    _run_as(roles.admin_dsn, [f"CREATE ROLE {roles.bridge} LOGIN"])
    env = bridge_env(roles.bridge_dsn, kafka_broker.bootstrap, topic_prefix)
    result = check(env)
    assert result.returncode == 1
    assert f"ALTER ROLE {roles.bridge} WITH REPLICATION;" in result.stdout, result.stdout
    assert f"CREATE PUBLICATION {topic_prefix} FOR TABLE" in result.stdout, result.stdout

    _run_as(roles.owner_dsn, [f"CREATE PUBLICATION {topic_prefix} FOR TABLE shop.customers, shop.orders"])
    result = check(env)
    assert result.returncode == 1
    for fix in (f"GRANT USAGE ON SCHEMA shop TO {roles.bridge};",
                f"GRANT SELECT ON shop.customers TO {roles.bridge};",
                f"GRANT SELECT ON shop.orders TO {roles.bridge};"):
        assert fix in result.stdout, (fix, result.stdout)

    _run_as(roles.admin_dsn, [f"ALTER ROLE {roles.bridge} WITH REPLICATION"])
    _run_as(roles.owner_dsn, [f"GRANT USAGE ON SCHEMA shop TO {roles.bridge}",
                              f"GRANT SELECT ON shop.customers, shop.orders TO {roles.bridge}"])
    emit = _emit_message_functions(roles.admin_dsn)  # Postgres 17 added a fourth argument
    _run_as(roles.admin_dsn, [f"REVOKE EXECUTE ON FUNCTION {f} FROM PUBLIC" for f in emit])
    try:
        result = check(env)
        text_variant = next(f for f in emit if f.split("(")[1].rstrip(")").replace(" ", "").split(",")[2] == "text")
        assert f"GRANT EXECUTE ON FUNCTION {text_variant} TO {roles.bridge};" in result.stdout, result.stdout
    finally:
        _run_as(roles.admin_dsn, [f"GRANT EXECUTE ON FUNCTION {f} TO PUBLIC" for f in emit])
    result = check(env)
    assert result.returncode == 0, result.stdout


def test_run_without_a_tables_select_stops_with_one_line_that_points_to_check(
        roles: Roles, kafka_broker: Broker, topic_prefix: str) -> None:
    # given the documented grants but SELECT on shop.orders taken back
    _grant_as_documented(roles)
    _run_as(roles.owner_dsn, [f"REVOKE SELECT ON shop.orders FROM {roles.bridge}"])
    env = bridge_env(roles.bridge_dsn, kafka_broker.bootstrap, topic_prefix)

    # when pgbridge runs: the initial snapshot cannot read the table
    result = pgbridge("run", env=env, timeout=120)

    # then it stops at once (retrying cannot grant it), naming the table and where the fix is
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Postgres refused a privilege: permission denied for table orders"), last
    assert "pgbridge check names every grant the role lacks" in last, last
