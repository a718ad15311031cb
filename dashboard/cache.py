"""Streamlit caches around dashboard.backend.

- `cached_run(run_id)`: st.cache_resource, the loaded run (model + dataset).
  Shared by every session, so nothing may mutate it: predictions never do.
- everything derived (statistics, masks, sweeps, evaluations, predictions) is
  st.cache_data keyed by run id + parameters and returns plain numpy/dicts.

Cached functions take the run id, never the run object, so keys stay small
and hashable.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import streamlit as st

from dashboard import backend

MAX_CACHED_RUNS = 4


@st.cache_resource(max_entries=MAX_CACHED_RUNS, show_spinner="Loading run ...")
def cached_run(run_id: str) -> Any:
    run = backend.load_run(run_id)
    run.dataset()  # load the data once here, not on every page
    return run


def forget_run(run_id: str) -> None:
    """Drop a deleted or retrained run from every cache."""
    cached_run.clear(run_id)
    st.cache_data.clear()


@st.cache_data(ttl=30, show_spinner=False)
def cached_run_list() -> list[dict[str, Any]]:
    rows = []
    for info in backend.list_runs():
        row = info.to_dict() if hasattr(info, "to_dict") else dict(info)
        config = getattr(info, "config", None) or row.get("config") or {}
        row["hidden"] = config.get("hidden")
        row["epochs"] = (config.get("train") or {}).get("epochs")
        rows.append(row)
    return rows


@st.cache_data(max_entries=16, show_spinner=False)
def statistics(run_id: str) -> list[np.ndarray]:
    return backend.native_statistics(cached_run(run_id).model)


@st.cache_data(max_entries=16, show_spinner=False)
def threshold_range(run_id: str) -> backend.ThresholdRange:
    return backend.threshold_range(cached_run(run_id).model.spec, statistics(run_id))


@st.cache_data(max_entries=64, show_spinner=False)
def masks(run_id: str, threshold: float) -> list[np.ndarray]:
    spec = threshold_range(run_id)
    return backend.masks_at(statistics(run_id), threshold, spec.keep_above)


@st.cache_data(max_entries=16, show_spinner=False)
def conditional_mean_weights(run_id: str) -> list[np.ndarray]:
    return backend.conditional_mean_weights(cached_run(run_id).model)


@st.cache_data(max_entries=32, show_spinner="Predicting the test set ...")
def test_prediction(run_id: str, mode: str, samples: int, threshold: float | None, seed: int,
                    weights: str | None = None) -> dict[str, np.ndarray]:
    """Arrays of a prediction on the whole test set. Pass `backend.effective_threshold` so that
    modes without a threshold share one cache entry."""
    run = cached_run(run_id)
    return prediction_arrays(backend.predict(run, run.dataset().x_test, mode, samples, threshold, seed, weights))


@st.cache_data(max_entries=64, show_spinner=False)
def test_metrics(run_id: str, mode: str, samples: int, threshold: float | None, seed: int,
                 weights: str | None = None) -> dict[str, Any]:
    arrays = test_prediction(run_id, mode, samples, threshold, seed, weights)
    return backend.test_metrics(arrays, cached_run(run_id).dataset())


@st.cache_data(max_entries=16, show_spinner="Sweeping thresholds ...")
def sweep(run_id: str) -> dict[str, Any]:
    curve = backend.sweep(cached_run(run_id))
    return {"thresholds": curve.thresholds, "density": curve.density, "values": curve.values,
            "metric": curve.metric}


@st.cache_data(max_entries=16, show_spinner="Predicting on the grid ...")
def grid_prediction(run_id: str, mode: str, samples: int, threshold: float | None, seed: int,
                    weights: str | None = None) -> dict[str, np.ndarray]:
    run = cached_run(run_id)
    return prediction_arrays(backend.predict(run, run.dataset().x_grid, mode, samples, threshold, seed, weights))


@st.cache_data(max_entries=32, show_spinner=False)
def selected_prediction(run_id: str, indices: tuple[int, ...], mode: str, samples: int, threshold: float | None,
                        seed: int, weights: str | None = None) -> dict[str, np.ndarray]:
    run = cached_run(run_id)
    x = run.dataset().x_test[list(indices)]
    return prediction_arrays(backend.predict(run, x, mode, samples, threshold, seed, weights))


@st.cache_data(max_entries=32, show_spinner="Predicting OOD inputs ...")
def ood_entropy(run_id: str, name: str, mode: str, samples: int, threshold: float | None, seed: int,
                n: int, weights: str | None = None) -> np.ndarray:
    from core.predict.metrics.ood import predictive_entropy
    run = cached_run(run_id)
    x = backend.load_ood_inputs(run.dataset(), name, n=n, seed=seed)
    return predictive_entropy(backend.predict(run, x, mode, samples, threshold, seed, weights).probs)


def prediction_arrays(prediction: Any) -> dict[str, np.ndarray]:
    """The array fields of a Prediction (cache_data stores these, not the object)."""
    arrays = {}
    for name in ("probs", "probs_per_draw", "mean", "mean_per_draw", "std_per_draw", "epistemic_variance",
                 "aleatoric_variance", "total_variance", "density", "disconnected"):
        value = getattr(prediction, name, None)
        if value is not None:
            arrays[name] = np.asarray(value)
    return arrays
