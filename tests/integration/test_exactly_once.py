"""Exactly-once mode on Apache Kafka: read_committed consumers see every change once, whole transactions.

Three scenarios (publish/transactions.py states the rules they check):

* pgbridge is killed with ``kill -9`` five times at random points of a multi-table workload of
  multi-row transfers; a ``read_committed`` consumer sees every committed change exactly once, in
  commit order, while a ``read_uncommitted`` consumer of the same topics does see the aborted
  copies (so the kills did land inside open Kafka transactions);
* atomicity: while that runs, a ``read_committed`` checker asserts at every partition end that no
  part of a Postgres transaction is visible there alone (each BEGIN with its END, a transfer's 20
  ledger lines all or none: Kafka exposes one partition's share of a transaction at once, the
  shares of several partitions each at its own commit marker), and at the end every transaction
  has exactly the rows per table its END record counts;
* fencing: two publishers with one ``transactional.id`` (a frozen leader and the standby that took
  over): the older one's commit fails with ``Fenced`` and its open transaction never becomes visible;
  and the same with two real replicas (``ha.leader_election``): the leader frozen, the standby takes
  over, the old one resumed exits 1 having committed nothing.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter, defaultdict
from typing import Any

import psycopg
import pytest

from pgbridge.consumer import SchemaStore
from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker, require_transactions
from tests.support.kafka import Record, read_topics
from tests.support.postgres import slot_confirmed_flush_lsn
from tests.support.replay import wait_caught_up
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TABLES = ("accounts_a", "accounts_b", "ledger")
ACCOUNTS = 200


@pytest.fixture(autouse=True)
def _apache_kafka_only() -> None:
    require_transactions()


def _schema(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts_a (id int PRIMARY KEY, balance bigint NOT NULL)")
        conn.execute("CREATE TABLE accounts_b (id int PRIMARY KEY, balance bigint NOT NULL)")
        conn.execute("CREATE TABLE ledger (id bigserial PRIMARY KEY, a int, b int, amount int, note text)")
        conn.execute("INSERT INTO accounts_a SELECT g, 1000000 FROM generate_series(1, %s) g", (ACCOUNTS,))
        conn.execute("INSERT INTO accounts_b SELECT g, 1000000 FROM generate_series(1, %s) g", (ACCOUNTS,))


class Transfers(threading.Thread):
    """Transfers between the two account tables, each with a ledger line (every 50th: 20 lines),
    until ``transactions`` were committed or ``halt`` is set."""

    def __init__(self, dsn: str, transactions: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.transactions = transactions
        self.rnd = random.Random(seed)
        self.committed = 0
        self.halt = threading.Event()
        self.error: BaseException | None = None

    @property
    def expected_events(self) -> int:
        """Row events of the committed transfers: 3 each, 19 more for every 20-line one."""
        return self.committed * 3 + sum(19 for n in range(self.committed) if n % 50 == 25)

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=False) as conn:
                for n in range(self.transactions):
                    if self.halt.is_set():
                        break
                    a, b = self.rnd.randint(1, ACCOUNTS), self.rnd.randint(1, ACCOUNTS)
                    amount = self.rnd.randint(1, 100)
                    conn.execute("UPDATE accounts_a SET balance = balance - %s WHERE id = %s", (amount, a))
                    conn.execute("UPDATE accounts_b SET balance = balance + %s WHERE id = %s", (amount, b))
                    lines = 20 if n % 50 == 25 else 1
                    conn.execute("INSERT INTO ledger (a, b, amount, note) SELECT %s, %s, %s, 'n' || g "
                                 "FROM generate_series(1, %s) g", (a, b, amount, lines))
                    conn.commit()
                    self.committed += 1
                    time.sleep(0.003)  # pacing the workload, not a wait
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def _topics(prefix: str) -> list[str]:
    return [f"{prefix}.public.{table}" for table in TABLES]


def _decoded(store: SchemaStore, records: list[Record]) -> list[dict[str, Any]]:
    return [store.decode(r.value) for r in records if r.value is not None]


def check_whole_transactions(store: SchemaStore, visible: dict[str, list[Record]], prefix: str) -> int:
    """Every Postgres transaction with rows visible is whole: on each table topic it has exactly the
    rows its END record counts for that table (the END must be visible too); returns how many."""
    ends: dict[int, dict[str, int]] = {}
    for value in _decoded(store, visible[f"{prefix}.transactions"]):
        if value["status"] == "END":
            ends[value["commit_lsn"]] = {c["data_collection"]: c["event_count"]
                                         for c in value["data_collections"] or []}
    rows: dict[int, Counter[str]] = defaultdict(Counter)
    for table in TABLES:
        for value in _decoded(store, visible[f"{prefix}.public.{table}"]):
            if value["transaction"] is not None:
                rows[value["source"]["commit_lsn"]][f"public.{table}"] += 1
    half = {lsn: (dict(counts), ends.get(lsn)) for lsn, counts in rows.items() if ends.get(lsn) != dict(counts)}
    assert not half, f"Postgres transactions not whole (rows seen per table, END counts): {dict(list(half.items())[:5])}"
    return len(rows)


def check_partition_whole(store: SchemaStore, topic: str, records: list[Record], prefix: str) -> None:
    """At a partition's end (everything read_committed may see there): no part of a transaction.

    Kafka makes one partition's share of a transaction visible at once; across partitions each
    share appears when that partition's commit marker is written, so this is checked where it can
    be observed: every BEGIN has its END, and a transfer's ledger lines are all there or none.
    """
    if topic == f"{prefix}.transactions":
        open_ids = Counter(v["commit_lsn"] for v in _decoded(store, records) if v["status"] == "BEGIN")
        open_ids.subtract(v["commit_lsn"] for v in _decoded(store, records) if v["status"] == "END")
        partial = [lsn for lsn, count in open_ids.items() if count]
        assert not partial, f"BEGIN without END visible: {partial[:5]}"
    elif topic == f"{prefix}.public.ledger":
        lines = Counter(v["source"]["commit_lsn"] for v in _decoded(store, records) if v["transaction"])
        incomplete = {lsn: count for lsn, count in lines.items() if count not in (1, 20)}
        assert not incomplete, f"transfers with only some ledger lines visible: {incomplete}"


class AtomicityChecker(threading.Thread):
    """A read_committed consumer of every topic that, each time a partition is caught up with what
    is visible, asserts that no part of a Postgres transaction is visible there alone."""

    def __init__(self, bootstrap: str, prefix: str, topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.prefix, self.topics = bootstrap, prefix, topics
        self.halt = threading.Event()
        self.checks = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        from pgbridge.consumer import UnknownSchema

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"atomicity-{self.prefix}",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "enable.partition.eof": True, "fetch.wait.max.ms": 50})
        try:
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING) for topic in self.topics])
            visible: dict[str, list[Record]] = {topic: [] for topic in self.topics}
            store = load_schemas(self.bootstrap, self.prefix)
            while not self.halt.is_set():
                message = consumer.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                topic = message.topic()
                assert topic is not None
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        try:
                            check_partition_whole(store, topic, visible[topic], self.prefix)
                        except UnknownSchema:
                            store = load_schemas(self.bootstrap, self.prefix)
                            check_partition_whole(store, topic, visible[topic], self.prefix)
                        self.checks += 1
                    continue
                visible[topic].append(Record(topic, 0, int(message.offset() or 0), message.key(),
                                             message.value(), None))
        except BaseException as exc:  # surfaced by finish()
            self.error = exc
        finally:
            consumer.close()

    def finish(self) -> int:
        self.halt.set()
        self.join(120)
        if self.error is not None:
            raise self.error
        return self.checks


def test_kill_9_five_times_read_committed_sees_each_change_exactly_once_and_whole(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: exactly-once mode on three tables
    _schema(pg_dsn)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": ",".join(f"public.{t}" for t in TABLES),
                            "PGBRIDGE_SNAPSHOT__MODE": "never", "PGBRIDGE_KAFKA__EXACTLY_ONCE": "true",
                            "PGBRIDGE_HA__LEADER_ELECTION": "false"})
    bridge = BridgeProcess(env).start()
    topics = [*_topics(topic_prefix), f"{topic_prefix}.transactions"]
    checker = AtomicityChecker(kafka_broker.bootstrap, topic_prefix, topics)
    try:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        workload = Transfers(pg_dsn, transactions=1_000_000, seed=17)  # until halted after the kills
        workload.start()
        wait_until(lambda: workload.committed > 50, timeout=60, message="workload did not start")
        checker.start()
        # when: kill -9 at random points of streaming (each restart first streams again), five times
        rnd = random.Random(23)
        for kill in range(5):
            wait_until(lambda: bridge.log().count("replicating") > kill, timeout=60,  # noqa: B023
                       message="the restarted bridge never streamed")
            time.sleep(rnd.uniform(0.2, 1.0))  # the sleep is the random kill point, not a wait
            bridge.kill()
            bridge = BridgeProcess(env, log_path=bridge.log_path).start()
        wait_until(lambda: bridge.log().count("replicating") > 5, timeout=60,
                   message="the last restarted bridge never streamed")
        workload.halt.set()
        workload.join(300)
        assert workload.error is None, workload.error
        try:
            wait_caught_up(pg_dsn, topic_prefix, timeout=180)
        except AssertionError:
            raise AssertionError(bridge.log()[-6000:]) from None
        checks = checker.finish()
        committed = read_topics(kafka_broker.bootstrap, topics, timeout=120, idle=2.0)
        uncommitted = read_topics(kafka_broker.bootstrap, topics, timeout=120, idle=2.0,
                                  isolation="read_uncommitted")
        store = load_schemas(kafka_broker.bootstrap, topic_prefix)
        assert bridge.terminate() == 0, bridge.log()
    finally:
        checker.halt.set()
        bridge.kill()

    # then: read_committed holds every committed transaction once: 3 + its ledger lines
    seen: Counter[tuple[int, int]] = Counter()
    per_tx: dict[int, int] = defaultdict(int)
    for topic in _topics(topic_prefix):
        lsns = []
        for value in _decoded(store, committed[topic]):
            key = (value["source"]["commit_lsn"], value["transaction"]["total_order"])
            seen[key] += 1
            per_tx[key[0]] += 1
            lsns.append(key)
        assert lsns == sorted(lsns), f"{topic} is not in commit order"
    duplicates = sum(count - 1 for count in seen.values())
    assert duplicates == 0, f"{duplicates} duplicate events for a read_committed consumer"
    expected_events = workload.expected_events
    assert sum(per_tx.values()) == expected_events
    assert len(per_tx) == workload.committed
    # ... and a read_uncommitted consumer sees the aborted copies the kills left behind
    dirty: Counter[tuple[int, int]] = Counter()
    for topic in _topics(topic_prefix):
        for value in _decoded(store, uncommitted[topic]):
            dirty[(value["source"]["commit_lsn"], value["transaction"]["total_order"])] += 1
    aborted_copies = sum(count - 1 for count in dirty.values())
    assert aborted_copies > 0, "no kill landed inside an open Kafka transaction"
    assert checks >= 10, f"only {checks} atomicity checks ran"
    assert check_whole_transactions(store, committed, topic_prefix) == workload.committed
    print(f"transactions={workload.committed} events={expected_events} read_committed duplicates=0 "
          f"read_uncommitted aborted copies={aborted_copies} atomicity checks={checks}")


def test_a_fenced_producer_cannot_commit_and_its_open_transaction_never_becomes_visible(
        kafka_broker: Broker, topic_prefix: str) -> None:
    """Two publishers with one transactional.id (a frozen leader and the standby that took over):
    the newer one's init_transactions fences the older, whose commit then fails with ``Fenced``."""
    from confluent_kafka import Producer

    from pgbridge.ack.tracker import AckTracker
    from pgbridge.lsn import Lsn
    from pgbridge.publish.transactions import (
        BatchPolicy,
        Fenced,
        KafkaTransactions,
        Position,
        transactional_id,
    )

    topic = f"{topic_prefix}.public.t"
    offsets = f"{topic_prefix}._offsets"

    def publisher() -> tuple[Producer, KafkaTransactions, AckTracker]:
        producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "enable.idempotence": True,
                             "acks": "all", "transactional.id": transactional_id(topic_prefix, "slot")})
        tracker = AckTracker()
        return producer, KafkaTransactions(producer, tracker, offsets_topic=offsets, slot="slot",
                                           policy=BatchPolicy(max_age_s=60, max_bytes=1 << 30,
                                                              split_after_s=600)), tracker

    old_producer, old, old_tracker = publisher()
    unit = old_tracker.open_unit()
    old.hold(unit)
    old_producer.produce(topic, b"from the old leader", b"k")
    old_producer.flush(30)
    old_tracker.seal(unit, None)
    # when: the standby registers the same transactional.id, and the old leader tries to commit
    new_producer, new, new_tracker = publisher()
    new.init()
    assert old._open is not None, "the old leader holds an open transaction"
    old._open.position = Position(Lsn(100))  # a boundary was reached
    with pytest.raises(Fenced) as fenced:
        old.commit()
    # then: a clear error, the old unit never completes (nothing confirmed), nothing visible
    assert "another pgbridge with the same transactional.id took over" in str(fenced.value)
    assert not old_tracker.is_drained()
    new_unit = new_tracker.open_unit()
    new.hold(new_unit)
    new_producer.produce(topic, b"from the new leader", b"k")
    new_tracker.seal(new_unit, None)
    new.boundary(Position(Lsn(200)))
    new.commit()
    assert new_tracker.is_drained()
    committed = read_topics(kafka_broker.bootstrap, [topic, offsets], min_count=1, timeout=60)
    assert [r.value for r in committed[topic]] == [b"from the new leader"]
    assert [r.value for r in committed[offsets]][-1] == Position(Lsn(200)).to_json()
    dirty = read_topics(kafka_broker.bootstrap, [topic], min_count=2, timeout=60, isolation="read_uncommitted")
    assert [r.value for r in dirty[topic]] == [b"from the old leader", b"from the new leader"]


