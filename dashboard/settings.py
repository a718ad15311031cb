"""Server settings of the dashboard: environment variables first, then `.streamlit/secrets.toml`.

Every setting is declared once with core.settings (its variable, its rule, its default and what it
means): the dashboard's in core/dashboard_settings.py (reached through dashboard/backend.py, the one
door), the others beside the code that uses them (core/admission.py, core/limits.py);
docs/classroom.md shows the table `python scripts/settings_table.py` renders from those
declarations. A value that breaks a setting's rule is refused with a message naming the variable,
never replaced by the default.

The token is a secret, so it belongs in the environment or in secrets.toml (never committed), not
in config.toml.
"""

from __future__ import annotations

import hmac
import logging
import math
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

# The declarations live in core (core/dashboard_settings.py), reached through the one door.
from dashboard.backend import dashboard_settings as declared
from dashboard.server_secrets import read_secrets as _secrets

CLASSROOM_VARIABLE = declared.CLASSROOM_VARIABLE
TEACHER_TOKEN_VARIABLE = declared.TEACHER_TOKEN_VARIABLE
MAX_TRAININGS_VARIABLE = declared.MAX_TRAININGS_VARIABLE
COMPUTE_THREADS_VARIABLE = declared.COMPUTE_THREADS_VARIABLE
CLASSROOM = declared.CLASSROOM
TEACHER_TOKEN = declared.TEACHER_TOKEN
MAX_TRAININGS = declared.MAX_TRAININGS
COMPUTE_THREADS = declared.COMPUTE_THREADS
QUEUE_PER_SESSION = declared.QUEUE_PER_SESSION
QUEUE_SESSION_SECONDS = declared.QUEUE_SESSION_SECONDS
SHORT_TRAINING_SECONDS = declared.SHORT_TRAINING_SECONDS
QUEUE_GRACE_SECONDS = declared.QUEUE_GRACE_SECONDS
TEACHER_BACKOFF_MAX = declared.TEACHER_BACKOFF_MAX
CACHED_RUNS = declared.CACHED_RUNS
DRAW_CACHE_MB = declared.DRAW_CACHE_MB
PREDICTION_CACHE_MB = declared.PREDICTION_CACHE_MB
PREDICT_SLOTS = declared.PREDICT_SLOTS
FORM_MEMORY_BROWSERS = declared.FORM_MEMORY_BROWSERS
LESSON_RUNS = declared.LESSON_RUNS
TRAINING_NICENESS = declared.TRAINING_NICENESS


def _secret(name: str) -> Any:
    """A key of .streamlit/secrets.toml, or None (also when there is no such file)."""
    return _secrets().get(name)


def classroom_mode() -> bool:
    """BNN_CLASSROOM (or classroom in secrets.toml); a value that is no yes/no word is refused, never
    read as "off" (a typo must not leave a class's server unprotected). Unset, it is on whenever the
    server is reachable from other machines: before, any browser that reached such a server could
    delete any run unless the teacher had remembered the variable."""
    configured = CLASSROOM.read(fallback=_secret)
    if configured is not None:
        return bool(configured)
    address = server_address()
    on = listens_beyond_loopback(address)
    _say_once(on, address)
    return on


LOOPBACK_NAMES = declared.LOOPBACK_NAMES
# Pure (no Streamlit, no torch): declared in core so that dashboard.serve's proxy reads it without them.
listens_beyond_loopback = declared.listens_beyond_loopback


def server_address() -> str | None:
    """The address browsers reach this process's Streamlit server on ("" for every interface,
    Streamlit's default): behind `python -m dashboard.serve`, its proxy's address ($BNN_SERVE_ADDRESS),
    not the loopback address the process itself listens on; None when no server runs here (AppTest,
    the command line)."""
    import streamlit as st

    from dashboard.streamlit_compat import serving_browsers

    if not serving_browsers():
        return None
    proxied = declared.SERVE_ADDRESS.read()
    if proxied is not None:
        return str(proxied).strip()
    return str(st.get_option("server.address") or "").strip()


_said: list[bool] = []
_said_lock = threading.Lock()


