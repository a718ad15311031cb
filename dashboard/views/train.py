"""Train a run in the background, or pick / delete a cached one."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import streamlit as st

from core.errors import BNNError
from dashboard import backend, cache, explain, form_memory, lesson_panel, state, streamlit_compat
from dashboard.backend import plain
from dashboard.run_admin import cached_runs_section, eta_text, teacher_section
from dashboard.train_form import FormErrors, config_form, method_options, number_box, parse_seed
from dashboard.ui import guard, slots, without_server_paths
from dashboard.worker import WorkerStatus

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0


TRAIN_PARAM = "train"  # ?train=<request token>: a reloaded page finds its training again (to watch)


def training_seconds(config: Any) -> float | None:
    """The estimated seconds of a training of `config` that the queue's limits and turns are
    checked against (core.cost's estimate on this server's measured speed, the same number the
    form's refusal uses), once per config and session; None when it cannot be estimated."""
    return training_seconds_estimate(config)


def queue_key(config: Any) -> str:
    """Requests for the same config share one job."""
    return json.dumps(config.to_dict(), sort_keys=True)


def queue_refusal(values: dict[str, Any]) -> str | None:
    """Why the queue would refuse this config from this session now (None: it would take it)."""
    config = backend.make_config(values)
    return cache.training_queue().refusal(
        queue_key(config), backend.total_epochs(config), owner=state.session_owner(), seconds=training_seconds(config)
    )


def start_training(values: dict[str, Any]) -> None:
    """Queue the config in the server's training queue (or join the same config's job) for this
    session; a refusal says why and what would fit."""
    with guard("Cannot start training"):
        config = backend.make_config(values)
        request = cache.training_queue().submit(
            queue_key(config),
            config,
            backend.total_epochs(config),
            label=config.label(),
            owner=state.session_owner(),
            who=state.session_label(),
            seconds=training_seconds(config),
            presence=state.queue_presence(),
        )
        state.set_worker(request)
        st.query_params[TRAIN_PARAM] = request.token


def other_requests(current: Any) -> None:
    """This session's other trainings (one more may be queued behind the one shown), each with Cancel."""
    for request in cache.training_queue().requests_of(state.session_owner()):
        if request is current:
            continue
        snapshot = request.snapshot()
        where = (
            f"queued, place {snapshot.position}, {eta_text(snapshot.eta, True)}"
            if snapshot.position
            else f"training, epoch {snapshot.finished_epochs}/{snapshot.total_epochs}"
        )
        left, right = st.columns([4, 1])
        left.caption(f"Also yours: {plain(request.label)} ({where})")
        if right.button("Cancel", key=f"cancel_request_{request.id}", type="secondary"):
            request.cancel()
            st.rerun()


def training_seconds_estimate(config: Any) -> float | None:
    """The training's estimated seconds on this server (its measured speed, not today's load: the
    queue's limits must not move with the load), once per config and session."""
    if not hasattr(config, "canonical_json"):
        return None
    key = f"training_seconds_estimate:{config.canonical_json()}"
    if key not in st.session_state:
        try:
            st.session_state[key] = backend.estimate_seconds(config, loaded=False)
        except BNNError:
            st.session_state[key] = None
    return st.session_state[key]


def training_chart(worker: Any, snapshot: Any) -> dict[str, Any]:
    """The training's loss and density curves (a template spec with this history's records put in)."""
    return cache.training_curves_chart(snapshot.history, getattr(worker.config, "method", None))


@st.fragment(run_every=POLL_SECONDS)
def training_progress() -> None:
    """Polled view of the running worker; a full rerun once it has finished."""
    worker = state.worker()
    if worker is None:
        return
    snapshot = worker.snapshot()
    if not snapshot.is_active:
        st.rerun()
    streamlit_compat.keep_fragment_polling(POLL_SECONDS)  # a poll: its timer again (streamlit_compat, 6)
    cancellable = state.may_cancel(worker)
    if not state.owns(worker):
        st.caption(
            "This page found the training through its link (a link someone shared, or a reload where "
            "the browser could not be recognised): it shows the progress; only the browser that asked "
            "for it, or the teacher, can cancel it."
        )
    if snapshot.status is WorkerStatus.QUEUED:
        running, waiting = cache.training_queue().counts()
        st.markdown(f"**Queued** {plain(worker.label)}")
        st.info(
            f"Waiting for a free training slot: place {snapshot.position} of {waiting} in the queue, "
            f"{eta_text(snapshot.eta, True)} ({running} training now, at most "
            f"{cache.training_queue().slots} at once; each session takes its turn)."
        )
        if cancellable and st.button("Cancel my request", key="cancel_training", type="secondary"):
            worker.cancel()
            st.rerun()
        other_requests(worker)
        return
    shared = (
        f" (shared with {snapshot.sharers - 1} other session(s) that asked for the same config)"
        if snapshot.sharers > 1
        else ""
    )
    st.markdown(f"**Training** {plain(worker.label)}{shared}")
    last = snapshot.history[-1] if snapshot.history else None
    elapsed = time.time() - snapshot.started if snapshot.started else 0.0
    # Time left: the estimate until an epoch is done, then the epochs' measured seconds x epochs left
    # (the elapsed time includes the process's start and the data's loading, which do not repeat).
    left = backend.remaining_seconds(
        [record.get("seconds", 0.0) for record in snapshot.history],
        snapshot.total_epochs,
        training_seconds_estimate(worker.config),
        elapsed,
    )
    to_go = "" if left is None else f", about {backend.time_text(left)} to go"
    if last:
        text = (
            f"epoch {snapshot.finished_epochs}/{snapshot.total_epochs}: loss {last['loss']:.4f}, "
            f"density {last['density']:.4f}; {elapsed:.0f} s so far{to_go}"
        )
    else:
        # Large nets spend long in their first epoch: show that time passes.
        text = f"epoch 1/{snapshot.total_epochs} under way: {elapsed:.0f} s so far{to_go} (estimated)"
    st.progress(snapshot.fraction, text=text)
    if snapshot.history:
        st.vega_lite_chart(training_chart(worker, snapshot))
    if worker.cancel_requested:
        st.caption("Cancelling after the current minibatch ...")
    elif cancellable and st.button(
        "Cancel",
        key="cancel_training",
        type="secondary",
        help="withdraws your request; a training other sessions share goes on for them",
    ):
        worker.cancel()
        st.rerun()
    other_requests(worker)


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
        st.success(plain(f"Finished {worker.label} in {seconds:.1f} s: stored as run {snapshot.run_id} and selected."))
        if snapshot.history:
            st.vega_lite_chart(training_chart(worker, snapshot))
    elif snapshot.status == WorkerStatus.CANCELLED:
        st.warning(plain(without_server_paths(f"Training cancelled: {snapshot.error}.")))
    elif snapshot.status == WorkerStatus.FAILED:
        st.error(plain(without_server_paths(f"Training failed: {backend.device_message(str(snapshot.error))}")))


st.header("Train a sparse Bayesian network")
st.markdown(explain.PAGE_INTROS["train"])
st.caption(
    "Training runs in the background, one config at a time per free slot of this server's queue; "
    "the other pages keep working on the selected run meanwhile."
)
TRAIN_REQUEST_KEY = "train_requested"


def request_training() -> None:
    """The Train button's callback: only a flag. The config is read from the form's widgets in the
    run that follows (a callback's args were bound one run earlier, before the last edits)."""
    st.session_state[TRAIN_REQUEST_KEY] = True


def train_again_section() -> None:
    """ "Train the same with another family / seed": one click fills the form from the current run's
    config with only the family or the seed changed (dashboard/form_memory.py)."""
    run_id = state.selected_run_id()
    run = cache.cached_run(run_id) if run_id else None
    if run is None:
        return
    config = run.config.to_dict()
    families = list(method_options())
    with st.expander(plain(f"Train the current run again with another family or seed ({run.config.label()})")):
        left, middle, right = st.columns([2, 1, 1])
        family = left.selectbox(
            "Family",
            families,
            key="again_family",
            index=families.index(config["method"]) if config["method"] in families else 0,
        )
        errors = FormErrors()
        seed = number_box(middle, "Seed", config["seed"] + 1, "again_seed", parse_seed, errors)
        right.button(
            "Fill the form",
            key="again_fill",
            disabled=seed is None,
            on_click=form_memory.fill_from_config,
            args=(run.run_id, config, family, seed),
            help="the form below gets this run's settings with the family and seed chosen here; "
            "another family starts from its own option defaults",
        )


# Each section in its slot, made before the form (whose errors and buttons come and go): the progress's
# polled fragment stands at the same place in every run (ui.slots).
form_slot, progress_slot, runs_slot, teacher_slot = slots(4)
with form_slot:
    with guard("Reading the current run"):
        train_again_section()
    running = state.worker() is not None and state.worker().snapshot().is_active
    form_values = config_form()
    if st.session_state.pop(TRAIN_REQUEST_KEY, False) and form_values is not None:
        before = state.worker()
        start_training(form_values)
        if state.worker() is not before:
            st.rerun()  # the page (and the sidebar) drawn again with the training and its Cancel
    refusal = None
    if form_values is not None:
        with guard("Cannot queue this training"):
            refusal = queue_refusal(form_values)
    if refusal:
        st.error(refusal)
    if not lesson_panel.hidden("train_button"):
        st.button(
            "Train",
            type="primary",
            disabled=form_values is None or refusal is not None,
            key="train_button",
            on_click=request_training,
            help="queued behind your training already under way"
            if running and state.owns(state.worker()) and not refusal
            else None,
        )
with progress_slot:
    if running:
        training_progress()
    else:
        finished_training()
with runs_slot, guard("Listing cached runs"):
    cached_runs_section()
with teacher_slot:
    teacher_section()