def test_an_initial_snapshot_read_by_parallel_workers_commits_each_row_once(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: 30,000 rows read in chunks of 2,000 by two workers, exactly-once
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 30000) g")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "initial",
                            "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "2000", "PGBRIDGE_SNAPSHOT__WORKERS": "2",
                            "PGBRIDGE_KAFKA__EXACTLY_ONCE": "true", "PGBRIDGE_HA__LEADER_ELECTION": "false"})
    with BridgeProcess(env).start() as bridge:
        # when
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=120, waiting_for="the snapshot to finish")
        records = read_topics(kafka_broker.bootstrap, [f"{topic_prefix}.public.t"], min_count=30000,
                              timeout=120)[f"{topic_prefix}.public.t"]
        store = load_schemas(kafka_broker.bootstrap, topic_prefix)
        assert bridge.terminate() == 0, bridge.log()
    # then: every row once, as a snapshot read, for a read_committed reader
    ids = Counter(store.decode(r.value)["after"]["id"] for r in records if r.value is not None)
    assert set(ids) == set(range(1, 30001)) and set(ids.values()) == {1}
    # ... and each chunk's progress record was committed in the Kafka transaction of its rows
    progress = read_topics(kafka_broker.bootstrap, [f"{topic_prefix}._snapshot"], timeout=60,
                           isolation="read_uncommitted")[f"{topic_prefix}._snapshot"]
    done = Counter(r.key for r in progress if r.key and b"/initial/done/" in r.key and r.value is not None)
    assert len(done) >= 15  # 30,000 rows in chunks of about 2,000
    # written twice each: inside the chunk's Kafka transaction, and again once its rows were durable
    assert set(done.values()) == {2}, done


