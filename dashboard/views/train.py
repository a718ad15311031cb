"""Train a run in the background, or pick / delete a cached one."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import backend, cache, figures, state
from dashboard.ui import guard
from dashboard.worker import WorkerStatus

POLL_SECONDS = 1.0


@st.cache_data(ttl=60, show_spinner=False)
def dataset_table() -> list[dict[str, Any]]:
    return backend.dataset_table()


@st.cache_data(ttl=600, show_spinner=False)
def method_options() -> dict[str, dict[str, Any]]:
    """Available families and their option defaults (from each family's Options dataclass)."""
    return {name: {f.name: _default(f) for f in fields} for name, fields in backend.family_option_fields().items()}


@st.cache_data(ttl=600, show_spinner=False)
def dataset_option_defaults(method: str, dataset: str) -> dict[str, Any]:
    """The family's option defaults on this dataset (small regression sets have their own)."""
    return backend.family_option_defaults(method, dataset)


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return None


def parse_rate(text: str, name: str) -> float:
    from core.errors import ConfigError
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ConfigError(f"{name}: must be a positive number such as 1e-3, got {text!r}") from None
    return value


def config_form() -> dict[str, Any] | None:
    """The training settings as RunConfig fields, or None when a field cannot be parsed."""
    datasets = {row["name"]: row for row in dataset_table()}
    names = list(datasets)
    dataset = st.selectbox(
        "Dataset", names, index=names.index(backend.DEFAULT_DATASET), key="train_dataset",
        format_func=lambda n: f"{n}  ({datasets[n]['availability']})",
        help="bundled and generated sets work offline; others need $BNN_DATA_DIR or a download.")
    info = datasets[dataset]
    st.caption(f"{info['task']}, inputs {info['input_shape']}, {info['n_train'] or '?'} train / "
               f"{info['n_test'] or '?'} test - {info['availability']}: {info['detail']}")

    methods = method_options()
    method_names = list(methods)
    method = st.selectbox("Method (family)", method_names, key="train_method",
                          index=method_names.index("lbbnn") if "lbbnn" in method_names else 0)
    batch_size = int(st.session_state.get("train_batch", 100) or 100)
    defaults = backend.default_settings(dataset, batch_size)
    default_hidden = ", ".join(map(str, defaults["hidden"]))
    left, right = st.columns(2)
    hidden_text = left.text_input("Hidden widths", "", key="train_hidden", placeholder=f"default: {default_hidden}",
                                  help=f"comma-separated layer widths; empty: {default_hidden} for this dataset "
                                       f"(the paper uses 400, 600 on MNIST)")
    seed = right.number_input("Seed", min_value=0, value=0, step=1, key="train_seed")
    left, middle, right = st.columns(3)
    epochs = left.number_input(f"Epochs (0: {defaults['epochs']}, about 3000 steps)", min_value=0, value=0, step=1,
                               key="train_epochs",
                               help="0 trains the default for this dataset's size and the batch size")
    batch_size = middle.number_input("Batch size", min_value=1, value=100, step=10, key="train_batch")
    posttrain = right.number_input("Post-training epochs (structure fixed)", min_value=0, value=0, step=1,
                                   key="train_posttrain")
    kl_weight = st.number_input(
        "KL weight (1 = the ELBO; below 1 tempers the prior)", min_value=0.001, max_value=1.0,
        value=float(defaults["kl_weight"]), step=0.05, format="%.3f", key="train_kl_weight",
        help="The ELBO itself prunes almost every weight of an LBBNN and fits small regression sets with a flat "
             "line; the default 0.1 keeps a readable picture (docs/why-lbbnn-over-prunes.md).")
    rate_columns = st.columns(3)
    default_rates = backend.default_learning_rates()
    rates_text = {group: column.text_input(f"Learning rate: {group}", f"{default_rates[group]:g}",
                                           key=f"train_lr_{group}")
                  for column, group in zip(rate_columns, ("weights", "scales", "inclusion"))}
    options_text = {}
    with st.expander(f"Family options / priors ({method})", expanded=method == "lbbnn"):
        defaults = dataset_option_defaults(method, dataset)
        columns = st.columns(3)
        for index, (name, default) in enumerate(defaults.items()):
            options_text[name] = columns[index % 3].text_input(name, str(default), key=f"train_opt_{method}_{name}")
    noise_options = noise_model_controls() if info["task"] == "regression" else {}
    params_text = ""
    if info["task"] == "regression" or dataset.startswith(("toy-", "two-")):
        params_text = st.text_input("Generator parameters (toy sets: name=value, ...)", "", key="train_params")
    device = st.selectbox("Device", ["auto", "cpu", "cuda"], key="train_device")

    values = None
    with guard("Invalid setting"):
        family_options = {name: backend.parse_scalar(text.strip()) for name, text in options_text.items()
                          if text.strip() != str(defaults[name])}
        values = {
            "dataset": dataset,
            "dataset_params": backend.parse_options(params_text) if params_text.strip() else {},
            "method": method,
            "hidden": list(backend.parse_hidden(hidden_text)) if hidden_text.strip() else None,
            "family_options": family_options,
            "likelihood_options": noise_options,
            "train": {"epochs": int(epochs) or None, "batch_size": int(batch_size), "posttrain_epochs": int(posttrain),
                      "kl_weight": float(kl_weight),
                      "learning_rates": {g: parse_rate(t, f"learning rate ({g})") for g, t in rates_text.items()}},
            "seed": int(seed),
            "device": device,
        }
    return values


def noise_model_controls() -> dict[str, Any]:
    """The Gaussian likelihood's noise model (core.models.likelihoods.GaussianOptions)."""
    with st.expander("Noise model (Gaussian likelihood)"):
        left, middle, right = st.columns(3)
        noise = left.selectbox("Noise", ["point", "fixed", "variational"], key="train_noise",
                               help="point: learned sd; fixed; variational: Gamma posterior on the precision")
        init = middle.selectbox("Initial noise", ["value", "data"], key="train_noise_init",
                                help="data: the residual sd of a least-squares fit to the training set")
        std = right.number_input("Noise sd (standardised)", min_value=1e-4, value=0.5, key="train_noise_std")
        prior = left.selectbox("Precision prior", ["none", "gamma"], index=1 if noise == "variational" else 0,
                               key="train_precision_prior", help="Gamma(a, b) on 1/sd^2; seed 001 uses (6, 6)")
        a = middle.number_input("Gamma a", min_value=1e-3, value=6.0, key="train_precision_a")
        b = right.number_input("Gamma b", min_value=1e-3, value=6.0, key="train_precision_b")
    return {"noise": noise, "noise_init": init, "noise_std": float(std), "precision_prior": prior,
            "precision_a": float(a), "precision_b": float(b)}


def start_training(values: dict[str, Any]) -> None:
    """Queue the config in the server's training queue (or join the same config's job)."""
    with guard("Cannot start training"):
        config = backend.make_config(values)
        key = json.dumps(config.to_dict(), sort_keys=True)
        request = cache.training_queue().submit(key, config, backend.total_epochs(config), label=config.label())
        state.set_worker(request)


@st.fragment(run_every=POLL_SECONDS)
def training_progress() -> None:
    """Polled view of the running worker; a full rerun once it has finished."""
    worker = state.worker()
    if worker is None:
        return
    snapshot = worker.snapshot()
    if not snapshot.is_active:
        st.rerun()
    if snapshot.status is WorkerStatus.QUEUED:
        running, waiting = cache.training_queue().counts()
        st.markdown(f"**Queued** {worker.label}")
        st.info(f"Waiting for a free training slot: place {snapshot.position} of {waiting} in the queue "
                f"({running} training now, at most {cache.training_queue().slots} at once).")
        if st.button("Cancel my request", key="cancel_training", type="secondary"):
            worker.cancel()
            st.rerun()
        return
    shared = f" (shared with {snapshot.sharers - 1} other session(s) that asked for the same config)" \
        if snapshot.sharers > 1 else ""
    st.markdown(f"**Training** {worker.label}{shared}")
    last = snapshot.history[-1] if snapshot.history else None
    text = (f"epoch {snapshot.finished_epochs}/{snapshot.total_epochs}: loss {last['loss']:.4f}, "
            f"density {last['density']:.4f}" if last else "starting ... (the first epoch is on its way)")
    st.progress(snapshot.fraction, text=text)
    if snapshot.history:
        st.altair_chart(figures.training_curves(snapshot.history))
    if worker.cancel_requested:
        st.caption("Cancelling after the current minibatch ...")
    elif st.button("Cancel", key="cancel_training", type="secondary",
                   help="withdraws your request; a training other sessions share goes on for them"):
        worker.cancel()
        st.rerun()


def finished_training() -> None:
    """What the last training in this session ended with (app.py has already selected its run)."""
    worker = state.worker()
    if worker is None:
        return
    snapshot = worker.snapshot()
    if snapshot.is_active:
        return
    if snapshot.status == WorkerStatus.DONE:
        seconds = (snapshot.finished or 0) - (snapshot.started or 0)
        st.success(f"Finished {worker.label} in {seconds:.1f} s: stored as run {snapshot.run_id} and selected.")
        if snapshot.history:
            st.altair_chart(figures.training_curves(snapshot.history))
    elif snapshot.status == WorkerStatus.CANCELLED:
        st.warning(f"Training cancelled: {snapshot.error}.")
    elif snapshot.status == WorkerStatus.FAILED:
        st.error(f"Training failed: {snapshot.error}")


def cached_runs_section() -> None:
    st.subheader("Cached runs")
    rows = cache.cached_run_list()
    if not rows:
        st.caption("The store is empty.")
        return
    table = pd.DataFrame([{
        "run id": r["run_id"],
        "dataset": r.get("dataset"),
        "method": r.get("method"),
        "hidden": "-".join(str(h) for h in (r.get("hidden") or [])),
        "epochs": r.get("epochs"),
        "created": dt.datetime.fromtimestamp(r["created"]).strftime("%Y-%m-%d %H:%M") if r.get("created") else "",
        "headline": headline_metric(r.get("metrics") or {}),
        "status": r.get("status", "ok") if r.get("status", "ok") == "ok" else f"corrupt: {r.get('error')}",
    } for r in reversed(rows)])
    st.dataframe(table, hide_index=True, width="stretch")
    ids = list(table["run id"])
    left, middle, right = st.columns([3, 1, 1])
    chosen = left.selectbox("Run", ids, key="cached_run_choice", label_visibility="collapsed")
    if middle.button("Use this run", key="use_run"):
        state.select_run(chosen)
        st.rerun()
    if not state.may_manage_runs():
        right.caption("Classroom mode: the teacher deletes runs.")
    elif right.button("Delete", key="delete_run"):
        with guard(f"Deleting run {chosen}"):
            backend.delete_run(chosen)
            cache.forget_run(chosen)
            if state.selected_run_id() == chosen:
                state.select_run(None)
            st.rerun()


def teacher_section() -> None:
    """Classroom mode only: the teacher unlocks deleting runs and clearing caches with a token."""
    from dashboard.settings import classroom_mode
    if not classroom_mode():
        return
    with st.expander("Teacher"):
        if not state.may_manage_runs():
            token = st.text_input("Teacher token", type="password", key="teacher_token_input")
            if token and not state.unlock_teacher(token):
                st.error("That is not the teacher token.")
            elif token:
                st.rerun()
            return
        st.caption("Unlocked: this session can delete runs and clear caches.")
        if st.button("Clear every cache", key="clear_caches",
                     help="every session reloads runs and recomputes results; trainings go on"):
            cache.clear_all()
            st.rerun()


def headline_metric(metrics: dict[str, Any]) -> str:
    """The first accuracy (or RMSE) among the stored metrics, as text."""
    return backend.headline_text(metrics)


st.header("Train a sparse Bayesian network")
st.caption("Training runs in the background, one config at a time per free slot of this server's queue; "
           "the other pages keep working on the selected run meanwhile.")
running = state.worker() is not None and state.worker().snapshot().is_active
form_values = config_form()
if st.button("Train", type="primary", disabled=running or form_values is None, key="train_button"):
    start_training(form_values)
    running = state.worker() is not None and state.worker().snapshot().is_active
if running:
    training_progress()
else:
    finished_training()
with guard("Listing cached runs"):
    cached_runs_section()
teacher_section()