def classroom_notice() -> str | None:
    """What the teacher reads when classroom mode turned itself on (None otherwise)."""
    if CLASSROOM.read(fallback=_secret) is not None or not classroom_mode():
        return None
    address = server_address() or "every interface"
    return (
        f"Classroom protections are on because this server listens on {address}, which other machines "
        f"can reach: only the teacher (the token in {TEACHER_TOKEN_VARIABLE}) can delete runs, clear "
        f"caches or cancel others' trainings. Set {CLASSROOM_VARIABLE}=0 to turn them off."
    )


def _say_once(on: bool, address: str | None) -> None:
    """The server's log says once, at its first page, why classroom mode is on or off."""
    if address is None:
        return
    with _said_lock:
        if _said:
            return
        _said.append(on)
    if on:
        log.warning(
            "classroom protections ON: the server listens on %s, reachable from other machines "
            "(%s unset; set it to 0 to turn them off)",
            address or "every interface",
            CLASSROOM_VARIABLE,
        )
    else:
        log.info(
            "classroom protections off: the server listens on loopback %s only (%s unset)", address, CLASSROOM_VARIABLE
        )


def teacher_token() -> str | None:
    token = TEACHER_TOKEN.read(fallback=_secret)
    return token or None


def is_teacher_token(candidate: str) -> bool:
    """True when `candidate` is the configured teacher token (constant-time comparison);
    always False when no token is configured."""
    token = teacher_token()
    if token is None or not candidate:
        return False
    return hmac.compare_digest(candidate.strip().encode(), token.encode())


def max_trainings_setting() -> int | None:
    """The configured number of concurrent trainings, or None (the worker's default)."""
    return MAX_TRAININGS.read(fallback=_secret)


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
    threads = COMPUTE_THREADS.read(fallback=_secret)
    if threads is None:
        return 1 if classroom_mode() else None
    return threads


def serve_folder() -> str | None:
    """The folder shared with the other server processes of `python -m dashboard.serve`
    ($BNN_SERVE_DIR, which it sets), or None for a server on its own."""
    return declared.SERVE_DIR.read()


def serve_child() -> int | None:
    """Which of dashboard.serve's server processes this is ($BNN_SERVE_CHILD), or None."""
    return declared.SERVE_CHILD.read()


def serve_warm_token() -> str | None:
    """The secret of dashboard.serve's warm-up page ($BNN_SERVE_WARM_TOKEN, which it sets), or None."""
    return declared.SERVE_WARM_TOKEN.read() or None


def training_niceness() -> int:
    """Niceness a training process adds to its scheduling priority ($BNN_TRAINING_NICENESS, or
    training_niceness in secrets.toml; default 19, below the draw processes): page reruns and the draws
    somebody is waiting for come first."""
    return TRAINING_NICENESS.read(fallback=_secret)


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


_switch_applied: list[float] = []


def apply_switch_interval() -> float:
    """Set this process's thread switch interval from $BNN_GIL_SWITCH_SECONDS (or gil_switch_seconds in
    secrets.toml), once per process; returns what was applied (core.dashboard_settings says why)."""
    with _threads_lock:
        if not _switch_applied:
            seconds = declared.GIL_SWITCH_SECONDS.read(fallback=_secret)
            sys.setswitchinterval(seconds)
            _switch_applied.append(seconds)
        return _switch_applied[0]


def refuse_streamlit_cache_clearing() -> bool:
    """In classroom mode, ignore Streamlit's own "clear cache" request (a developer-menu
    command that toolbarMode="minimal" hides, but any client can send): it would empty every
    session's caches, forget the training queue and reset the sender's session. The
    teacher's button on the Train page clears the caches instead. Returns True when the
    guard is in place (it is installed once per process)."""
    if not classroom_mode():
        return False
    from dashboard.streamlit_compat import guard_clear_cache_request

    return guard_clear_cache_request(classroom_mode)


# --- the training queue's limits and the teacher token's throttle ---------------------------------

log = logging.getLogger(__name__)


def queue_limits() -> Any:
    """The training queue's QueueLimits from the settings above (read when the queue is made)."""
    from dashboard import backend
    from dashboard.worker import QueueLimits

    return QueueLimits(
        per_session=QUEUE_PER_SESSION.read(fallback=_secret),
        session_seconds=QUEUE_SESSION_SECONDS.read(fallback=_secret),
        # one limit for the form and the queue: core.cost's BNN_MAX_TRAINING_MINUTES
        training_seconds=backend.admission_limits().training_seconds,
        grace_seconds=QUEUE_GRACE_SECONDS.read(fallback=_secret),
        short_seconds=SHORT_TRAINING_SECONDS.read(fallback=_secret),
    )


