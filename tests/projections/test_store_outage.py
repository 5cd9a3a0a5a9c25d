"""The one rule both of a runner's waits for its store follow: bounded from the first failure, backing off."""

from __future__ import annotations

from projections.store_outage import LONGEST_DELAY, StoreOutage


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_waits_back_off_until_the_bound_then_give_up() -> None:
    clock = _Clock()
    outage = StoreOutage(12.0, clock)
    assert not outage.ongoing
    waits = []
    while (wait := outage.failed()) is not None:
        waits.append(wait)
        clock.now += wait
    assert outage.ongoing
    assert waits[:5] == [0.2, 0.4, 0.8, 1.6, 3.2] and max(waits) <= LONGEST_DELAY
    assert abs(sum(waits[:-1]) - 12.0) < 1e-9, "the waits end at the bound, not past it"
    assert waits[-1] == 0.2, "then one last try, once: a failure just after the bound is not taken as the end"


def test_a_new_outage_gets_the_whole_bound_and_the_first_delay_again() -> None:
    clock = _Clock()
    outage = StoreOutage(1.0, clock)
    assert outage.failed() == 0.2
    clock.now += 0.9
    outage.ended()
    assert not outage.ongoing
    clock.now += 30
    assert outage.failed() == 0.2, "a later outage is not charged for the earlier one"
    clock.now += 1.0
    assert outage.failed() == 0.2 and outage.failed() is None, "one last try past the bound, then the end"
    outage.ended()
    assert outage.failed() == 0.2
    clock.now += 1.0
    assert outage.failed() == 0.2, "each outage has its own last try"
