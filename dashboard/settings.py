"""Server settings of the dashboard: environment variables first, then `.streamlit/secrets.toml`.

| environment variable | secrets.toml key | meaning |
|---|---|---|
| `BNN_CLASSROOM` (1/true/yes) | `classroom = true` | classroom mode: sessions cannot delete runs or clear caches |
| `BNN_TEACHER_TOKEN` | `teacher_token = "..."` | the token that unlocks deleting and clearing in classroom mode |
| `BNN_MAX_TRAININGS` | `max_trainings = 2` | trainings at once (default 1 on a CPU, 2 with a GPU) |
| `BNN_CACHED_RUNS` | | loaded runs kept in memory (default 32) |

The token is a secret, so it belongs in the environment or in secrets.toml
(never committed), not in config.toml.
"""

from __future__ import annotations

import functools
import hmac
import os
from pathlib import Path
from typing import Any

CLASSROOM_VARIABLE = "BNN_CLASSROOM"
TEACHER_TOKEN_VARIABLE = "BNN_TEACHER_TOKEN"
TRUE_WORDS = ("1", "true", "yes", "on")


def _secret(name: str) -> Any:
    """A key of .streamlit/secrets.toml, or None (also when there is no such file)."""
    return _secrets().get(name)


@functools.lru_cache(maxsize=1)
def _secrets() -> dict[str, Any]:
    """The secrets, read once per process (restart the server after editing them).

    Streamlit is asked only when a secrets file exists: reading st.secrets starts a
    watcher polling the secrets files, which cost a busy server measurable time."""
    candidates = [Path.cwd() / ".streamlit" / "secrets.toml", Path.home() / ".streamlit" / "secrets.toml"]
    if not any(path.is_file() for path in candidates):
        return {}
    try:
        import streamlit as st
        return dict(st.secrets)
    except Exception:  # unreadable secrets, or not under a Streamlit runtime
        return {}


def classroom_mode() -> bool:
    text = os.environ.get(CLASSROOM_VARIABLE)
    if text is not None and text.strip():
        return text.strip().lower() in TRUE_WORDS
    value = _secret("classroom")
    return str(value).strip().lower() in TRUE_WORDS if value is not None else False


def teacher_token() -> str | None:
    token = os.environ.get(TEACHER_TOKEN_VARIABLE, "").strip() or str(_secret("teacher_token") or "").strip()
    return token or None


def is_teacher_token(candidate: str) -> bool:
    """True when `candidate` is the configured teacher token (constant-time comparison);
    always False when no token is configured."""
    token = teacher_token()
    if token is None or not candidate:
        return False
    return hmac.compare_digest(candidate.strip().encode(), token.encode())


def max_trainings_setting() -> str | None:
    """The configured number of concurrent trainings as text (validated by the worker), or None."""
    text = os.environ.get("BNN_MAX_TRAININGS", "").strip()
    if text:
        return text
    value = _secret("max_trainings")
    return None if value is None else str(value)


def refuse_streamlit_cache_clearing() -> bool:
    """In classroom mode, ignore Streamlit's own "clear cache" request (a developer-menu
    command that toolbarMode="minimal" hides, but any client can send): it would empty every
    session's caches, forget the training queue and reset the sender's session. The
    teacher's button on the Train page clears the caches instead. Returns True when the
    guard is in place (it is installed once per process)."""
    if not classroom_mode():
        return False
    try:
        from streamlit.runtime.app_session import AppSession
    except ImportError:  # a Streamlit without this module: nothing to guard
        return False
    handler = getattr(AppSession, "_handle_clear_cache_request", None)
    if handler is None:
        return False
    if getattr(handler, "classroom_guard", False):
        return True

    def guarded(session, *args, **kwargs):
        if classroom_mode():
            return None
        return handler(session, *args, **kwargs)

    guarded.classroom_guard = True
    AppSession._handle_clear_cache_request = guarded
    return True
