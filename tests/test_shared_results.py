"""Results shared by a class: settings that compute the same numbers share one cache entry,
a cached number is the number a fresh prediction gives, entries of different runs stay apart,
predictions take turns (compute slots), the run list is read once per change of the store, and
chart specs are kept with their data already encoded (the same rows)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from core.errors import PredictionError
from tests.support import clear_dashboard_caches


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny mnist-small runs that differ only by seed, in their own store."""
    from core.runs import RunConfig, train_run

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNN_CACHE_DIR", str(tmp_path_factory.mktemp("bnn-shared")))
        yield [
            train_run(
                RunConfig(dataset="mnist-small", hidden=(8,), seed=seed, train={"epochs": 1, "batch_size": 500})
            ).run_id
            for seed in (0, 1)
        ]


@pytest.fixture(autouse=True)
def fresh_caches():
    clear_dashboard_caches()
    yield
    clear_dashboard_caches()


def fresh_metrics(run, mode, samples, threshold, weights=None):
    """The metric cards computed from scratch: Run.predict, no cache of any kind."""
    from dashboard import backend, cache

    prediction = run.predict(
        run.dataset().x_test, mode=mode, samples=samples, threshold=threshold, seed=0, weights=weights
    )
    return backend.test_metrics(cache.prediction_arrays(prediction), run.dataset())


# --- one entry for settings that compute the same numbers ------------------------------------------


def test_prediction_key_merges_settings_that_compute_the_same_numbers():
    from dashboard.caching import prediction_key

    assert (
        prediction_key("prune", 7, 0.3, 0, "mean")
        == prediction_key("mpm-mean", 1, 0.3, 0)
        == {"mode": "mpm-mean", "samples": 1, "threshold": 0.3, "seed": 0, "weights": None}
    )
    assert prediction_key("prune", 7, 0.3, 2, "sample") == prediction_key("mpm", 7, 0.3, 2)
    assert prediction_key("prune", 7, 0.3, 2, None) == prediction_key("mpm", 7, 0.3, 2)  # prune samples by default
    assert prediction_key("mean", 20, None, 5) == prediction_key("ALL-MEA", 1, None, 0)
    # ... and keeps apart what differs
    assert prediction_key("mpm", 7, 0.3, 0) != prediction_key("mpm", 8, 0.3, 0)
    assert prediction_key("mpm", 7, 0.3, 0) != prediction_key("mpm", 7, 0.3, 1)
    assert prediction_key("mpm-mean", 1, 0.3, 0) != prediction_key("mpm-mean", 1, 0.31, 0)
    assert prediction_key("bma", 4, None, 0) != prediction_key("mpm", 4, None, 0)
    assert prediction_key("bma", 4, None, 0)["threshold"] is None


@pytest.mark.parametrize("weights", ["mean", "sample"])
def test_cached_prune_metrics_are_the_fresh_numbers_and_one_entry_serves_both_modes(runs, weights, monkeypatch):
    from dashboard import backend, cache

    run_id = runs[0]
    run = cache.cached_run(run_id)
    samples = 1 if weights == "mean" else 6
    for threshold in (0.3, 0.55):
        cached = cache.test_metrics(run_id, "prune", samples, threshold, 0, weights)
        assert cached == fresh_metrics(run, "prune", samples, threshold, weights)  # exactly the same numbers
    # The same numbers under mpm / mpm-mean: served from the entries above, nothing predicted again.
    calls = []
    original = backend.predict
    monkeypatch.setattr(backend, "predict", lambda *a, **k: calls.append(a) or original(*a, **k))
    same_mode = "mpm-mean" if weights == "mean" else "mpm"
    for threshold in (0.3, 0.55):
        assert cache.test_metrics(run_id, same_mode, samples, threshold, 0) == fresh_metrics(
            run, same_mode, samples, threshold
        )
    assert calls == []


