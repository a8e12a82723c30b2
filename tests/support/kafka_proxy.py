"""A Kafka-protocol proxy for fault tests: one broker behind it, one fault in front of it.

Every request goes to the broker and every response back, except the first Produce request to
one partition (``fault``). That one is never forwarded: the proxy answers it NOT_LEADER_OR_FOLLOWER,
as a broker does for a partition it does not lead yet, and it answers only once the next Produce
request to that partition has gone to the broker (or after ``hold_s``). So the client sees what
librdkafka saw on a partition created moments before (publish/producer.py, ``unproven``): its first
batch refused while the second, already sent, is accepted as the partition's first. The broker
must advertise the proxy's address (``advertised.listeners``), so that the clients' connections
after the bootstrap come here too.

While the refusal waits, the answers to other requests on the connection go back as they come
(librdkafka matches answers by correlation id); only the fault partition's next answer waits
behind the refusal. Held in request order instead, they can fill the idempotent producer's five
requests in flight per connection, and the second row's batch, the one that releases the refusal,
is never sent: once in a full suite run under load, with exactly-once, librdkafka timed out "4
in-flight, 1 out-queue" requests after 30 s and the test saw a timeout instead of the unproven
delivery it is about.

Only what the fault needs is parsed: request headers, and the first topic and partition of a
Produce request (versions 9 to 12, which name topics; librdkafka 2.16 sends 10). Responses are
passed through as frames.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

PRODUCE = 0
NOT_LEADER_OR_FOLLOWER = 6


def _read_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed Kafka frame without its size; ``None`` once the peer closed."""
    head = _read_exact(sock, 4)
    if head is None:
        return None
    return _read_exact(sock, struct.unpack(">i", head)[0])


def _uvarint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _skip_tags(data: bytes, at: int) -> int:
    count, at = _uvarint(data, at)
    for _ in range(count):
        _tag, at = _uvarint(data, at)
        size, at = _uvarint(data, at)
        at += size
    return at


def produce_target(frame: bytes) -> tuple[int, str, int] | None:
    """``(correlation id, topic, partition)`` of a Produce request (its first topic and
    partition: librdkafka sends one partition per request), ``None`` for any other request."""
    api_key, version, correlation = struct.unpack(">hhi", frame[:8])
    if api_key != PRODUCE:
        return None
    if not 9 <= version <= 12:
        raise AssertionError(f"the proxy reads Produce versions 9-12 (topics by name), not {version}")
    client_id_length = struct.unpack(">h", frame[8:10])[0]
    at = _skip_tags(frame, 10 + max(0, client_id_length))  # request header v2 ends with tags
    transactional_id, at = _uvarint(frame, at)
    at += max(0, transactional_id - 1) + 2 + 4  # the id, acks, timeout_ms
    _topics, at = _uvarint(frame, at)
    name_length, at = _uvarint(frame, at)
    topic = frame[at:at + name_length - 1].decode()
    at += name_length - 1
    _partitions, at = _uvarint(frame, at)
    partition = struct.unpack(">i", frame[at:at + 4])[0]
    return correlation, topic, partition


def not_leader_response(correlation: int, topic: str, partition: int) -> bytes:
    """A ProduceResponse (versions 9-12, one topic, one partition) refusing it: not the leader."""
    name = topic.encode()
    body = (b"\x02" + _encode_uvarint(len(name) + 1) + name + b"\x02"
            + struct.pack(">ihqqq", partition, NOT_LEADER_OR_FOLLOWER, -1, -1, -1)
            + b"\x01"   # record_errors: empty
            + b"\x00"   # error_message: null
            + b"\x00"   # partition tags
            + b"\x00"   # topic tags
            + struct.pack(">i", 0) + b"\x00")  # throttle_time_ms, tags
    frame = struct.pack(">i", correlation) + b"\x00" + body  # response header v1: id, tags
    return struct.pack(">i", len(frame)) + frame


@dataclass
class _Held:
    """The refused request's answer, sent once ``release`` is set (or after the hold)."""

    response: bytes
    release: threading.Event = field(default_factory=threading.Event)


_BROKER = object()  # the next response comes from the broker
_FAULT = object()  # ... and answers a Produce to the fault partition: it follows the refusal
_WAKE = object()  # no request for a while: time to check the refusal's hold


class KafkaProxy:
    """Listens on ``port``; forwards to ``upstream``; refuses the first Produce to ``fault``."""

    def __init__(self, port: int, upstream: tuple[str, int], fault: tuple[str, int], *,
                 hold_s: float = 15.0) -> None:
        self.port = port
        self.upstream = upstream
        self.fault = fault
        self.hold_s = hold_s
        self.held = threading.Event()      # the first Produce to ``fault`` arrived and is held
        self.released = threading.Event()  # the next one went to the broker
        self.refused = threading.Event()   # the refusal was sent to the client
        self._held: _Held | None = None
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", port))
        self._sockets: list[socket.socket] = []
        self._closed = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaProxy:
        threading.Thread(target=self._accept, daemon=True, name="kafka-proxy").start()
        return self

    def close(self) -> None:
        self._closed = True
        for sock in [self._server, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> KafkaProxy:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        self._sockets += [client, upstream]
        order: queue.Queue[object] = queue.Queue()
        threading.Thread(target=self._answer, args=(client, upstream, order), daemon=True).start()
        try:
            while (frame := read_frame(client)) is not None:
                target = produce_target(frame)
                held = self._refuse(target)
                if held is not None:
                    order.put(held)
                    continue
                to_fault = target is not None and target[1:] == self.fault
                order.put(_FAULT if to_fault else _BROKER)
                upstream.sendall(struct.pack(">i", len(frame)) + frame)
                if to_fault:
                    self._release()
        except OSError:
            pass
        finally:
            order.put(None)

    def _refuse(self, target: tuple[int, str, int] | None) -> _Held | None:
        """The first Produce to ``fault``: held, to be refused."""
        if target is None or target[1:] != self.fault:
            return None
        with self._lock:
            if self.held.is_set():
                return None
            self._held = _Held(not_leader_response(*target))
            self.held.set()
            return self._held

    def _release(self) -> None:
        with self._lock:
            if self._held is not None and not self._held.release.is_set():
                self._held.release.set()
                self.released.set()

    def _answer(self, client: socket.socket, upstream: socket.socket, order: queue.Queue[object]) -> None:
        """The broker's responses as they come, and the refusal once released (or after the hold),
        always before the answer to the fault partition's next request."""
        held: _Held | None = None
        deadline = 0.0

        def refuse() -> None:
            nonlocal held
            assert held is not None
            held.release.wait(max(0.0, deadline - time.monotonic()))
            client.sendall(held.response)
            self.refused.set()
            held = None

        try:
            while True:
                try:
                    entry = order.get(timeout=0.05 if held is not None else None)
                except queue.Empty:
                    entry = _WAKE
                if held is not None and (held.release.is_set() or time.monotonic() >= deadline):
                    refuse()
                if entry is _WAKE:
                    continue
                if entry is None:
                    break
                if isinstance(entry, _Held):
                    held, deadline = entry, time.monotonic() + self.hold_s
                    continue
                frame = read_frame(upstream)
                if frame is None:
                    break
                if entry is _FAULT and held is not None:
                    refuse()
                client.sendall(struct.pack(">i", len(frame)) + frame)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.close()
