"""Fetch a JVM component's jars with Maven into a local cache, once, and say where they are.

Why Maven and not a download: the machines (developers', CI's, users') reach Maven Central only
through Maven as it is configured there; a pom kept in the repository is the whole recipe, and its
hash names the cache folder so an edited pom never mixes with jars of an older one.

Usage: ``python jvm/fetch.py kafka [more ...]`` prints one directory per component.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

HERE: Final = Path(__file__).resolve().parent
MAVEN_TIMEOUT_S: Final = 900.0


class FetchError(RuntimeError):
    """Maven could not provide a component's jars (the message carries Maven's last lines)."""


def cache_root() -> Path:
    return Path(os.environ.get("PGBRIDGE_JVM_CACHE") or Path.home() / ".cache" / "pgbridge" / "jvm")


def components() -> list[str]:
    return sorted(p.parent.name for p in HERE.glob("*/pom.xml"))


def pom_of(component: str) -> Path:
    pom = HERE / component / "pom.xml"
    if not pom.is_file():
        raise FetchError(f"no JVM component {component!r}: expected {pom} (known: {', '.join(components())})")
    return pom


def target_dir(component: str) -> Path:
    """``<cache>/<component>-<first 12 hex digits of the pom's sha256>``."""
    digest = hashlib.sha256(pom_of(component).read_bytes()).hexdigest()[:12]
    return cache_root() / f"{component}-{digest}"


def fetch(component: str) -> Path:
    """The directory holding every jar of ``component``; runs Maven only the first time.

    A ``.complete`` marker is written last, so an interrupted copy is redone; a file lock keeps two
    test processes from copying into the same folder at once.
    """
    target = target_dir(component)
    marker = target / ".complete"
    if marker.exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FetchError("Maven (`mvn`) is not installed: install it (Debian: apt-get install maven) to run "
                         f"the JVM component {component!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{component}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        pom = pom_of(component)
        # A pom with <artifactItems> names exact artifacts (dependency:copy, no transitive resolution);
        # any other pom lists dependencies to copy with everything they need.
        goal = ["dependency:copy"] if "<artifactItems>" in pom.read_text() else \
            ["dependency:copy-dependencies", "-DincludeScope=runtime"]
        cmd = [mvn, "-q", "-B", "-f", str(pom), *goal, f"-DoutputDirectory={target}"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise FetchError(f"Maven did not fetch {component!r} within {MAVEN_TIMEOUT_S:.0f} s") from exc
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise FetchError(f"Maven failed to fetch {component!r} (exit {done.returncode}):\n{tail}")
        if not any(target.glob("*.jar")) and not any(target.glob("*.zip")):
            raise FetchError(f"Maven fetched no jar or archive for {component!r} into {target}")
        marker.write_text("ok\n")
    return target


def classpath(component: str) -> str:
    """A ``java -cp`` value: every jar of the component (Java expands ``dir/*``)."""
    return str(fetch(component) / "*")


def main(argv: list[str]) -> int:
    names = argv or components()
    try:
        for name in names:
            print(fetch(name))
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
