"""Training in a background thread, polled by the UI.

The worker never touches Streamlit: it calls a core training function with a
progress callback and a cancel Event, and records what happens in plain
attributes guarded by a lock. The Train page reads `snapshot()` from an
`st.fragment(run_every=...)`, so the page stays responsive while training.
"""

from __future__ import annotations

import logging
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
        return self.status is WorkerStatus.RUNNING


class TrainingWorker:
    """Runs one training job in a daemon thread; cancel with `cancel()`."""

    def __init__(self, train_fn: TrainFunction, config: Any, total_epochs: int, label: str = ""):
        self._train_fn = train_fn
        self.config = config
        self.label = label
        self._total_epochs = int(total_epochs)
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._history: list[dict[str, Any]] = []
        self._status = WorkerStatus.IDLE
        self._run_id: str | None = None
        self._error: str | None = None
        self._started: float | None = None
        self._finished: float | None = None
        self._thread = threading.Thread(target=self._run, name="bnn-training", daemon=True)

    # --- control (UI thread) --------------------------------------------------------------------
    def start(self) -> "TrainingWorker":
        with self._lock:
            if self._status is not WorkerStatus.IDLE:
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
        self._thread.join(timeout)
        return self.snapshot()

    def snapshot(self) -> WorkerSnapshot:
        with self._lock:
            return WorkerSnapshot(status=self._status, history=list(self._history),
                                  total_epochs=self._total_epochs, run_id=self._run_id, error=self._error,
                                  started=self._started, finished=self._finished)

    # --- the thread ---------------------------------------------------------------------------------
    def _progress(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._history.append(dict(record))

    def _finish(self, status: WorkerStatus, run_id: str | None = None, error: str | None = None) -> None:
        with self._lock:
            self._status = status
            self._run_id = run_id
            self._error = error
            self._finished = time.time()

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
            self._finish(WorkerStatus.DONE, run_id=getattr(result, "run_id", None))
