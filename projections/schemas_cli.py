"""``caucus schemas export DIR``: the Avro schemas of the event log and the results feed, self-contained.

Why: the shipped ``.avsc`` files refer to shared types (``Envelope``, ``Result``, ...) by name, and a
schema of version N may use the shared types of version N or of an earlier one. A consumer with stock
fastavro and those files would get other fingerprints than the ones the records carry. The exported
files have every shared type expanded in place, exactly as the codec registers them, so their
fingerprints (listed in ``fingerprints.json``) are the ones in the records' headers, and a consumer
needs nothing but fastavro and these files (docs/feed.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from ledger.cli_output import JsonOption, emit, fail
from ledger.codec import load_catalogue
from ledger.events import PAYLOAD_TYPES
from projections.feed_events import FEED_TYPES

__all__ = ["export_schemas", "register"]

INDEX_FILE = "fingerprints.json"
ENCODING = "Avro single-object encoding: 0xC3 0x01, the writer schema's 8-byte CRC-64-AVRO fingerprint, the body"


def export_schemas(directory: Path) -> list[dict[str, Any]]:
    """Write one expanded schema per (type, version) and the fingerprint index; return the index rows."""
    rows: list[dict[str, Any]] = []
    directory.mkdir(parents=True, exist_ok=True)
    for topic, types in (("events", PAYLOAD_TYPES), ("results", FEED_TYPES)):
        for (name, version), schema in sorted(load_catalogue(types).items()):
            canonical = to_parsing_canonical_form(parse_schema(dict(schema)))
            file = f"{name}.v{version}.avsc"
            (directory / file).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            # fastavro spells the fingerprint in the byte order the record header carries it.
            rows.append({"type": name, "version": version, "log": topic, "file": file,
                         "fingerprint": fingerprint(canonical, "CRC-64-AVRO")})
    index = {"encoding": ENCODING, "schemas": rows}
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return rows


def register(app: typer.Typer) -> None:
    schemas_app = typer.Typer(help="The records' Avro schemas, for consumers in any language.", no_args_is_help=True)
    app.add_typer(schemas_app, name="schemas")

    @schemas_app.command("export")
    def export(
        directory: Path = typer.Argument(..., help="Where to write the .avsc files and fingerprints.json (created if new)."),
        as_json: bool = JsonOption,
    ) -> None:
        """Write every schema of the event log and the results feed with its shared types expanded in
        place (TYPE.vN.avsc), and fingerprints.json: type, version, log (events or results), file and the
        CRC-64-AVRO fingerprint as the records' header carries it (hex). fastavro and these files decode
        every record (docs/feed.md). Exit 0: written; 2: the directory cannot be written."""
        try:
            rows = export_schemas(directory)
        except OSError as exc:
            raise fail(f"cannot write the schemas to {directory}: {exc}") from exc

        def human() -> None:
            typer.echo(f"wrote {len(rows)} schemas and {INDEX_FILE} to {directory}")
            for r in rows:
                typer.echo(f"  {r['fingerprint']}  {r['log']:<7}  {r['file']}")

        emit({"directory": str(directory), "schemas": rows}, as_json, human)
