"""No secret anywhere: logs (text and JSON), errors, ``/metrics``, ``pgbridge config`` and ``check``.

Every secret pgbridge can hold is set to a recognisable random value: the Postgres password in the
DSN (a role authenticated by scram-sha-256), the SASL/SCRAM password and the client key's password
(the broker's listener wants both SCRAM and a client certificate), and the Schema Registry's
basic-auth password (HTTPS, real basic auth). ``run``, ``check``, ``schemas``, ``config`` and
``slot drop --yes`` then run once with everything right and once per forced failure of each
connection (a wrong password, an unreachable host), and everything they printed, and what
``/metrics`` served while they ran, is scanned for every secret (and the encodings a leak would
take: a basic-auth header's base64, a URL-quoted password). Text and JSON log formats alternate
between ``run`` and ``check`` so both are covered for both.

The scan is shown to fail: ``test_the_scan_finds_a_secret_logged_on_purpose`` logs a secret through
pgbridge's own logging set-up (text and JSON) and the scan must report it.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import signal
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from jvm.fetch import classpath

from pgbridge.embedded.apache_kafka import KafkaCluster, start_kafka
from pgbridge.embedded.postgres import PgCluster, start_cluster
from tests.support.bridge import bridge_env
from tests.support.broker import require_transactions
from tests.support.ports import free_port
from tests.support.registry import SchemaRegistry
from tests.support.replay import wait_caught_up
from tests.support.tls import CertificateAuthority
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(400)]

ROLE = "pgbridge_secret"
SASL_USER = "pgbridge"
REGISTRY_USER = "pgbridge"
# A failing `run` that retries (an outage) is stopped once its first attempt failed (its retries
# print the same lines again), or after this long.
RUN_LIMIT_S = 6.0
RETRYING = "transient failure; reconnecting"


# --- the scan ------------------------------------------------------------------------------------


def leak_forms(secret: str, user: str | None = None) -> set[str]:
    """The secret and how it would look leaked through a URL or an HTTP basic-auth header."""
    forms = {secret, urllib.parse.quote(secret, safe="")}
    if user is not None:
        forms.add(base64.b64encode(f"{user}:{secret}".encode()).decode())
    return forms


def find_secrets(text: str, forms: Mapping[str, Iterable[str]]) -> list[str]:
    """Names of the secrets any of whose ``forms`` occurs in ``text``."""
    return sorted(name for name, variants in forms.items() if any(form in text for form in variants))


@pytest.mark.parametrize("json_format", [False, True], ids=["text", "json"])
def test_the_scan_finds_a_secret_logged_on_purpose(json_format: bool) -> None:
    secret = secrets.token_hex(12)
    leaking = ("import logging; from pgbridge.logs import configure_logging; "
               f"configure_logging(json_format={json_format}); "
               f"logging.getLogger('pgbridge.source').error('retrying with %s', '{secret}')")
    done = subprocess.run([sys.executable, "-c", leaking], capture_output=True, text=True, timeout=60, check=True)
    output = done.stdout + done.stderr
    assert find_secrets(output, {"postgres password": leak_forms(secret)}) == ["postgres password"], output
    header = "Authorization: Basic " + base64.b64encode(f"u:{secret}".encode()).decode()
    assert find_secrets(header, {"registry password": leak_forms(secret, "u")}) == ["registry password"]
    assert find_secrets(output.replace(secret, "***"), {"postgres password": leak_forms(secret)}) == []
    # (a bare value, not ``password=...``: pgbridge's log formatter masks that form itself)


# --- the servers ---------------------------------------------------------------------------------


@dataclass
class Secured:
    postgres: PgCluster
    kafka: KafkaCluster
    registry: SchemaRegistry
    ca: CertificateAuthority
    client_cert: Path
    client_key: Path
    pg_password: str
    sasl_password: str
    key_password: str
    registry_password: str


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    require_transactions()
    directory = tmp_path_factory.mktemp("no-secrets")
    ca = CertificateAuthority(directory)
    server = ca.issue("server", "localhost", hosts=("localhost", "127.0.0.1"))
    key_password, pg_password = f"keypw{secrets.token_hex(10)}", f"pgpw{secrets.token_hex(10)}"
    sasl_password, registry_password = f"saslpw{secrets.token_hex(10)}", f"regpw{secrets.token_hex(10)}"
    client = ca.issue("client", "pgbridge", client=True, password=key_password)
    hba = (f"host all {ROLE} 127.0.0.1/32 scram-sha-256", f"host replication {ROLE} 127.0.0.1/32 scram-sha-256")
    with contextlib.ExitStack() as stack:
        postgres = start_cluster(18, hba=hba)
        stack.callback(postgres.close)
        postgres.execute(f"CREATE ROLE {ROLE} LOGIN REPLICATION SUPERUSER PASSWORD '{pg_password}'")
        listener = "listener.name.secure."
        kafka = start_kafka(classpath("kafka"), 1, listeners={"SECURE": "SASL_SSL"},
                                  scram_users={SASL_USER: sasl_password}, overrides={
                                      "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                                      listener + "ssl.keystore.type": "PEM",
                                      listener + "ssl.keystore.location": str(server.chain),
                                      listener + "ssl.truststore.type": "PEM",
                                      listener + "ssl.truststore.location": str(ca.ca_cert),
                                      listener + "ssl.client.auth": "required",
                                      listener + "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                                      listener + "scram-sha-512.sasl.jaas.config":
                                          "org.apache.kafka.common.security.scram.ScramLoginModule required;"})
        stack.callback(kafka.close)
        registry = SchemaRegistry(tls=(server.cert, server.key, ca.ca_cert),
                                  users={REGISTRY_USER: registry_password}).start()
        stack.callback(registry.close)
        yield Secured(postgres, kafka, registry, ca, client.cert, client.key, pg_password, sasl_password,
                      key_password, registry_password)


# --- running pgbridge ----------------------------------------------------------------------------


def settings(s: Secured, dbname: str, prefix: str, *, pg_password: str | None = None, pg_port: int | None = None,
             sasl_password: str | None = None, bootstrap: str | None = None, registry_password: str | None = None,
             registry_url: str | None = None) -> dict[str, str]:
    """Every secret set; a keyword replaces one value to force that connection's failure."""
    dsn = (f"host=127.0.0.1 port={pg_port or s.postgres.port} user={ROLE} dbname={dbname} "
           f"password={pg_password or s.pg_password}")
    env = bridge_env(dsn, bootstrap or s.kafka.bootstrap_for("SECURE"), prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.items",
        "PGBRIDGE_KAFKA__EXACTLY_ONCE": "true",
        "PGBRIDGE_KAFKA__PROPERTIES__SECURITY.PROTOCOL": "SASL_SSL",
        "PGBRIDGE_KAFKA__PROPERTIES__SASL.MECHANISM": "SCRAM-SHA-512",
        "PGBRIDGE_KAFKA__PROPERTIES__SASL.USERNAME": SASL_USER,
        "PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD": sasl_password or s.sasl_password,
        "PGBRIDGE_KAFKA__PROPERTIES__SSL.CA.LOCATION": str(s.ca.ca_cert),
        "PGBRIDGE_KAFKA__PROPERTIES__SSL.CERTIFICATE.LOCATION": str(s.client_cert),
        "PGBRIDGE_KAFKA__PROPERTIES__SSL.KEY.LOCATION": str(s.client_key),
        "PGBRIDGE_KAFKA__PROPERTIES__SSL.KEY.PASSWORD": s.key_password,
        "PGBRIDGE_SCHEMA_REGISTRY__URL": registry_url or s.registry.url,
        "PGBRIDGE_SCHEMA_REGISTRY__SSL_CA_LOCATION": str(s.ca.ca_cert),
        "PGBRIDGE_SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO": f"{REGISTRY_USER}:{registry_password or s.registry_password}",
        "PGBRIDGE_SCHEMA_REGISTRY__TIMEOUT_S": "3",
    })
    return env


