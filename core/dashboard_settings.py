"""The dashboard server's settings, declared in core so that the dashboard reaches them through its one
door (dashboard/backend.py re-exports this module; dashboard/settings.py reads them, with
`.streamlit/secrets.toml` as the fallback source).

Each is a core.settings Setting: its variable, its rule, its default and what it limits; the table in
docs/classroom.md is rendered from these declarations (scripts/settings_table.py). Nothing here reads
secrets.toml or Streamlit: the readers take the fallback source from the caller.
"""

from __future__ import annotations

from typing import Any, Callable

from core.settings import Setting, register

CLASSROOM_VARIABLE = "BNN_CLASSROOM"
TEACHER_TOKEN_VARIABLE = "BNN_TEACHER_TOKEN"
MAX_TRAININGS_VARIABLE = "BNN_MAX_TRAININGS"
COMPUTE_THREADS_VARIABLE = "BNN_COMPUTE_THREADS"

Fallback = Callable[[str], Any] | None

CLASSROOM = register(
    Setting(
        CLASSROOM_VARIABLE,
        "flag",
        None,
        "classroom mode: sessions cannot delete runs or clear caches; every "
        "computation uses one PyTorch thread unless BNN_COMPUTE_THREADS says otherwise (unset: on whenever the "
        "server listens on an address other machines reach, i.e. Streamlit's server.address is not a loopback "
        "address; set 0 to turn it off there)",
        secret_key="classroom",
        shown_default="on when the server listens beyond loopback",
    )
)

TEACHER_TOKEN = register(
    Setting(
        TEACHER_TOKEN_VARIABLE,
        "text",
        None,
        "the token that unlocks deleting runs, clearing caches and the "
        "training queue's panel in classroom mode (a secret: environment or secrets.toml, never config.toml)",
        secret_key="teacher_token",
    )
)

MAX_TRAININGS = register(
    Setting(
        MAX_TRAININGS_VARIABLE,
        "whole",
        None,
        "trainings at once (unset: 1 on a CPU, 2 with a GPU)",
        low=1,
        high=1000,
        secret_key="max_trainings",
    )
)

COMPUTE_THREADS = register(
    Setting(
        COMPUTE_THREADS_VARIABLE,
        "whole",
        None,
        "PyTorch threads per computation, in the server and its "
        "trainings (unset: 1 in classroom mode, else PyTorch's own)",
        low=1,
        high=4096,
        secret_key="compute_threads",
    )
)

# --- a class over several server processes (python -m dashboard.serve) ---------------------------

# On 2 cores, 2 processes halved the class's first-update p95 and a third made it worse
# (benchmarks/results/classroom_ab_*servers*.md); 16 leaves room for bigger machines, each process
# holding its own caches (about 1.5 GB for a class's runs).
MAX_SERVER_PROCESSES = 16

SERVER_PROCESSES = register(
    Setting(
        "BNN_SERVER_PROCESSES",
        "whole",
        1,
        "Streamlit server processes `python -m dashboard.serve` starts behind its one address (also "
        "--processes; each keeps a browser on one process and holds its own caches; 1: one process, as "
        "`streamlit run`)",
        low=1,
        high=MAX_SERVER_PROCESSES,
    )
)

# Set by dashboard.serve for each server process it starts; nobody sets them by hand.
SERVE_DIR = register(
    Setting(
        "BNN_SERVE_DIR",
        "path",
        None,
        "set by `python -m dashboard.serve` for its server processes: the folder through which they share "
        "the training slots, the queue's view and the teacher's cancels (unset: a process shares nothing)",
    )
)
SERVE_CHILD = register(
    Setting(
        "BNN_SERVE_CHILD",
        "whole",
        None,
        "set by `python -m dashboard.serve` for its server processes: which one this is (its trainings' "
        "?train= tokens name it, so that the proxy sends a link's browser to it)",
        low=0,
        high=MAX_SERVER_PROCESSES - 1,
    )
)
SERVE_ADDRESS = register(
    Setting(
        "BNN_SERVE_ADDRESS",
        "text",
        None,
        "set by `python -m dashboard.serve` for its server processes: the address its proxy listens on "
        "(classroom mode's default follows it, not the process's own loopback address)",
    )
)
SERVE_WARM_TOKEN = register(
    Setting(
        "BNN_SERVE_WARM_TOKEN",
        "text",
        None,
        "set by `python -m dashboard.serve` for its server processes: a secret that only its warm-up page "
        "carries (?warm=), which starts the process's draw processes and waits for them before the class",
    )
)

LOOPBACK_NAMES = ("localhost",)


