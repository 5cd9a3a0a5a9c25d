"""The log: the one append-only sequence of encoded events that everything else is derived from.

``port`` defines what a log must do; ``sqlite`` (embedded), ``kafka`` and ``memory`` (this process only)
are the adapters, chosen by ``ledger.backends`` from configuration. All pass the same contract tests.
"""

from ledger.log.port import (
    EventLog,
    LogError,
    LogLostError,
    LogUnavailableError,
    PendingRecord,
    Position,
    StoredRecord,
)

__all__ = [
    "EventLog",
    "LogError",
    "LogLostError",
    "LogUnavailableError",
    "PendingRecord",
    "Position",
    "StoredRecord",
]
