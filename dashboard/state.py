"""Session state shared across pages: the selected run, the training request
(a place in the server's training queue), whether this session is the
teacher's (classroom mode), and per-run settings (threshold, mode, samples)
that must survive page switches.

Streamlit drops a widget's state when its page is not shown, so settings are
kept under our own keys and copied into/out of the widget keys.

Who owns a training. Before, ownership was the client's IP, which every
student behind one NAT or proxy shares: a classmate opening a copied link got
the Cancel button. Now the owner is a server-side identity (`session_owner`),
recorded by the queue with each request; Cancel is offered to the owner and,
in classroom mode, to the unlocked teacher. The `?train=<token>` in the
address is only a *lookup*: a reloaded page or a copied link finds the
training by it and shows its progress; Cancel comes with it only for the
owner.

The identity is the browser's: Streamlit's own XSRF cookie (`_streamlit_xsrf`,
set by the server on the first page load, readable through
`st.context.cookies`) carries a random token that stays the same across the
browser's reloads and tabs and differs between browsers (checked in
Chromium: one token over a first load, two reloads and a second tab; another
in a second browser profile). The owner is an HMAC of that token under a key
made at server start, so the token itself is never kept or shown. So a
reload keeps Cancel, the tabs of one browser share one set of per-session
limits (the tester's three tabs: one running and one queued in all), and a
link copied into another browser only shows the progress. Where there is no
such cookie (XSRF protection turned off, or AppTest) each Streamlit session
mints a random owner secret kept only in its session state: then a reload
shows the progress without Cancel (the teacher can still cancel) and each
tab is a session of its own. What neither can stop: a student who opens a
private window or another browser, or edits the cookie, is a new owner; the
server-wide admission limits bound what all owners together may ask. No
identity ever goes into the address, which is exactly what copied links leak.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import streamlit as st

from dashboard import backend, cache, lesson_panel, links
from dashboard.backend import plain

# Streamlit's internals, kept in one place (re-exported: the pages and tests call them through state)
from dashboard.streamlit_compat import XSRF_COOKIE, browser_token, session_presence, xsrf_token  # noqa: F401

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


def unlock_teacher(token: str) -> Any:
    """Make this session the teacher's when `token` is the configured teacher token; tries are
    throttled and wrong ones logged under the session's label (dashboard/settings.py). Returns the
    TokenCheck (ok, or the message to show)."""
    from dashboard.settings import check_teacher_token

    result = check_teacher_token(token, session_label())
    if result.ok:
        st.session_state[TEACHER_KEY] = True
    return result


OWNER_KEY = "session_owner"
PRESENCE_KEY = "session_presence"
# Owners are HMACs of the browsers' tokens under a key of this server process: they mean nothing
# elsewhere, and the queue they are used in lives no longer than the process.
_OWNER_KEY_BYTES = secrets.token_bytes(32)


def session_owner() -> str:
    """What the training queue knows this session's trainings by: the browser's identity when
    its XSRF cookie is there, else a random secret of this session (never shown, never in the
    address)."""
    owner = st.session_state.get(OWNER_KEY)
    if not owner:
        token = browser_token()
        owner = (
            "browser:" + hmac.new(_OWNER_KEY_BYTES, token, hashlib.sha256).hexdigest()
            if token
            else "session:" + secrets.token_urlsafe(18)
        )
        st.session_state[OWNER_KEY] = owner
    return owner


def queue_presence() -> Any:
    """This page's presence callable for the training queue (one per page, so the queue counts
    pages, not calls), or None outside a server."""
    presence = st.session_state.get(PRESENCE_KEY)
    if presence is None:
        presence = session_presence()
        if presence is not None:
            st.session_state[PRESENCE_KEY] = presence
    return presence


def session_label(owner: str | None = None) -> str:
    """A short anonymous label for a session (the teacher's list, the server log): a hash of its
    owner secret, so the label gives nothing away."""
    owner = owner or session_owner()
    return "student " + hashlib.sha256(owner.encode()).hexdigest()[:6]


def owns(request: Any) -> bool:
    """True when this session asked for `request` (a page that only found it by its link does not)."""
    return request is not None and getattr(request, "owner", None) == session_owner()


def may_cancel(request: Any) -> bool:
    """Cancel is the owner's, and the unlocked teacher's in classroom mode; never a link's."""
    from dashboard.settings import classroom_mode

    return owns(request) or (classroom_mode() and bool(st.session_state.get(TEACHER_KEY)))


TRAIN_PARAM = "train"  # ?train=<token>: the training this page started (see views/train.py)


def reattach_training() -> None:
    """A reloaded page is a new session: find its training again through the address, so its
    progress comes back. Only the progress: the address is a lookup, and a copied link carries it
    too, so Cancel stays with the session that asked (`may_cancel`)."""
    if worker() is not None:
        return
    token = st.query_params.get(TRAIN_PARAM)
    if not token:
        return
    queue = cache.training_queue()
    request = queue.find(token)
    if request is None:
        del st.query_params[TRAIN_PARAM]
        return
    set_worker(request)
    presence = queue_presence()
    if owns(request) and presence is not None:  # the owner's reloaded page keeps its queued trainings
        queue.touch(request.owner, presence)


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
    if TRAIN_PARAM in st.query_params:
        del st.query_params[TRAIN_PARAM]
    # A session may have a second training queued: the pages follow it next.
    waiting = cache.training_queue().requests_of(session_owner())
    if waiting:
        set_worker(waiting[0])
        st.query_params[TRAIN_PARAM] = waiting[0].token
    if snapshot.status == WorkerStatus.DONE and snapshot.run_id:
        if snapshot.run is not None:  # the trained run itself: browsing it reads nothing from disk
            cache.adopt_run(snapshot.run)
        cache.cached_run_list.clear()
        previous = selected_run_id()
        select_run(snapshot.run_id)
        if previous and previous != snapshot.run_id:
            # Never switch runs without a word (the reader may be studying the previous one).
            notify(
                f"Training finished: now showing the new run {snapshot.run_id[:8]} ({current.label}); "
                f"the run you were looking at, {previous[:8]}, is still in the sidebar's list."
            )


def ensure_default_run() -> None:
    """Select the newest healthy cached run when nothing is selected (or the selection vanished)."""
    rows = [r for r in cache.cached_run_list() if r.get("status", "ok") == "ok"]
    ids = [r["run_id"] for r in rows]
    current = selected_run_id()
    if current in ids:
        return
    select_run(ids[-1] if ids else None)
    if current is not None and ids:
        notify(
            f"Run {current[:8]} is no longer in the store (deleted, here or in another session); "
            f"now showing run {ids[-1][:8]}."
        )


NOTICE_KEY = "pending_notice"


def notify(message: str) -> None:
    """A message the sidebar shows once on the next render (run switches are never silent)."""
    st.session_state[NOTICE_KEY] = message


def pop_notice() -> str | None:
    return st.session_state.pop(NOTICE_KEY, None)


# The view in the address: ?run=..&threshold=..&mode=..&R=..&ood=..; a copied link reproduces it.
VIEW_PARAMS = {"threshold": "threshold", "mode": "mode", "samples": "R", "weights": "weights"}
MAX_SAMPLES = links.MAX_SAMPLES


def apply_link_view(run_id: str | None) -> None:
    """Once per session (a browser tab opening a link): the address's threshold, mode, R, OOD sets
    and epoch become the settings of the linked run, each checked against it (dashboard/links.py)."""
    links.apply_view(run_id)


def publish(name: str, value: Any, text: str | None = None) -> None:
    """Write a view setting into the address (only when it changed: each write is a message)."""
    param = VIEW_PARAMS.get(name, name)
    if text is None:
        text = (
            f"{value:.6g}" if isinstance(value, float) else ",".join(value) if isinstance(value, list) else str(value)
        )
    if st.query_params.get(param) != text:
        st.query_params[param] = text


def setting(run_id: str, name: str, default: Any) -> Any:
    return st.session_state.setdefault(SETTINGS_KEY, {}).setdefault(run_id, {}).get(name, default)


def store_setting(run_id: str, name: str, value: Any) -> None:
    st.session_state.setdefault(SETTINGS_KEY, {}).setdefault(run_id, {})[name] = value


def persistent_widget(
    widget: Any, run_id: str, name: str, default: Any, label: str, link_text: Any = None, **kwargs: Any
) -> Any:
    """A widget whose value is remembered per run across pages; link_text(value), when given, is how
    the address writes it."""
    key = f"widget:{name}:{run_id}"
    if lesson_panel.hidden(name):  # hidden by ?hide= or the lesson step: the value stays, undrawn
        value = setting(run_id, name, default)
        store_setting(run_id, name, value)
        if name in VIEW_PARAMS:
            publish(name, value, link_text(value) if link_text is not None else None)
        return value
    # Always (re)seed the widget from our store: after a page switch Streamlit may
    # have discarded or reset the widget's own state.
    st.session_state[key] = setting(run_id, name, default)

    def remember() -> None:
        store_setting(run_id, name, st.session_state[key])

    value = widget(label, key=key, on_change=remember, **kwargs)
    store_setting(run_id, name, value)
    if name in VIEW_PARAMS:
        publish(name, value, link_text(value) if link_text is not None else None)
    return value


def prediction_mode_select(run_id: str, default: str = "bma") -> str:
    """The prediction mode, shared by every page of a run once the user picks one; until then
    each page opens in its own default (Pruning in prune, where the threshold acts)."""
    key = f"widget:mode:{run_id}"
    chosen = setting(run_id, "mode_chosen", False)
    current = setting(run_id, "mode", default) if chosen else default
    if current not in backend.PREDICTION_MODES:
        current = default
    if lesson_panel.hidden("mode"):
        publish("mode", current)
        return current
    st.session_state[key] = current

    def remember() -> None:
        store_setting(run_id, "mode", st.session_state[key])
        store_setting(run_id, "mode_chosen", True)

    value = st.selectbox(
        "Prediction mode",
        list(backend.PREDICTION_MODES),
        key=key,
        on_change=remember,
        format_func=lambda m: f"{m} ({backend.MODE_HELP[m].split(':')[0]})",
    )
    publish("mode", value)
    return value


def samples_slider(run_id: str, max_samples: int = MAX_SAMPLES, disabled: bool = False) -> int:
    """The number of posterior draws R, shared by every page of a run; disabled (with the reason)
    in modes that draw nothing."""
    return persistent_widget(
        st.slider,
        run_id,
        "samples",
        links.DEFAULT_SAMPLES,
        "Posterior samples R",
        min_value=1,
        max_value=max_samples,
        disabled=disabled,
        help="this mode predicts with one network and draws nothing"
        if disabled
        else "posterior draws averaged per prediction",
    )


def threshold_off_reason(mode: str, spec: backend.ThresholdRange) -> str | None:
    """Why the threshold slider does nothing in `mode` (said on it and under it), None where it acts."""
    if backend.mode_uses_slider(mode):
        return None
    if mode in backend.DEFAULT_CUT_MODES:
        return f"Mode {mode} cuts at the family's default {spec.default:.4g} (the median probability model)."
    return f"Mode {mode} uses every weight."


def threshold_slider(
    run_id: str, spec: backend.ThresholdRange, label: str | None = None, disabled_reason: str | None = None
) -> float:
    direction = "keep above" if spec.keep_above else "keep below"
    step = (spec.high - spec.low) / 200 or 0.01
    current = spec.clip(setting(run_id, "threshold", spec.default))
    store_setting(run_id, "threshold", current)
    help_text = (
        f"A weight is kept when its {spec.name} is {'above' if spec.keep_above else 'below'} the threshold. "
        f"The family's default is {spec.default:.4g}."
    )
    return float(
        persistent_widget(
            st.slider,
            run_id,
            "threshold",
            current,
            label or f"threshold on {spec.name} ({direction})",
            link_text=lambda value: links.link_number(float(value), float(spec.low), float(spec.high)),
            min_value=float(spec.low),
            max_value=float(spec.high),
            step=float(step),
            format="%.4g",
            disabled=disabled_reason is not None,
            help=help_text if disabled_reason is None else f"{disabled_reason} {help_text}",
        )
    )


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
    st.caption(plain(f"Run {run.run_id}: {run.config.label()}"))
    return run
