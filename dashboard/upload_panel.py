"""Your own table on the Train page: a CSV or Parquet upload, its target, task, split column and
missing-value policy, stored by the command line's own function (core.runs.user_data.store_table:
checked first, content-addressed, nothing half-stored). The run is then trained by the normal form
and queue, like any other.

Limits: the table's size is refused on the upload's announced size before its bytes are read, with
the command line's message ($BNN_MAX_TABLE_MB). Streamlit's own `server.maxUploadSize`
(.streamlit/config.toml) is set above that setting's default, so the setting governs; where an
operator raises the setting past it, Streamlit's limit refuses first and the panel says so.

Every bad file gets the command line's one message (st.error), never a traceback. The uploaded
bytes are kept for the session (a visit to another page empties Streamlit's uploader, not the
table chosen); the pickers remember their values the same way.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from core.errors import BNNError
from dashboard import backend, form_memory
from dashboard.backend import plain

UPLOAD_KEY = "upload_table_file"  # the st.file_uploader (Streamlit cannot set an upload's value)
HELD_KEY = "upload_table"  # {"file", "file_id", "data", "header"} or {"file", "file_id", "error"}
STORED_KEY = "upload_table_stored"  # (content hash, options) -> the stored name or the refusal
CHOICE_MEMORY = "upload_table_choices"
TARGET_KEY, TASK_KEY, SPLIT_KEY, MISSING_KEY = "upload_target", "upload_task", "upload_split", "upload_missing"
CHOICE_KEYS = (TARGET_KEY, TASK_KEY, SPLIT_KEY, MISSING_KEY)
NO_SPLIT = "(none: a seeded 80/20 split)"
INFERRED = "inferred"


def forget() -> None:
    """The uploader changed (a new file, or the file removed) or Forget was pressed: drop the table."""
    for key in (HELD_KEY, STORED_KEY, CHOICE_MEMORY, *CHOICE_KEYS):
        st.session_state.pop(key, None)


def receive(file: Any) -> dict[str, Any]:
    """Check the upload's size before reading it, then parse its header (the command line's checks)."""
    held: dict[str, Any] = {"file": file.name, "file_id": getattr(file, "file_id", file.name)}
    try:
        backend.user_data.check_upload_size(file.size, file.name)
        data = file.getvalue()
        held.update(data=data, header=backend.user_data.table_header(data, file.name))
    except BNNError as exc:
        held["error"] = str(exc)
    return held


def size_help() -> str:
    setting = backend.user_data.max_upload_mb()
    server = float(st.get_option("server.maxUploadSize"))
    text = f"at most {setting:g} MB ($BNN_MAX_TABLE_MB)"
    if server < setting:
        text += f"; this server's Streamlit accepts at most {server:g} MB (server.maxUploadSize), which governs"
    return text + ". The first row names the columns; comma, semicolon, tab or | between values."


def remembered(key: str, default: Any, options: list[Any]) -> int:
    """The picker's remembered value (Streamlit drops it on another page) as an index, else the default's."""
    value = st.session_state.get(key, st.session_state.get(CHOICE_MEMORY, {}).get(key, default))
    st.session_state.pop(key, None)
    return options.index(value) if value in options else options.index(default)


def table_choice(errors: Any) -> dict[str, Any] | None:
    """The uploaded table as form fields ({"dataset", "dataset_params", "file"}), or None: no table
    (the dataset list is used), or a refused one (its message is shown and Train is disabled)."""
    st.file_uploader(
        "Or train on your own table (CSV or Parquet)",
        type=["csv", "parquet"],
        key=UPLOAD_KEY,
        on_change=forget,
        help=size_help(),
    )
    file = st.session_state.get(UPLOAD_KEY)
    held = st.session_state.get(HELD_KEY)
    if file is not None and (held is None or held["file_id"] != getattr(file, "file_id", file.name)):
        forget()
        held = st.session_state[HELD_KEY] = receive(file)
    if held is None:
        return filled_table()
    if "error" in held:
        errors.beside(st, held["error"])
        return None
    if file is None:
        left, right = st.columns([4, 1])
        left.caption(plain(f"Your table {held['file']} (uploaded in this session) stays chosen."))
        if right.button("Forget it", key="upload_forget", help="back to the dataset list"):
            forget()
            st.rerun()
    return choices(held, errors)


def filled_table() -> dict[str, Any] | None:
    """A form filled from a table's run ("Train the same with another family / seed") trains on that
    stored table with its options, not on the dataset list's first entry."""
    dataset = st.session_state.get("train_dataset")
    entry = st.session_state.get(form_memory.CARRIED_KEY)
    if not backend.user_data.is_table_name(dataset) or not entry or entry["config"]["dataset"] != dataset:
        return None
    left, right = st.columns([4, 1])
    left.caption(plain(f"The stored table {dataset} of run {entry['from'][:8]}, with its options."))
    if right.button("Forget it", key="upload_forget_filled", help="back to the dataset list"):
        st.session_state.pop("train_dataset", None)
        st.session_state.pop(form_memory.CARRIED_KEY, None)
        st.rerun()
    return {"dataset": dataset, "dataset_params": dict(entry["config"]["dataset_params"]), "file": dataset}


