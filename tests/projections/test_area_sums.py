"""The feed keeps county and state sums up to date from the units that changed (``projections.area_sums``):
after a projection in many small batches, every published area's newest sums equal the sums over every
unit (``area_tally.aggregate``), field by field."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ledger.config import Settings
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from projections.feed import FeedPublisher, open_results_log
from projections.feed_events import AreaTallyPublished, FeedDeduper, feed_codec, feed_key
from projections.fraction_text import fraction_text
from projections.queries import load_view
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.sqlite import SqliteStore
from projections.wiring import serving_set


def test_incremental_area_sums_equal_the_sums_over_every_unit(support: ModuleType, tmp_path: Path) -> None:
    data = tmp_path / "data"
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(support.election_log(90, corrections=6, rejections=3))
    settings = Settings(data_dir=data)
    store = SqliteStore(data / "store.sqlite3")
    try:
        info = serving_set(store, settings)
        runner = ProjectionRunner(store, info.set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=7, poll_timeout=0.01)
        publisher = FeedPublisher(store, info, open_results_log(settings), catch_up_interval=0).attach(runner)
        runner.run(until_caught_up=True)
        publisher.flush()
        assert publisher.stats.flushes >= 10, "published batch by batch, so the sums were kept up, not recomputed"
        codec = feed_codec()
        newest = {}
        dedupe = FeedDeduper()
        for rec in open_results_log(settings).read():
            event = codec.decode(rec.value)
            if isinstance(event.payload, AreaTallyPublished) and dedupe.fresh(event):
                newest[feed_key(event)] = event.payload.sums
        view = load_view(store)
        eid = view.context.election_id
        wanted = {(eid, "county", cid): a for cid, a in view.counties().items()}
        wanted[(eid, "state", eid)] = view.state()
        assert set(newest) == set(wanted)
        for key, area in wanted.items():
            got = newest[key]
            assert (got["units_defined"], got["units_reporting"], got["units_pending_ties"], got["units_with_problems"]) == (
                area.units_defined, area.units_reporting, area.units_pending, area.units_with_problems), key
            for name in ("first", "final", "cds", "cds_computed", "cds_reported"):
                assert {c: n for c, n in got[name].items() if n} == {c: n for c, n in getattr(area, name).items() if n}, (key, name)
            assert {c: v for c, v in got["sde"].items() if v != "0/1"} == {c: fraction_text(v) for c, v in area.sde.items() if v}, key
            assert {c: v for c, v in got["sde_display_sum"].items() if v != "0.0000"} == {
                c: str(v) for c, v in area.sde_display_sum.items() if v}, key
    finally:
        store.close()
