"""Sparse BNN Explorer dashboard: `streamlit run dashboard/app.py`.

Start-up is light: no training, no model loading at import. The sidebar
picks the current run (newest cached run by default); pages read it from
session state and load it through the cached backend.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import streamlit as st

# `streamlit run dashboard/app.py` finds the packages core and dashboard once the project is installed
# (`pip install -e .`, the README's set-up command); Streamlit itself only adds dashboard/ to sys.path.
from dashboard.paths import PAGE_ICON, PAGES_DIR  # resolved once per process: this script runs on every rerun

APP_TITLE = "Sparse BNN Explorer"
SIDEBAR_POLL_SECONDS = 1.0
SIDEBAR_RUN_KEY = "sidebar_run"
RUN_PARAM = "run"  # ?run=<run id>: a link to a run
LINKED_RUN_KEY = "linked_run"  # the last link followed


def run_picker(status_slot: Any) -> None:
    """Sidebar: choose the current run among the cached ones; the training line goes in `status_slot`."""
    from dashboard import cache, links, state
    from dashboard.backend import plain
    from dashboard.ui import guard

    with guard("Listing cached runs"):
        links.accept(links.TRAIN, links.parse_train_token)  # its format only; whose it is, reattach decides
        state.reattach_training()
        state.collect_finished_worker()
        state.ensure_default_run()
        notice = state.pop_notice()
        if notice:  # it quotes run ids and labels: plain text
            st.sidebar.info(plain(notice))
            st.toast(plain(notice))
        rows = [r for r in cache.cached_run_list() if r.get("status", "ok") == "ok"]
        if not rows:
            worker = state.worker()
            if worker is not None and worker.snapshot().is_active:
                st.sidebar.caption("No cached runs yet: the first one is training.")
            else:
                st.sidebar.caption("No cached runs yet: train one on the Train page.")
            follow_link([])
            state.apply_link_view(None)  # a link's view settings have no run to apply to: said, not ignored
            sidebar_training_status(status_slot)
            return
        all_labels = cache.cached_run_labels()
        labels = {r["run_id"]: all_labels[r["run_id"]] for r in reversed(rows)}  # newest first
        ids = list(labels)
        follow_link(ids)
        current = state.selected_run_id()
        if current not in ids:
            current = ids[0]
            state.select_run(current)
        # The selection may change elsewhere (training finished): push it into the widget.
        if st.session_state.get(SIDEBAR_RUN_KEY) != current:
            st.session_state[SIDEBAR_RUN_KEY] = current
        from dashboard import lesson_panel

        if lesson_panel.hidden("sidebar_runs"):  # a lesson picks the run: shown, not offered
            st.sidebar.caption(f"Current run: {plain(labels[current])}")
        else:
            st.sidebar.selectbox(
                "Current run",
                ids,
                format_func=labels.get,
                key=SIDEBAR_RUN_KEY,
                on_change=lambda: state.select_run(st.session_state[SIDEBAR_RUN_KEY]),
            )
        state.apply_link_view(state.selected_run_id())
        # The address names the current run, so a link to this page opens the same run.
        if st.query_params.get(RUN_PARAM) != state.selected_run_id():
            st.query_params[RUN_PARAM] = state.selected_run_id()
            st.session_state[LINKED_RUN_KEY] = state.selected_run_id()
    sidebar_training_status(status_slot)


def sidebar_training_status(status_slot: Any) -> None:
    """The training line of the sidebar, on every page: polled while a training is under way so
    that its end shows within a second (then the whole app reruns and says which run is new)."""
    from dashboard import state

    worker = state.worker()
    if worker is None or not worker.snapshot().is_active:
        return
    with status_slot:
        _training_status_fragment()


@st.fragment(run_every=SIDEBAR_POLL_SECONDS)
def _training_status_fragment() -> None:
    from dashboard import state

    worker = state.worker()
    snapshot = worker.snapshot() if worker is not None else None
    if snapshot is None or not snapshot.is_active:
        st.rerun(scope="app")
    from dashboard import streamlit_compat

    streamlit_compat.keep_fragment_polling(SIDEBAR_POLL_SECONDS)  # a poll: its timer again (streamlit_compat, 6)
    if snapshot.position is not None:
        st.caption(f"Training queued: place {snapshot.position} in the queue")
    else:
        st.caption(f"Training in the background: epoch {snapshot.finished_epochs}/{snapshot.total_epochs}")


def follow_link(ids: list[str]) -> None:
    """A shared link (?run=<id or unique prefix>) selects its run, once per new link; any other
    value is refused with a message (and the address then names the run shown)."""
    from dashboard import links, state

    requested = st.query_params.get(RUN_PARAM)
    if requested is None or requested == st.session_state.get(LINKED_RUN_KEY):
        return
    st.session_state[LINKED_RUN_KEY] = requested
    run_id = links.accept(RUN_PARAM, lambda text: links.parse_run(text, ids))
    if run_id is not None:
        state.select_run(run_id)


PAGE_PARAM = "page"  # ?page=pruning: open that page (the path /pruning does the same)
DEFAULT_PAGE = "train"  # the name of the default page, whose url path is the root ("")


RERUN_LOG_VARIABLE = "BNN_RERUN_LOG"  # a file: one JSON line per script run (the load test's CPU per interaction)


def main() -> None:
    """One script run; with $BNN_RERUN_LOG set, its session, page, wall and thread CPU times are logged."""
    path = os.environ.get(RERUN_LOG_VARIABLE)
    if not path:
        return render()
    watch_draws(path)
    from dashboard import ui

    if ui.rerun_logger is None:  # a page body's fragment runs (ui.body_fragment), logged as full runs are
        ui.rerun_logger = lambda started, ended, cpu, page: log_rerun(path, started, cpu, page, ended, fragment=True)
    started, cpu, page = time.time(), time.thread_time(), []
    try:
        render(page)
    finally:
        log_rerun(path, started, time.thread_time() - cpu, page[0] if page else None)


def log_rerun(
    path: str,
    started: float,
    cpu_seconds: float,
    page: str | None,
    ended: float | None = None,
    fragment: bool = False,
) -> None:
    """One line: the run's session, page, start and end (wall clock) and thread CPU; "fragment": true for a
    page body's own run (ui.body_fragment)."""
    from dashboard.streamlit_compat import script_session_id

    record = {
        "session": script_session_id(),
        "page": page,
        "start": started,
        "end": time.time() if ended is None else ended,
        "cpu": cpu_seconds,
    }
    line = json.dumps({**record, "fragment": True} if fragment else record) + "\n"
    # One write to a file opened for appending: concurrent sessions' lines do not interleave
    # (this script runs afresh each time, so a module-level lock would not be shared).
    handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(handle, line.encode())
    finally:
        os.close(handle)


