"""Throwaway Kafka-protocol brokers (Tansu, in memory) for integration tests.

The broker itself lives in ``pgbridge.embedded.broker`` (the demo and the benchmarks need it too);
this module keeps the names the tests import. Readers of what a test wrote consume to the end
(``tests/support/kafka.py``) because Tansu's high watermarks can be wrong after batched writes.
"""

from __future__ import annotations

from pgbridge.embedded.broker import HOST, START_TIMEOUT, Broker, answers_metadata, start_broker, tansu_binary

__all__ = ["HOST", "START_TIMEOUT", "Broker", "answers_metadata", "start_broker", "tansu_binary"]
