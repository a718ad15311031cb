"""Every private Streamlit hook the dashboard relies on, in one place.

Streamlit's public API does not offer these, and a Streamlit release may move or drop any of them.
Each has a fallback here so that the app still runs (less well) on a Streamlit without it, and
each has a test in tests/test_streamlit_compat.py that fails loudly when the installed Streamlit
no longer provides it, so an upgrade cannot lose one silently. No other dashboard module imports
Streamlit's internals (that test checks it too).

1. ALTAIR_GLOBALS_LOCK: the lock `st.altair_chart` holds while it switches Altair's process-wide
   data transformer and theme (dashboard/altair_spec.py converts charts under it).
2. arrow_bytes: Streamlit's own conversion of chart rows to the Arrow bytes `st.vega_lite_chart`
   ships (dashboard/cache.py encodes cached chart specs once).
3. guard_clear_cache_request: Streamlit's handler of a client's "clear cache" request, wrapped so
   that classroom mode can refuse it (dashboard/settings.py).
4. XSRF_COOKIE and xsrf_token: the name and version-2 format of Streamlit's XSRF cookie, the
   browser identity of the training queue (dashboard/state.py).
5. session_presence and script_session_id: the running script's session and whether it is still
   connected (the playground's training stops when its page is gone; the rerun log).
6. keep_fragment_polling: a polled fragment's timer sent again from the fragment's own run (every
   st.fragment(run_every=...) in dashboard/ calls it; the hook's test checks the source).
7. fragment_only_run: whether this script run reruns fragments only (a page body's own run is logged
   in the server's rerun log as a full run is: dashboard/ui.py, body_fragment).
"""

from __future__ import annotations

import binascii
import threading
from typing import Any, Callable

# 1. -----------------------------------------------------------------------------------------------
try:
    from streamlit.elements.vega_charts import _altair_globals_lock as ALTAIR_GLOBALS_LOCK

    HAS_ALTAIR_GLOBALS_LOCK = True
except ImportError:  # a Streamlit without it: the pages never call st.altair_chart, so ours suffices
    ALTAIR_GLOBALS_LOCK = threading.Lock()
    HAS_ALTAIR_GLOBALS_LOCK = False


# 2. -----------------------------------------------------------------------------------------------
def arrow_bytes(rows: list[dict[str, Any]]) -> bytes | None:
    """Rows as the Arrow IPC bytes st.vega_lite_chart sends for a named dataset, or None on a
    Streamlit without the converter (the chart then converts on each call, as before)."""
    try:
        from streamlit import dataframe_util
    except ImportError:
        return None
    return dataframe_util.convert_anything_to_arrow_bytes(rows)


# 3. -----------------------------------------------------------------------------------------------
CLEAR_CACHE_HANDLER = "_handle_clear_cache_request"


def guard_clear_cache_request(refuse: Callable[[], bool]) -> bool:
    """Make Streamlit ignore a client's "clear cache" request while refuse() is true (installed once
    per process). True when the guard is in place, False on a Streamlit without the handler."""
    try:
        from streamlit.runtime.app_session import AppSession
    except ImportError:
        return False
    handler = getattr(AppSession, CLEAR_CACHE_HANDLER, None)
    if handler is None:
        return False
    if getattr(handler, "classroom_guard", False):
        return True

    def guarded(session: Any, *args: Any, **kwargs: Any) -> Any:
        if refuse():
            return None
        return handler(session, *args, **kwargs)

    guarded.classroom_guard = True  # type: ignore[attr-defined]
    setattr(AppSession, CLEAR_CACHE_HANDLER, guarded)
    return True


# 4. -----------------------------------------------------------------------------------------------
XSRF_COOKIE = "_streamlit_xsrf"