class GuessThrottle:
    """Exponential back-off on wrong teacher tokens, per session and for the whole server.

    A tester made 17-20 guesses a second from six sessions, unthrottled and unlogged. After k
    failures (of one session, or of the server as a whole) the next try waits 2^k s, at most
    `cap` s: with the default 60 s cap six sessions get about one guess a minute between them.
    The server-wide count is what stops a class of tabs from multiplying the rate; its price is
    that a student's guessing can make the teacher wait up to `cap` too. A count is forgotten
    after a quiet spell of 10 x cap (a class later starts afresh) and on a right token.
    """

    SERVER = "(server)"

    def __init__(self, cap: float, clock: Callable[[], float] = time.monotonic):
        self.cap = float(cap)
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[int, float]] = {}  # key -> (count, time of the last failure)

    def _wait(self, key: str, now: float) -> float:
        count, last = self._failures.get(key, (0, -math.inf))
        if count and now - last > 10 * self.cap:
            self._failures.pop(key, None)
            return 0.0
        return max(0.0, last + min(2.0**count, self.cap) - now) if count else 0.0

    def wait(self, who: str) -> float:
        """Seconds before `who` (a session label) may try again (0: now)."""
        with self._lock:
            now = self._clock()
            return max(self._wait(who, now), self._wait(self.SERVER, now))

    def failed(self, who: str) -> tuple[int, int, float]:
        """Count a wrong token: (this session's failures, the server's, seconds until the next try)."""
        with self._lock:
            now = self._clock()
            counts = []
            for key in (who, self.SERVER):
                self._wait(key, now)  # forgets a stale count
                count = self._failures.get(key, (0, now))[0] + 1
                self._failures[key] = (count, now)
                counts.append(count)
        return counts[0], counts[1], self.wait(who)

    def succeeded(self, who: str) -> None:
        with self._lock:
            self._failures.pop(who, None)
            self._failures.pop(self.SERVER, None)


@dataclass(frozen=True)
class TokenCheck:
    """The outcome of one try: ok, or the message to show (why not, and when to try again)."""

    ok: bool
    message: str | None = None


_throttle_lock = threading.Lock()
_throttles: list[GuessThrottle] = []


def guess_throttle() -> GuessThrottle:
    """The server's one throttle (its cap read once)."""
    with _throttle_lock:
        if not _throttles:
            _throttles.append(GuessThrottle(TEACHER_BACKOFF_MAX.read(fallback=_secret)))
        return _throttles[0]


def check_teacher_token(candidate: str, who: str, throttle: GuessThrottle | None = None) -> TokenCheck:
    """Try `candidate` as the teacher token for the session labelled `who`. A throttled try is
    not checked at all; a wrong one is logged with the session's label, never with its text."""
    throttle = throttle or guess_throttle()
    wait = throttle.wait(who)
    if wait > 0:
        log.info("teacher token try from %s refused unchecked: %.0f s of back-off left", who, wait)
        return TokenCheck(False, f"Too many wrong tokens: this try was not checked. Try again in {math.ceil(wait)} s.")
    if is_teacher_token(candidate):
        throttle.succeeded(who)
        log.info("teacher token accepted from %s", who)
        return TokenCheck(True)
    mine, server, wait = throttle.failed(who)
    log.warning(
        "wrong teacher token from %s (%d from this session, %d on the server); next try in %.0f s",
        who,
        mine,
        server,
        wait,
    )
    return TokenCheck(False, f"That is not the teacher token. The next try is possible in {math.ceil(wait)} s.")


# --- the server's caches (shared by every session; together they bound what browsing can hold) ----
# (Their bounds and the worst case they add up to: core/dashboard_settings.py.)


def form_memory_browsers() -> int:
    return FORM_MEMORY_BROWSERS.read(fallback=_secret)


def cached_runs() -> int:
    return CACHED_RUNS.read(fallback=_secret)


def draw_cache_bytes() -> int:
    return declared.draw_cache_bytes(_secret)


def prediction_cache_bytes() -> int:
    return int(PREDICTION_CACHE_MB.read(fallback=_secret) * 2**20)


def predict_slots() -> int | None:
    return declared.predict_slots(_secret)


def lesson_runs() -> bool:
    return bool(LESSON_RUNS.read())
