"""``iso_text`` is ``isoformat`` to the letter, whichever path formats it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from ledger.timestamps import iso_text, iso_texts

_OFFSETS = st.timedeltas(min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59))


@given(st.datetimes(timezones=st.just(timezone.utc)))
def test_utc_datetimes_read_as_isoformat(at: datetime) -> None:
    assert iso_text(at) == at.isoformat()


@given(st.datetimes(timezones=st.one_of(st.none(), st.timezones(), _OFFSETS.map(timezone))))
def test_any_zone_naive_or_odd_offset_reads_as_isoformat(at: datetime) -> None:
    assert iso_text(at) == at.isoformat()


def test_an_offset_of_seconds_keeps_its_seconds() -> None:
    at = datetime(2020, 2, 3, 19, 0, 22, tzinfo=timezone(timedelta(seconds=3725)))
    assert iso_text(at) == "2020-02-03T19:00:22+01:02:05"


@given(st.lists(st.datetimes(timezones=st.just(timezone.utc)), max_size=20),
       st.lists(st.datetimes(timezones=st.one_of(st.none(), st.timezones(), _OFFSETS.map(timezone))), max_size=3))
def test_a_list_of_times_reads_as_each_ones_isoformat(utc: list[datetime], others: list[datetime]) -> None:
    """All UTC (one orjson call) or mixed with other zones (each on its own): the same texts."""
    assert iso_texts(utc) == [at.isoformat() for at in utc]
    mixed = utc + others
    assert iso_texts(mixed) == [at.isoformat() for at in mixed]
