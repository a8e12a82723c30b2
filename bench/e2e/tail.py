"""Follow a topic live while a system streams: count records, note when the last one arrived,
and keep a sample of (Kafka timestamp, value) pairs for commit → Kafka latency.

The reader is one librdkafka consumer with explicit partition assignment (no group), created only
once the topic exists: Tansu creates a topic when a metadata request names it, so existence is
checked by listing all topics. ``fetch.wait.max.ms`` is 10 ms, so a record is seen within a few
milliseconds of the broker committing it; the arrival time of the last record is therefore an
upper bound on when the producer's last acknowledgement was sent (the broker commits, then
acknowledges; with ``acks=all`` on a single broker both happen in the same request).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, Consumer, TopicPartition


@dataclass
class TailResult:
    count: int = 0
    first_arrival: float | None = None  # wall clock when the first record was read
    last_arrival: float | None = None  # wall clock when the record that completed the count was read
    max_timestamp_ms: int | None = None  # highest Kafka record timestamp seen
    byte_count: int = 0  # key + value bytes
    samples: list[tuple[int, bytes]] = field(default_factory=list)  # (timestamp ms, value)


class TopicTail:
    def __init__(self, bootstrap: str, topic: str, expected: int, *, sample_every: int = 1) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.expected = expected
        self.sample_every = max(1, sample_every)
        self.result = TailResult()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"tail-{topic}", daemon=True)

    def start(self) -> TopicTail:
        self._thread.start()
        return self

    def wait(self, timeout: float) -> bool:
        """True once ``expected`` records were read; False on timeout."""
        done = self._done.wait(timeout)
        if self._error is not None:
            raise self._error
        return done

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            self._follow()
        except BaseException as exc:  # reported by wait()
            self._error = exc
            self._done.set()

    def _follow(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": f"pgbridge-bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 10,
            "topic.metadata.refresh.interval.ms": 1000,
        })
        result = self.result
        try:
            while not self._stop.is_set():
                metadata = consumer.list_topics(timeout=5)  # all topics: creates nothing
                topic = metadata.topics.get(self.topic)
                if topic is not None and topic.error is None and topic.partitions:
                    consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                                     for p in sorted(topic.partitions)])
                    break
                time.sleep(0.05)
            every = self.sample_every
            while not self._stop.is_set():
                batch = consumer.consume(num_messages=5000, timeout=0.05)
                if not batch:
                    continue
                now = time.time()
                for message in batch:
                    if message.error() is not None:
                        continue
                    result.count += 1
                    value = message.value()
                    key = message.key()
                    result.byte_count += (len(value) if value else 0) + (len(key) if key else 0)
                    kind, timestamp = message.timestamp()
                    if kind != TIMESTAMP_NOT_AVAILABLE and (result.max_timestamp_ms is None
                                                            or timestamp > result.max_timestamp_ms):
                        result.max_timestamp_ms = timestamp
                    if result.count % every == 0 and value is not None and kind != TIMESTAMP_NOT_AVAILABLE:
                        result.samples.append((timestamp, value))
                    if result.count == self.expected:
                        result.last_arrival = now
                        self._done.set()
                if result.first_arrival is None:
                    result.first_arrival = now
        finally:
            consumer.close()


def read_all(bootstrap: str, topic: str, *, idle: float = 1.0, timeout: float = 30.0) -> list[tuple[bytes | None,
                                                                                                   bytes | None]]:
    """Every (key, value) of a small topic (``_schemas``), reading until ``idle`` seconds of silence."""
    out: list[tuple[bytes | None, bytes | None]] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pgbridge-bench-{uuid.uuid4().hex}",
                        "enable.auto.commit": False, "auto.offset.reset": "earliest",
                        "allow.auto.create.topics": False, "fetch.wait.max.ms": 10})
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            topic_md = consumer.list_topics(timeout=5).topics.get(topic)
            if topic_md is not None and topic_md.partitions:
                consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in topic_md.partitions])
                break
            time.sleep(0.1)
        last = time.monotonic()
        while time.monotonic() - last < idle and time.monotonic() < deadline:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                out.append((message.key(), message.value()))
                last = time.monotonic()
    finally:
        consumer.close()
    return out
