"""Training in background threads, queued process-wide, polled by the UI.

The worker never touches Streamlit: it calls a core training function with a
progress callback and a cancel Event, and records what happens in plain
attributes guarded by a lock. The Train page reads `snapshot()` from an
`st.fragment(run_every=...)`, so the page stays responsive while training.

`TrainingQueue` is shared by every session of one server (a class of 30 on
one machine): at most `slots` trainings run at once, the rest wait in order.
A session holds a `TrainingRequest`: its place in the queue, its job's
progress, and a cancel that withdraws only its own request. A request for a
config that is already queued or training joins that job. A job nobody
cancelled runs to the end even when every session that asked has left, so
its run is stored for later.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Hashable

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

    def __init__(self, train_fn: TrainFunction, config: Any, total_epochs: int, label: str = "",
                 on_finish: Callable[["TrainingWorker"], None] | None = None):
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
        self._thread.join(timeout)
        return self.snapshot()

    def snapshot(self) -> WorkerSnapshot:
        with self._lock:
            return WorkerSnapshot(status=self._status, history=list(self._history),
                                  total_epochs=self._total_epochs, run_id=self._run_id, error=self._error,
                                  started=self._started, finished=self._finished, run=self._trained)

    # --- the thread ---------------------------------------------------------------------------------
    def _progress(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._history.append(dict(record))

    def _finish(self, status: WorkerStatus, run_id: str | None = None, error: str | None = None,
                run: Any = None) -> None:
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
    runs at a lower scheduling priority (TRAINING_NICENESS) so that page reruns come first.
    """
    import multiprocessing
    import queue as queue_module
    from types import SimpleNamespace

    context = multiprocessing.get_context("spawn")  # never fork a process with threads running
    messages = context.Queue()
    stop = context.Event()
    # The validated config itself goes to the child (pickled by multiprocessing), not its fields:
    # it is not validated again there.
    from dashboard.settings import compute_threads

    child = context.Process(target=_train_child, args=(config, messages, stop, compute_threads()),
                            name="bnn-training", daemon=True)
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
                    raise BNNError(f"the training process ended without a result (exit code {child.exitcode}); "
                                   "the server log may say why") from None
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


TRAINING_NICENESS = 10  # added to the child's scheduling niceness (Unix)


def _cancelled(cancel: Any) -> bool:
    return cancel.is_set() if hasattr(cancel, "is_set") else bool(cancel())


def _train_child(config: Any, messages: Any, stop: Any, threads: int | None = None) -> None:
    """The child's side of train_in_subprocess; `threads`: PyTorch threads (None: its default)."""
    import traceback

    try:
        # Trainings yield the cores to the sessions' page runs, which somebody is waiting for.
        if hasattr(os, "nice"):
            os.nice(TRAINING_NICENESS)
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


def _error_from_child(kind: str, name: str, text: str) -> Exception:
    import core.errors as errors

    if kind == "bnn-error":
        error_type = getattr(errors, name, None)
        if isinstance(error_type, type) and issubclass(error_type, BNNError):
            return error_type(text)
        return BNNError(text)
    return RuntimeError(f"{name}: {text}")


# --- the process-wide queue ----------------------------------------------------------------------

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


class _Job:
    """One config's training, shared by every request that asked for it."""

    def __init__(self, key: Hashable, worker: TrainingWorker):
        self.key = key
        self.worker = worker
        self.requests: set[int] = set()  # ids of the live requests sharing it


