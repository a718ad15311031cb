"""Session state shared across pages: the selected run, the training request
(a place in the server's training queue), whether this session is the
teacher's (classroom mode), and per-run settings (threshold, mode, samples)
that must survive page switches.

Streamlit drops a widget's state when its page is not shown, so settings are
kept under our own keys and copied into/out of the widget keys.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from dashboard import backend, cache

RUN_KEY = "selected_run_id"
WORKER_KEY = "training_worker"
SETTINGS_KEY = "run_settings"  # {run_id: {"threshold": ..., "mode": ..., "samples": ...}}
HANDLED_KEY = "handled_worker"  # the finished worker whose run was already selected
TEACHER_KEY = "is_teacher"


def selected_run_id() -> str | None:
    return st.session_state.get(RUN_KEY)


def select_run(run_id: str | None) -> None:
    st.session_state[RUN_KEY] = run_id


def worker() -> Any:
    return st.session_state.get(WORKER_KEY)


def set_worker(value: Any) -> None:
    st.session_state[WORKER_KEY] = value


def may_manage_runs() -> bool:
    """Deleting runs and clearing caches: anyone outside classroom mode, the teacher inside it."""
    from dashboard.settings import classroom_mode
    return not classroom_mode() or bool(st.session_state.get(TEACHER_KEY))


def unlock_teacher(token: str) -> bool:
    """Make this session the teacher's when `token` is the configured teacher token."""
    from dashboard.settings import is_teacher_token
    ok = is_teacher_token(token)
    if ok:
        st.session_state[TEACHER_KEY] = True
    return ok


def collect_finished_worker() -> None:
    """Once per finished worker: select the run it stored and refresh the run list (on any page)."""
    from dashboard.worker import WorkerStatus

    current = worker()
    if current is None or st.session_state.get(HANDLED_KEY) is current:
        return
    snapshot = current.snapshot()
    if snapshot.is_active:
        return
    st.session_state[HANDLED_KEY] = current
    if snapshot.status == WorkerStatus.DONE and snapshot.run_id:
        if snapshot.run is not None:  # the trained run itself: browsing it reads nothing from disk
            cache.adopt_run(snapshot.run)
        cache.cached_run_list.clear()
        select_run(snapshot.run_id)


def ensure_default_run() -> None:
    """Select the newest healthy cached run when nothing is selected (or the selection vanished)."""
    rows = [r for r in cache.cached_run_list() if r.get("status", "ok") == "ok"]
    ids = [r["run_id"] for r in rows]
    current = selected_run_id()
    if current in ids:
        return
    select_run(ids[-1] if ids else None)


def setting(run_id: str, name: str, default: Any) -> Any:
    return st.session_state.setdefault(SETTINGS_KEY, {}).setdefault(run_id, {}).get(name, default)


def store_setting(run_id: str, name: str, value: Any) -> None:
    st.session_state.setdefault(SETTINGS_KEY, {}).setdefault(run_id, {})[name] = value


def persistent_widget(widget: Any, run_id: str, name: str, default: Any, label: str, **kwargs: Any) -> Any:
    """A widget whose value is remembered per run across pages."""
    key = f"widget:{name}:{run_id}"
    # Always (re)seed the widget from our store: after a page switch Streamlit may
    # have discarded or reset the widget's own state.
    st.session_state[key] = setting(run_id, name, default)

    def remember() -> None:
        store_setting(run_id, name, st.session_state[key])

    value = widget(label, key=key, on_change=remember, **kwargs)
    store_setting(run_id, name, value)
    return value


def prediction_mode_select(run_id: str) -> str:
    """The prediction mode, shared by every page of a run."""
    return persistent_widget(st.selectbox, run_id, "mode", "bma", "Prediction mode",
                             options=list(backend.PREDICTION_MODES),
                             format_func=lambda m: f"{m} ({backend.MODE_HELP[m].split(':')[0]})")


def samples_slider(run_id: str, max_samples: int) -> int:
    """The number of posterior draws R, shared by every page of a run."""
    return persistent_widget(st.slider, run_id, "samples", 10, "Posterior samples R", min_value=1,
                             max_value=max_samples)


def threshold_slider(run_id: str, spec: backend.ThresholdRange, label: str | None = None) -> float:
    direction = "keep above" if spec.keep_above else "keep below"
    step = (spec.high - spec.low) / 200 or 0.01
    current = spec.clip(setting(run_id, "threshold", spec.default))
    store_setting(run_id, "threshold", current)
    return float(persistent_widget(
        st.slider, run_id, "threshold", current,
        label or f"threshold on {spec.name} ({direction})",
        min_value=float(spec.low), max_value=float(spec.high), step=float(step), format="%.4g",
        help=f"A weight is kept when its {spec.name} is {'above' if spec.keep_above else 'below'} the threshold. "
             f"The family's default is {spec.default:.4g}."))


def current_run() -> Any:
    """The selected run, loaded (cached); stops the page with a hint when there is none."""
    from dashboard.ui import guard

    run_id = selected_run_id()
    if run_id is None:
        st.info("No run selected. Train one on the **Train** page or pick a cached run in the sidebar.")
        st.stop()
    run = None
    with guard(f"Loading run {run_id}"):
        run = cache.cached_run(run_id)
    if run is None:
        st.stop()
    return run


def run_page(title: str) -> Any:
    """A page about the selected run: its heading and caption; returns the run."""
    run = current_run()
    st.header(title)
    st.caption(f"Run {run.run_id}: {run.config.label()}")
    return run
