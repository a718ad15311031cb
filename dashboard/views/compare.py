"""Compare runs of one data identity (the dataset and its options): pruning curves, entropy ECDFs,
calibration and the Hubin & Storvik (2024) table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import altair_spec, backend, cache, explain, state
from dashboard import calibration_panels as calibration
from dashboard import charts as figures
from dashboard.ui import guard

MAX_RUNS = 8
OOD_INPUTS = 1000

st.header("Compare runs")
st.markdown(explain.PAGE_INTROS["compare"])

rows = [r for r in cache.cached_run_list() if r.get("status", "ok") == "ok"]
if not rows:
    st.info("No cached runs yet: train some on the **Train** page.")
    st.stop()
labels = cache.cached_run_labels()
# Runs are grouped by what their data is (the dataset with its options), not by the dataset's name:
# two targets of one table, or two tables, are different problems and never share a page.
identities = {
    r["run_id"]: backend.user_data.data_identity(r.get("dataset"), (r.get("config") or {}).get("dataset_params"))
    for r in rows
}
data_labels = dict(identities.values())
keys = list(dict.fromkeys(identities[r["run_id"]][0] for r in reversed(rows)))
current = identities.get(state.selected_run_id(), identities[rows[-1]["run_id"]])[0]
data_key = st.selectbox(
    "Data",
    keys,
    index=keys.index(current),
    key="compare_dataset",
    format_func=data_labels.get,
    help="opens on the current run's data: the dataset with its options (a table's target, a generator's parameters)",
)
dataset_name = data_labels[data_key]
candidates = [r for r in reversed(rows) if identities[r["run_id"]][0] == data_key]
ids = [r["run_id"] for r in candidates]
if st.session_state.get("compare_runs_of") != data_key:  # other data: its own runs, not an empty choice
    st.session_state.pop("compare_runs", None)
    st.session_state["compare_runs_of"] = data_key
chosen = st.multiselect(
    "Runs",
    ids,
    default=ids[: MAX_RUNS // 2],
    format_func=labels.get,
    key="compare_runs",
    max_selections=MAX_RUNS,
    help="each family has one colour on every chart (colour-blind safe); runs of one family differ by dash",
)
if not chosen:
    st.info("Choose one or more runs.")
    st.stop()
by_id = {r["run_id"]: r for r in candidates}
# The chosen runs' labels in their families' colours (the picker's chips cannot be coloured).
st.vega_lite_chart(
    altair_spec.spec(figures.run_key([labels[r] for r in chosen], [by_id[r].get("method") for r in chosen])),
    width="content",
)

first = None
with guard(f"Loading {dataset_name}"):
    first = cache.cached_run(chosen[0]).dataset()
if first is None:
    st.stop()

shown = [(run_id, labels[run_id], by_id[run_id].get("method")) for run_id in chosen]  # (id, label, family)
with guard("Comparing pruning curves"):
    st.vega_lite_chart(cache.compare_curves_chart(shown), width="content")
    st.caption(
        "Each family is pruned on its own statistic (inclusion probability, signal-to-noise, magnitude, ...) "
        "and predicts with the mean weights of what it keeps. Add an `fnn` run of this dataset to see "
        "plain magnitude pruning of a deterministic network at the same densities."
    )

ood = None  # the OOD set chosen below (classifiers); the calibration table reads it too
with guard("Comparing uncertainty"):
    if first.task == "classification":
        choices = backend.ood_set_names(first)
        ood = st.selectbox("OOD set", choices, key="compare_ood") if choices else None
        aurocs = []
        for run_id in chosen if ood is not None else []:
            summary = cache.ood_summary(run_id, ood, "bma", 10, None, 0, OOD_INPUTS)
            aurocs.append({"run": labels[run_id], f"AUROC ({ood})": summary["auroc"]})
        max_entropy = float(np.log(first.n_classes)) if first.n_classes else None
        # The charts come built from the cache: the same runs and OOD set give the same chart to everyone.
        st.vega_lite_chart(cache.compare_ecdf_chart(shown, ood, 10, OOD_INPUTS, max_entropy), width="content")
        if aurocs:
            st.dataframe(pd.DataFrame(aurocs).style.format({f"AUROC ({ood})": "{:.3f}"}), hide_index=True)
        st.caption(
            "bma with R = 10 draws. A run that tells OOD inputs apart has its dashed curve far right of its "
            "solid one (AUROC near 1)."
        )

with guard("Comparing calibration"):
    calibration.compare_section(shown, first.task, ood, OOD_INPUTS)

with guard("The table of modes"):
    records = []
    score = backend.headline_metric(first.task)
    for run_id in chosen:
        run = cache.cached_run(run_id)
        spec = cache.threshold_range(run_id)
        record = {"setting": backend.setting_key(run.config.to_dict())}
        for column, mode, samples in backend.COMPARE_MODES:
            threshold = backend.mode_threshold(mode, spec.default, spec.default)
            record[column] = cache.test_metrics(run_id, mode, samples, threshold, 0)[score]
        bma = cache.test_metrics(run_id, "bma", 10, None, 0)
        if score == "accuracy":
            record[f"doubt@{backend.DOUBT_LEVEL:g} accuracy"] = bma["doubt_accuracy"]
            record[f"doubt@{backend.DOUBT_LEVEL:g} count"] = bma["doubt_count"]
        record["density (MED)"] = cache.test_metrics(run_id, "mpm-mean", 1, spec.default, 0)["density"]
        for index, statistic in enumerate(cache.statistics(run_id)):
            record[f"layer {index + 1} mean {spec.name}"] = float(np.mean(statistic))
        records.append(record)
    # A setting's name: what tells it apart from the other settings, the seed left out.
    seedless = [
        {**by_id[r], "config": {k: v for k, v in (by_id[r].get("config") or {}).items() if k != "seed"}} for r in chosen
    ]
    setting_labels = backend.run_labels(seedless)
    names = {
        backend.setting_key(cache.cached_run(r).config.to_dict()): setting_labels[r].rsplit(" (", 1)[0] for r in chosen
    }
    table = figures.summary_over_seeds(records)
    table.insert(0, "runs", table.pop("setting").map(lambda key: names.get(key, key)))
    # Two tables, the modes and then the structure: as one (modes, doubt, density and a column per
    # layer) it was wider than the page and its right part was cut off.
    modes = ["runs", "seeds", *[column for column, _, _ in backend.COMPARE_MODES]]
    st.dataframe(
        table[modes],
        hide_index=True,
        width="stretch",
        column_config={"runs": st.column_config.TextColumn("runs", width="medium")},
    )
    st.dataframe(
        table[[c for c in table.columns if c not in modes[1:]]],
        hide_index=True,
        width="stretch",
        column_config={"runs": st.column_config.TextColumn("runs", width="medium")},
    )
    st.caption(
        f"Test {score} per prediction mode (Hubin & Storvik 2024's table: SIM = sampled, "
        "MED = median probability model, MEA = mean weights, ALL = every weight). "
        "Runs that differ only by seed are one row: "
        "median (min, max) over the seeds."
    )
