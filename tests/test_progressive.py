"""Progressive predictions (core.predict.progressive): an answer at once from the draws already kept,
the rest computed in the background, ending at the uncached R-draw numbers.

Truth is `Run.predict` without any cache: a partial answer resting on k draws must equal the k-draw
prediction bit for bit, and the complete one the R-draw prediction. A slow fake forward pass shows
that nobody waits behind another session's draws for what can be shown now, that unwanted work is
dropped and that no worker thread outlives its work.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest

import core.predict.draw_cache as draw_cache_module
from core.errors import PredictionError
from core.predict import DrawCache
from core.predict.progressive import Progress, Refiner
from tests.test_draw_cache import assert_same, classification_run, regression_run

SAMPLING = [("bma", None, None), ("mpm", None, None), ("prune", 0.3, "sample")]


@contextmanager
def slow_draws(monkeypatch, seconds):
    """Every draw's forward pass takes at least `seconds` (the numbers are the real ones)."""
    real = draw_cache_module.sampled_forward

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(draw_cache_module, "sampled_forward", slow)
    yield


def refiner_threads() -> int:
    return sum(thread.name == "bnn-refiner" and thread.is_alive() for thread in threading.enumerate())


def wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.mark.parametrize("mode, threshold, weights", SAMPLING)
def test_partial_answers_are_the_k_draw_predictions_and_the_last_is_the_r_draw_one(
    monkeypatch, mode, threshold, weights
):
    run = classification_run(seed=3)
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=1)
    seen = set()
    with slow_draws(monkeypatch, 0.02):
        progress = refiner.ready(run, x, "test", "run", mode, 12, threshold, 0, weights)
        assert progress == Progress(0, 12) and not progress.complete
        while not progress.complete:
            progress = refiner.ready(run, x, "test", "run", mode, 12, threshold, 0, weights)
            if progress.draws and progress.draws not in seen and len(seen) < 3:
                seen.add(progress.draws)
                partial = cache.predict(run, x, "test", "run", mode, progress.draws, threshold, 0, weights)
                assert_same(
                    partial, run.predict(x, mode=mode, samples=progress.draws, threshold=threshold, weights=weights)
                )
            time.sleep(0.005)
    assert any(0 < k < 12 for k in seen), seen  # at least one answer was partial
    computed = cache.draws_computed
    final = cache.predict(run, x, "test", "run", mode, 12, threshold, 0, weights)
    assert cache.draws_computed == computed == 12  # the background computed each draw once; nothing more now
    assert_same(final, run.predict(x, mode=mode, samples=12, threshold=threshold, weights=weights))
    assert refiner.wait(10) and refiner.finished == 1
    wait_until(lambda: refiner_threads() == 0, 10)


def test_regression_completes_to_the_uncached_prediction():
    run = regression_run(likelihood="heteroscedastic")
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=2)
    assert refiner.ready(run, x, "test", "reg", "bma", 9) == Progress(0, 9)
    assert refiner.wait(30)
    assert refiner.ready(run, x, "test", "reg", "bma", 9) == Progress(9, 9)
    assert_same(cache.predict(run, x, "test", "reg", "bma", 9), run.predict(x, mode="bma", samples=9))


def test_a_deterministic_plan_is_complete_at_once_and_queues_nothing():
    run = classification_run()
    refiner = Refiner(DrawCache(), workers=1)
    for mode, weights in (("mean", None), ("mpm-mean", None), ("prune", "mean")):
        assert refiner.ready(run, run.dataset().x_test, "test", "run", mode, 20, None, 0, weights) == Progress(1, 1)
    assert refiner.pending == 0 and refiner_threads() == 0


