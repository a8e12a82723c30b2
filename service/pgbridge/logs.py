"""Structured logging: key=value text or one JSON object per line, with secrets redacted.

Fields come from ``extra={...}``. Redaction runs on the final text, so a password can never leak
through a libpq or librdkafka message that quotes a connection string.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

_STANDARD: Final = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_SECRET_PATTERNS: Final = (
    (re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE), r"\1***"),
    (re.compile(r"(://[^:/@\s]+:)[^@\s]+@"), r"\1***@"),
    (re.compile(r"((?:sasl\.password|ssl\.key\.password|basic\.auth\.user\.info)\W+)\S+", re.IGNORECASE),
     r"\1***"),    # any setting named for a secret (sasl.oauthbearer.client.secret, fs.s3a.secret.key) given as name=value
    (re.compile(r"([\w.-]*secret[\w.-]*\s*=\s*)\S+", re.IGNORECASE), r"\1***"),
)


def redact(text: str) -> str:
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {key: value for key, value in vars(record).items() if key not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        payload.update(_fields(record))
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(payload, default=str))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        extras = " ".join(f"{key}={value}" for key, value in _fields(record).items())
        line = f"{stamp} {record.levelname.lower():7} {record.name}: {record.getMessage()}"
        if extras:
            line = f"{line} {extras}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return redact(line)


# librdkafka repeats a failing connection attempt every reconnect backoff (about 20 lines a second
# against a refused port); one line per distinct message per window is what an operator can read.
KAFKA_LOG_WINDOW_S: Final = 30.0
_NUMBERS: Final = re.compile(r"\d+")


class LibrdkafkaLog:
    """The ``logger`` of every confluent-kafka client: librdkafka's lines as structured records.

    confluent-kafka calls ``log(level, "%s [%s] %s", facility, client name, message)``. Each
    distinct message (numbers folded, so ``after 3ms`` and ``after 5ms`` are one) is logged at most
    once per ``window_s``; the next line after a window says how many were suppressed. Lines pass
    through the same redaction as every other record.
    """

    def __init__(self, logger: logging.Logger | None = None, *, window_s: float = KAFKA_LOG_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger or logging.getLogger("librdkafka")
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def log(self, level: int, fmt: str, *args: object) -> None:
        if not self._logger.isEnabledFor(level):
            return
        if len(args) >= 3:
            facility, client, message = str(args[0]), str(args[1]), str(args[2])
        else:
            facility, client, message = "", "", (fmt % args if args else fmt)
        key = (facility, _NUMBERS.sub("#", message))
        now = self._clock()
        with self._lock:
            first, suppressed = self._seen.get(key, (-float("inf"), 0))
            if now - first < self._window_s:
                self._seen[key] = (first, suppressed + 1)
                return
            self._seen[key] = (now, 0)
            if len(self._seen) > 1024:  # bounded: forget the oldest half
                for stale in sorted(self._seen, key=lambda k: self._seen[k][0])[:512]:
                    del self._seen[stale]
        extra: dict[str, object] = {"facility": facility, "client": client}
        if suppressed:
            extra["suppressed"] = suppressed
        self._logger.log(level, "%s", message, extra=extra)


def configure_logging(level: str = "INFO", *, json_format: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_format else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # librdkafka's lines come through LibrdkafkaLog (deduplicated per window); warnings and errors
    # are worth seeing, its chatter only when debugging.
    logging.getLogger("librdkafka").setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
