"""The Pruning page's background draws follow each browser session's newest setting
(dashboard/cache.py test_draws_ready): a session that moves the threshold again before its numbers
are complete stops the draws of the setting it left, unless another session still waits for them."""

from __future__ import annotations

import time

import pytest

import core.predict.draw_cache as draw_cache_module
from core.predict import DrawCache
from tests.test_dashboard_app import fresh_caches  # noqa: F401


@pytest.fixture
def tiny_run(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    from core.runs import RunConfig, train_run

    return train_run(RunConfig(dataset="mnist-small", hidden=(8,), train={"epochs": 1, "batch_size": 500})).run_id


def test_a_sessions_newer_setting_stops_the_draws_of_the_one_it_left(tiny_run, monkeypatch):
    from dashboard import backend, cache, streamlit_compat

    draws = DrawCache()  # drawn in this process, slowly: the test sees the old setting stop
    monkeypatch.setattr(backend, "DRAW_CACHE", draws)
    monkeypatch.setattr(cache, "draw_processes_once", lambda: None)
    real = draw_cache_module.sampled_forward

    def slow(*args, **kwargs):
        time.sleep(0.05)
        return real(*args, **kwargs)

    monkeypatch.setattr(draw_cache_module, "sampled_forward", slow)
    session = {"id": "s1"}
    monkeypatch.setattr(streamlit_compat, "script_session_id", lambda: session["id"])
    assert cache.test_draws_ready(tiny_run, "mpm", 40, 0.3, 0) == (0, 40)
    session["id"] = "s2"
    assert cache.test_draws_ready(tiny_run, "mpm", 40, 0.6, 0) == (0, 40)  # s2 waits for another setting
    session["id"] = "s1"
    assert cache.test_draws_ready(tiny_run, "mpm", 2, 0.5, 0)[1] == 2  # s1 moves on: 0.3 has no waiter left
    session["id"] = "s2"
    assert cache.test_draws_ready(tiny_run, "prune", 40, 0.6, 0, "mean") == (1, 1)  # s2: no draws now
    refiner = draws.refiner()
    assert refiner.wait(30)
    held = {key.threshold: draws.draws_held(key) for key in draws.keys()}
    assert held[0.5] == 2 and held.get(0.3, 0) < 40 and held.get(0.6, 0) < 40, held
    assert refiner.superseded == 2 and refiner.finished == 1


def test_the_draw_processes_load_a_run_only_for_a_setting_with_draws_to_compute(tiny_run, monkeypatch):
    from dashboard import backend, cache, streamlit_compat

    draws = DrawCache()
    monkeypatch.setattr(backend, "DRAW_CACHE", draws)
    monkeypatch.setattr(cache, "draw_processes_once", lambda: None)
    monkeypatch.setattr(streamlit_compat, "script_session_id", lambda: "s1")
    loads = []
    monkeypatch.setattr(draws, "prepare", lambda run, owner: loads.append(owner))
    assert cache.test_draws_ready(tiny_run, "mean", 1, None, 0) == (1, 1)  # nothing to draw
    assert loads == []
    run = cache.cached_run(tiny_run)
    # every draw of this setting already kept (as a lesson prepared before the class keeps them)
    draws.predict(run, run.dataset().x_test, "test", tiny_run, "mpm", 3, 0.5, 0)
    assert cache.test_draws_ready(tiny_run, "mpm", 3, 0.5, 0) == (3, 3)
    assert loads == []
    # a setting with draws to compute: the draw processes load the run
    assert cache.test_draws_ready(tiny_run, "mpm", 5, 0.5, 0)[1] == 5
    assert loads == [tiny_run]
    assert draws.refiner().wait(30)