def test_nobody_waits_behind_another_sessions_draws_for_what_it_can_show_now(monkeypatch):
    run = classification_run(seed=1)
    x = run.dataset().x_test
    cache = DrawCache(compute_slots=1)
    refiner = Refiner(cache, workers=1)
    cache.predict(run, x, "test", "run", "mpm", 5, 0.4)  # kept before the class: plan Q, 5 draws
    draw_seconds = 0.5  # all 20 draws: 10 s
    with slow_draws(monkeypatch, draw_seconds):
        started = time.perf_counter()
        assert refiner.ready(run, x, "test", "run", "bma", 20) == Progress(0, 20)  # plan P: 20 slow draws queued
        assert time.perf_counter() - started < 3.0  # (a loaded machine's margin) not after the 20 draws' 10 s
        wait_until(lambda: cache.turns.waiting == 0 and refiner.pending == 1)
        time.sleep(0.05)  # the worker is inside its first draw
        # Another session: plan Q's 5 draws are kept; its answer comes at once, though P holds the only slot.
        started = time.perf_counter()
        assert refiner.ready(run, x, "test", "run", "mpm", 5, 0.4) == Progress(5, 5)
        cached = cache.predict(run, x, "test", "run", "mpm", 5, 0.4)
        assert time.perf_counter() - started < 3.0  # (a loaded machine's margin) not after P's 10 s
        assert_same(cached, run.predict(x, mode="mpm", samples=5, threshold=0.4))
        # A deterministic mode needs one forward pass: it waits for one of P's draws at most, not for all 20.
        started = time.perf_counter()
        mean = cache.predict(run, x, "test", "run", "mean", 1)
        assert time.perf_counter() - started < 8 * draw_seconds  # (a loaded machine's margin) not all 20
        assert_same(mean, run.predict(x, mode="mean"))
        assert cache.draws_held(next(k for k in cache.keys() if k.mode.value == "bma")) < 20
        refiner.close()
    assert refiner_threads() == 0


def test_work_nobody_wants_any_more_is_dropped_and_its_draws_stay(monkeypatch):
    run = classification_run(seed=2)
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=1, linger=0.3)
    with slow_draws(monkeypatch, 0.05):
        refiner.ready(run, x, "test", "run", "bma", 200)  # asked once, never again
        assert refiner.wait(10)
    key = cache.keys()[0]
    held = cache.draws_held(key)
    assert 1 <= held < 200 and refiner.dropped == 1 and refiner.finished == 0
    wait_until(lambda: refiner_threads() == 0, 10)
    # What was drawn is reused: asking again continues from there and ends at the uncached numbers.
    assert refiner.ready(run, x, "test", "run", "bma", 30).draws == min(held, 30)
    assert refiner.wait(30)
    assert_same(cache.predict(run, x, "test", "run", "bma", 30), run.predict(x, mode="bma", samples=30))


def test_raising_r_while_drawing_extends_the_same_job(monkeypatch):
    run = classification_run()
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=2)
    with slow_draws(monkeypatch, 0.02):
        refiner.ready(run, x, "test", "run", "mpm", 4, 0.5)
        refiner.ready(run, x, "test", "run", "mpm", 10, 0.5)  # one job, R raised
        assert refiner.pending == 1
        assert refiner.wait(30)
    assert refiner.ready(run, x, "test", "run", "mpm", 10, 0.5) == Progress(10, 10)
    assert cache.draws_computed == 10


def test_workers_are_bounded_and_none_outlives_its_work(monkeypatch):
    run = classification_run()
    x = run.dataset().x_test
    before = threading.active_count()
    cache = DrawCache(compute_slots=2)
    refiner = Refiner(cache, workers=2)
    most = 0
    with slow_draws(monkeypatch, 0.01):
        for step in range(12):
            refiner.ready(run, x, "test", "run", "mpm", 4, 0.1 + 0.05 * step)
            most = max(most, refiner_threads())
        while refiner.pending:
            most = max(most, refiner_threads())
            time.sleep(0.002)
    assert 1 <= most <= 2
    assert refiner.finished == 12
    # None of the refiner's threads outlives its work. (Not "the process's thread count is back to
    # before": a thread another test left ending meanwhile makes that count fall below it, and the
    # CI run with the new worker order timed out on exactly that.)
    wait_until(lambda: refiner_threads() == 0, 10)
    assert threading.active_count() <= before
    assert refiner.threads == 0


def test_a_failed_background_computation_is_raised_to_the_next_asker(monkeypatch):
    run = classification_run()
    x = run.dataset().x_test
    refiner = Refiner(DrawCache(), workers=1)

    def broken(*args, **kwargs):
        raise PredictionError("the forward pass failed")

    monkeypatch.setattr(draw_cache_module, "sampled_forward", broken)
    refiner.ready(run, x, "test", "run", "bma", 3)
    assert refiner.wait(10)
    with pytest.raises(PredictionError, match="forward pass failed"):
        refiner.ready(run, x, "test", "run", "bma", 3)
    # raised once: the next ask queues the plan again
    assert refiner.ready(run, x, "test", "run", "bma", 3) == Progress(0, 3)
    refiner.close()