def watch_draws(path: str) -> None:
    """Every draw the shared draw cache computes, one JSON line in the same log: the load test counts
    the draws of each plan, those no session waited for and those computed twice."""
    from dashboard import backend

    if backend.DRAW_CACHE.observer is None:
        backend.DRAW_CACHE.observer = lambda key, index, where, started: log_draw(path, key, index, where, started)


def log_draw(path: str, key: Any, index: int, where: str, started: float) -> None:
    record = {
        "draw": index,
        "run": str(key.owner),
        "inputs": str(key.inputs),
        "mode": key.mode.value,
        "threshold": key.threshold,
        "seed": key.seed,
        "where": where,
        "pid": os.getpid(),
        "start": started,
        "end": time.time(),
    }
    handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(handle, (json.dumps(record) + "\n").encode())
    finally:
        os.close(handle)


def family_key() -> None:
    """The family colours, the same on every chart. Drawn on every page before the page itself, it
    also loads the browser's chart library before the page needs it (the first chart of a tab waits
    for the library to load: benchmarks/results/dashboard_latency.md, the playground rows)."""
    st.sidebar.caption("Family colours")
    from dashboard import cache

    st.sidebar.vega_lite_chart(cache.family_key_chart(), width="content")


def render(page_out: list | None = None) -> None:
    st.set_page_config(page_title=APP_TITLE, page_icon=str(PAGE_ICON), layout="wide")
    # The first paint of a fresh server waits for torch and the data modules: say so at once.
    starting = st.empty()
    # The app's messages (a link's refusals, an error, a lesson's note) in a slot of their own above the
    # page's: the page's polled fragments stand at the same place in every run (dashboard/ui.py, slots).
    notices, page_slot = st.container(), st.container()
    with notices:
        navigation = render_app_parts(starting, page_out)
    from dashboard.ui import guard

    with page_slot, guard():
        navigation.run()


