"""Free TCP ports on 127.0.0.1 for throwaway test servers: ``pgbridge.embedded.ports`` (why ports
are picked below the ephemeral range is written there)."""

from __future__ import annotations

from pgbridge.embedded.ports import free_port

__all__ = ["free_port"]
