"""The read API's cache of built answers is bounded by bytes as well as by count: readers asking a large
answer at many times (each ``?as_of=`` its own answer) once held hundreds of them, gigabytes in all."""

from __future__ import annotations

from projections.read_api.reader import _Cache


def test_the_cache_keeps_its_byte_budget_dropping_the_least_recently_used() -> None:
    cache = _Cache(256, budget=100)
    for key in range(10):
        cache.put(key, f"answer {key}", 20)
    kept = [key for key in range(10) if cache.get(key) is not None]
    assert kept == [5, 6, 7, 8, 9]  # five of 20 bytes fill the budget of 100
    cache.get(5)  # used: now the newest
    cache.put(10, "answer 10", 20)
    assert cache.get(5) is not None and cache.get(6) is None


def test_an_answer_over_a_quarter_of_the_budget_is_not_kept_and_pushes_nothing_out() -> None:
    cache = _Cache(256, budget=100)
    cache.put("small", "s", 10)
    cache.put("huge", "h", 26)
    assert cache.get("huge") is None and cache.get("small") == "s"


def test_replacing_an_answer_counts_its_weight_once() -> None:
    cache = _Cache(256, budget=100)
    for _ in range(50):
        cache.put("same", "x", 20)
    cache.put("other", "y", 20)
    assert cache.get("same") == "x" and cache.get("other") == "y"


def test_a_cache_without_a_budget_is_bounded_by_count() -> None:
    cache = _Cache(3)
    for key in range(5):
        cache.put(key, key)
    assert [key for key in range(5) if cache.get(key) is not None] == [2, 3, 4]
