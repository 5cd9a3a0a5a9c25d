"""Importer for the published 2020 Iowa Democratic caucus results (see ``run.import_idp2020``).

Modules: ``text`` (cleaning names and values), ``releases`` (the three results-site snapshots),
``reference`` (apportionment, unit directory, NYT feed), ``delegates`` (CDs and satellite weights from
SDEs), ``satellites`` (weights from pool shares), ``units`` (site names to VAN ids, unit and county
definitions), ``definitions`` (the election's definition per release), ``build`` (events) and ``run``
(plan, append, summary).
"""

from producers.importers.idp2020.build import ACTOR, ELECTION_ID, event_id
from producers.importers.idp2020.run import ImportSummary, import_idp2020, plan_import

__all__ = ["ACTOR", "ELECTION_ID", "event_id", "ImportSummary", "import_idp2020", "plan_import"]
