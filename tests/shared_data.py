"""Where the tests find the published reference data, which is never part of the repository:
``CAUCUS_SHARED_DATA`` when it is set (a directory holding ``iowa2020/``), else the repository's sibling
``shared/data``. Tests that need the data skip, naming the place they looked, when it is not there."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SHARED_DATA", "IOWA2020", "WHERE"]

SHARED_DATA = Path(os.environ.get("CAUCUS_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
IOWA2020 = SHARED_DATA / "iowa2020"
WHERE = "set CAUCUS_SHARED_DATA to the directory that holds iowa2020/, or put it at the repository's sibling shared/data"
