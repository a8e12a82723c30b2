"""A stand-in for a transactional confluent-kafka ``Producer`` in unit tests of what goes into each
Kafka transaction (publish/transactions.py ``KafkaTransactions``): the records produced, grouped by
the transaction that committed them."""

from __future__ import annotations


class TransactionalProducer:
    def __init__(self) -> None:
        self.open: list[tuple[str, bytes | None, bytes | None]] | None = None
        self.committed: list[list[tuple[str, bytes | None, bytes | None]]] = []
        self.outstanding = 0  # what flush() reports still unacknowledged
        self.flush_loses_the_error = False  # flush() ends as confluent-kafka's did once fenced

    def init_transactions(self, _timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
        assert self.open is None
        self.open = []

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, **_: object) -> None:
        assert self.open is not None, "produced outside a transaction"
        self.open.append((topic, key, value))

    def flush(self, _timeout: float) -> int:
        if self.flush_loses_the_error:
            raise SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL without setting an exception")
        return self.outstanding

    def commit_transaction(self, _timeout: float) -> None:
        assert self.open is not None
        self.committed.append(self.open)
        self.open = None

    def abort_transaction(self, _timeout: float) -> None:
        self.open = None
