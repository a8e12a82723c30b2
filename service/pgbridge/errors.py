"""Typed errors: every failure pgbridge reports is one of these, classified where it is first seen.

``ConfigError`` is the operator's input (exit 2). ``TransientError`` is worth retrying with backoff
(connection lost, broker down). ``FatalError`` will not get better by retrying (slot dropped,
publication missing, corrupt stream); the CLI prints it as one line with its ``hint``.
"""

from __future__ import annotations

from pgbridge.lsn import format_lsn


class PgbridgeError(Exception):
    """Root of every error pgbridge raises on purpose."""

    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    def one_line(self) -> str:
        text = str(self).replace("\n", " ")
        return f"{text} ({self.hint})" if self.hint else text


class ConfigError(PgbridgeError):
    """Invalid or missing configuration; the CLI exits 2."""


class TransientError(PgbridgeError):
    """A failure that may go away: reconnect with backoff and resume from the confirmed LSN."""


class SourceUnavailable(TransientError):
    """Postgres could not be reached or the replication connection dropped."""


class BrokerUnavailable(TransientError):
    """Kafka could not be reached or a delivery failed; nothing past it is confirmed."""


class RegistryUnavailable(TransientError):
    """The Schema Registry could not be reached, timed out or answered 5xx / 408 / 429."""


class SlotInUse(TransientError):
    """Another process streams from the slot; wait for it to let go (this is also HA standby)."""


class StopRequested(PgbridgeError):
    """A stop (SIGTERM/SIGINT) arrived while pgbridge waited on a server (publish/topics.py) or for
    room in the producer queue: the session stops as on any stop, without waiting any longer."""


class FatalError(PgbridgeError):
    """A failure that retrying will not fix; the process stops without confirming further."""


class DecodeError(FatalError):
    """A pgoutput or replication frame that does not parse; carries where it happened."""

    def __init__(self, message: str, *, tag: str | None = None, offset: int | None = None,
                 lsn: int | None = None) -> None:
        where = []
        if tag is not None:
            where.append(f"tag {tag!r}")
        if offset is not None:
            where.append(f"offset {offset}")
        if lsn is not None:
            where.append(f"lsn {format_lsn(lsn)}")
        detail = f"{message} at {', '.join(where)}" if where else message
        super().__init__(detail, hint="the replication stream is corrupt or from an unsupported protocol "
                         "version; set postgres.proto_version to match the server")
        self.tag = tag
        self.offset = offset
        self.lsn = lsn


class InvariantError(FatalError):
    """The stream broke an ordering rule (nested BEGIN, change outside a transaction, LSN backwards)."""


class PrivilegeError(FatalError):
    """Postgres refused the role something pgbridge needs (a table's SELECT for a snapshot, a
    function, a schema): retrying cannot grant it, ``pgbridge check`` names each missing grant."""

    def __init__(self, message: str) -> None:
        super().__init__(f"Postgres refused a privilege: {message}",
                         hint="pgbridge check names every grant the role lacks with the GRANT that gives it; "
                              "docs/deployment.md#least-privileges lists them all")


class SlotError(FatalError):
    """The replication slot is missing, invalidated, in use or was recreated under us."""


class PublishError(FatalError):
    """Kafka refused a record for a reason retrying will not fix (authorization, record too large)."""


class SchemaError(FatalError):
    """A writer schema was rejected (Schema Registry compatibility) or cannot be built."""
