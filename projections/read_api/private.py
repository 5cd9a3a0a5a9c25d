"""What a public answer must not show of the server: where its files are, its database and its brokers.

``caucus`` names them to its operator (a diff's sources, a store's errors); the read API answers anyone.
Strings are scrubbed where they stand in an answer (never in its JSON text: a pattern that runs past a
closing quote breaks the document), and a path only as a whole path, so a data directory called ``/data``
does not eat ``/database``, and one called ``/`` hides nothing it would have to mangle fractions for.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger.config import Settings

__all__ = ["private_words", "scrubbed"]

_PG_URL = re.compile(r"postgres(?:ql)?://[^\s\"',)]+")
_END = r"(?=[/\\\s\"'),:;]|$)"


def private_words(settings: Settings) -> Callable[[str], str]:
    """A function that replaces this server's private words in a text."""
    data_dir = Path(settings.data_dir)
    paths = {str(data_dir.resolve()), *([str(data_dir)] if len(data_dir.parts) > 1 else [])} - {"/", "."}
    patterns = [(re.compile(re.escape(p) + _END), "<data dir>") for p in sorted(paths, key=len, reverse=True)]
    literal = {settings.database: "<database>"} if settings.database else {}
    for broker in (settings.kafka or "").split(","):
        if broker.strip():
            literal[broker.strip()] = "<kafka>"

    def hide(text: str) -> str:
        for word, instead in literal.items():
            text = text.replace(word, instead)
        text = _PG_URL.sub("<database>", text)
        for pattern, instead in patterns:
            text = pattern.sub(instead, text)
        return text

    return hide


def scrubbed(value: Any, hide: Callable[[str], str]) -> Any:
    """``value`` (a JSON-able answer) with every string in it passed through ``hide``."""
    if isinstance(value, str):
        return hide(value)
    if isinstance(value, dict):
        return {k: scrubbed(v, hide) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v, hide) for v in value]
    return value
