"""The container image's HEALTHCHECK: ``python -m pgbridge.probe [PATH]``.

It asks the running pgbridge for ``PATH`` (``/healthz`` unless given) on the HTTP port pgbridge
itself uses: the settings are loaded exactly as ``pgbridge run`` loads them (defaults < the file of
``PGBRIDGE_CONFIG`` < environment), so ``http.port`` set in a configuration file is followed as
well as ``PGBRIDGE_HTTP__PORT``. (A file given only as ``run --config FILE`` is invisible to a
separate process: in the image, name it with ``PGBRIDGE_CONFIG`` instead.)

Exit 0 when the answer is 200, else 1 with one line on stderr: the endpoint's reason, a refused
connection, an invalid configuration, or ``http.port: 0`` (HTTP off, so there is nothing to ask and
the check fails by design). Proxies are bypassed, so an inherited ``HTTP(S)_PROXY`` cannot turn a
local probe into an outbound request.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Final

from pgbridge.config import Settings, load_settings
from pgbridge.errors import ConfigError

TIMEOUT_S: Final = 4.0
_WILDCARDS: Final = {"", "0.0.0.0", "::", "[::]"}


def probe_url(settings: Settings, path: str = "/healthz") -> str | None:
    """The URL of ``path`` on this pgbridge's HTTP server; ``None`` when HTTP is off."""
    port = settings.http.port
    if port == 0:
        return None
    host = settings.http.host
    if host in _WILDCARDS:
        host = "::1" if ":" in host else "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    path = args[0] if args else "/healthz"
    try:
        settings = load_settings(None)
    except ConfigError as exc:
        print(f"unhealthy: invalid configuration: {exc}", file=sys.stderr)
        return 1
    url = probe_url(settings, path)
    if url is None:
        print("unhealthy: http.port is 0 (HTTP off), so there is no endpoint to probe", file=sys.stderr)
        return 1
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=TIMEOUT_S) as response:
            return 0 if response.status == 200 else 1
    except urllib.error.HTTPError as exc:
        print(f"unhealthy: {url} answered {exc.code}: {exc.read().decode(errors='replace').strip()}",
              file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
