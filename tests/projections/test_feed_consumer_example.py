"""The consumer example of docs/feed.md runs as written, with nothing but fastavro, kafka-python and the
schemas `caucus schemas export` writes, against a real broker, and prints the statewide SDEs that
`caucus subscribe` prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

CAUCUS = str(Path(sys.executable).parent / "caucus")
DOC = Path(__file__).resolve().parents[2] / "docs" / "feed.md"


def _example() -> str:
    section = DOC.read_text(encoding="utf-8").split("## Schemas and a consumer in 20 lines", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "docs/feed.md has its consumer example"
    return found.group(1)


def test_the_example_is_twenty_lines_that_import_only_fastavro_and_kafka() -> None:
    code = _example()
    assert len(code.strip().splitlines()) <= 20
    imported = {m.split(".")[0] for m in re.findall(r"^(?:from|import) ([\w.]+)", code, re.M)}
    assert imported <= {"io", "json", "os", "pathlib", "fastavro", "kafka"}, imported


def test_the_schemas_export_gives_the_fingerprints_records_carry(tmp_path: Path) -> None:
    from fastavro import parse_schema
    from fastavro.schema import fingerprint, to_parsing_canonical_form

    from ledger.codec import default_codec

    done = subprocess.run([CAUCUS, "schemas", "export", str(tmp_path / "schemas"), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["schemas"]
    codec_fps = {(i.type, i.version): i.fingerprint.hex() for i in default_codec().schemas()}
    for row in rows:
        schema = json.loads((tmp_path / "schemas" / row["file"]).read_text())
        assert fingerprint(to_parsing_canonical_form(parse_schema(schema)), "CRC-64-AVRO") == row["fingerprint"]
        if row["log"] == "events":
            assert codec_fps[(row["type"], row["version"])] == row["fingerprint"], row
    assert {r["type"] for r in rows if r["log"] == "results"} >= {"UnitTallyPublished", "AreaTallyPublished"}


def test_the_consumer_example_reads_the_feed_on_kafka(
    support: ModuleType, kafka_bootstrap: str, unique_topic: str, pg_dsn: str, tmp_path: Path
) -> None:
    from ledger.log.kafka import provision_topic

    results_topic = f"{unique_topic}-results"
    provision_topic(kafka_bootstrap, unique_topic, 8)
    support.produce(kafka_bootstrap, unique_topic, support.election_log(40, corrections=2, rejections=1), 8)
    env: dict[str, Any] = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}
    env["CAUCUS_RESULTS_TOPIC"] = results_topic
    base = [CAUCUS, "--data-dir", str(tmp_path), "--kafka", kafka_bootstrap, "--topic", unique_topic, "--database", pg_dsn]
    subprocess.run([*base, "project", "--until-caught-up", "-q", "--session-timeout-ms", "2000", "--group", f"ex-{unique_topic}"],
                   env=env, check=True, timeout=120)
    subprocess.run([CAUCUS, "schemas", "export", str(tmp_path / "schemas")], check=True, timeout=60, capture_output=True)
    example = tmp_path / "consumer.py"
    example.write_text(_example(), encoding="utf-8")
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=120,
                          env={**env, "SCHEMAS": str(tmp_path / "schemas"), "TOPIC": results_topic, "BOOTSTRAP": kafka_bootstrap})
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    subscribed = subprocess.run([*base, "subscribe", "--from-beginning", "--until-idle", "3"], env=env,
                                capture_output=True, text=True, timeout=120)
    assert subscribed.returncode == 0, subscribed.stderr
    states = {}
    for line in subscribed.stdout.splitlines():
        d = json.loads(line)
        if d.get("kind") == "state":
            states[d["area"]] = {"election": d["area"], "version": d["version"], "sde": d["sde_display_sum"]}
    assert printed and printed == [states[k] for k in sorted(states)]