def listens_beyond_loopback(address: str | None) -> bool:
    """Whether other machines can reach a server listening on `address`: every interface (empty,
    0.0.0.0, ::) and any address or host name that is not loopback do; None (no server) does not."""
    import ipaddress

    if address is None:
        return False
    host = address.strip().strip("[]").lower()
    if not host:
        return True
    if host in LOOPBACK_NAMES:
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it resolves to some interface of this machine
        return True


# --- the training queue's limits and the teacher token's throttle ---------------------------------

QUEUE_PER_SESSION = register(
    Setting(
        "BNN_QUEUE_PER_SESSION",
        "whole",
        2,
        "trainings one session (a browser; a tab where the browser is not recognised) may have running or "
        "queued at once (2: one running and one queued)",
        low=1,
        high=100,
        secret_key="queue_per_session",
    )
)

QUEUE_SESSION_SECONDS = register(
    Setting(
        "BNN_QUEUE_SESSION_SECONDS",
        "real",
        1200.0,
        "estimated seconds of the trainings one session may have running or queued at once",
        low=1,
        high=30 * 86400,
        secret_key="queue_session_seconds",
    )
)

SHORT_TRAINING_SECONDS = register(
    Setting(
        "BNN_SHORT_TRAINING_SECONDS",
        "real",
        300.0,
        "the short lane: while every training slot runs a training estimated above this many seconds, one "
        "training estimated at most this long starts beside them (0: no short lane), so a default-size "
        "training never waits behind another student's long one",
        low=0,
        high=86400,
        secret_key="short_training_seconds",
    )
)

QUEUE_GRACE_SECONDS = register(
    Setting(
        "BNN_QUEUE_GRACE_SECONDS",
        "real",
        60.0,
        "seconds after a session's last open page closes before its queued trainings are dropped (its running "
        "one goes on)",
        low=0,
        high=86400,
        secret_key="queue_grace_seconds",
    )
)

TEACHER_BACKOFF_MAX = register(
    Setting(
        "BNN_TEACHER_BACKOFF_MAX_SECONDS",
        "real",
        60.0,
        "longest wait between teacher-token tries after wrong ones (2^k s after k failures, per session "
        "and per server)",
        low=1,
        high=86400,
        secret_key="teacher_backoff_max_seconds",
    )
)

# --- the server's caches (shared by every session; together they bound what browsing can hold) ----
# Worst case with the defaults: 32 loaded runs of 784-400-600-10 (about 11 MB each, 350 MB), the
# draw cache (256 MB) and the prediction cache (512 MB): about 1.1 GB above an idle server, inside
# the 2 GB a class's server is meant to grow by at most.

CACHED_RUNS = register(
    Setting(
        "BNN_CACHED_RUNS",
        "whole",
        32,
        "loaded runs kept in memory, shared by every session (about 11 MB each for 784-400-600-10)",
        low=1,
        high=10_000,
        secret_key="cached_runs",
    )
)

DRAW_CACHE_MB = register(
    Setting(
        "BNN_DRAW_CACHE_MB",
        "real",
        256.0,
        "megabytes of sampled predictions' per-draw outputs kept (least recently used dropped first; 0 keeps "
        "nothing), in each server process and on disk beside the run store (BNN_CACHE_DIR/draws: shared by "
        "dashboard.serve's processes, kept across restarts)",
        low=0,
        high=10**6,
        secret_key="draw_cache_mb",
    )
)

PREDICTION_CACHE_MB = register(
    Setting(
        "BNN_PREDICTION_CACHE_MB",
        "real",
        512.0,
        "megabytes of the pages' test-set and grid predictions kept "
        "(least recently used dropped first; a full MNIST test set at R = 100 is 40 MB)",
        low=0,
        high=10**6,
        secret_key="prediction_cache_mb",
    )
)

PREDICT_SLOTS = register(
    Setting(
        "BNN_PREDICT_SLOTS",
        "whole",
        0,
        "predictions computed at once, the others queued first come, first served (0: no limit)",
        low=0,
        high=10_000,
        secret_key="predict_slots",
    )
)

DRAW_PROCESSES = register(
    Setting(
        "BNN_DRAW_PROCESSES",
        "whole",
        2,
        "child processes computing the cards' background draws, below the server in priority, so that "
        "page reruns never wait for them (0: the server's own threads)",
        low=0,
        high=64,
        secret_key="draw_processes",
    )
)

DRAW_NICENESS = register(
    Setting(
        "BNN_DRAW_NICENESS",
        "whole",
        10,
        "niceness the draw processes add to their scheduling priority (Unix; 0: the server's)",
        low=0,
        high=19,
        secret_key="draw_niceness",
    )
)

