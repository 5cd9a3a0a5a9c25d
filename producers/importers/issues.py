"""What an import could not use, said to the operator instead of skipped silently.

Severity decides the exit code: ``warning`` means one row or unit was left out or guessed at and the
rest of the import stands; ``error`` means the input cannot be trusted as a whole (a file missing, a
header wrong, a ratio that is not constant), so nothing is appended.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["Issue", "Severity", "has_errors", "utf8_rows"]

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



def utf8_rows(reader: Any, where: str, issues: list[Issue]) -> Iterator[list[str]]:
    """A ``csv.reader``'s rows, until a byte that is not UTF-8: that is an error naming the file and
    the line (the last one read whole: the bad byte is in the block read after it), not a crash. A
    file damaged or in another encoding cannot be half imported, so nothing is."""
    try:
        yield from reader
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start : exc.start + 1].hex() if isinstance(exc.object, bytes) else "?"
        issues.append(Issue("error", f"{where}:{reader.line_num + 1}", f"not UTF-8 text (byte 0x{byte}: {exc.reason}) "
                            "at or after this line; the published files are UTF-8, and nothing is imported"))
