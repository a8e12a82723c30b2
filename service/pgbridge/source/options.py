"""What pgbridge asks the walsender for: the pgoutput protocol version and START_REPLICATION options.

Pure functions of the server's version and the ``postgres`` settings, decided before any slot is
created so that an unsupported combination fails cleanly instead of leaving a slot behind.
"""

from __future__ import annotations

from pgbridge.config import PostgresConfig
from pgbridge.errors import FatalError


def negotiate_proto_version(server_version: int, override: int | None) -> int:
    """Highest pgoutput protocol the server speaks: 4 on 16+, 3 on 15, 2 on 14, 1 below."""
    if override is not None:
        return override
    if server_version >= 160000:
        return 4
    if server_version >= 150000:
        return 3
    if server_version >= 140000:
        return 2
    return 1


def replication_options(pg: PostgresConfig, proto_version: int, server_version: int) -> dict[str, str]:
    """pgoutput's options for ``START_REPLICATION``: each feature only where protocol and server have it."""
    options = {
        "proto_version": str(proto_version),
        "publication_names": f'"{pg.publication}"',
    }
    if server_version >= 140000:
        options["messages"] = "true"
    if pg.streaming and proto_version >= 2:
        options["streaming"] = "parallel" if proto_version >= 4 else "on"
    if pg.binary and server_version >= 140000:
        options["binary"] = "true"
    if pg.two_phase and proto_version >= 3:
        options["two_phase"] = "true"
    if server_version >= 160000:
        options["origin"] = pg.origin
    elif pg.origin == "none":
        raise FatalError(f"postgres.origin=none needs PostgreSQL 16 or later (server is {server_version // 10000})",
                         hint="set postgres.origin=any, or filter by source.origin downstream")
    return options