def xsrf_token(cookie: str) -> bytes | None:
    """The token of an XSRF cookie in its version-2 form '2|mask|masked token|timestamp' (the
    server masks it afresh on every page load; the token under the mask stays), else None."""
    parts = cookie.strip("\"'").split("|")
    if len(parts) != 4 or parts[0] != "2":
        return None
    try:
        mask, masked = binascii.a2b_hex(parts[1]), binascii.a2b_hex(parts[2])
    except (binascii.Error, ValueError):
        return None
    if len(mask) != 4 or len(masked) < 16:  # a forged short token would make a weak identity
        return None
    return bytes(byte ^ mask[i % 4] for i, byte in enumerate(masked))


def browser_token() -> bytes | None:
    """The random token of this browser's XSRF cookie (st.context.cookies), or None when there is none."""
    import streamlit as st

    try:
        raw = st.context.cookies.get(XSRF_COOKIE)
    except Exception:  # no runtime, or a Streamlit without it
        return None
    return xsrf_token(raw) if isinstance(raw, str) else None


# 5. -----------------------------------------------------------------------------------------------
def script_session_id() -> str | None:
    """The session id of the script running in this thread, or None outside a server."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
    except Exception:  # no runtime (bare mode) or a Streamlit without it
        return None
    return None if ctx is None else ctx.session_id


def session_presence() -> Callable[[], bool] | None:
    """A callable telling whether this browser session is still connected (thread-safe; for work
    that runs on after the script, like the playground's training), or None outside a server."""
    from streamlit.runtime import Runtime

    session_id = script_session_id()
    if session_id is None or not Runtime.exists():
        return None
    runtime = Runtime.instance()
    return lambda: runtime.is_active_session(session_id)


def serving_browsers() -> bool:
    """Whether this process runs a real Streamlit server (AppTest installs a stand-in runtime, a mock,
    and the command line none): only a real one serves browsers."""
    try:
        from streamlit import runtime

        return bool(runtime.exists()) and type(runtime.Runtime.instance()) is runtime.Runtime
    except (ImportError, AttributeError, RuntimeError):
        return False


# 6. -----------------------------------------------------------------------------------------------
def keep_fragment_polling(seconds: float) -> bool:
    """Inside a fragment's own run (one of its polls): ask the browser again to rerun this fragment every
    `seconds`; True when asked. Streamlit sends a fragment's timer only from the full run that defines
    it, and a full run is stopped for a rerun request at its next message: when that message was the
    timer and the request a poll of the same fragment (sent by the browser before the full run's start
    reached it), the fragment ran again, defined and drawn by the stopped run, and the browser had no
    timer left, so the cards stayed at "0 of 11 draws" (benchmarks/browser_class.py's error rows: no poll
    sent and no timer received after the move). The browser ignores a timer it already has. False
    outside a fragment's own run, without a runtime, or on a Streamlit without these internals."""
    try:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
        from streamlit.runtime.scriptrunner_utils import script_run_context
    except ImportError:
        return False
    ctx = script_run_context.get_script_run_ctx(suppress_warning=True)
    if ctx is None or not getattr(ctx, "fragment_ids_this_run", None):
        return False  # a full run: the fragment's definition sent the timer
    thread_state = getattr(script_run_context, "ThreadState", None)
    try:
        fragment_id = (
            thread_state.get().fragment_id if thread_state is not None else getattr(ctx, "current_fragment_id", None)
        )
    except (RuntimeError, AttributeError):  # a thread Streamlit did not set up
        return False
    if not fragment_id:
        return False
    message = ForwardMsg()
    message.auto_rerun.interval = float(seconds)
    message.auto_rerun.fragment_id = fragment_id
    ctx.enqueue(message)
    return True


# 7. -----------------------------------------------------------------------------------------------
def fragment_only_run() -> bool:
    """True inside a script run that reruns fragments only (a widget inside a fragment moved, or a
    fragment's timer), False in a full run, without a runtime, or on a Streamlit without the flag."""
    try:
        from streamlit.runtime.scriptrunner_utils import script_run_context
    except ImportError:
        return False
    ctx = script_run_context.get_script_run_ctx(suppress_warning=True)
    return bool(ctx is not None and getattr(ctx, "fragment_ids_this_run", None))
