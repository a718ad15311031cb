"""The Pruning page's progressive cards under AppTest: a slider move answers at once with the draws
already kept, says on the card how many of the R draws it rests on, and ends at the numbers of the
uncached R-draw prediction."""

from __future__ import annotations

import os
import time

import pytest
from streamlit.testing.v1 import AppTest

import core.predict.draw_cache as draw_cache_module
from tests.test_dashboard_app import APP, TIMEOUT, assert_clean, fresh_caches, metric_value  # noqa: F401

R = 8
DRAW_SECONDS = 2.5  # a slow fake draw: the four new draws take 10 s


@pytest.fixture(scope="module")
def mnist_run(tmp_path_factory):
    cache = tmp_path_factory.mktemp("bnn-cache")
    previous = os.environ.get("BNN_CACHE_DIR")
    os.environ["BNN_CACHE_DIR"] = str(cache)
    from core.runs import RunConfig, train_run

    yield train_run(RunConfig(dataset="mnist-small", hidden=(8,), train={"epochs": 1, "batch_size": 500})).run_id
    if previous is None:
        os.environ.pop("BNN_CACHE_DIR", None)
    else:
        os.environ["BNN_CACHE_DIR"] = previous


def fresh_metrics(run_id: str, samples: int) -> dict:
    """The cards' numbers from an uncached Run.predict with `samples` draws."""
    from core.runs import load_run
    from dashboard import backend, cache

    run = load_run(run_id)
    prediction = run.predict(run.dataset().x_test, mode="bma", samples=samples, seed=0)
    return backend.test_metrics(cache.prediction_arrays(prediction), run.dataset())


def open_bma(run_id: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["selected_run_id"] = run_id
    at.run()
    at.switch_page("views/pruning.py").run()
    at.selectbox(key=f"widget:mode:{run_id}").set_value("bma").run()
    return at


@pytest.mark.slow
def test_cards_answer_at_once_say_their_draws_and_end_at_the_uncached_numbers(mnist_run, monkeypatch):
    from dashboard import backend, cache

    at = open_bma(mnist_run)
    assert_clean(at)
    # The page's first R = 10 draws, computed in the background: in a draw process (its start imports
    # torch). Asked for as the page's polls ask (AppTest runs no fragment timers), or dropped as unwanted.
    deadline = time.monotonic() + 240
    while cache.test_draws_ready(mnist_run, "bma", 10, None, 0) != (10, 10):
        assert time.monotonic() < deadline, "the first 10 draws did not arrive"
        time.sleep(0.5)
    if backend.DRAW_CACHE.processes is not None:
        assert backend.DRAW_CACHE.draws_elsewhere >= 9  # the first may have been drawn by the page itself
    from core.runs import load_run
    from tests.test_draw_cache import assert_same

    run = cache.cached_run(mnist_run)
    x = run.dataset().x_test
    kept = backend.DRAW_CACHE.predict(run, x, "test", mnist_run, "bma", 10, None, 0, original_units=False)
    assert_same(kept, load_run(mnist_run).predict(x, mode="bma", samples=10, seed=0))  # bit for bit
    backend.DRAW_CACHE.use_processes(None)  # the slow fake draws below are this process's
    real = draw_cache_module.sampled_forward

    def slow(*args, **kwargs):
        time.sleep(DRAW_SECONDS)
        return real(*args, **kwargs)

    monkeypatch.setattr(draw_cache_module, "sampled_forward", slow)
    at.slider(key=f"widget:samples:{mnist_run}").set_value(R).run()
    assert_clean(at)
    # R = 8 after the page's first R = 10: every draw is kept, the answer is complete at once
    assert [m.delta for m in at.metric if m.label == "accuracy"] == [f"{R} of {R} draws"]
    assert f"Based on all {R} draws." in [c.value for c in at.caption]
    assert metric_value(at, "accuracy") == f"{fresh_metrics(mnist_run, R)['accuracy']:.4f}"
    # a threshold-free mode at a new R beyond the kept draws: the page answers before the slow draws are done
    started = time.perf_counter()
    at.slider(key=f"widget:samples:{mnist_run}").set_value(14).run()
    elapsed = time.perf_counter() - started
    assert_clean(at)
    captions = [c.value for c in at.caption]
    partial = [c for c in captions if c.startswith("Based on ") and " of 14 draws" in c]
    assert partial, captions
    shown = int(partial[0].split()[2])
    assert 10 <= shown < 14  # the first 10 were kept by the page's first answer
    assert elapsed < 3 * DRAW_SECONDS  # not after the four slow draws
    assert [m.delta for m in at.metric if m.label == "accuracy"] == [f"{shown} of 14 draws"]
    assert metric_value(at, "accuracy") == f"{fresh_metrics(mnist_run, shown)['accuracy']:.4f}"
    assert metric_value(at, "NLL") == f"{fresh_metrics(mnist_run, shown)['nll']:.4f}"
    deadline = time.monotonic() + 60
    while "Based on all 14 draws." not in [c.value for c in at.caption]:  # the page polls, as the browser does
        assert time.monotonic() < deadline, [c.value for c in at.caption]
        time.sleep(0.5)
        at.run()
        assert_clean(at)
    final = fresh_metrics(mnist_run, 14)
    for label, name in (("accuracy", "accuracy"), ("NLL", "nll"), ("ECE", "ece")):
        assert metric_value(at, label) == f"{final[name]:.4f}"
