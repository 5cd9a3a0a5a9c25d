"""The one exception type of the caucus math.

Why a dedicated ``ValueError`` subclass: callers at the edges (intake, importers,
the read API) must tell "this input breaks a caucus rule" apart from programming
errors, and turn it into a message for the person who sent it.  Every message
names the field and the rule it breaks, so it can be shown as it is.
"""

from __future__ import annotations

__all__ = ["CaucusMathError"]


class CaucusMathError(ValueError):
    """Input that no caucus could have produced (negative counts, an overcount, ...).

    ``field`` names the offending input (``"final"``, ``"delegates"``, ...) and
    ``rule`` the section of RULES.md it breaks, so that a rejected submission can
    be explained without parsing the message.
    """

    def __init__(self, field: str, message: str, rule: str | None = None) -> None:
        self.field = field
        self.rule = rule
        text = f"{field}: {message}"
        if rule:
            text += f" ({rule})"
        super().__init__(text)