def choices(held: dict[str, Any], errors: Any) -> dict[str, Any] | None:
    header = held["header"]
    columns = header["columns"]
    st.caption(plain(f"{held['file']}: {header['rows']:,} rows, {len(columns)} columns ({header['name']})."))
    left, middle, right = st.columns(3)
    target = left.selectbox(
        "Target column",
        columns,
        index=remembered(TARGET_KEY, columns[-1], columns),
        key=TARGET_KEY,
        help="what the network predicts; every other column (but the split column) is an input",
    )
    inferred = backend.user_data.inferred_task(held["data"], held["file"], target)
    tasks = [INFERRED, *backend.user_data.TASKS]
    task = middle.selectbox(
        "Task",
        tasks,
        index=remembered(TASK_KEY, INFERRED, tasks),
        key=TASK_KEY,
        format_func=lambda t: f"inferred: {inferred}" if t == INFERRED else t,
        help="classification when the target is text or at most 10 distinct whole numbers; else regression",
    )
    splits = [NO_SPLIT, *[c for c in columns if c != target]]
    split = right.selectbox(
        "Split column (optional)",
        splits,
        index=remembered(SPLIT_KEY, NO_SPLIT, splits),
        key=SPLIT_KEY,
        help="a column saying train or test on each row; none: a seeded 80/20 split (stratified by class)",
    )
    missing = left.selectbox(
        "Missing values",
        list(backend.user_data.MISSING_CHOICES),
        index=remembered(MISSING_KEY, "refuse", list(backend.user_data.MISSING_CHOICES)),
        key=MISSING_KEY,
        help="refuse: a table with an empty cell (or NA, NaN, null, ?) is refused, naming the column and "
        "line; drop: the rows with one are left out",
    )
    st.session_state[CHOICE_MEMORY] = {TARGET_KEY: target, TASK_KEY: task, SPLIT_KEY: split, MISSING_KEY: missing}
    params: dict[str, Any] = {"target": target, "missing": missing}
    if task != INFERRED:
        params["task"] = task
    if split != NO_SPLIT:
        params["split_column"] = split
    outcome = store(held, params)
    if "error" in outcome:
        errors.beside(st, outcome["error"])
        return None
    return {"dataset": outcome["name"], "dataset_params": params, "file": held["file"]}


def store(held: dict[str, Any], params: dict[str, Any]) -> dict[str, str]:
    """Store the table with these options (the command line's function), once per session and
    options: {"name": the stored table's name} or {"error": the refusal}."""
    outcomes = st.session_state.setdefault(STORED_KEY, {})
    key = (held["header"]["sha256"], tuple(sorted(params.items())))
    if key not in outcomes:
        try:
            outcomes[key] = {"name": backend.user_data.store_table(held["data"], held["file"], params).name}
        except BNNError as exc:
            outcomes[key] = {"error": str(exc)}
    return outcomes[key]
