"""The broker limit: produce ``--count`` records of ``--size`` bytes as fast as librdkafka takes them.

Same producer settings as pgbridge's ``publish/producer.py`` (idempotent, ``acks=all``,
``linger.ms`` 5, ``batch.num.messages`` 10,000), one delivery callback per record, timed from the
first ``produce`` to the last delivery report. Prints one JSON object. Run as its own process by
``bench/run.py``; usable alone: ``python bench/e2e/raw_producer.py --bootstrap HOST:PORT --topic T``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=250, help="value bytes")
    parser.add_argument("--key-size", type=int, default=18, help="key bytes")
    args = parser.parse_args()

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    futures = admin.create_topics([NewTopic(args.topic, num_partitions=1, replication_factor=1)])
    futures[args.topic].result(30)
    producer = Producer({"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "queue.buffering.max.messages": 100_000,
                         "queue.buffering.max.kbytes": 1024 * 1024, "batch.num.messages": 10_000})
    value = os.urandom(args.size)
    key_base = os.urandom(max(0, args.key_size - 8))
    delivered = 0
    failed = 0

    def on_delivery(error: object, _message: object) -> None:
        nonlocal delivered, failed
        if error is None:
            delivered += 1
        else:
            failed += 1

    producer.produce(args.topic, value, b"warm-up")  # connection, metadata and producer id first
    producer.flush(30)
    cpu_start = time.process_time()
    started = time.monotonic()
    produce = producer.produce
    for i in range(args.count):
        key = key_base + i.to_bytes(8, "big")
        while True:
            try:
                produce(args.topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    seconds = time.monotonic() - started
    print(json.dumps({"seconds": seconds, "delivered": delivered, "failed": failed,
                      "cpu_s": time.process_time() - cpu_start}))


if __name__ == "__main__":
    main()
