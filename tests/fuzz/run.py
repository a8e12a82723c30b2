"""The long fuzz run: ``python -m tests.fuzz.run --seconds 300 [--batch 400] [--json out.json]``.

Rotates through every target of ``tests.fuzz.targets`` (single messages in each protocol version and
stream position, mutated sessions through decoder + assembler, decoded messages in any order into
the assembler) in Hypothesis batches with fresh random seeds until the time is up, then prints the
inputs tried, the time, the failures (each with Hypothesis' shrunk example) and the peak RSS. Exit
status 1 when anything failed. CI runs the short derandomized slice in ``tests/unit``; this is the
run to repeat after touching the decoder, the kernel or the assembler.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgbridge.decode.messages import Message
from tests.fuzz import targets

Target = tuple[str, Callable[[], None]]


def _message_target(common: settings, version: int, in_stream: bool,
                    tally: Callable[[], None]) -> Callable[[], None]:
    @common
    @given(buf=targets.message_bytes(version, in_stream))
    def message(buf: bytes) -> None:
        tally()
        targets.check_message(buf, version, in_stream)

    return message


def _session_target(common: settings, version: int, tally: Callable[[], None]) -> Callable[[], None]:
    @common
    @given(data=st.data())
    def session(data: st.DataObject) -> None:
        tally()
        with targets.fresh_spill_dir() as spill:
            targets.check_session(data.draw(targets.mutated_session(version)), version,
                                  Path(spill) / "spill")

    return session


def _assembler_target(common: settings, tally: Callable[[], None]) -> Callable[[], None]:
    @common
    @given(msgs=targets.message_objects())
    def assembler(msgs: list[Message]) -> None:
        tally()
        with targets.fresh_spill_dir() as spill:
            targets.check_messages_fed(msgs, Path(spill) / "spill")

    return assembler


def _targets(batch: int, counter: dict[str, int]) -> list[Target]:
    """One Hypothesis test per target and context; each call runs ``batch`` new examples."""
    common = settings(max_examples=batch, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck))

    def tally_for(name: str) -> Callable[[], None]:
        def tally() -> None:
            counter[name] = counter.get(name, 0) + 1
        return tally

    out: list[Target] = []
    for version, in_stream in targets.CONTEXTS:
        name = f"message v{version}{' in stream' if in_stream else ''}"
        out.append((name, _message_target(common, version, in_stream, tally_for(name))))
    for version in (1, 2, 3, 4):
        name = f"session v{version}"
        out.append((name, _session_target(common, version, tally_for(name))))
    out.append(("assembler", _assembler_target(common, tally_for("assembler"))))
    return out


def run(seconds: float, batch: int) -> dict[str, object]:
    counter: dict[str, int] = {}
    failures: list[dict[str, str]] = []
    started = time.monotonic()
    rounds = 0
    while time.monotonic() - started < seconds:
        for name, test in _targets(batch, counter):
            if time.monotonic() - started >= seconds:
                break
            try:
                test()
            except Exception as exc:
                failures.append({"target": name, "error": f"{type(exc).__name__}: {exc}"[:2000],
                                 "traceback": traceback.format_exc()[-4000:]})
        rounds += 1
    elapsed = time.monotonic() - started
    return {
        "seconds": round(elapsed, 1),
        "inputs": sum(counter.values()),
        "inputs_per_target": counter,
        "rounds": rounds,
        "failures": len(failures),
        "failure_details": failures,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--batch", type=int, default=400, help="examples per target per round")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    report = run(args.seconds, args.batch)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
