"""Trainings as threads and child processes: a `TrainingWorker` runs one training function in a
background thread and records its progress for the UI to poll; `train_in_subprocess` is the
training function the server uses, core.runs.train_run in a child process (the interpreter lock
stays with the pages); `default_slots` says how many may run at once. The queue that decides
which training runs when is dashboard/worker.py. Nothing here touches Streamlit.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from core.errors import BNNError, TrainingCancelled

log = logging.getLogger(__name__)

# train_fn(config, progress=callback, cancel=event) -> a result with a `run_id`
TrainFunction = Callable[..., Any]


class WorkerStatus(str, Enum):
    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class WorkerSnapshot:
    """A consistent copy of the worker's state for one redraw."""

    status: WorkerStatus
    history: list[dict[str, Any]] = field(default_factory=list)
    total_epochs: int = 0
    run_id: str | None = None
    error: str | None = None
    started: float | None = None
    finished: float | None = None
    # Requests (TrainingRequest): 1-based place among waiting jobs while QUEUED, else None;
    # how many sessions share the job.
    position: int | None = None
    sharers: int = 1
    # While QUEUED: estimated seconds until it starts (None: unknown).
    eta: float | None = None
    # The trained run itself when the training function handed it over (DONE only): the page
    # adopts it instead of reading it back from the store.
    run: Any = field(default=None, repr=False, compare=False)

    @property
    def finished_epochs(self) -> int:
        return len(self.history)

    @property
    def fraction(self) -> float:
        if self.status is WorkerStatus.DONE:
            return 1.0
        if self.total_epochs <= 0:
            return 0.0
        return min(1.0, self.finished_epochs / self.total_epochs)

    @property
    def is_active(self) -> bool:
        return self.status in (WorkerStatus.RUNNING, WorkerStatus.QUEUED)


