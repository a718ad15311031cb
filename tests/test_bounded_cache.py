"""The pages' byte-bounded prediction cache (dashboard/bounded_cache.py): never above its bound,
least recently used dropped first, values shared read-only, entries past their time to live redone."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.bounded_cache import BoundedCache, value_bytes


def arrays_of(n_bytes: int) -> dict:
    return {"probs": np.zeros(n_bytes // 4, dtype=np.float32), "note": "not counted"}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4000), st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2000)), max_size=60))
def test_never_above_its_bound_and_the_most_recent_survive(bound, requests):
    cache = BoundedCache(bound)
    sizes: dict[int, int] = {}
    order: list[int] = []  # most recent last, as the model of an LRU
    for key, size in requests:
        size -= size % 4
        sizes.setdefault(key, size)
        value = cache.get_or_compute(key, lambda size=sizes[key]: arrays_of(size))
        assert value_bytes(value) == sizes[key]
        if key in order:
            order.remove(key)
        if sizes[key] <= bound:
            order.append(key)
        while sum(sizes[k] for k in order) > bound:
            order.pop(0)
        assert cache.bytes <= bound
        assert cache.bytes == sum(sizes[k] for k in order) and len(cache) == len(order)


def test_a_hit_is_the_same_read_only_arrays_and_a_miss_computes_once():
    cache = BoundedCache(10**6)
    calls = []
    first = cache.get_or_compute("a", lambda: calls.append(1) or arrays_of(400))
    again = cache.get_or_compute("a", lambda: calls.append(1) or arrays_of(400))
    assert again is first and calls == [1]
    with pytest.raises(ValueError, match="read-only"):
        first["probs"][0] = 1.0  # a page cannot change what another session is shown


def test_a_value_larger_than_the_bound_is_returned_but_not_kept():
    cache = BoundedCache(100)
    value = cache.get_or_compute("big", lambda: arrays_of(400))
    assert value_bytes(value) == 400 and len(cache) == 0 and cache.bytes == 0


def test_entries_past_their_time_to_live_are_computed_again_and_clear_empties():
    now = [0.0]
    cache = BoundedCache(10**6, ttl=10.0, clock=lambda: now[0])
    calls = []
    cache.get_or_compute("a", lambda: calls.append(1) or arrays_of(40))
    now[0] = 5.0
    cache.get_or_compute("a", lambda: calls.append(1) or arrays_of(40))
    now[0] = 20.0
    cache.get_or_compute("a", lambda: calls.append(1) or arrays_of(40))
    assert calls == [1, 1] and cache.bytes == 40
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0


def test_threads_filling_it_at_once_keep_the_bound():
    cache = BoundedCache(10_000)
    errors = []

    def fill(start: int) -> None:
        try:
            for key in range(start, start + 200):
                cache.get_or_compute(key % 50, lambda: arrays_of(800))
                assert cache.bytes <= 10_000
        except Exception as exc:  # noqa: BLE001 - the test reports any failure of a thread
            errors.append(exc)

    threads = [threading.Thread(target=fill, args=(i * 7,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and cache.bytes <= 10_000 and cache.bytes == 800 * len(cache)
