"""Streamlit caches around dashboard.backend, shared by every session of the server (the machinery:
dashboard/caching.py).

- `cached_run(run_id)`: st.cache_resource, the loaded run (model + dataset).
  Shared by every session, so nothing may mutate it: predictions never do.
  Runs of one dataset share one loaded copy of it (`cached_dataset`).
- everything derived (statistics, masks, sweeps, evaluations, predictions) is
  st.cache_data keyed by run id + parameters and returns plain numpy/dicts.
  Predictions are keyed in `prediction_key`'s canonical form, so settings that
  compute the same numbers (prune with mean weights and mpm-mean at a threshold,
  prune with sampled weights and mpm) are one entry, computed once for a class.
- chart specs (dashboard/cache_charts.py, re-exported here) are cached with their
  data already Arrow-encoded (`shipped`), so a rerun only looks them up.
- `test_draws_ready`: how many of a setting's R draws are kept now; the page shows
  the cards of those at once and refines them as the others arrive.
- `cached_run_list()`: the store's runs, one copy per process, read again when
  the store's folder changes (or after RUN_LIST_TTL).
- `training_queue()`: the process-wide training queue (dashboard/worker.py).

Cached functions take the run id, never the run object, so keys stay small
and hashable. Deleting a run forgets only that run's entries (`forget_run`):
every per-run entry is also keyed by the run's generation, which forgetting
bumps, so the other sessions' entries for other runs stay.

Sizes are for a class on one machine (about 30 sessions on a handful of
runs). A loaded MNIST 784-400-600-10 LBBNN run holds 8.6 MB of weights and
grows the process by about 11 MB (measured: resident size over five loads);
its dataset (36 MB for mnist-small) is loaded once and shared by every run of
it. So `MAX_CACHED_RUNS` = 32 runs cost about 0.36 GB plus their datasets, and
no session reloads weights from disk on a rerun; $BNN_CACHED_RUNS changes it.
The largest derived entries (R=100 predictions on 2k test images) are about
16 MB; their caches are bounded by entries and a time to live.

Below these, sampled predictions go through the backend's draw cache
(`backend.DRAW_CACHE`, core.predict.draw_cache): per run, mode, threshold and
input set, the outputs of each posterior draw, bounded by bytes
($BNN_DRAW_CACHE_MB, default 256), so a new R computes only the draws not yet
kept. Forgetting a run drops its draws too.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

from dashboard import backend
from dashboard import surface as decision_surface
from dashboard.caching import DERIVED_TTL, PREDICTIONS, next_generation, once_at_a_time, per_run, prediction_key


def _cached_runs_setting() -> int:
    from dashboard.settings import cached_runs

    return cached_runs()


MAX_CACHED_RUNS = _cached_runs_setting()


@st.cache_resource(max_entries=8, show_spinner="Loading the dataset ...")
def cached_dataset(key: str) -> Any:
    """A dataset by its RunConfig fields (JSON), loaded once for every run that uses it."""
    return backend.config_from_fields(json.loads(key)).load_dataset()


def dataset_key(config: Any) -> str:
    """The RunConfig fields that decide which dataset a run loads."""
    values = config.to_dict()
    return json.dumps(
        {k: values.get(k) for k in ("dataset", "split", "data_seed", "dataset_params") if k in values}, sort_keys=True
    )


def cached_run(run_id: str) -> Any:
    """The loaded run, read from disk once however many sessions ask at the same time."""
    return once_at_a_time(("cached_run", run_id), lambda: _cached_run(run_id))


# Runs a training handed over (worker), waiting to become cached runs without a read from disk.
_adopted_lock = threading.Lock()
_adopted: dict[str, Any] = {}
MAX_ADOPTED = 4


def adopt_run(run: Any) -> None:
    """Make a just-trained run (handed over by the training worker) the cached copy of its id."""
    with _adopted_lock:
        _adopted[run.run_id] = run
        while len(_adopted) > MAX_ADOPTED:
            _adopted.pop(next(iter(_adopted)))


@st.cache_resource(max_entries=MAX_CACHED_RUNS, show_spinner="Loading run ...")
def _cached_run(run_id: str) -> Any:
    with _adopted_lock:
        run = _adopted.pop(run_id, None)
    if run is None:
        run = backend.load_run(run_id)
    try:
        run._dataset = cached_dataset(dataset_key(run.config))
    except Exception:  # an odd config: the run loads its own copy
        run.dataset()
    return run


def forget_run(run_id: str) -> None:
    """Drop a deleted or retrained run from every cache, and nothing else."""
    next_generation(run_id)
    _cached_run.clear(run_id)
    backend.forget_draws(run_id)
    cached_run_list.clear()


def clear_all() -> None:
    """Empty the run and result caches of every session (the teacher's button); the training
    queue is kept."""
    st.cache_data.clear()
    PREDICTIONS.clear()
    _clear_run_list()
    _cached_run.clear()
    cached_dataset.clear()
    backend.clear_draws()


# Stores the lessons' runs were placed into by this process. Not an lru_cache in app.py: Streamlit runs
# app.py afresh on every script run, so a cache defined there was new each time and the check ran on
# every rerun of every session.
_lesson_stores: set[str] = set()
_lesson_stores_lock = threading.Lock()


def install_lesson_runs(store_folder: str) -> None:
    """The shipped lessons' runs into the store on the first start (BNN_LESSON_RUNS), verified like any
    stored run, once per process and store; a damaged bundled run is logged and skipped (nothing of it
    is copied)."""
    from dashboard import settings

    if not settings.lesson_runs():
        return
    with _lesson_stores_lock:
        if store_folder in _lesson_stores:
            return
        _, problems = backend.install_bundled_runs(Path(store_folder).parent)
        _lesson_stores.add(store_folder)
    for problem in problems:
        logging.getLogger(__name__).warning(problem)


@st.cache_resource
def training_queue() -> Any:
    """The one training queue of this server process (sharing the machine's training slots with the
    other server processes of `python -m dashboard.serve`)."""
    from dashboard.settings import queue_limits, serve_child, serve_folder
    from dashboard.worker import TrainingQueue, default_slots, train_in_subprocess

    slots, folder = default_slots(), serve_folder()
    shared, prefix = None, ""
    if folder is not None:  # one of `python -m dashboard.serve`'s processes: the machine's slots are shared
        from dashboard.shared_queue import SharedQueue

        child = serve_child() or 0
        shared, prefix = SharedQueue(folder, slots, child), f"s{child}-"
    queue = TrainingQueue(train_in_subprocess, slots, queue_limits(), shared=shared, token_prefix=prefix)
    # A finished run reaches every session's run list at once, not after the list's time to live.
    queue.on_job_finished = cached_run_list.clear
    return queue


# The run list is read on every rerun of every session (the sidebar): one copy per process, read
# again from the store when its folder changes (a run added or deleted, by this server or another
# process) and at least every RUN_LIST_TTL seconds (the runs' "last used" times and sizes). One
# session reads it again at a time; the others keep the list before until it is in: with a store
# of 178 runs a read took 54-59 ms (`_read_run_list()` timed in one process), and when the list
# went stale in a class every session's next run read it at once (`py-spy record --rate 100
# --duration 30` on the server during `python -m benchmarks.classroom_load --sessions 30 --preset
# fast-mnist --kept-draws`: 4% of the script runs' samples under the store's reading).
RUN_LIST_TTL = 30.0
_run_list_lock = threading.Lock()
_run_list: dict[str, Any] = {"stamp": None, "read_at": 0.0, "rows": None, "labels": None, "reader": None, "cleared": 0}


def _store_stamp() -> tuple[str, int | None]:
    """The run store's folder and its modification time (changes when a run folder comes or goes)."""
    root = backend.run_store_folder()
    try:
        return str(root), root.stat().st_mtime_ns
    except OSError:
        return str(root), None


def _current_run_list() -> dict[str, Any]:
    stamp = _store_stamp()
    me = threading.get_ident()
    with _run_list_lock:
        if (
            _run_list["rows"] is not None
            and _run_list["stamp"] == stamp
            and time.monotonic() - _run_list["read_at"] < RUN_LIST_TTL
        ):
            return dict(_run_list)
        if _run_list["rows"] is not None and _run_list["reader"] is not None:
            return dict(_run_list)  # another session is reading it again: the list before until then
        _run_list["reader"], cleared = me, _run_list["cleared"]
    try:
        rows = _read_run_list()
    finally:
        with _run_list_lock:
            if _run_list["reader"] == me:
                _run_list["reader"] = None
    with _run_list_lock:
        if _run_list["cleared"] == cleared:  # not cleared while it was read (a run added or deleted)
            _run_list.update(stamp=stamp, read_at=time.monotonic(), rows=rows, labels=None)
            return dict(_run_list)
        return {**_run_list, "rows": rows, "labels": None}  # this caller's read; the next one reads again


def cached_run_list() -> list[dict[str, Any]]:
    """Every run of the store as plain dicts (oldest first), shared by every session: read-only."""
    return list(_current_run_list()["rows"])


def cached_run_labels() -> dict[str, str]:
    """backend.run_labels of the healthy runs of cached_run_list, worked out once per run list."""
    held = _current_run_list()
    if held["labels"] is None:
        labels = backend.run_labels([r for r in held["rows"] if r.get("status", "ok") == "ok"])
        with _run_list_lock:
            if _run_list["rows"] is held["rows"]:
                _run_list["labels"] = labels
        return labels
    return held["labels"]


def _clear_run_list() -> None:
    with _run_list_lock:
        _run_list.update(stamp=None, rows=None, labels=None, reader=None, cleared=_run_list["cleared"] + 1)


cached_run_list.clear = _clear_run_list  # type: ignore[attr-defined]


def _read_run_list() -> list[dict[str, Any]]:
    """The store's rows; a damaged run stays in the list (status "corrupt", so that the teacher can
    delete it) with nothing of its config or metrics shown."""
    rows = []
    for info in backend.list_runs():
        row = info.to_dict() if hasattr(info, "to_dict") else dict(info)
        config = getattr(info, "config", None) or row.get("config") or {}
        if row.get("status", "ok") != "ok" or not isinstance(config, dict):
            config, row["metrics"] = {}, {}
        train = config.get("train") if isinstance(config.get("train"), dict) else {}
        row["hidden"] = config.get("hidden") if isinstance(config.get("hidden"), list) else None
        row["epochs"] = train.get("epochs") if isinstance(train.get("epochs"), int) else None
        row["config"] = config  # labels name the fields that tell runs of one kind apart
        rows.append(row)
    return rows


@per_run(max_entries=64, show_spinner=False)
def statistics(run_id: str) -> list[np.ndarray]:
    return backend.native_statistics(cached_run(run_id).model)


@per_run(max_entries=64, show_spinner=False)
def snapshots(run_id: str) -> Any | None:
    """The run's per-epoch snapshots (small: histograms, densities, masks of small nets) or None."""
    return backend.training_snapshots(cached_run(run_id))


def family(run_id: str) -> str:
    """The run's family (its method): what picks its colour on every page."""
    return str(cached_run(run_id).config.method)


@per_run(max_entries=64, show_spinner=False)
def threshold_range(run_id: str) -> backend.ThresholdRange:
    return backend.threshold_range(cached_run(run_id).model.spec, statistics(run_id))


@per_run(max_entries=256, ttl=DERIVED_TTL, show_spinner=False)
def masks(run_id: str, threshold: float) -> list[np.ndarray]:
    spec = threshold_range(run_id)
    return backend.masks_at(statistics(run_id), threshold, spec.keep_above)


@per_run(max_entries=64, show_spinner=False)
def conditional_mean_weights(run_id: str) -> list[np.ndarray]:
    return backend.conditional_mean_weights(cached_run(run_id).model)


@per_run(canonical_prediction=True, bounded=PREDICTIONS, show_spinner="Predicting the test set ...")
def test_prediction(
    run_id: str, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> dict[str, np.ndarray]:
    """Arrays of a prediction on the whole test set. Pass `backend.effective_threshold` so that
    modes without a threshold share one cache entry."""
    run = cached_run(run_id)
    return prediction_arrays(
        backend.predict(run, run.dataset().x_test, mode, samples, threshold, seed, weights, inputs="test")
    )


@per_run(canonical_prediction=True, max_entries=512, ttl=DERIVED_TTL, show_spinner=False)
def test_metrics(
    run_id: str, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> dict[str, Any]:
    arrays = test_prediction(run_id, mode, samples, threshold, seed, weights)
    return backend.test_metrics(arrays, cached_run(run_id).dataset())


@per_run(max_entries=64, show_spinner="Sweeping thresholds ...")
def sweep(run_id: str) -> dict[str, Any]:
    curve = backend.sweep(cached_run(run_id))
    return {"thresholds": curve.thresholds, "density": curve.density, "values": curve.values, "metric": curve.metric}


@per_run(canonical_prediction=True, bounded=PREDICTIONS, show_spinner="Predicting on the grid ...")
def grid_prediction(
    run_id: str, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> dict[str, np.ndarray]:
    run = cached_run(run_id)
    return prediction_arrays(
        backend.predict(run, run.dataset().x_grid, mode, samples, threshold, seed, weights, inputs="grid")
    )


@per_run(canonical_prediction=True, max_entries=128, ttl=DERIVED_TTL, show_spinner=False)
def selected_prediction(
    run_id: str,
    indices: tuple[int, ...],
    mode: str,
    samples: int,
    threshold: float | None,
    seed: int,
    weights: str | None = None,
) -> dict[str, np.ndarray]:
    run = cached_run(run_id)
    x = run.dataset().x_test[list(indices)]
    return prediction_arrays(
        backend.predict(run, x, mode, samples, threshold, seed, weights, inputs=("test", tuple(indices)))
    )


@per_run(canonical_prediction=True, max_entries=64, ttl=DERIVED_TTL, show_spinner="Predicting OOD inputs ...")
def ood_entropy(
    run_id: str,
    name: str,
    mode: str,
    samples: int,
    threshold: float | None,
    seed: int,
    n: int,
    weights: str | None = None,
) -> np.ndarray:
    run = cached_run(run_id)
    x = backend.load_ood_inputs(run.dataset(), name, n=n, seed=seed)
    prediction = backend.predict(run, x, mode, samples, threshold, seed, weights, inputs=("ood", name, n, seed))
    return backend.predictive_entropy(prediction.probs)


@per_run(canonical_prediction=True, max_entries=512, ttl=DERIVED_TTL, show_spinner=False)
def ood_summary(
    run_id: str,
    name: str,
    mode: str,
    samples: int,
    threshold: float | None,
    seed: int,
    n: int,
    weights: str | None = None,
) -> dict[str, float]:
    """OOD set `name` against the test set: its size, mean predictive entropy and the entropy AUROC
    (small numbers: a rerun reads these, not the test set's per-draw probabilities)."""
    inside = backend.predictive_entropy(test_prediction(run_id, mode, samples, threshold, seed, weights)["probs"])
    values = ood_entropy(run_id, name, mode, samples, threshold, seed, n, weights)
    return {
        "inputs": int(len(values)),
        "mean_entropy": float(values.mean()),
        "auroc": float(backend.entropy_auroc(inside, values)),
    }


def test_draws_ready(
    run_id: str, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> tuple[int, int]:
    """(k, R): test_prediction of this setting can be read now with k of its R draws, without waiting
    for any computation (k = R: complete; a mode that draws nothing: (1, 1)). With k < R the other
    draws are computed in the background (the draw cache's refiner: its workers share the compute
    slots, and drop a setting no page has asked about for a few seconds). test_metrics(..., k, ...)
    is then exactly the k-draw prediction's, and with R the uncached R-draw numbers.

    The browser session asking waits for this setting only: the one it asked before is no longer
    drawn for it (a student who moves the slider again before the numbers are complete stops the
    draws nobody else waits for)."""
    from dashboard.streamlit_compat import script_session_id

    key = prediction_key(mode, samples, threshold, seed, weights)
    refiner = backend.DRAW_CACHE.refiner()
    run = cached_run(run_id)
    draw_processes_once()
    if not backend.mode_draws_samples(key["mode"]):
        refiner.leave(script_session_id())  # a setting that draws nothing: the session waits for no draws
        return 1, 1
    progress = refiner.ready(
        run,
        run.dataset().x_test,
        "test",
        run_id,
        key["mode"],
        key["samples"],
        key["threshold"],
        key["seed"],
        waiter=script_session_id(),
    )
    if progress.draws < progress.samples:
        # Draws to compute: the draw processes load this run now, beside the refiner's first draws. Not
        # for a setting whose draws are all kept (a lesson prepared or taught before): there the load is
        # CPU the class's first minute needs for its pages (benchmarks/results/classroom_kept_draws_lazy.md).
        backend.DRAW_CACHE.prepare(run, run_id)
    return progress.draws, progress.samples


_draw_processes_lock = threading.Lock()
_draw_processes_set = False


def kept_draws_folder() -> Path:
    """Where sampled draws are kept on disk: $BNN_CACHE_DIR/draws, beside the run store."""
    return backend.run_store_folder().parent / "draws"


def draw_processes_once() -> None:
    """Before the first background draw: move the draw cache's background draws into child processes
    ($BNN_DRAW_PROCESSES, below the server in priority: core.predict.draw_process), so that a class's
    draws never hold the interpreter lock or the cores the script runs need."""
    global _draw_processes_set
    if _draw_processes_set:
        return
    from dashboard.server_secrets import secret

    with _draw_processes_lock:
        if not _draw_processes_set:
            options = backend.dashboard_settings.draw_process_options(secret)
            backend.DRAW_CACHE.use_processes(options.pop("processes"), backend.load_run, **options)
            # Beside the run store, kept across restarts: dashboard.serve's processes read each other's
            # draws, and a lesson taught again reads the draws of the class before (core.predict.shared_draws).
            backend.DRAW_CACHE.share(kept_draws_folder(), backend.draw_cache_bytes())
            _draw_processes_set = True


def warm_draw_processes() -> int:
    """The draw processes started (draw_processes_once) and waited for until each has answered; how many
    answered (0 with BNN_DRAW_PROCESSES=0)."""
    draw_processes_once()
    processes = backend.DRAW_CACHE.processes
    return processes.ready() if processes is not None else 0


def prior_of_statistic(run_id: str) -> dict[str, Any] | None:
    """What the run's prior says about its statistic (None when nothing)."""
    config = cached_run(run_id).config
    return backend.prior_of_statistic(config.method, dict(config.family_options or {}))


def prediction_arrays(prediction: Any) -> dict[str, np.ndarray]:
    """The array fields of a Prediction (cache_data stores these, not the object)."""
    arrays = {}
    for name in (
        "probs",
        "probs_per_draw",
        "mean",
        "mean_per_draw",
        "std_per_draw",
        "epistemic_variance",
        "aleatoric_variance",
        "total_variance",
        "density",
        "disconnected",
    ):
        value = getattr(prediction, name, None)
        if value is not None:
            arrays[name] = np.asarray(value)
    return arrays


@per_run(max_entries=512, ttl=DERIVED_TTL, show_spinner=False)
def kept_counts(run_id: str, threshold: float) -> dict[str, int]:
    """Weights kept at `threshold`, raw and on an input-to-output path (the Pruning page's caption:
    about 30 ms of CPU on a 784-400-600-10 network, on every rerun before it was cached)."""
    return backend.kept_counts_at(cached_run(run_id), threshold)


@per_run(max_entries=64, ttl=DERIVED_TTL, show_spinner="Writing the pruned model ...")
def export_zip(run_id: str, threshold: float, format: str = "safetensors") -> bytes:
    return backend.export_zip(cached_run(run_id), threshold, format)


@per_run(canonical_prediction=True, max_entries=64, ttl=DERIVED_TTL, show_spinner="Predicting on the input plane ...")
def surface(
    run_id: str, mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None, n: int = 60
) -> dict[str, np.ndarray]:
    """The decision surface of a 2-D classifier: grid axes and per-point class, confidence,
    predictive entropy and the spread of the R draws."""
    run = cached_run(run_id)
    points, xs, ys = decision_surface.input_grid_2d(run.dataset().x_train, n)
    prediction = backend.predict(run, points, mode, samples, threshold, seed, weights, inputs=("surface", n))
    arrays = decision_surface.surface_arrays(np.asarray(prediction.probs_per_draw))
    return {"xs": xs, "ys": ys, **arrays}


# The chart specs (dashboard/cache_charts.py), here too: the pages ask this module for everything cached.
from dashboard.cache_charts import (  # noqa: E402, F401  (they read the entries above)
    accuracy_by_samples_chart,
    class_probability_charts,
    compare_curves_chart,
    compare_ecdf_chart,
    density_chart,
    entropy_ecdf_chart,
    family_key_chart,
    histogram_without_threshold,
    inclusion_charts,
    mask_comparison,
    playback_density_chart,
    playback_histograms_chart,
    receptive_fields_chart,
    shipped,
    training_curves_chart,
    tuning_chart,
    with_small_rows_shipped,
)