class TrainingWorker:
    """Runs one training job in a daemon thread; cancel with `cancel()`."""

    def __init__(
        self,
        train_fn: TrainFunction,
        config: Any,
        total_epochs: int,
        label: str = "",
        on_finish: Callable[["TrainingWorker"], None] | None = None,
    ):
        self._train_fn = train_fn
        self._on_finish = on_finish
        self.config = config
        self.label = label
        self._total_epochs = int(total_epochs)
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._history: list[dict[str, Any]] = []
        self._status = WorkerStatus.IDLE
        self._run_id: str | None = None
        self._trained: Any = None  # the trained run, when the training function handed it over
        self._error: str | None = None
        self._started: float | None = None
        self._finished: float | None = None
        self._thread = threading.Thread(target=self._run, name="bnn-training", daemon=True)

    # --- control (UI thread) --------------------------------------------------------------------
    def start(self) -> "TrainingWorker":
        with self._lock:
            if self._status not in (WorkerStatus.IDLE, WorkerStatus.QUEUED):
                raise RuntimeError("a worker can be started once")
            self._status = WorkerStatus.RUNNING
            self._started = time.time()
        self._thread.start()
        return self

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def join(self, timeout: float | None = None) -> WorkerSnapshot:
        if self._thread.ident is not None:  # a job cancelled while it waited never had a thread
            self._thread.join(timeout)
        return self.snapshot()

    def snapshot(self) -> WorkerSnapshot:
        with self._lock:
            return WorkerSnapshot(
                status=self._status,
                history=list(self._history),
                total_epochs=self._total_epochs,
                run_id=self._run_id,
                error=self._error,
                started=self._started,
                finished=self._finished,
                run=self._trained,
            )

    # --- the thread ---------------------------------------------------------------------------------
    def _progress(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._history.append(dict(record))

    def _finish(
        self, status: WorkerStatus, run_id: str | None = None, error: str | None = None, run: Any = None
    ) -> None:
        with self._lock:
            self._status = status
            self._run_id = run_id
            self._trained = run if hasattr(run, "model") else None
            self._error = error
            self._finished = time.time()
        if self._on_finish is not None:
            self._on_finish(self)

    def _run(self) -> None:
        try:
            result = self._train_fn(self.config, progress=self._progress, cancel=self._cancel)
        except TrainingCancelled as exc:
            self._finish(WorkerStatus.CANCELLED, error=str(exc))
        except BNNError as exc:
            self._finish(WorkerStatus.FAILED, error=str(exc))
        except Exception as exc:  # a bug: keep the thread's traceback in the server log, show a message
            log.exception("training worker crashed")
            self._finish(WorkerStatus.FAILED, error=f"unexpected error ({type(exc).__name__}): {exc}")
        else:
            self._finish(WorkerStatus.DONE, run_id=getattr(result, "run_id", None), run=result)


# --- training in a child process ----------------------------------------------------------------


def train_in_subprocess(config: Any, progress: Callable[[dict], None] | None = None, cancel: Any = None) -> Any:
    """core.runs.train_run(config) in a child process; the same contract as a TrainFunction.

    The server's threads share one interpreter lock with anything training in a thread, and
    a training's Python loop takes it thousands of times a second: a class of sessions
    rerunning their pages beside two trainings waited seconds for it. In a child process
    the training competes for cores only. Progress records and the outcome come back over
    a queue; cancelling sets an Event the child's training loop checks every minibatch; a
    BNNError in the child is raised here with its message. The child writes the run to
    the same store ($BNN_CACHE_DIR is inherited) and hands the trained run back (weights as
    safetensors bytes), so the result is the run itself and nobody reads it back. The child
    runs at a lower scheduling priority ($BNN_TRAINING_NICENESS, default TRAINING_NICENESS) so that page
    reruns come first.
    """
    import multiprocessing
    import queue as queue_module
    from types import SimpleNamespace

    context = multiprocessing.get_context("spawn")  # never fork a process with threads running
    messages = context.Queue()
    stop = context.Event()
    # The validated config itself goes to the child (pickled by multiprocessing), not its fields:
    # it is not validated again there.
    from dashboard.settings import compute_threads, training_niceness

    child = context.Process(
        target=_train_child,
        args=(config, messages, stop, compute_threads(), training_niceness()),
        name="bnn-training",
        daemon=True,
    )
    child.start()
    try:
        while True:
            if cancel is not None and _cancelled(cancel):
                stop.set()
            try:
                message = messages.get(timeout=0.2)
            except queue_module.Empty:
                if child.is_alive():
                    continue
                try:  # it may have put its last message just before ending
                    message = messages.get(timeout=1.0)
                except queue_module.Empty:
                    raise BNNError(
                        f"the training process ended without a result (exit code {child.exitcode}); "
                        "the server log may say why"
                    ) from None
            kind = message[0]
            if kind == "progress":
                if progress is not None:
                    progress(message[1])
            elif kind == "done":
                if len(message) > 2 and message[2] is not None:  # the trained run itself
                    from dashboard import backend

                    return backend.run_from_handover(message[2])
                return SimpleNamespace(run_id=message[1])
            else:
                raise _error_from_child(kind, message[1], message[2])
    finally:
        if child.is_alive():
            stop.set()
            child.join(timeout=30)
            if child.is_alive():
                child.terminate()
                child.join(timeout=5)


# added to the child's scheduling niceness (Unix) unless $BNN_TRAINING_NICENESS says otherwise
TRAINING_NICENESS = 19  # $BNN_TRAINING_NICENESS's default (tests/test_draw_process.py checks they agree)


def _cancelled(cancel: Any) -> bool:
    return cancel.is_set() if hasattr(cancel, "is_set") else bool(cancel())


def _train_child(
    config: Any, messages: Any, stop: Any, threads: int | None = None, niceness: int = TRAINING_NICENESS
) -> None:
    """The child's side of train_in_subprocess; `threads`: PyTorch threads (None: its default)."""
    import traceback

    _end_with_parent()
    try:
        # Trainings yield the cores to the sessions' page runs, which somebody is waiting for.
        if niceness and hasattr(os, "nice"):
            os.nice(int(niceness))
        if threads is not None:
            import torch

            torch.set_num_threads(int(threads))
        from dashboard import backend

        run = backend.train_run(config, progress=lambda record: messages.put(("progress", record)), cancel=stop)
        messages.put(("done", run.run_id, backend.run_handover(run)))
    except BNNError as exc:
        messages.put(("bnn-error", type(exc).__name__, str(exc)))
    except BaseException as exc:  # a bug: the traceback goes to the server's log
        traceback.print_exc()
        messages.put(("crash", type(exc).__name__, str(exc)))
    finally:
        messages.close()
        messages.join_thread()


def _end_with_parent() -> None:
    """Linux: this training process gets SIGTERM when the server process that started it ends, even
    killed. Otherwise a killed server's trainings trained on unseen, beyond the machine's training
    slots (dashboard.serve restarts a server process that ended; its slots are free at once)."""
    import multiprocessing
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it ended before the line above
        os._exit(1)


def _error_from_child(kind: str, name: str, text: str) -> Exception:
    import core.errors as errors

    if kind == "bnn-error":
        error_type = getattr(errors, name, None)
        if isinstance(error_type, type) and issubclass(error_type, BNNError):
            return error_type(text)
        return BNNError(text)
    return RuntimeError(f"{name}: {text}")


def default_slots() -> int:
    """How many trainings may run at once: $BNN_MAX_TRAININGS (or max_trainings in
    .streamlit/secrets.toml), else 1 on a CPU (trainings on the same cores only slow each
    other down) and 2 with a GPU."""
    from dashboard.settings import max_trainings_setting

    slots = max_trainings_setting()
    if slots is not None:
        return slots
    import torch

    return 2 if torch.cuda.is_available() else 1
