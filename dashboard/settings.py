"""Server settings of the dashboard: environment variables first, then `.streamlit/secrets.toml`.

| environment variable | secrets.toml key | meaning |
|---|---|---|
| `BNN_CLASSROOM` (1/true/yes) | `classroom = true` | classroom mode: sessions cannot delete runs or clear caches |
| `BNN_TEACHER_TOKEN` | `teacher_token = "..."` | the token that unlocks deleting and clearing in classroom mode |
| `BNN_MAX_TRAININGS` | `max_trainings = 2` | trainings at once (default 1 on a CPU, 2 with a GPU) |
| `BNN_CACHED_RUNS` | | loaded runs kept in memory (default 32) |
| `BNN_COMPUTE_THREADS` | `compute_threads = 1` | PyTorch threads per computation, in the server and its trainings (default: 1 in classroom mode, else PyTorch's own) |

The token is a secret, so it belongs in the environment or in secrets.toml
(never committed), not in config.toml.
"""

from __future__ import annotations

import functools
import hmac
import os
import threading
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


MAX_TRAININGS_VARIABLE = "BNN_MAX_TRAININGS"


def _whole_number_setting(variable: str, secret_key: str) -> int | None:
    """$variable, else `secret_key` in secrets.toml, as a positive whole number; None when neither is
    set; a ConfigError naming the variable for anything else."""
    from core.errors import ConfigError

    text = os.environ.get(variable, "").strip()
    if not text:
        value = _secret(secret_key)
        text = "" if value is None else str(value).strip()
    if not text:
        return None
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"{variable}: must be a positive whole number, got {text!r}")
    return number


def max_trainings_setting() -> int | None:
    """The configured number of concurrent trainings, or None (the worker's default)."""
    return _whole_number_setting(MAX_TRAININGS_VARIABLE, "max_trainings")


COMPUTE_THREADS_VARIABLE = "BNN_COMPUTE_THREADS"


def compute_threads() -> int | None:
    """PyTorch threads per computation (intra-op), in the server and in its training processes:
    $BNN_COMPUTE_THREADS (or compute_threads in secrets.toml), else 1 in classroom mode, else None
    (PyTorch's default, one per core).

    Why 1 for a class: 30 sessions' predictions run side by side, one per core, instead of each
    spreading over every core (and its threads spin-waiting between operations, taking the cores
    from the trainings). The 30-session load test on this 2-core machine, full MNIST: slider p95
    5.3 s with 1 thread against 5.6 s with PyTorch's default (fast-mnist runs; 6.6 against 7.3 s
    with 1-epoch runs), and the two trainings beside the class ran 41-49 epochs instead of 4-5
    (benchmarks/results/classroom_load_threads.md)."""
    threads = _whole_number_setting(COMPUTE_THREADS_VARIABLE, "compute_threads")
    if threads is None:
        return 1 if classroom_mode() else None
    return threads


_threads_lock = threading.Lock()
_threads_applied: list[int | None] = []


def apply_compute_threads() -> int | None:
    """Set PyTorch's threads for this process from compute_threads(), once per process (a
    process-wide setting is never flipped per run); returns what was applied."""
    with _threads_lock:
        if not _threads_applied:
            threads = compute_threads()
            if threads is not None:
                import torch
                torch.set_num_threads(threads)
            _threads_applied.append(threads)
        return _threads_applied[0]


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


# --- admission limits (core.cost declares them; the dashboard reads secrets.toml as the fallback) ---------

def admission_limits() -> Any:
    """What one request may cost on this server (core.cost.Limits): BNN_MEMORY_BUDGET_MB,
    BNN_MAX_WEIGHTS, BNN_PLAYGROUND_MAX_WEIGHTS, BNN_MAX_GENERATED_POINTS, BNN_MAX_PREDICTION_VALUES,
    BNN_MAX_PREDICTION_SECONDS and BNN_MAX_TRAINING_MINUTES, each from the environment, else its key
    in secrets.toml, else its default (the table: core.settings.describe())."""
    from core.cost import server_limits
    return server_limits(fallback=_secret)
