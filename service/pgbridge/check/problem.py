"""One finding of ``pgbridge check``: what is wrong and the fix, as one line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    severity: str  # "error" fails the check; "warning" is reported but passes; "info" is a fact
    message: str
    fix: str

    def line(self) -> str:
        return f"{self.severity}: {self.message} — fix: {self.fix}"

