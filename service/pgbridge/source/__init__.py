"""Postgres I/O: the replication connection, slots, the COPY BOTH loop and its (pure) framing."""