@dataclass
class Outputs:
    """Everything pgbridge showed, by where it came from (for the failure message)."""

    texts: dict[str, str]

    def add(self, where: str, text: str) -> None:
        self.texts[where] = self.texts.get(where, "") + text


def command(args: list[str], env: dict[str, str], json_logs: bool, outputs: Outputs,
            where: str) -> tuple[int, str]:
    env = {**env, "PGBRIDGE_LOG__JSON": "true" if json_logs else "false"}
    done = subprocess.run([sys.executable, "-m", "pgbridge", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    text = done.stdout + done.stderr
    outputs.add(f"{where}: pgbridge {' '.join(args)} (exit {done.returncode})", text)
    return done.returncode, text


def run(env: dict[str, str], json_logs: bool, outputs: Outputs, where: str, *,
        until: float = RUN_LIMIT_S, caught_up: tuple[str, str] | None = None) -> int | None:
    """``pgbridge run`` until it exits, its first attempt failed (``RETRYING``) or ``until`` seconds
    (or, with ``caught_up`` = (dsn, slot), until it is replicating and the slot confirmed
    everything); ``/metrics`` scraped before it is stopped with SIGTERM. Its exit code: None if it was still running and had to be stopped."""
    port = free_port()
    env = {**env, "PGBRIDGE_LOG__JSON": "true" if json_logs else "false", "PGBRIDGE_HTTP__PORT": str(port),
           "PGBRIDGE_HTTP__HOST": "127.0.0.1"}
    with tempfile.NamedTemporaryFile(prefix="pgbridge-run-", suffix=".log") as log:
        process = subprocess.Popen([sys.executable, "-m", "pgbridge", "run"], env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
        try:
            if caught_up is not None:
                wait_until(lambda: "replicating" in Path(log.name).read_text(errors="replace") or process.poll(),
                           timeout=60, interval=0.2, message="pgbridge never started replicating")
                wait_caught_up(*caught_up, timeout=60)
            else:  # it exits by itself (an error), retries, or runs for ``until`` s
                with contextlib.suppress(AssertionError):
                    wait_until(lambda: process.poll() is not None or RETRYING in Path(log.name).read_text(
                        errors="replace"), timeout=until, interval=0.2, message="running on")
            code = process.poll()
            if code is None:
                outputs.add(f"{where}: /metrics", scrape(port))
                process.send_signal(signal.SIGTERM)
                assert process.wait(60) == 0 or caught_up is None, f"{where}: run did not stop cleanly"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
            log.seek(0)
            outputs.add(f"{where}: pgbridge run (exit {process.returncode})", log.read().decode(errors="replace"))
    return code


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return str(response.read().decode())
    except OSError as exc:
        return f"(no /metrics: {exc})"


# --- the test ------------------------------------------------------------------------------------


@pytest.mark.integration
def test_no_secret_in_any_output_with_everything_right_or_failing(secured: Secured) -> None:
    s = secured
    dbname, prefix = f"t_{secrets.token_hex(6)}", f"t_{secrets.token_hex(4)}"
    s.postgres.execute(f"CREATE DATABASE {dbname}")
    with psycopg.connect(s.postgres.dsn(dbname), autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
    wrong = {name: f"wrong{name}{secrets.token_hex(8)}" for name in ("pg", "sasl", "registry")}
    forms = {"postgres password": leak_forms(s.pg_password), "sasl password": leak_forms(s.sasl_password),
             "ssl key password": leak_forms(s.key_password),
             "registry password": leak_forms(s.registry_password, REGISTRY_USER),
             "wrong postgres password": leak_forms(wrong["pg"]), "wrong sasl password": leak_forms(wrong["sasl"]),
             "wrong registry password": leak_forms(wrong["registry"], REGISTRY_USER)}
    outputs = Outputs({})
    good = settings(s, dbname, prefix)

    # everything right: it streams, and says nothing secret while doing so
    for json_logs in (False, True):
        command(["config"], good, json_logs, outputs, "good")
        code, check = command(["check"], good, json_logs, outputs, "good")
        assert code == 0, check
        command(["schemas"], good, json_logs, outputs, "good")
    run(good, False, outputs, "good", caught_up=(s.postgres.dsn(dbname), prefix))
    with psycopg.connect(s.postgres.dsn(dbname), autocommit=True) as conn:
        conn.execute("INSERT INTO items VALUES (3, 'three')")
    run(good, True, outputs, "good", caught_up=(s.postgres.dsn(dbname), prefix))
    assert s.registry.subjects(), "nothing was registered: the good runs did not stream"

    # every connection made to fail, both ways; each failure with its own prefix (slot, leader lock),
    # so that they run side by side: most of their time is waiting on a server that does not answer
    closed = free_port()
    failures = {
        "postgres wrong password": settings(s, dbname, f"{prefix}_1", pg_password=wrong["pg"]),
        "postgres unreachable": settings(s, dbname, f"{prefix}_2", pg_port=closed),
        "kafka wrong password": settings(s, dbname, f"{prefix}_3", sasl_password=wrong["sasl"]),
        "kafka unreachable": settings(s, dbname, f"{prefix}_4", bootstrap=f"127.0.0.1:{closed}"),
        "registry wrong password": settings(s, dbname, f"{prefix}_5", registry_password=wrong["registry"]),
        "registry unreachable": settings(s, dbname, f"{prefix}_6",
                                         registry_url=f"https://127.0.0.1:{closed}/apis/ccompat/v7"),
    }

    def fail(number: int, where: str, env: dict[str, str]) -> None:
        json_logs = number % 2 == 0
        code, check = command(["check"], env, json_logs, outputs, where)
        expected = {"postgres": "error: cannot connect to Postgres", "kafka": "error: Kafka",
                    "registry": "error: Schema Registry"}[where.split()[0]]
        assert code != 0 and expected in check, f"{where}: check did not report the failure:\n{check}"
        run(env, not json_logs, outputs, where)
        if not where.startswith("kafka"):  # schemas reads Postgres and the registry only
            command(["schemas"], env, json_logs, outputs, where)
        if where.startswith("postgres"):
            command(["slot", "drop", "--yes", "--timeout", "5"], env, not json_logs, outputs, where)

    with ThreadPoolExecutor(max_workers=3) as pool:
        for done in [pool.submit(fail, number, where, env) for number, (where, env) in enumerate(failures.items())]:
            done.result()
    assert not s.postgres.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name LIKE %s",
                                  params=(f"{prefix}\\_%",)), "a failing run created a slot"
    command(["slot", "drop", "--yes", "--timeout", "30"], good, True, outputs, "good")
    assert not s.postgres.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", params=(prefix,))

    leaks = {where: found for where, text in outputs.texts.items() if (found := find_secrets(text, forms))}
    assert not leaks, "secrets printed:\n" + "\n".join(
        f"- {where}: {', '.join(found)}\n{outputs.texts[where][-2000:]}" for where, found in leaks.items())
    assert sum(len(text) for text in outputs.texts.values()) > 0