def test_forgetting_a_run_drops_its_queued_work_only(monkeypatch):
    run, other = classification_run(seed=0), classification_run(seed=5)
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=1)
    with slow_draws(monkeypatch, 0.05):
        refiner.ready(run, x, "test", "a", "bma", 40)
        refiner.ready(other, x, "test", "b", "bma", 3)
        refiner.ready(run, x, "test", "a", "mpm", 40, 0.5)
        refiner.forget("a")
        assert refiner.wait(30)
    assert refiner.ready(other, x, "test", "b", "bma", 3) == Progress(3, 3)
    assert all(cache.draws_held(k) < 40 for k in cache.keys() if k.owner == "a")


@pytest.mark.parametrize("workers, linger", [(0, 1.0), (1, 0.0), (1, -2.0)])
def test_settings_out_of_range_are_refused(workers, linger):
    with pytest.raises(PredictionError):
        Refiner(DrawCache(), workers=workers, linger=linger)


def test_the_plan_with_fewest_draws_missing_goes_first_and_a_long_one_yields_to_it(monkeypatch):
    """Shortest remaining work first: a 2-draw plan asked while one worker draws a 30-draw plan is done
    after at most two more of the long plan's draws (first come, first served: after all 30), and both
    end at the uncached numbers."""
    run = classification_run(seed=3)
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=1)
    with slow_draws(monkeypatch, 0.05):
        refiner.ready(run, x, "test", "run", "bma", 30)
        wait_until(lambda: cache.keys() and cache.draws_held(cache.keys()[0]) >= 1)
        long_key = cache.keys()[0]
        asked_at = cache.draws_held(long_key)
        refiner.ready(run, x, "test", "run", "mpm", 2, 0.5)
        wait_until(lambda: refiner.ready(run, x, "test", "run", "mpm", 2, 0.5).complete, 30)
        short_key = next(k for k in cache.keys() if k != long_key)
        assert cache.draws_held(long_key) <= asked_at + 2 < 30, (asked_at, cache.draws_held(long_key))
        assert refiner.yielded >= 1
        while not refiner.ready(run, x, "test", "run", "bma", 30).complete:  # a page polling for the rest
            time.sleep(0.05)
    assert cache.draws_held(short_key) == 2
    assert_same(cache.predict(run, x, "test", "run", "bma", 30), run.predict(x, mode="bma", samples=30))
    assert_same(
        cache.predict(run, x, "test", "run", "mpm", 2, 0.5), run.predict(x, mode="mpm", samples=2, threshold=0.5)
    )
    assert cache.draws_computed == 32  # every draw once, whatever the order
    assert refiner.wait(10) and refiner.finished == 2
    wait_until(lambda: refiner_threads() == 0, 10)


def test_a_plan_alone_or_behind_a_longer_one_never_yields(monkeypatch):
    run = classification_run(seed=4)
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=1)
    with slow_draws(monkeypatch, 0.02):
        refiner.ready(run, x, "test", "run", "bma", 6)
        wait_until(lambda: cache.keys() and cache.draws_held(cache.keys()[0]) >= 1)
        refiner.ready(run, x, "test", "run", "mpm", 20, 0.5)  # lacks more than the running plan: waits
        assert refiner.wait(30)
    assert refiner.yielded == 0 and refiner.finished == 2