def test_draw_cache_keeps_prune_with_sampled_weights_and_mpm_in_one_entry(runs):
    from core.predict.draw_cache import DrawCache
    from dashboard import cache

    run = cache.cached_run(runs[0])
    x = run.dataset().x_test[:300]
    draws = DrawCache()
    pruned = draws.predict(run, x, "test", owner="a", mode="prune", samples=5, threshold=0.4, weights="sample")
    computed = draws.draws_computed
    median = draws.predict(run, x, "test", owner="a", mode="mpm", samples=5, threshold=0.4)
    assert draws.draws_computed == computed == 5 and len(draws) == 1
    fresh = run.predict(x, mode="mpm", samples=5, threshold=0.4)
    np.testing.assert_array_equal(median.probs_per_draw, fresh.probs_per_draw)
    np.testing.assert_array_equal(pruned.probs_per_draw, fresh.probs_per_draw)
    assert median.mode.value == "mpm" and pruned.mode.value == "prune"  # each answer names its own mode
    assert median.density == fresh.density


def test_cache_entries_of_two_runs_stay_apart_and_forgetting_one_keeps_the_other(runs, monkeypatch):
    from dashboard import backend, cache

    first, second = runs
    a = cache.test_metrics(first, "prune", 4, 0.4, 0, "sample")
    b = cache.test_metrics(second, "prune", 4, 0.4, 0, "sample")
    assert a == fresh_metrics(cache.cached_run(first), "prune", 4, 0.4, "sample")
    assert b == fresh_metrics(cache.cached_run(second), "prune", 4, 0.4, "sample")
    assert a != b  # the two runs' numbers really differ, so a mix-up would show
    cache.forget_run(first)
    calls = []
    original = backend.predict
    monkeypatch.setattr(backend, "predict", lambda run, *a, **k: calls.append(run.run_id) or original(run, *a, **k))
    assert cache.test_metrics(second, "mpm", 4, 0.4, 0) == b
    assert calls == []  # the other run's entry stayed
    assert cache.test_metrics(first, "mpm", 4, 0.4, 0) == a
    assert calls == [first]  # the forgotten run's was computed again, to the same numbers


# --- compute slots ------------------------------------------------------------------------------------


