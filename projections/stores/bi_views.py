"""SQL views of the serving projection for BI tools, in their own schema (``caucus``).

The store's tables are the runner's: versioned table sets (``proj_sets``, switched by ``proj_serving``),
tallies kept as the JSON text the ledger wrote, times as ISO text. A BI user should not need to know any
of that. These views show the serving set of the ``tally`` projection only, with jsonb and timestamptz
columns and one row per unit, per unit and candidate, per county and candidate, per state and candidate.

- ``caucus.unit_results``: one row per unit that has a state: status, reporting, D, T, the alignments,
  county delegates and SDEs (jsonb, by candidate), when its current result was recorded, the whole tally.
- ``caucus.unit_candidate_results``: one row per reporting unit and candidate: first and final alignment,
  county delegates, SDE (the 4-decimal display value, numeric).
- ``caucus.county_tallies`` / ``caucus.state_tallies``: their sums. SDE sums are sums of the displayed
  4-decimal values, the way the party published its totals (RULES §9); ``caucus tally`` gives exact ones.
- ``caucus.events``: the paper-trail index, with ``recorded_at`` as timestamptz.

Created (or replaced) when the store is opened and their version in ``proj_meta`` is not this one.
"""

from __future__ import annotations

__all__ = ["BI_SCHEMA", "BI_VIEWS_VERSION", "BI_VIEW_NAMES", "bi_view_statements"]

BI_SCHEMA = "caucus"
BI_VIEWS_VERSION = "1"
BI_VIEW_NAMES = ("unit_results", "unit_candidate_results", "county_tallies", "state_tallies", "events")

_SERVING = "JOIN proj_serving s ON s.set_id = {alias}.set_id AND s.name = 'tally'"


def bi_view_statements(schema: str = BI_SCHEMA) -> list[str]:
    return [
        f"CREATE SCHEMA IF NOT EXISTS {schema}",
        *(f"DROP VIEW IF EXISTS {schema}.{name} CASCADE" for name in reversed(BI_VIEW_NAMES)),
        f"""CREATE VIEW {schema}.unit_results AS
SELECT t.election_id,
       t.unit_id,
       t.county_id,
       t.status,
       t.tally::jsonb ->> 'name' AS unit_name,
       (t.tally::jsonb ->> 'reporting')::boolean AS reporting,
       (t.tally::jsonb ->> 'delegates')::integer AS delegates,
       (t.tally::jsonb ->> 'attendance')::integer AS attendance,
       t.tally::jsonb -> 'first' AS first_alignment,
       t.tally::jsonb -> 'final' AS final_alignment,
       t.tally::jsonb -> 'cds' AS county_delegates,
       t.tally::jsonb -> 'sde_display' AS sde,
       (t.tally::jsonb ->> 'result_recorded_at')::timestamptz AS result_recorded_at,
       t.tally::jsonb AS tally
FROM proj_unit_tallies t {_SERVING.format(alias="t")}""",
        f"""CREATE VIEW {schema}.unit_candidate_results AS
SELECT u.election_id,
       u.unit_id,
       u.county_id,
       c.key AS candidate,
       (u.first_alignment ->> c.key)::integer AS first_alignment,
       (u.final_alignment ->> c.key)::integer AS final_alignment,
       (u.county_delegates ->> c.key)::integer AS county_delegates,
       (u.sde ->> c.key)::numeric AS sde
FROM {schema}.unit_results u, jsonb_each(u.county_delegates) c
WHERE u.reporting""",
        f"""CREATE VIEW {schema}.county_tallies AS
SELECT election_id, county_id, candidate,
       sum(first_alignment) AS first_alignment, sum(final_alignment) AS final_alignment,
       sum(county_delegates) AS county_delegates, sum(sde) AS sde, count(*) AS units_reporting
FROM {schema}.unit_candidate_results
GROUP BY election_id, county_id, candidate""",
        f"""CREATE VIEW {schema}.state_tallies AS
SELECT election_id, candidate,
       sum(first_alignment) AS first_alignment, sum(final_alignment) AS final_alignment,
       sum(county_delegates) AS county_delegates, sum(sde) AS sde, count(*) AS units_reporting
FROM {schema}.unit_candidate_results
GROUP BY election_id, candidate""",
        f"""CREATE VIEW {schema}.events AS
SELECT e.election_id, CASE WHEN e.unit_key LIKE 'election:%' THEN NULL ELSE e.unit_key END AS unit_id, e.event_id, e.type, e.part AS log_partition, e.log_offset,
       e.recorded_at::timestamptz AS recorded_at
FROM proj_events e {_SERVING.format(alias="e")}""",
    ]
