"""Tune the pruning threshold: accuracy vs density, metric cards, accuracy vs R."""

from __future__ import annotations

import streamlit as st

from dashboard import backend, cache, state
from dashboard.ui import guard

MAX_SAMPLES = 100

run = state.run_page("Pruning")
run_id = run.run_id
dataset = run.dataset()

with guard("Reading the statistic"):
    spec = cache.threshold_range(run_id)
    left, middle, right = st.columns([2, 1, 1])
    with left:
        threshold = state.threshold_slider(run_id, spec)
    with middle:
        mode = state.prediction_mode_select(run_id)
    with right:
        samples = state.samples_slider(run_id, MAX_SAMPLES)
    st.caption(backend.MODE_HELP[mode])
    weights = None
    if mode == "prune":
        weights = st.radio("Weights of the kept connections", ["sample", "mean"], horizontal=True,
                           key="prune_weights")
    effective = backend.effective_threshold(mode, threshold)
    if effective is None:
        st.caption(f"Mode {mode} uses every weight: the threshold only moves the point on the curve.")

with guard("Evaluating the test set"):
    metrics = cache.test_metrics(run_id, mode, samples, effective, 0, weights)
    if metrics["disconnected"]:
        st.warning("This network is disconnected: no input reaches an output, every prediction is the same. "
                   "Lower the threshold.")
    cards = st.columns(5)
    if dataset.task == "classification":
        cards[0].metric("accuracy", f"{metrics['accuracy']:.4f}")
        cards[1].metric("NLL", f"{metrics['nll']:.4f}")
        cards[2].metric("ECE", f"{metrics['ece']:.4f}")
        cards[3].metric("density", f"{metrics['density']:.4f}")
        doubt = metrics["doubt_accuracy"]
        cards[4].metric(f"doubt@{backend.DOUBT_LEVEL:g} accuracy", "n/a" if doubt is None else f"{doubt:.4f}",
                        help="accuracy on the test inputs whose model-averaged max probability exceeds "
                             f"{backend.DOUBT_LEVEL:g}",
                        delta=f"{metrics['doubt_count']} of {dataset.n_test} decided", delta_color="off")
    else:
        cards[0].metric("RMSE", f"{metrics['rmse']:.4f}")
        cards[1].metric("test log-likelihood", f"{metrics['log_likelihood']:.4f}")
        cards[2].metric("95% coverage", f"{metrics['coverage_95']:.3f}")
        cards[3].metric("density", f"{metrics['density']:.4f}")

with guard("Sweeping thresholds"):
    # The current point: the pruned mean-weight network at this threshold (what the sweep traces).
    st.vega_lite_chart(cache.density_chart(run_id, threshold))
    st.caption("Each point prunes at one threshold and predicts with the mean weights of the kept connections; "
               "the red diamond is the current threshold.")

if dataset.task == "classification" and mode in ("bma", "mpm", "prune") and weights != "mean":
    with guard("Accuracy vs R"):
        st.vega_lite_chart(cache.accuracy_by_samples_chart(run_id, mode, samples, effective, 0, weights))
