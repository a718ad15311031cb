"""Sparse BNN Explorer dashboard: `streamlit run dashboard/app.py`.

Start-up is light: no training, no model loading at import. The sidebar
picks the current run (newest cached run by default); pages read it from
session state and load it through the cached backend.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run dashboard/app.py` puts dashboard/ on sys.path, not the project root.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

import streamlit as st  # noqa: E402

from dashboard import cache, settings, state  # noqa: E402
from dashboard.ui import guard  # noqa: E402

APP_TITLE = "Sparse BNN Explorer"
# Not "pages/": a folder of that name beside the entry point switches Streamlit
# into its legacy multipage mode, where a deep link runs a page without app.py.
PAGES_DIR = Path(__file__).resolve().parent / "views"
SIDEBAR_RUN_KEY = "sidebar_run"
RUN_PARAM = "run"  # ?run=<run id>: a link to a run
LINKED_RUN_KEY = "linked_run"  # the last link followed


def run_picker() -> None:
    """Sidebar: choose the current run among the cached ones."""
    with guard("Listing cached runs"):
        state.collect_finished_worker()
        state.ensure_default_run()
        rows = [r for r in cache.cached_run_list() if r.get("status", "ok") == "ok"]
        if not rows:
            st.sidebar.caption("No cached runs yet: train one on the Train page.")
            return
        labels = {r["run_id"]: run_label(r) for r in reversed(rows)}  # newest first
        ids = list(labels)
        follow_link(ids)
        current = state.selected_run_id()
        if current not in ids:
            current = ids[0]
            state.select_run(current)
        # The selection may change elsewhere (training finished): push it into the widget.
        if st.session_state.get(SIDEBAR_RUN_KEY) != current:
            st.session_state[SIDEBAR_RUN_KEY] = current
        st.sidebar.selectbox("Current run", ids, format_func=labels.get, key=SIDEBAR_RUN_KEY,
                             on_change=lambda: state.select_run(st.session_state[SIDEBAR_RUN_KEY]))
        # The address names the current run, so a link to this page opens the same run.
        if st.query_params.get(RUN_PARAM) != state.selected_run_id():
            st.query_params[RUN_PARAM] = state.selected_run_id()
            st.session_state[LINKED_RUN_KEY] = state.selected_run_id()
    worker = state.worker()
    snapshot = worker.snapshot() if worker is not None else None
    if snapshot is not None and snapshot.position is not None:
        st.sidebar.caption(f"Training queued: place {snapshot.position} in the queue")
    elif snapshot is not None and snapshot.is_active:
        st.sidebar.caption(f"Training in the background: epoch {snapshot.finished_epochs}/{snapshot.total_epochs}")


def follow_link(ids: list[str]) -> None:
    """A shared link (?run=<id or unique prefix>) selects its run, once per new link."""
    requested = st.query_params.get(RUN_PARAM)
    if not requested or requested == st.session_state.get(LINKED_RUN_KEY):
        return
    st.session_state[LINKED_RUN_KEY] = requested
    matches = [run_id for run_id in ids if run_id.startswith(requested)]
    if len(matches) == 1:
        state.select_run(matches[0])
    else:
        st.sidebar.warning(f"The link names run {requested!r}, which is {'ambiguous' if matches else 'not cached'}; "
                           f"showing another run.")


def run_label(row: dict) -> str:
    hidden = "-".join(str(h) for h in (row.get("hidden") or []))
    return f"{row.get('method')} [{hidden}] on {row.get('dataset')} ({row['run_id'][:8]})"


def main() -> None:
    st.set_page_config(page_title=APP_TITLE, page_icon=":material/hub:", layout="wide")
    pages = [
        st.Page(PAGES_DIR / "train.py", title="Train", icon=":material/model_training:", default=True),
        st.Page(PAGES_DIR / "inclusion.py", title="Inclusion & masks", icon=":material/grid_on:"),
        st.Page(PAGES_DIR / "pruning.py", title="Pruning", icon=":material/content_cut:"),
        st.Page(PAGES_DIR / "uncertainty.py", title="Uncertainty", icon=":material/ssid_chart:"),
    ]
    settings.refuse_streamlit_cache_clearing()
    navigation = st.navigation(pages)
    st.sidebar.title(APP_TITLE)
    run_picker()
    with guard():
        navigation.run()


main()
