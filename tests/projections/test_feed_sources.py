"""One results topic, one event log: a second log's runner refuses to publish into another's feed.

Both logs hold election ``e1`` with the same unit ids, so their tallies would share every feed key and
subscribers would keep whichever version is higher: a mixed, silently wrong feed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from ledger.log.kafka import KafkaLog, provision_topic

CAUCUS = str(Path(sys.executable).parent / "caucus")


def _env(results_topic: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}
    return {**env, "CAUCUS_RESULTS_TOPIC": results_topic}


def _records(bootstrap: str, topic: str) -> int:
    log = KafkaLog(bootstrap, topic, partitions=4)
    try:
        return sum(log.high_watermarks().values())
    finally:
        log.close()


def test_a_second_event_log_is_refused_the_first_ones_results_topic(
    support: ModuleType, kafka_bootstrap: str, unique_topic: str, tmp_path: Path
) -> None:
    results = f"{unique_topic}-shared-results"
    env = _env(results)
    runs = {}
    for name, seed_units in (("a", 40), ("b", 30)):
        topic = f"{unique_topic}-{name}"
        provision_topic(kafka_bootstrap, topic, 4)
        support.produce(kafka_bootstrap, topic, support.election_log(seed_units, corrections=1), 4)
        runs[name] = [CAUCUS, "--data-dir", str(tmp_path / name), "--kafka", kafka_bootstrap, "--topic", topic, "--partitions", "4",
                      "project", "--until-caught-up", "-q", "--session-timeout-ms", "2000", "--group", f"src-{topic}"]
    first = subprocess.run(runs["a"], env=env, capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    published = _records(kafka_bootstrap, results)
    assert published > 0

    refused = subprocess.run([*runs["b"], "--json"], env=env, capture_output=True, text=True, timeout=180)
    assert refused.returncode == 2, refused.stderr
    message = json.loads(refused.stderr)["error"]["message"]
    assert "another event log" in message and "CAUCUS_RESULTS_TOPIC" in message, message
    assert _records(kafka_bootstrap, results) == published, "nothing of the second log reached the first one's feed"

    again = subprocess.run(runs["a"], env=env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr  # its own feed: a restart goes on
    own = subprocess.run(runs["b"], env=_env(f"{unique_topic}-b-results"), capture_output=True, text=True, timeout=180)
    assert own.returncode == 0, own.stderr  # with a results topic of its own the second log publishes
    assert _records(kafka_bootstrap, f"{unique_topic}-b-results") > 0