def test_compute_slots_let_one_prediction_run_at_a_time_with_the_same_numbers(runs, monkeypatch):
    from core.predict import draw_cache
    from dashboard import cache

    run = cache.cached_run(runs[0])
    x = run.dataset().x_test[:200]
    running, most = [0], [0]
    lock = threading.Lock()
    original = draw_cache.sampled_forward

    def watched(*args, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        try:
            return original(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(draw_cache, "sampled_forward", watched)

    def most_at_once(slots):
        draws = draw_cache.DrawCache(compute_slots=slots)
        most[0] = 0
        results = {}
        threads = [
            threading.Thread(
                target=lambda t=t: results.__setitem__(
                    t, draws.predict(run, x, "test", owner="a", mode="mpm", samples=3, threshold=t)
                )
            )
            for t in (0.2, 0.3, 0.4, 0.5)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for t, prediction in results.items():
            np.testing.assert_array_equal(prediction.probs, run.predict(x, mode="mpm", samples=3, threshold=t).probs)
        return most[0]

    assert most_at_once(1) == 1
    assert most_at_once(None) > 1  # without slots they do overlap (so the check above can fail)
    with pytest.raises(PredictionError, match="compute_slots"):
        draw_cache.DrawCache(compute_slots=0)


# --- the run list -------------------------------------------------------------------------------------


def test_run_list_is_read_once_and_again_when_the_store_changes(runs, monkeypatch):
    from core.runs import RunConfig, delete_run, train_run
    from dashboard import backend, cache

    reads = []
    original = backend.list_runs
    monkeypatch.setattr(backend, "list_runs", lambda: reads.append(1) or original())
    rows = cache.cached_run_list()
    assert [r["run_id"] for r in rows] == [info.run_id for info in original()] and set(runs) <= {
        r["run_id"] for r in rows
    }
    for _ in range(5):
        assert cache.cached_run_list() == rows
    assert cache.cached_run_labels() == backend.run_labels(rows)
    assert len(reads) == 1
    # A run trained (here by core, as another process would) shows at once, without clearing anything.
    extra = train_run(RunConfig(dataset="two-moons", hidden=(4,), train={"epochs": 1})).run_id
    assert extra in [r["run_id"] for r in cache.cached_run_list()]
    assert extra in cache.cached_run_labels()
    delete_run(extra)
    assert extra not in [r["run_id"] for r in cache.cached_run_list()]
    assert len(reads) == 3


def test_a_stale_run_list_is_read_again_by_one_session_while_the_others_keep_the_list_before(monkeypatch):
    """When the list goes stale in a class, every session's next run asked for it at once; now one reads
    it again and the others are answered from the list before; a list cleared meanwhile (a run added
    or deleted) is never replaced by a read that began before it."""
    import threading

    from dashboard import cache

    cache.cached_run_list.clear()
    reading, release, reads = threading.Event(), threading.Event(), []

    def slow_read():
        reads.append(threading.get_ident())
        if len(reads) == 2:  # the second read (the refresh) waits until the test lets it go
            reading.set()
            assert release.wait(10)
        return [{"run_id": f"r{len(reads)}", "status": "ok", "config": {}}]

    monkeypatch.setattr(cache, "_read_run_list", slow_read)
    assert [r["run_id"] for r in cache.cached_run_list()] == ["r1"]
    monkeypatch.setattr(cache, "RUN_LIST_TTL", 0.0)  # stale from now on
    refresher = threading.Thread(target=cache.cached_run_list)
    refresher.start()
    assert reading.wait(10)
    for _ in range(3):  # other sessions meanwhile: the list before, and no read of their own
        assert [r["run_id"] for r in cache.cached_run_list()] == ["r1"]
    assert len(reads) == 2
    release.set()
    refresher.join(10)
    monkeypatch.setattr(cache, "RUN_LIST_TTL", 30.0)
    assert [r["run_id"] for r in cache.cached_run_list()] == ["r2"] and len(reads) == 2

    # cleared while a read is under way: that read's rows are not kept, the next ask reads again
    reading.clear(), release.clear()
    reads[:] = [0]  # the next read is the second: it waits
    monkeypatch.setattr(cache, "RUN_LIST_TTL", 0.0)
    refresher = threading.Thread(target=cache.cached_run_list)
    refresher.start()
    assert reading.wait(10)
    cache.cached_run_list.clear()
    release.set()
    refresher.join(10)
    monkeypatch.setattr(cache, "RUN_LIST_TTL", 30.0)
    assert [r["run_id"] for r in cache.cached_run_list()] == ["r3"] and len(reads) == 3
    cache.cached_run_list.clear()


# --- chart specs kept with their data encoded ----------------------------------------------------------


def arrow_rows(data: bytes) -> list[dict]:
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all().to_pandas().to_dict("records")


def test_shipped_spec_holds_the_same_rows_as_arrow():
    from dashboard import cache, charts

    spec = charts.metric_vs_density(
        np.array([0.1, 0.5, 0.9]),
        np.array([0.9, 0.4, 0.1]),
        np.array([0.95, 0.94, 0.5]),
        "accuracy",
        current=(0.4, 0.94),
    ).to_dict()
    # shipped also names the datasets by position (charts.stable_dataset_names): the same views, the same rows
    renamed = charts.stable_dataset_names(spec)
    plain = {name: list(rows) for name, rows in renamed["datasets"].items()}
    shipped = cache.shipped(spec)
    assert set(shipped["datasets"]) == set(plain)
    assert {k: v for k, v in shipped.items() if k != "datasets"} == {
        k: v for k, v in renamed.items() if k != "datasets"
    }
    for name, rows in plain.items():
        assert isinstance(shipped["datasets"][name], bytes)
        assert arrow_rows(shipped["datasets"][name]) == rows


def test_cached_uncertainty_charts_are_built_from_the_shared_prediction(runs):
    from dashboard import backend, cache, charts

    run_id = runs[0]
    run = cache.cached_run(run_id)
    indices = (3, 4, 5)
    specs = cache.class_probability_charts(run_id, indices, "prune", 4, 0.4, 0, "sample")
    fresh = run.predict(
        run.dataset().x_test[list(indices)], mode="prune", samples=4, threshold=0.4, seed=0, weights="sample"
    )
    assert len(specs) == len(indices)
    for position, spec in enumerate(specs):
        expected = charts.class_probability_bars(
            fresh.probs_per_draw[:, position, :],
            list(run.dataset().class_names or []) or None,
            doubt_level=backend.DOUBT_LEVEL,
        ).to_dict()
        expected_rows = sorted(tuple(sorted(r.items())) for rows in expected["datasets"].values() for r in rows)
        got_rows = sorted(tuple(sorted(r.items())) for data in spec["datasets"].values() for r in arrow_rows(data))
        assert got_rows == expected_rows
        assert spec["title"].startswith(f"#{indices[position]}: true {int(run.dataset().y_test[indices[position]])}")
    summary = cache.ood_summary(run_id, "uniform-noise", "bma", 3, None, 0, 50)
    inside = backend.predictive_entropy(run.predict(run.dataset().x_test, mode="bma", samples=3, seed=0).probs)
    outside = cache.ood_entropy(run_id, "uniform-noise", "bma", 3, None, 0, 50)
    assert summary == {
        "inputs": 50,
        "mean_entropy": float(outside.mean()),
        "auroc": backend.entropy_auroc(inside, outside),
    }


# --- the server's rerun log (the load test's CPU per interaction) ---------------------------------------


def test_rerun_log_records_each_script_run(runs, tmp_path, monkeypatch):
    import json
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    log = tmp_path / "reruns.jsonl"
    monkeypatch.setenv("BNN_RERUN_LOG", str(log))
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py"), default_timeout=120)
    at.session_state["selected_run_id"] = runs[0]
    at.run()
    at.switch_page("views/glossary.py").run()
    assert not at.exception
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["page"] for line in lines] == ["train", "glossary"]
    assert all(line["end"] >= line["start"] and line["cpu"] >= 0 for line in lines)


def test_predict_slots_setting(monkeypatch):
    from dashboard import backend

    monkeypatch.delenv("BNN_PREDICT_SLOTS", raising=False)
    assert backend.predict_slots() is None  # no limit by default (see predict_slots: measured)
    for text, slots in (("3", 3), ("1", 1), ("0", None)):
        monkeypatch.setenv("BNN_PREDICT_SLOTS", text)
        assert backend.predict_slots() == slots
    from core.errors import InputError

    for bad in ("-2", "many"):  # refused with the variable's name, never read as "no limit"
        monkeypatch.setenv("BNN_PREDICT_SLOTS", bad)
        with pytest.raises(InputError, match="BNN_PREDICT_SLOTS"):
            backend.predict_slots()


def test_no_page_relies_on_streamlit_magic():
    """.streamlit/config.toml turns magic off (its ast.parse raced other threads on Python 3.11): a bare
    expression in a page would silently show nothing, so there must be none."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    config = (root / ".streamlit" / "config.toml").read_text()
    assert "magicEnabled = false" in config
    bare = []
    for path in [root / "dashboard" / "app.py", *sorted((root / "dashboard" / "views").glob("*.py"))]:
        tree = ast.parse(path.read_text())
        for parent in ast.walk(tree):
            body = getattr(parent, "body", None)
            for index, node in enumerate(body if isinstance(body, list) else []):
                if not isinstance(node, ast.Expr) or isinstance(node.value, (ast.Call, ast.Await)):
                    continue
                docstring = (
                    index == 0
                    and isinstance(parent, (ast.Module, ast.FunctionDef, ast.ClassDef))
                    and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)
                )
                if not docstring:
                    bare.append(f"{path.name}:{node.lineno}")
    assert bare == []
