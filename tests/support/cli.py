"""pgbridge's command line in a child process, as an operator runs it: ``python -m pgbridge ...``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping


def clean_env(settings: Mapping[str, str] | None = None, /, **more: str) -> dict[str, str]:
    """This process's environment without its ``PGBRIDGE_`` settings (a developer's shell may have
    some), then ``settings`` and ``more``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PGBRIDGE_")}
    return {**env, **(settings or {}), **more}


def pgbridge(*args: str, env: Mapping[str, str] | None = None, stdin: int | None = subprocess.DEVNULL,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m pgbridge *args`` with ``env`` over a clean environment; stdout and stderr as text."""
    return subprocess.run([sys.executable, "-m", "pgbridge", *args], env=clean_env(env), stdin=stdin,
                          capture_output=True, text=True, timeout=timeout)


def check(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``pgbridge check *args``."""
    return pgbridge("check", *args, env=env)