def test_a_frozen_leader_fenced_by_the_standby_commits_nothing_once_resumed(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    """Active/standby with exactly-once: the leader is frozen (SIGSTOP) mid-stream; it loses its
    lease, the server ends its walsender (wal_sender_timeout), the standby takes over and fences
    it; resumed, the old leader commits nothing and either exits with the fencing error or stands
    by again (``_resumed_leader_outcome``)."""
    # given
    _schema(pg_dsn)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": ",".join(f"public.{t}" for t in TABLES),
                            "PGBRIDGE_SNAPSHOT__MODE": "never", "PGBRIDGE_KAFKA__EXACTLY_ONCE": "true",
                            "PGBRIDGE_KAFKA__TRANSACTION_MAX_MS": "5000", "PGBRIDGE_HA__LEASE_S": "3",
                            "PGBRIDGE_HA__STANDBY_RETRY_S": "1"})
    first = BridgeProcess(env).start()
    wait_until(lambda: "replicating" in first.log(), timeout=60, message="the first replica never streamed")
    second = BridgeProcess(env).start()
    workload = Transfers(pg_dsn, transactions=1_000_000, seed=31)
    try:
        workload.start()
        wait_until(lambda: workload.committed > 200, timeout=60, message="workload did not start")
        # when: the leader freezes mid-stream, and the standby takes over
        assert first.process is not None
        first.process.send_signal(signal.SIGSTOP)
        wait_until(lambda: "replicating" in second.log(), timeout=120, message="the standby never took over")
        taken_over = slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) > taken_over, timeout=60,
                   message="the new leader never committed a transaction")
        first.process.send_signal(signal.SIGCONT)
        # then: the old leader stops with the fencing error, or stands by again (below)
        try:
            outcome = wait_until(lambda: _resumed_leader_outcome(first), timeout=120,
                                 message="the resumed old leader neither stopped nor stood by")
        except AssertionError as exc:
            pytest.fail(f"{exc}:\n{first.log()[-5000:]}")
        workload.halt.set()
        workload.join(120)
        assert workload.error is None, workload.error
        wait_caught_up(pg_dsn, topic_prefix, timeout=180)
        topics = [*_topics(topic_prefix), f"{topic_prefix}.transactions"]
        committed = read_topics(kafka_broker.bootstrap, topics, timeout=120, idle=2.0)
        store = load_schemas(kafka_broker.bootstrap, topic_prefix)
        assert second.terminate() == 0, second.log()
        if outcome == "standing by":
            assert first.terminate() == 0, first.log()[-3000:]
    finally:
        workload.halt.set()
        if first.process is not None and first.process.poll() is None:
            first.process.send_signal(signal.SIGCONT)
        first.kill()
        second.kill()
    if outcome == "stopped":
        assert first.process.returncode == 1, first.log()[-3000:]
        # whichever it noticed first: Kafka's fencing, or its slot monitor seeing the slot taken over
        errors = [line for line in first.log().splitlines() if line.startswith("error:")]
        assert errors and ("same transactional.id took over" in errors[-1]
                           or "not by this pgbridge" in errors[-1]), first.log()[-3000:]
    # ... and nothing it had open became visible: every change exactly once, transactions whole
    seen: Counter[tuple[int, int]] = Counter()
    for topic in _topics(topic_prefix):
        for value in _decoded(store, committed[topic]):
            seen[(value["source"]["commit_lsn"], value["transaction"]["total_order"])] += 1
    assert set(seen.values()) == {1}
    assert len({lsn for lsn, _ in seen}) == workload.committed
    assert check_whole_transactions(store, committed, topic_prefix) == workload.committed


def _resumed_leader_outcome(bridge: BridgeProcess) -> str | None:
    """What a leader resumed after a standby took over did: ``stopped`` (it exited: Kafka's fencing
    or its slot monitor reached it first, or its lost lease did while a Kafka transaction was open,
    whose abort the broker refuses as fenced), or ``standing by`` (its lost lease reached it first
    with no Kafka transaction open: nothing to abort, nothing it can commit, so it waits for the
    lock like any standby). Either way it commits nothing; which one is a race inside the process."""
    if bridge.process is not None and bridge.process.poll() is not None:
        return "stopped"
    return "standing by" if "standing by: another replica holds the leader lock" in bridge.log() else None
