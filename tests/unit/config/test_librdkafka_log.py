"""librdkafka's log lines through pgbridge's logger: one line per distinct message per window."""

from __future__ import annotations

import io
import json
import logging

from pgbridge.logs import JsonFormatter, LibrdkafkaLog

REFUSED = "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused (after {}ms in state CONNECT)"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _capture(level: int = logging.WARNING) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(f"test.librdkafka.{id(stream)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(level)
    return logger, stream


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_repeated_failure_is_logged_once_per_window_and_then_counts_what_it_suppressed() -> None:
    logger, stream = _capture()
    clock = Clock()
    log = LibrdkafkaLog(logger, window_s=30.0, clock=clock)
    for attempt in range(20):  # twenty reconnect attempts in one second, each with another duration
        clock.now = attempt * 0.05
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "pgbridge-admin#producer-1", REFUSED.format(attempt))
    clock.now = 31.0
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "pgbridge-admin#producer-1", REFUSED.format(99))
    lines = _lines(stream)
    assert len(lines) == 2
    assert lines[0]["facility"] == "FAIL" and lines[0]["client"] == "pgbridge-admin#producer-1"
    assert lines[0]["level"] == "error" and "Connection refused" in str(lines[0]["msg"])
    assert "suppressed" not in lines[0]
    assert lines[1]["suppressed"] == 19


def test_distinct_messages_are_each_logged() -> None:
    logger, stream = _capture()
    log = LibrdkafkaLog(logger, clock=Clock())
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "c", "broker A down")
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "c", "broker B down")
    log.log(logging.WARNING, "%s [%s] %s", "REQTMOUT", "c", "broker A down")
    assert [line["msg"] for line in _lines(stream)] == ["broker A down", "broker B down", "broker A down"]


def test_levels_below_the_logger_level_cost_nothing_and_print_nothing() -> None:
    logger, stream = _capture(logging.CRITICAL)
    log = LibrdkafkaLog(logger, clock=Clock())
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "c", "refused")
    assert stream.getvalue() == ""


def test_secrets_in_a_librdkafka_line_are_redacted() -> None:
    logger, stream = _capture()
    LibrdkafkaLog(logger, clock=Clock()).log(logging.ERROR, "%s [%s] %s", "CONF", "c",
                                             "sasl.password=hunter2 rejected")
    assert "hunter2" not in stream.getvalue()