def render_app_parts(starting: Any, page_out: list | None) -> Any:
    """Everything but the page: navigation, lessons, the sidebar's run picker, link refusals; returns
    the navigation, whose run() draws the page."""
    if "app_started" not in st.session_state:
        starting.info("Starting the Sparse BNN Explorer: loading PyTorch and the cached runs ...")
    from dashboard import settings
    from dashboard.ui import guard

    pages = [
        st.Page(PAGES_DIR / "train.py", title="Train", icon=":material/model_training:", default=True),
        st.Page(PAGES_DIR / "inclusion.py", title="Inclusion & masks", icon=":material/grid_on:"),
        st.Page(PAGES_DIR / "pruning.py", title="Pruning", icon=":material/content_cut:"),
        st.Page(PAGES_DIR / "uncertainty.py", title="Uncertainty", icon=":material/ssid_chart:"),
        st.Page(PAGES_DIR / "compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page(PAGES_DIR / "playground.py", title="Playground", icon=":material/science:"),
        st.Page(PAGES_DIR / "glossary.py", title="Glossary", icon=":material/menu_book:"),
    ]
    settings.refuse_streamlit_cache_clearing()
    with guard("Server settings"):
        settings.apply_compute_threads()
        settings.apply_switch_interval()
    with guard("Warming up"):
        from dashboard.warm import warm_up

        warm_up()
    navigation = st.navigation(pages)
    if page_out is not None:
        page_out.append(navigation.url_path or DEFAULT_PAGE)
    names = {page.url_path or DEFAULT_PAGE: page for page in pages}
    from dashboard import backend, cache, lesson_panel

    with guard("Placing the lessons' runs"):  # before a lesson link looks for its runs
        cache.install_lesson_runs(str(backend.run_store_folder()))

    with guard("Lesson link"):
        lesson_panel.follow_address(names)  # ?lesson=&step=&hide= (a step opens its page: before any drawing)
    st.sidebar.title(APP_TITLE)
    status_slot = st.sidebar.container()  # the training line: at a fixed place, as the page's fragments
    with guard("Lesson"):
        lesson_panel.render(names)
    # No st.spinner here: it starts a timer thread on every rerun of every session, and the run
    # list is read from memory (the first paint of a fresh server says "Starting" above).
    run_picker(status_slot)
    family_key()
    starting.empty()
    st.session_state["app_started"] = True
    from dashboard import links

    if PAGE_PARAM in st.query_params and not st.session_state.get("page_link_followed"):
        st.session_state["page_link_followed"] = True
        requested = links.accept(PAGE_PARAM, lambda text: links.parse_page(text, names))
        if requested is not None and requested != (navigation.url_path or DEFAULT_PAGE):
            st.switch_page(names[requested])
    links.show_refusals()  # after any page switch (which reruns the script): shown on the page drawn
    return navigation


# A training started with multiprocessing's "spawn" re-runs the parent's main script in the child as
# __mp_main__, and under Streamlit that is this file: the child must not render the app (it cost
# each training's start 2.4 s of CPU, seen in the rerun log of the classroom load test).
if __name__ != "__mp_main__":
    main()
