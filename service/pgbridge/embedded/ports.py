"""Free TCP ports on 127.0.0.1 for throwaway servers.

Ports are picked *below* the kernel's ephemeral range. The kernel hands out ephemeral ports as the
source port of outgoing connections, so a server port inside that range can be taken by any client
while its server is down (a broker outage test restarts the broker on the same port), and a client
that reconnects to ``127.0.0.1:P`` can even connect to itself when the kernel picks ``P`` as its source
port. Below the range only an explicit ``bind`` can take a port, and we check for that.

A port is free when checked, and bound by its server only once that server has started, seconds
later for a JVM. Another process picking ports on the same host (a second test worker, a second
``pgbridge demo``) could check the same port in between: two Kafka brokers of a test run once
collided so ("Address already in use"). So a port handed out is also claimed on the host: a file
named after it under ``<tmp>/pgbridge-ports`` holding the claiming process's id, created under an
exclusive lock and taken over only once that process is gone.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path
from typing import Final

from pgbridge.embedded import EmbeddedError

_LOWEST_PORT: Final = 10_000
_EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_CLAIMS: Final = Path(tempfile.gettempdir()) / "pgbridge-ports"
_handed_out: set[int] = set()
_lock = threading.Lock()


def _ephemeral_start() -> int:
    try:
        low, _high = _EPHEMERAL_RANGE.read_text().split()
        return int(low)
    except (OSError, ValueError):
        return 32_768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _claimed_by_a_live_process(claim: Path) -> bool:
    """Whether ``claim`` names a process still running. Claims are written under the lock, so a
    missing, empty or garbled one (a process killed while writing it) is stale."""
    try:
        pid = int(claim.read_text(encoding="ascii"))
    except (FileNotFoundError, ValueError):
        return False
    try:
        os.kill(pid, 0)  # PermissionError: another user's process, alive
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def claim_on_host(port: int, claims: Path = _CLAIMS) -> bool:
    """Claim ``port`` against the other processes of this host; False when a live one holds it.
    Without a usable claims directory (another user's, a read-only tmp) every port counts as
    unclaimed: the in-process check and the bind check still hold."""
    try:
        claims.mkdir(exist_ok=True)
        with open(claims / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            claim = claims / str(port)
            if _claimed_by_a_live_process(claim):
                return False
            claim.write_text(str(os.getpid()), encoding="ascii")  # a stale claim is overwritten
            return True
    except OSError:
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to and this process has not handed out before."""
    with _lock:
        ephemeral_start = _ephemeral_start()
        if ephemeral_start - _LOWEST_PORT >= 1_000:
            for _ in range(200):
                port = random.randrange(_LOWEST_PORT, ephemeral_start)
                if port not in _handed_out and _bindable(port) and claim_on_host(port):
                    _handed_out.add(port)
                    return port
        # Unusual ephemeral range: fall back to a kernel-chosen port.
        for _ in range(200):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out and claim_on_host(port):
                _handed_out.add(port)
                return port
    raise EmbeddedError("could not find a free TCP port on 127.0.0.1")
