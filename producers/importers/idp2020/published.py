"""The published 2020 files, known by their SHA-256 digests.

The importer needs no credential because it writes only what the party published. Nothing but the
files' content can show that: a copy with one count changed imports as readily as the real releases,
and its results would carry the importer's name. So each file the importer reads is compared with the
digest of the published one; records imported from other files are written under a writer that says
so (``UNPUBLISHED_WRITER``), which makes them direct writes: ``caucus trail`` shows the writer and
``caucus audit`` lists every such record (``DIRECT_WRITE``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ledger.record_headers import UNPUBLISHED_IMPORT

__all__ = ["PUBLISHED", "UNPUBLISHED_WRITER", "unpublished"]

PUBLISHED = {
    "idp_apportionment.csv": "b87006a7c3cc95c910eb70e3a0ec42a89a141af4c3bf0f579a452dcb5fb96e5c",
    "idp_results_2020-02-07T0113Z.csv": "aceec2bc960242a1c14c80e80c0fa28a7dd3ca809dd02f68d354de2390e7a0fe",
    "idp_results_2020-02-08T0628Z.csv": "294f95a6ea08abe8612761124b2b3e1051a5beba4a99e612086b57ff4e9aa76f",
    "idp_results_2020-04-06T2345Z_certified.csv": "a25f2a8f90438b7bdb3aa379975ce00a8fb5afc0f4ee7f10e8b481d2750a7423",
    "iowa2020_precincts.csv": "b368860562f600c0553ed33080c8fe7097a679c6bf9eca8d0f56d78f6ce325f1",
    "nyt_feed_2020-02-06T1850Z.csv": "093d84cea1edd525ee31bb3cc2f553a3b067c830582ca4c8497ed3b4096b972d",
}
"""The files the importer reads, as the party (and, for the directory and the feed, the press) published them."""

UNPUBLISHED_WRITER = UNPUBLISHED_IMPORT + "idp2020"
"""The writer of records imported from other files: not ``importer:``, so a direct write (module docstring)."""


def unpublished(data_dir: Path) -> list[str]:
    """The files of ``data_dir`` the importer reads whose content is not the published one (a missing
    file is the import's own error, not listed here)."""
    changed = []
    for name, digest in PUBLISHED.items():
        path = data_dir / name
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            changed.append(name)
    return changed
