"""What an import could not use, said to the operator instead of skipped silently.

Severity decides the exit code: ``warning`` means one row or unit was left out or guessed at and the
rest of the import stands; ``error`` means the input cannot be trusted as a whole (a file missing, a
header wrong, a ratio that is not constant), so nothing is appended.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["Issue", "Severity", "has_errors"]

Severity = Literal["info", "warning", "error"]


@dataclass(frozen=True, slots=True)
class Issue:
    severity: Severity
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.where}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def has_errors(issues: Iterable[Issue]) -> bool:
    return any(i.severity == "error" for i in issues)
