"""What an import could not use, said to the operator instead of skipped silently.

Severity decides the exit code: ``warning`` means one row or unit was left out or guessed at and the
rest of the import stands; ``error`` means the input cannot be trusted as a whole (a file missing, a
header wrong, a ratio that is not constant), so nothing is appended.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["Issue", "Severity", "has_errors", "utf8_text"]

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


def utf8_text(path: Path, where: str, issues: list[Issue]) -> io.StringIO | None:
    """The file as text for ``csv.reader``, or None with an error naming the line of the first byte that
    is not UTF-8 (a file damaged or in another encoding cannot be half imported, so nothing is). Read
    whole: the published files are a few megabytes. ``OSError`` is the caller's to name."""
    data = path.read_bytes()
    try:
        return io.StringIO(data.decode("utf-8-sig"), newline="")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        issues.append(Issue("error", f"{where}:{line}", f"not UTF-8 text (byte 0x{data[exc.start]:02x}: {exc.reason}); "
                            "the published files are UTF-8, and nothing is imported"))
        return None
