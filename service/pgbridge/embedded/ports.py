"""Free TCP ports on 127.0.0.1 for throwaway servers.

Ports are picked *below* the kernel's ephemeral range. The kernel hands out ephemeral ports as the
source port of outgoing connections, so a server port inside that range can be taken by any client
while its server is down (a broker outage test restarts the broker on the same port), and a client
that reconnects to ``127.0.0.1:P`` can even connect to itself when the kernel picks ``P`` as its source
port. Below the range only an explicit ``bind`` can take a port, and we check for that.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path
from typing import Final

from pgbridge.embedded import EmbeddedError

_LOWEST_PORT: Final = 10_000
_EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to and this process has not handed out before."""
    with _lock:
        ephemeral_start = _ephemeral_start()
        if ephemeral_start - _LOWEST_PORT >= 1_000:
            for _ in range(200):
                port = random.randrange(_LOWEST_PORT, ephemeral_start)
                if port not in _handed_out and _bindable(port):
                    _handed_out.add(port)
                    return port
        # Unusual ephemeral range: fall back to a kernel-chosen port.
        for _ in range(200):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise EmbeddedError("could not find a free TCP port on 127.0.0.1")
