"""The per-draw prediction cache (core.predict.draw_cache) against uncached predictions.

Truth here is `Run.predict` / `predict` without a cache: a cached prediction with R draws must
be the same numbers, bit for bit, whatever R's were asked before (up, down, jumps), for every
sampling mode, classification and regression; and only the new draws may be computed.
"""

from __future__ import annotations

import copy
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from core.data.dataset import make_dataset
from core.errors import PredictionError
from core.models.network import BayesianMLP, ModelConfig
from core.predict import DrawCache, predict
from core.runs import Run

ARRAYS = (
    "probs_per_draw",
    "probs",
    "mean_per_draw",
    "std_per_draw",
    "mean",
    "epistemic_variance",
    "aleatoric_variance",
    "total_variance",
)
SCALARS = (
    "samples",
    "threshold",
    "weights",
    "density",
    "layer_density",
    "draw_density",
    "disconnected",
    "warnings",
    "mode",
    "task",
)
# (mode, threshold, weights): the plans that draw
SAMPLING = [("bma", None, None), ("mpm", None, None), ("prune", 0.45, None), ("prune", 0.3, "sample")]
SEQUENCES = [(10, 20), (20, 10, 5), (1, 7, 3, 15), (4, 4, 1, 2), (3, 12, 6)]


def make_model(family="lbbnn", hidden=(12, 9), in_features=5, outputs=3, likelihood="categorical", seed=0):
    torch.manual_seed(seed)
    return BayesianMLP(ModelConfig(in_features, outputs, hidden=hidden, family=family, likelihood=likelihood))


def classification_run(seed=0, family="lbbnn"):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(40, 5)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)
    dataset = make_dataset(
        name="tiny", task="classification", x_train=x, y_train=y, x_test=x, y_test=y, source="generated", n_classes=3
    )
    return Run.of(make_model(family=family, seed=seed), dataset)


def regression_run(likelihood="gaussian", family="lbbnn", seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(30, 5)).astype(np.float32)
    y = (x[:, 0] - 0.5 * x[:, 2]).astype(np.float32)
    dataset = make_dataset(
        name="tiny-regression",
        task="regression",
        x_train=x,
        y_train=y,
        x_test=x,
        y_test=y,
        source="generated",
        target_mean=3.0,
        target_std=2.5,
    )
    outputs = 2 if likelihood == "heteroscedastic" else 1
    model = make_model(family=family, outputs=outputs, likelihood=likelihood, seed=seed)
    return Run.of(model, dataset)


