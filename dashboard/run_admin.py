"""The Train page's run management: the store's runs (use one, delete one) and, in classroom mode,
the teacher's section (unlock, clear every cache, the queue with a Cancel on each training)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import backend, cache, state, streamlit_compat
from dashboard.backend import plain
from dashboard.ui import guard, without_server_paths
from dashboard.worker import WorkerStatus, duration_text

log = logging.getLogger(__name__)

QUEUE_POLL_SECONDS = 2.0  # the teacher's queue panel refreshes this often


def eta_text(seconds: float | None, starting: bool) -> str:
    if seconds is None:
        return "time unknown"
    when = "starts in" if starting else "ends in"
    return f"{when} about {duration_text(seconds)}" if seconds >= 1 else ("starting" if starting else "ending")


def cached_runs_section() -> None:
    st.subheader("Cached runs")
    rows = cache.cached_run_list()
    if not rows:
        st.caption("The store is empty.")
        return
    differences = backend.config_differences(rows)
    table = pd.DataFrame(
        [
            {
                "run id": r["run_id"],
                "dataset": r.get("dataset"),
                "method": r.get("method"),
                "hidden": "-".join(str(h) for h in (r.get("hidden") or [])),
                "epochs": r.get("epochs"),
                "differs in": differences.get(r["run_id"], ""),
                "created": dt.datetime.fromtimestamp(r["created"]).strftime("%Y-%m-%d %H:%M")
                if r.get("created")
                else "",
                "headline": headline_metric(r.get("metrics") or {}),
                "status": (
                    r.get("status", "ok")
                    if r.get("status", "ok") == "ok"
                    else f"corrupt: {without_server_paths(r.get('error'))}"
                ),
            }
            for r in reversed(rows)
        ]
    )
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
        st.session_state[PENDING_DELETE_KEY] = chosen
    pending = st.session_state.get(PENDING_DELETE_KEY)
    if pending is not None and pending in ids:
        st.warning(
            f"Delete run {plain(pending)}? Its weights and results are removed for every session; "
            "this cannot be undone."
        )
        yes, no = st.columns([1, 4])
        if yes.button("Yes, delete it", key="confirm_delete", type="primary"):
            st.session_state.pop(PENDING_DELETE_KEY, None)
            with guard(f"Deleting run {pending}"):
                backend.delete_run(pending)
                cache.forget_run(pending)
                if state.selected_run_id() == pending:
                    state.select_run(None)
                state.notify(f"Deleted run {pending[:8]}.")
                st.rerun()
        if no.button("Keep it", key="cancel_delete"):
            st.session_state.pop(PENDING_DELETE_KEY, None)
            st.rerun()


PENDING_DELETE_KEY = "pending_delete"


def teacher_section() -> None:
    """Classroom mode only: the teacher unlocks deleting runs, clearing caches and cancelling any
    training with a token. A token is checked only when Unlock is pressed (not on every rerun),
    and tries are throttled (dashboard/settings.py)."""
    from dashboard.settings import classroom_mode

    if not classroom_mode():
        return
    from dashboard.settings import classroom_notice

    notice = classroom_notice()
    notice_slot = st.container()  # the queue panel's polled fragment at the same place with or without it
    if notice:  # turned on by itself: the teacher is told why, and how to turn it off
        notice_slot.caption(notice)
    with st.expander("Teacher"):
        if not state.may_manage_runs():
            with st.form("teacher_unlock_form", clear_on_submit=True, border=False):
                token = st.text_input("Teacher token", type="password", key="teacher_token_input")
                submitted = st.form_submit_button("Unlock", key="teacher_unlock")
            if submitted and token:
                result = state.unlock_teacher(token)
                if result.ok:
                    st.rerun()
                st.error(result.message)
            return
        st.caption("Unlocked: this session can delete runs, clear caches and cancel any training.")
        if st.button(
            "Clear every cache",
            key="clear_caches",
            help="every session reloads runs and recomputes results; trainings go on",
        ):
            cache.clear_all()
            st.rerun()
        queue_panel()


@st.fragment(run_every=QUEUE_POLL_SECONDS)
def queue_panel() -> None:
    """The teacher's view of the server's queue: every running and waiting training, who asked
    (an anonymous session label), what, its state, place and time; Cancel on each."""
    streamlit_compat.keep_fragment_polling(QUEUE_POLL_SECONDS)  # a poll: its timer again (streamlit_compat, 6)
    queue = cache.training_queue()
    entries = queue.overview()
    running, waiting = queue.counts()
    st.markdown(f"**Training queue**: {running} running (at most {queue.slots} at once), {waiting} waiting")
    if not entries:
        st.caption("Nothing is training or waiting.")
        return
    for entry in entries:
        if entry.place is not None:
            where = f"queued, place {entry.place}, {eta_text(entry.eta, True)}"
        elif entry.status is WorkerStatus.QUEUED:  # of a server process that stopped answering
            where = "queued on a server process that does not answer"
        else:
            where = f"running, epoch {entry.finished_epochs}/{entry.total_epochs}, {eta_text(entry.eta, False)}"
        left, right = st.columns([5, 1])
        left.text(f"{entry.who}: {entry.label}; {where}")
        if right.button("Cancel", key=f"teacher_cancel_{entry.key}", type="secondary"):
            queue.cancel_job(entry.job_id, process=entry.process)
            log.info(
                "the teacher (%s) cancelled training %d (%s) of %s",
                state.session_label(),
                entry.job_id,
                entry.label,
                entry.who,
            )
            st.rerun(scope="fragment")


def headline_metric(metrics: dict[str, Any]) -> str:
    """The first accuracy (or RMSE) among the stored metrics, as text."""
    return backend.headline_text(metrics)
