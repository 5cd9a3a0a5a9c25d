"""Timestamps as text: the one spelling the stores and states use (``datetime.isoformat``).

Why a helper: a rebuild writes one of these per event into the event index, and ``isoformat`` was
a measurable share of the runner's time. orjson formats an aware UTC datetime in C as RFC 3339,
which for UTC is exactly ``isoformat``'s text; any other zone (an offset that is not whole minutes
has no RFC 3339 spelling) takes ``isoformat`` itself, so the text never depends on the path.
"""

from __future__ import annotations

from datetime import datetime, timezone

import orjson

__all__ = ["iso_text", "iso_texts"]

_UTC = timezone.utc


def iso_text(at: datetime) -> str:
    """``at.isoformat()``, faster for the UTC datetimes the codec decodes."""
    if at.tzinfo is _UTC:
        return orjson.dumps(at)[1:-1].decode()
    return at.isoformat()


def iso_texts(ats: list[datetime]) -> list[str]:
    """``iso_text`` of each, in one orjson call where every one is UTC (a rebuild's chunk of event
    times): the list's JSON text split at the quotes between its items, which no time's text holds."""
    if all(at.tzinfo is _UTC for at in ats):
        text = orjson.dumps(ats).decode()
        return text[2:-2].split('","') if ats else []
    return [iso_text(at) for at in ats]