def assert_same(cached, truth):
    for name in ARRAYS:
        a, b = getattr(cached, name), getattr(truth, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert np.array_equal(a, b), f"{name}: max difference {np.abs(a - b).max()}"
    for name in SCALARS:
        assert getattr(cached, name) == getattr(truth, name), name


@contextmanager
def threads(count):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("mode, threshold, weights", SAMPLING)
@pytest.mark.parametrize("sequence", SEQUENCES)
def test_cached_classification_equals_run_predict_bit_for_bit(mode, threshold, weights, sequence):
    run = classification_run()
    x = run.dataset().x_test
    cache = DrawCache()
    for samples in sequence:
        cached = cache.predict(
            run, x, "test", owner="a", mode=mode, samples=samples, threshold=threshold, seed=3, weights=weights
        )
        assert_same(cached, run.predict(x, mode=mode, samples=samples, threshold=threshold, seed=3, weights=weights))
    assert cache.draws_computed == max(sequence)  # every draw computed once


@pytest.mark.parametrize("likelihood", ["gaussian", "heteroscedastic"])
@pytest.mark.parametrize("mode, threshold, weights", SAMPLING)
def test_cached_regression_equals_run_predict_in_original_units(likelihood, mode, threshold, weights):
    run = regression_run(likelihood)
    x = run.dataset().x_test
    cache = DrawCache()
    for samples in (6, 2, 11, 1):
        for units in (True, False):
            cached = cache.predict(
                run,
                x,
                "test",
                owner="r",
                mode=mode,
                samples=samples,
                threshold=threshold,
                seed=5,
                weights=weights,
                original_units=units,
            )
            truth = run.predict(
                x, mode=mode, samples=samples, threshold=threshold, seed=5, weights=weights, original_units=units
            )
            assert_same(cached, truth)
    assert cache.draws_computed == 11
    # original units really differ from the model's (the check above compares something)
    assert not np.allclose(
        run.predict(x, mode=mode, samples=2, threshold=threshold, weights=weights).mean,
        run.predict(x, mode=mode, samples=2, threshold=threshold, weights=weights, original_units=False).mean,
    )


@pytest.mark.parametrize("family", ["bnn", "concrete-dropout", "sparse-vd", "horseshoe"])
def test_other_families_cached_equal_uncached(family):
    run = classification_run(family=family)
    x = run.dataset().x_test
    cache = DrawCache()
    for mode in ("bma", "mpm"):
        for samples in (3, 8, 5):
            assert_same(
                cache.predict(run, x, "test", owner="f", mode=mode, samples=samples),
                run.predict(x, mode=mode, samples=samples),
            )


def test_draw_r_does_not_depend_on_r_with_two_threads():
    """The case that batched products broke: a 600-unit layer into 10 outputs, 2 threads (MKL summed
    the batch of R draws and a single draw in different orders, so R=1 was not R=6's first draw)."""
    model = make_model(hidden=(600,), in_features=8, outputs=10)
    x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    with threads(2):
        six = predict(model, x, "bma", samples=6, seed=0)
        for samples in (1, 2, 5):
            fewer = predict(model, x, "bma", samples=samples, seed=0)
            assert np.array_equal(six.probs_per_draw[:samples], fewer.probs_per_draw)
        cache = DrawCache()
        for samples in (2, 6, 3):
            assert_same(
                cache.predict(model, x, "x", owner="m", mode="bma", samples=samples),
                predict(model, x, "bma", samples=samples),
            )


@pytest.mark.parametrize("mode, threshold, weights", [("mpm", None, None), ("prune", 0.3, "sample")])
def test_draws_with_sparse_layers_are_the_same_cached_or_not(monkeypatch, mode, threshold, weights):
    """Shared-mask draws run alone multiply layers below the crossover as sparse matrices (here every
    layer): R=6's first draws are R=2's, cached or not, with two threads."""
    import core.predict.compact as compact

    monkeypatch.setattr(compact, "SPARSE_BELOW_DENSITY", 1.1)
    model = make_model(hidden=(300, 40), in_features=8, outputs=10)
    x = np.random.default_rng(1).normal(size=(150, 8)).astype(np.float32)
    with threads(2):
        six = predict(model, x, mode, samples=6, threshold=threshold, seed=1, weights=weights)
        two = predict(model, x, mode, samples=2, threshold=threshold, seed=1, weights=weights)
        assert np.array_equal(six.probs_per_draw[:2], two.probs_per_draw)
        cache = DrawCache()
        for samples in (2, 6, 3):
            assert_same(
                cache.predict(
                    model, x, "x", owner="m", mode=mode, samples=samples, threshold=threshold, seed=1, weights=weights
                ),
                predict(model, x, mode, samples=samples, threshold=threshold, seed=1, weights=weights),
            )
    monkeypatch.setattr(compact, "SPARSE_BELOW_DENSITY", 0.0)  # all dense: the same numbers up to rounding
    dense = predict(model, x, mode, samples=6, threshold=threshold, seed=1, weights=weights)
    assert np.allclose(dense.probs_per_draw, six.probs_per_draw, atol=1e-5)


def test_raising_r_computes_only_the_new_draws(monkeypatch):
    run = classification_run()
    x = run.dataset().x_test
    cache = DrawCache()
    made = []
    original = BayesianMLP.sample_weights

    def spy(self, n, seed, masks=None, start=0):
        # this test's network only: a background thread an earlier test left drawing (a refiner) calls
        # sample_weights on its own networks too (CI, 2026-11-27: its draws 0-6 landed in this list)
        if self is run.model:
            made.extend(range(start, start + n))
        return original(self, n, seed, masks=masks, start=start)

    monkeypatch.setattr(BayesianMLP, "sample_weights", spy)
    cache.predict(run, x, "test", owner="a", mode="mpm", samples=10)
    assert made == list(range(10))
    made.clear()
    cache.predict(run, x, "test", owner="a", mode="mpm", samples=20)
    assert made == list(range(10, 20))
    made.clear()
    for samples in (5, 20, 1):  # lowering R, or asking again, computes nothing
        cache.predict(run, x, "test", owner="a", mode="mpm", samples=samples)
    assert made == []
    assert (cache.draws_computed, cache.draws_reused) == (20, 10 + 5 + 20 + 1)


def test_modes_that_draw_nothing_pass_through():
    run = classification_run()
    x = run.dataset().x_test
    cache = DrawCache()
    for mode, weights in (("mean", None), ("mpm-mean", None), ("prune", "mean")):
        threshold = 0.4 if mode == "prune" else None
        assert_same(
            cache.predict(run, x, "test", owner="a", mode=mode, samples=7, threshold=threshold, weights=weights),
            run.predict(x, mode=mode, samples=7, threshold=threshold, weights=weights),
        )
    assert len(cache) == 0 and cache.draws_computed == 0
    # without an owner nothing is kept either
    cache.predict(run, x, "test", owner=None, mode="bma", samples=3)
    assert len(cache) == 0


def test_no_cross_talk_between_runs_modes_thresholds_seeds_and_inputs():
    first, second = classification_run(seed=0), classification_run(seed=1)
    x = first.dataset().x_test
    other_x = np.random.default_rng(9).normal(size=(25, 5)).astype(np.float32)
    cache = DrawCache()
    asks = [
        (first, "a", x, "test", "bma", None, 0),
        (second, "b", x, "test", "bma", None, 0),
        (first, "a", x, "test", "mpm", None, 0),
        (first, "a", x, "test", "prune", 0.3, 0),
        (first, "a", x, "test", "prune", 0.6, 0),
        (first, "a", x, "test", "bma", None, 1),
        (first, "a", other_x, "other", "bma", None, 0),
    ]
    for samples in (4, 9, 2):
        for run, owner, inputs, name, mode, threshold, seed in asks:
            cached = cache.predict(
                run, inputs, name, owner=owner, mode=mode, samples=samples, threshold=threshold, seed=seed
            )
            assert_same(cached, run.predict(inputs, mode=mode, samples=samples, threshold=threshold, seed=seed))
    assert len(cache) == len(asks)
    # the asks really differ from each other (else the checks above could not tell them apart)
    values = [
        cache.predict(run, inputs, name, owner=owner, mode=mode, samples=4, threshold=threshold, seed=seed).probs
        for run, owner, inputs, name, mode, threshold, seed in asks[:6]
    ]
    assert all(not np.array_equal(a, b) for i, a in enumerate(values) for b in values[i + 1 :])


def test_a_retrained_run_under_the_same_owner_is_not_served_old_draws():
    old, new = classification_run(seed=0), classification_run(seed=1)
    x = old.dataset().x_test
    cache = DrawCache()
    cache.predict(old, x, "test", owner="same-id", mode="bma", samples=5)
    assert_same(cache.predict(new, x, "test", owner="same-id", mode="bma", samples=5), new.predict(x, "bma", 5))
    assert len(cache) == 1


def test_forget_drops_only_that_owner():
    first, second = classification_run(seed=0), classification_run(seed=1)
    x = first.dataset().x_test
    cache = DrawCache()
    cache.predict(first, x, "test", owner="a", mode="bma", samples=4)
    cache.predict(second, x, "test", owner="b", mode="bma", samples=4)
    cache.predict(first, x, "test", owner="a", mode="mpm", samples=4)
    size_b = cache.nbytes
    cache.forget("a")
    assert [key.owner for key in cache.keys()] == ["b"]
    assert 0 < cache.nbytes < size_b
    cache.predict(second, x, "test", owner="b", mode="bma", samples=4)
    assert cache.draws_computed == 12  # b's draws were still there
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


def entry_bytes(model, n, samples, mode):
    """What an entry of `samples` draws holds: the outputs (float32) and, for a categorical classifier asked
    for a prediction, their probabilities (as many), the plan's masks (mpm/prune), the draws' usage (union and
    first-draw masks, bma also the running 'possible' masks) and 64 B a draw."""
    numel = [layer.out_features * (layer.in_features + 1) for layer in model.layers]
    outputs = samples * n * model.layers[-1].out_features * 4 * (2 if model.likelihood.probabilities_by_row else 1)
    masks = 0 if mode == "bma" else sum(numel)
    usage = 2 * sum(numel) + (sum(numel) if mode == "bma" else 0) + 64 * samples
    return outputs + masks + usage


def test_the_byte_bound_holds_and_the_least_recently_used_go_first():
    run = classification_run()
    model, x = run.model, run.dataset().x_test
    one = entry_bytes(model, len(x), 10, "bma")
    cache = DrawCache(max_bytes=int(2.5 * one))
    ask = {}
    for seed in range(4):
        ask[seed] = lambda seed=seed, samples=10: cache.predict(
            run, x, "test", owner="a", mode="bma", samples=samples, seed=seed
        )
    ask[0]()
    assert cache.nbytes == one  # the accounting is the entry's real size
    ask[1]()
    ask[0]()  # 0 used last: 1 is now the oldest
    ask[2]()
    assert cache.nbytes == 2 * one <= cache.max_bytes
    assert sorted(key.seed for key in cache.keys()) == [0, 2]
    ask[3]()
    assert sorted(key.seed for key in cache.keys()) == [2, 3]
    # growing an entry past the room left evicts others, never the one just used
    before = cache.draws_computed
    ask[3](samples=20)
    assert [key.seed for key in cache.keys()] == [3] and cache.nbytes == entry_bytes(model, len(x), 20, "bma")
    assert cache.draws_computed == before + 10
    # an entry bigger than the bound alone is answered, not kept
    big = cache.predict(run, x, "test", owner="a", mode="bma", samples=60, seed=7)
    assert_same(big, run.predict(x, "bma", 60, seed=7))
    assert cache.nbytes <= cache.max_bytes and all(key.seed != 7 for key in cache.keys())
    with pytest.raises(PredictionError):
        DrawCache(max_bytes=-1)


def test_predicting_through_the_cache_does_not_mutate_the_model_or_the_global_rng():
    run = classification_run()
    run.model.train()
    before = copy.deepcopy(run.model.state_dict())
    rng_before = torch.get_rng_state()
    cache = DrawCache()
    for mode in ("bma", "mpm", "prune"):
        threshold = 0.4 if mode == "prune" else None
        for samples in (3, 6):
            prediction = cache.predict(
                run, run.dataset().x_test, "test", owner="a", mode=mode, samples=samples, threshold=threshold
            )
            prediction.probs_per_draw[:] = -1  # a caller writing to its arrays does not reach the cache
    assert run.model.training
    assert torch.equal(torch.get_rng_state(), rng_before)
    for key, value in run.model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert_same(
        cache.predict(run, run.dataset().x_test, "test", owner="a", mode="mpm", samples=6),
        run.predict(run.dataset().x_test, "mpm", 6),
    )
    # regression in the model's units: its per-draw means are the network's outputs themselves
    run = regression_run()
    x = run.dataset().x_test
    cache.predict(run, x, "test", owner="r", mode="bma", samples=4, original_units=False).mean_per_draw[:] = -1
    assert_same(
        cache.predict(run, x, "test", owner="r", mode="bma", samples=4, original_units=False),
        run.predict(x, "bma", 4, original_units=False),
    )


def test_sessions_in_threads_share_one_computation_and_get_the_truth():
    runs = {"a": classification_run(seed=0), "b": classification_run(seed=1)}
    x = runs["a"].dataset().x_test
    truth = {
        (owner, mode, samples): runs[owner].predict(x, mode=mode, samples=samples)
        for owner in runs
        for mode in ("bma", "mpm")
        for samples in (1, 5, 12)
    }
    cache = DrawCache()
    start = threading.Barrier(12)
    failures = []

    def session(index):
        rng = np.random.default_rng(index)
        start.wait()
        for _ in range(8):
            owner, mode = ("a", "b")[rng.integers(2)], ("bma", "mpm")[rng.integers(2)]
            samples = (1, 5, 12)[rng.integers(3)]
            try:
                assert_same(
                    cache.predict(runs[owner], x, "test", owner=owner, mode=mode, samples=samples),
                    truth[(owner, mode, samples)],
                )
            except AssertionError as exc:
                failures.append(f"{owner} {mode} R={samples}: {exc}")

    workers = [threading.Thread(target=session, args=(i,)) for i in range(12)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []
    # each (run, mode) entry's draws were computed at most once: up to 12 each, 4 entries
    assert cache.draws_computed <= 4 * 12
    assert all(cache.draws_held(key) <= 12 for key in cache.keys())


def test_dashboard_backend_predicts_through_the_draw_cache(monkeypatch):
    from dashboard import backend

    run = classification_run()
    run.run_id = "run-a"
    x = run.dataset().x_test
    monkeypatch.setattr(backend, "DRAW_CACHE", DrawCache())
    for samples in (10, 20, 10):
        assert_same(
            backend.predict(run, x, "prune", samples, 0.4, 0, "sample", inputs="test"),
            run.predict(x, mode="prune", samples=samples, threshold=0.4, weights="sample"),
        )
    assert backend.DRAW_CACHE.draws_computed == 20
    # bma refuses a threshold: the backend drops it, and the cache entry has none
    assert_same(backend.predict(run, x, "bma", 4, 0.4, 0, inputs="test"), run.predict(x, "bma", 4))
    assert {key.threshold for key in backend.DRAW_CACHE.keys()} == {0.4, None}
    backend.forget_draws("run-a")
    assert len(backend.DRAW_CACHE) == 0


def test_the_draw_cache_bound_is_read_from_the_environment(monkeypatch):
    from dashboard import backend

    monkeypatch.setenv("BNN_DRAW_CACHE_MB", "64")
    assert backend.draw_cache_bytes() == 64 * 2**20
    monkeypatch.setenv("BNN_DRAW_CACHE_MB", "0")
    assert backend.draw_cache_bytes() == 0
    from core.errors import InputError

    for bad in ("lots", "-1"):  # refused with the variable's name, never replaced by the default
        monkeypatch.setenv("BNN_DRAW_CACHE_MB", bad)
        with pytest.raises(InputError, match="BNN_DRAW_CACHE_MB"):
            backend.draw_cache_bytes()
    monkeypatch.delenv("BNN_DRAW_CACHE_MB")
    assert backend.draw_cache_bytes() == 256 * 2**20


def test_a_computation_that_fails_midway_leaves_no_half_entry(monkeypatch):
    from core.predict import engine

    run = classification_run()
    x = run.dataset().x_test
    cache = DrawCache()
    cache.predict(run, x, "test", owner="a", mode="bma", samples=3)
    original, calls = engine.run_network, []

    def failing(network, *args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # the fourth draw of the next request
            raise PredictionError("interrupted")
        return original(network, *args, **kwargs)

    monkeypatch.setattr(engine, "run_network", failing)
    monkeypatch.setattr("core.predict.draw_cache.MEMORY_BUDGET_BYTES", 4000)  # one draw a chunk: 3 added, then it fails
    with pytest.raises(PredictionError, match="interrupted"):
        cache.predict(run, x, "test", owner="a", mode="bma", samples=9)
    monkeypatch.setattr(engine, "run_network", original)
    for samples in (9, 2):
        assert_same(
            cache.predict(run, x, "test", owner="a", mode="bma", samples=samples), run.predict(x, "bma", samples)
        )


def test_a_session_needing_fewer_draws_does_not_wait_for_the_whole_computation(monkeypatch):
    """A writer computing draws 0..9 publishes each one: a session asking R = 2 of the same plan
    returns while the writer is still drawing, with the numbers of an uncached prediction."""
    from core.predict import draw_cache

    run = classification_run()
    x = run.dataset().x_test
    cache = DrawCache()
    original = draw_cache.sampled_forward
    reader_done, writer_started = threading.Event(), threading.Event()
    drawn = []

    def slow(model, plan, inputs, seed, masks, batch_size, budget, draws, usage, path=None):
        if draws.start == 2:  # hold the writer at its third draw until the reader has its answer
            writer_started.set()
            reader_done.wait(timeout=20)
        drawn.append(draws.start)
        return original(model, plan, inputs, seed, masks, batch_size, budget, draws=draws, usage=usage, path=path)

    monkeypatch.setattr(draw_cache, "sampled_forward", slow)
    results = {}
    writer = threading.Thread(
        target=lambda: results.__setitem__(10, cache.predict(run, x, "test", owner="a", mode="mpm", samples=10))
    )
    writer.start()
    assert writer_started.wait(timeout=20)
    results[2] = cache.predict(run, x, "test", owner="a", mode="mpm", samples=2)
    held_when_read = list(drawn)
    reader_done.set()
    writer.join(timeout=60)
    assert held_when_read == [0, 1]  # answered from the two published draws, the writer still at work
    assert drawn == list(range(10)) and cache.draws_computed == 10
    for samples, prediction in results.items():
        assert_same(prediction, run.predict(x, "mpm", samples))


@pytest.mark.parametrize("slots", [1, 2])
def test_fair_turns_hold_at_most_the_slots_and_serve_in_order(slots):
    from core.predict.draw_cache import FairTurns

    turns = FairTurns(slots)
    holding, most, order = [0], [0], []
    lock = threading.Lock()
    release = threading.Event()

    def hold(name):
        with turns.turn():
            with lock:
                holding[0] += 1
                most[0] = max(most[0], holding[0])
                order.append(name)
            release.wait(timeout=20)
            with lock:
                holding[0] -= 1

    blockers = [threading.Thread(target=hold, args=(f"b{i}",)) for i in range(slots)]
    for thread in blockers:
        thread.start()
    deadline = time.monotonic() + 20
    while len(order) < slots and time.monotonic() < deadline:
        time.sleep(0.01)
    waiting = []
    for i in range(5):  # queue up one at a time, so the order they asked in is known
        waiting.append(threading.Thread(target=hold, args=(f"w{i}",)))
        waiting[-1].start()
        while turns.waiting < i + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert turns.waiting == 5 and len(order) == slots  # every slot taken, the rest queued
    release.set()
    for thread in blockers + waiting:
        thread.join(timeout=20)
    assert most[0] == slots
    if slots == 1:  # one at a time: the turns follow the queue exactly
        assert order == ["b0"] + [f"w{i}" for i in range(5)]
    with pytest.raises(PredictionError, match="compute_slots"):
        FairTurns(0)


def test_an_entry_keeps_its_draw_path_and_is_drawn_again_when_the_kept_choice_changed():
    """The CI failure of 2026-11-27 (probs_per_draw 1.2e-7 apart): an entry drawn by one path, the
    process's kept choice then dropped (`forget_paths`, or the bounded table) and probed again. Reading
    the entry keeps its path again; a different choice made meanwhile drops its draws and draws them
    again by that path, so the cached numbers equal the uncached ones bit for bit either way."""
    from core.predict.draw_paths import DrawPath, forget_paths, path_key, remember_path, remembered_path
    from core.predict.engine import MEMORY_BUDGET_BYTES, make_plan, sampled_forward

    with threads(1):  # how products split over threads changes the rounding (measured: this net's paths differ at 1)
        model = make_model(hidden=(30, 20), in_features=5)
        x = torch.randn(300, 5, generator=torch.Generator().manual_seed(0))
        plan = make_plan(model, "bma", 5, None, None)
        by = {
            path: sampled_forward(model, plan, x, 0, None, None, MEMORY_BUDGET_BYTES, path=path)[0]
            for path in (DrawPath.PLAIN, DrawPath.ACTIVE)
        }
        assert not torch.equal(by[DrawPath.PLAIN], by[DrawPath.ACTIVE])  # the paths round apart here: the test can tell
        key = path_key(model, None, x, None, None)
        forget_paths(model)
        remember_path(key, DrawPath.PLAIN)
        cache = DrawCache()
        first = cache.predict(model, x, "x", "a", "bma", 5)
        assert_same(first, predict(model, x, "bma", 5))
        forget_paths(model)  # the choice dropped; the entry's draws ran by plain
        assert_same(cache.predict(model, x, "x", "a", "bma", 5), first)
        assert remembered_path(key) is DrawPath.PLAIN and cache.draws_computed == 5  # kept again, nothing drawn
        assert_same(predict(model, x, "bma", 5), first)
        forget_paths(model)
        remember_path(key, DrawPath.ACTIVE)  # another choice made meanwhile (another entry's probe)
        again = cache.predict(model, x, "x", "a", "bma", 5)
        assert cache.draws_computed == 10  # the five drawn again, by the kept path
        assert not np.array_equal(again.probs_per_draw, first.probs_per_draw)
        assert_same(again, predict(model, x, "bma", 5))
        # later draws: that path too
        assert_same(cache.predict(model, x, "x", "a", "bma", 8), predict(model, x, "bma", 8))
        forget_paths(model)


def test_each_draws_probabilities_are_computed_once_and_equal_the_stacks(monkeypatch):
    run = classification_run(seed=3)
    x = run.dataset().x_test
    likelihood = type(run.model.likelihood)
    softmaxed = []
    original = likelihood.probabilities
    # the cache's softmaxes are of one draw (n, classes); an uncached prediction's of its stack (R, n, classes)
    monkeypatch.setattr(
        likelihood,
        "probabilities",
        lambda self, output: (output.dim() == 2 and softmaxed.append(len(output))) or original(self, output),
    )
    cache = DrawCache()
    for samples in (10, 11, 12, 5, 12):  # a refining card's counts, then a lower R and the same again
        assert_same(
            cache.predict(run, x, "test", owner="o", mode="bma", samples=samples), predict_uncached(run, x, samples)
        )
    # one (n, classes) softmax per draw while the cards asked for 10, 11, 12, 5 and 12 of them
    assert softmaxed == [len(x)] * 12
    # a reset entry's draws are new: theirs are computed again
    entry = next(iter(cache._entries.values()))
    entry.reset()
    softmaxed.clear()
    assert_same(cache.predict(run, x, "test", owner="o", mode="bma", samples=3), predict_uncached(run, x, 3))
    assert softmaxed == [len(x)] * 3


def predict_uncached(run, x, samples):
    with torch.no_grad():
        return run.predict(x, mode="bma", samples=samples)


@pytest.mark.parametrize("likelihood", ["bernoulli", "categorical"])
def test_a_binary_classifiers_cached_draws_equal_the_uncached_prediction_bit_for_bit(likelihood):
    # 1,000 inputs: the sigmoid of one draw and of a stack of draws part their elements differently between
    # torch's vectorised loop and its scalar tail, so per-draw probabilities may differ from the stack's
    rng = np.random.default_rng(5)
    x = rng.normal(size=(1000, 5)).astype(np.float32)  # with the model of seed 2: 5 such elements in 7 draws
    y = (x[:, 0] > 0).astype(np.int64)
    dataset = make_dataset(
        name="binary", task="classification", x_train=x, y_train=y, x_test=x, y_test=y, source="generated", n_classes=2
    )
    run = Run.of(make_model(outputs=2, likelihood=likelihood, seed=2), dataset)
    cache = DrawCache()
    for samples in (6, 7, 3, 7):
        assert_same(
            cache.predict(run, x, "test", owner="b", mode="bma", samples=samples), predict_uncached(run, x, samples)
        )


@pytest.mark.parametrize("name", ["categorical", "bernoulli"])
def test_a_likelihood_says_rightly_whether_its_probabilities_go_row_by_row(name):
    from core.models.likelihoods import LIKELIHOODS

    likelihood = LIKELIHOODS[name]()
    classes = 10 if name == "categorical" else 1
    same = []
    for count in (1, 2):
        with threads(count):
            for n in (7, 37, 200, 10_001):
                output = torch.randn(6, n, classes, generator=torch.Generator().manual_seed(n))
                per_draw = torch.stack([likelihood.probabilities(output[i]) for i in range(6)])
                same.append(torch.equal(likelihood.probabilities(output), per_draw))
    # categorical: every size and thread count; bernoulli's sigmoid differs in the last bit somewhere
    assert all(same) if likelihood.probabilities_by_row else not all(same)