class TrainingRequest:
    """One session's request: what it sees of its job, and a cancel of its own.

    Same interface as TrainingWorker for the UI (snapshot, cancel, cancel_requested, label, join).
    """

    def __init__(self, queue: "TrainingQueue", job: _Job, request_id: int, joined: bool):
        self._queue = queue
        self._job = job
        self.id = request_id
        # Unguessable: the token in a page's address lets that page (reloaded) cancel this request.
        self.token = secrets.token_urlsafe(12)
        self.joined = joined  # True when it joined a job that was already queued or training
        self.label = job.worker.label
        self.config = job.worker.config
        self._withdrawn = False

    def snapshot(self) -> WorkerSnapshot:
        snapshot = self._job.worker.snapshot()
        if self._withdrawn:  # whatever the job does now (others may share it), this request is over
            return replace(snapshot, status=WorkerStatus.CANCELLED, error="you cancelled this request",
                           position=None, finished=snapshot.finished or time.time())
        return replace(snapshot, position=self._queue.position(self._job), sharers=max(1, len(self._job.requests)))

    def cancel(self) -> None:
        """Withdraw this request; the job stops only when no other request shares it."""
        if not self._withdrawn:
            self._withdrawn = True
            self._queue._withdraw(self._job, self.id)

    @property
    def cancel_requested(self) -> bool:
        return self._withdrawn

    def join(self, timeout: float | None = None) -> WorkerSnapshot:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._job.worker.snapshot().status is WorkerStatus.QUEUED:
            if deadline is not None and time.monotonic() >= deadline:
                return self.snapshot()
            time.sleep(0.01)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        self._job.worker.join(remaining)
        return self.snapshot()


class TrainingQueue:
    """At most `slots` trainings at once, the others waiting first come, first served."""

    KEEP_FINISHED = 64

    def __init__(self, train_fn: TrainFunction, slots: int = 1):
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self._train_fn = train_fn
        self.slots = int(slots)
        self._lock = threading.RLock()
        self._waiting: OrderedDict[Hashable, _Job] = OrderedDict()
        self._running: list[_Job] = []
        self._ids = itertools.count(1)
        # Requests by their token, so that a reloaded page (a new session) finds its training again.
        self._requests: dict[str, TrainingRequest] = {}
        self.on_job_finished: Callable[[], None] | None = None  # e.g. refresh the cached run list

    def submit(self, key: Hashable, config: Any, total_epochs: int, label: str = "") -> TrainingRequest:
        """Queue a training of `config` (identified by `key`), or join the job already queued
        or training for the same key."""
        with self._lock:
            job = self._waiting.get(key) or next(
                (j for j in self._running if j.key == key and not j.worker.cancel_requested), None)
            joined = job is not None
            if job is None:
                worker = TrainingWorker(self._train_fn, config, total_epochs, label, on_finish=self._finished)
                worker._status = WorkerStatus.QUEUED
                job = _Job(key, worker)
                self._waiting[key] = job
            request = TrainingRequest(self, job, next(self._ids), joined)
            job.requests.add(request.id)
            self._requests[request.token] = request
            self._dispatch()
            return request

    def find(self, token: str | None) -> "TrainingRequest | None":
        """The request with this token (from the page's address), if it is still known."""
        with self._lock:
            return self._requests.get(str(token)) if token else None

    def position(self, job: _Job) -> int | None:
        """1-based place of a waiting job (1: next to start), None when it is not waiting."""
        with self._lock:
            for place, key in enumerate(self._waiting, start=1):
                if key == job.key and self._waiting[key] is job:
                    return place
            return None

    def counts(self) -> tuple[int, int]:
        """(running, waiting) jobs."""
        with self._lock:
            return len(self._running), len(self._waiting)

    def _withdraw(self, job: _Job, request_id: int) -> None:
        with self._lock:
            job.requests.discard(request_id)
            if job.requests:
                return
            if self._waiting.get(job.key) is job:  # nobody wants it any more: never started
                del self._waiting[job.key]
                job.worker._cancel.set()
                job.worker._finish(WorkerStatus.CANCELLED, error="cancelled while waiting in the queue")
            else:
                job.worker.cancel()

    def _finished(self, worker: TrainingWorker) -> None:
        with self._lock:
            self._running = [job for job in self._running if job.worker is not worker]
            # Forget finished requests beyond the most recent few (their pages got the outcome).
            done = [t for t, r in self._requests.items() if not r._job.worker.snapshot().is_active]
            for token in done[:-self.KEEP_FINISHED]:
                del self._requests[token]
            self._dispatch()
        if self.on_job_finished is not None:
            try:
                self.on_job_finished()
            except Exception:  # a listener's failure must not lose the queue's bookkeeping
                log.exception("on_job_finished listener failed")

    def _dispatch(self) -> None:
        with self._lock:
            while self._waiting and len(self._running) < self.slots:
                _, job = self._waiting.popitem(last=False)
                self._running.append(job)
                job.worker.start()