def test_a_plan_superseded_by_the_same_sessions_newer_ask_stops_its_draws(monkeypatch):
    """A student moves the threshold again before the numbers are complete: the plan she waited for
    stops before its next draw (not `linger` seconds later), the new one is drawn, and both end at the
    uncached numbers when asked again."""
    run = classification_run(seed=6)
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=1, linger=60.0)  # linger alone would keep the old plan for a minute
    with slow_draws(monkeypatch, 0.05):
        refiner.ready(run, x, "test", "run", "mpm", 40, 0.3, waiter="s1")
        wait_until(lambda: cache.keys() and cache.draws_held(cache.keys()[0]) >= 1)
        old = cache.keys()[0]
        assert refiner.ready(run, x, "test", "run", "mpm", 3, 0.6, waiter="s1") == Progress(0, 3)
        moved_at = cache.draws_held(old)
        wait_until(lambda: refiner.ready(run, x, "test", "run", "mpm", 3, 0.6, waiter="s1").complete, 30)
        assert refiner.wait(10)
    assert cache.draws_held(old) <= moved_at + 1 < 40, (moved_at, cache.draws_held(old))
    assert refiner.superseded == 1 and refiner.dropped == 1 and refiner.finished == 1
    assert_same(
        cache.predict(run, x, "test", "run", "mpm", 3, 0.6), run.predict(x, mode="mpm", samples=3, threshold=0.6)
    )
    # What the old plan drew stays, and is the k-draw prediction; asked again it completes to the R-draw one.
    held = cache.draws_held(old)
    assert_same(
        cache.predict(run, x, "test", "run", "mpm", held, 0.3), run.predict(x, mode="mpm", samples=held, threshold=0.3)
    )
    while not refiner.ready(run, x, "test", "run", "mpm", 12, 0.3, waiter="s2").complete:
        time.sleep(0.02)
    assert_same(
        cache.predict(run, x, "test", "run", "mpm", 12, 0.3), run.predict(x, mode="mpm", samples=12, threshold=0.3)
    )
    assert cache.draws_computed == 12 + 3  # nothing drawn twice


def test_a_plan_another_session_still_waits_for_goes_on(monkeypatch):
    run = classification_run(seed=7)
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=1, linger=60.0)
    with slow_draws(monkeypatch, 0.02):
        refiner.ready(run, x, "test", "run", "mpm", 10, 0.3, waiter="s1")
        refiner.ready(run, x, "test", "run", "mpm", 10, 0.3, waiter="s2")
        refiner.ready(run, x, "test", "run", "mpm", 2, 0.6, waiter="s1")  # s1 moves on; s2 still waits
        assert refiner.wait(30)
    assert refiner.superseded == 0 and refiner.dropped == 0 and refiner.finished == 2
    assert sorted(cache.draws_held(key) for key in cache.keys()) == [2, 10]


def test_a_session_that_lowers_r_stops_the_draws_beyond_it(monkeypatch):
    run = classification_run(seed=8)
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=1, linger=60.0)
    with slow_draws(monkeypatch, 0.05):
        refiner.ready(run, x, "test", "run", "mpm", 30, 0.3, waiter="s1")
        wait_until(lambda: cache.keys() and cache.draws_held(cache.keys()[0]) >= 1)
        refiner.ready(run, x, "test", "run", "mpm", 4, 0.3, waiter="s1")  # R from 30 down to 4
        assert refiner.wait(30)
    key = cache.keys()[0]
    assert 4 <= cache.draws_held(key) <= 6 and refiner.finished == 1
    assert_same(
        cache.predict(run, x, "test", "run", "mpm", 4, 0.3), run.predict(x, mode="mpm", samples=4, threshold=0.3)
    )


def test_a_waiter_whose_plan_is_complete_waits_for_nothing(monkeypatch):
    """Asking a complete plan counts as moving on: the plan asked before is left (dropped when nobody
    else waits), and the refiner keeps no record of the waiter (it holds only waiters of queued plans)."""
    run = classification_run(seed=9)
    x = run.dataset().x_test
    cache = DrawCache()
    cache.predict(run, x, "test", "run", "mpm", 3, 0.6)  # kept
    refiner = Refiner(cache, workers=1, linger=60.0)
    with slow_draws(monkeypatch, 0.05):
        refiner.ready(run, x, "test", "run", "mpm", 40, 0.3, waiter="s1")
        assert refiner.ready(run, x, "test", "run", "mpm", 3, 0.6, waiter="s1") == Progress(3, 3)
        assert refiner.wait(10)
    assert refiner.superseded == 1 and refiner._newest == {}


def test_a_waiter_that_leaves_for_a_setting_without_draws_stops_its_plan(monkeypatch):
    run = classification_run(seed=10)
    x = run.dataset().x_test
    cache = DrawCache()
    refiner = Refiner(cache, workers=1, linger=60.0)
    with slow_draws(monkeypatch, 0.05):
        refiner.ready(run, x, "test", "run", "mpm", 40, 0.3, waiter="s1")
        refiner.leave("s1")  # e.g. the mean weights: one network, no draws
        refiner.leave(None)  # outside a session: nothing to do
        assert refiner.wait(10)
    assert refiner.superseded == 1 and all(cache.draws_held(key) < 40 for key in cache.keys())