# 19, below the draw processes (10): in the 30-session class with two trainings (fast-mnist runs, 2 cores), the
# complete R-draw numbers' p95 was 20.7 and 22.4 s against 40.0 and 32.9 s at 10, first updates 3.0 / 4.0 s against
# 3.9 / 5.4 s; the trainings ran 27-33 epochs in the class's two minutes instead of 39-48
# (benchmarks/results/classroom_ab_*.md, 2026-11-27 04:07-04:33 UTC).
TRAINING_NICENESS = register(
    Setting(
        "BNN_TRAINING_NICENESS",
        "whole",
        19,
        "niceness the dashboard's training processes add to their scheduling priority (Unix; 0: the "
        "server's); above BNN_DRAW_NICENESS, the draws a session waits for come before the trainings",
        low=0,
        high=19,
        secret_key="training_niceness",
    )
)

DRAW_PROCESS_MB = register(
    Setting(
        "BNN_DRAW_PROCESS_MB",
        "real",
        1024.0,
        "megabytes of resident memory a draw process may hold: above it, it drops the runs it "
        "loaded, and ends when still above (the next draw starts a fresh one)",
        low=64,
        high=10**6,
        secret_key="draw_process_mb",
    )
)

DRAW_SECONDS = register(
    Setting(
        "BNN_DRAW_SECONDS",
        "real",
        120.0,
        "CPU seconds one background draw may use before its process is stopped and the page told "
        "(waiting 20 times that for an answer stops it too)",
        low=1,
        high=86_400,
        secret_key="draw_seconds",
    )
)

CARDS_POLL_SECONDS = register(
    Setting(
        "BNN_CARDS_POLL_SECONDS",
        "real",
        0.5,
        "seconds between a page's polls of its refining cards while their draws are computed (each poll is "
        "a fragment run on the server; the accuracy-vs-R chart polls at most every 2 s)",
        low=0.1,
        high=60,
        secret_key="cards_poll_seconds",
    )
)

# A server process's script runs, its event loop and its draw cache's threads share one interpreter lock.
# Each message a script run hands to the event loop is a system call, after which the thread waits for the
# lock up to this interval when another thread runs Python; a page's run sends dozens. On this 2-core
# machine, 30 sessions on one `streamlit run` (python -m benchmarks.classroom_load --sessions 30 --preset
# fast-mnist, eight runs of each, alternating): first-update p95 0.69-1.54 s (mean 1.28) at Python's 0.005 s,
# 0.73-1.73 s (mean 1.12) at 0.001 s; pooled over four runs each, p95 1.42 -> 1.25 s, p99 3.59 -> 2.31 s,
# the server's CPU unchanged (benchmarks/results/classroom_switch_interval.md).
GIL_SWITCH_SECONDS = register(
    Setting(
        "BNN_GIL_SWITCH_SECONDS",
        "real",
        0.001,
        "the server process's thread switch interval (Python's sys.setswitchinterval; its own default is "
        "0.005): how long a thread that gave up the interpreter lock may wait for it while another runs",
        low=0.0001,
        high=0.1,
        secret_key="gil_switch_seconds",
    )
)

FORM_MEMORY_BROWSERS = register(
    Setting(
        "BNN_FORM_MEMORY_BROWSERS",
        "whole",
        1000,
        "browsers whose Train form choices the server keeps for a "
        "reload (the most recently used; a few hundred bytes each)",
        low=1,
        high=10**6,
        secret_key="form_memory_browsers",
    )
)

LESSON_RUNS = register(
    Setting(
        "BNN_LESSON_RUNS",
        "flag",
        True,
        "place the shipped lessons' runs (assets/lessons/store) into the run store on "
        "the server's first start, verified like any stored run, so a class opening a lesson waits for no training",
    )
)


def draw_cache_bytes(fallback: Fallback = None) -> int:
    """The draw cache's bound in bytes ($BNN_DRAW_CACHE_MB, else `fallback`'s key, else the default)."""
    return int(DRAW_CACHE_MB.read(fallback=fallback) * 2**20)


def predict_slots(fallback: Fallback = None) -> int | None:
    """Predictions computed at once, or None for no limit (0)."""
    return PREDICT_SLOTS.read(fallback=fallback) or None


def draw_process_options(fallback: Fallback = None) -> dict[str, Any]:
    """The draw processes' settings as DrawCache.use_processes takes them (processes 0: none)."""
    return {
        "processes": DRAW_PROCESSES.read(fallback=fallback),
        "niceness": DRAW_NICENESS.read(fallback=fallback),
        "max_bytes": int(DRAW_PROCESS_MB.read(fallback=fallback) * 2**20),
        "timeout": DRAW_SECONDS.read(fallback=fallback),
    }
