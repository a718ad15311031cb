"""What the training queue (dashboard/worker.py) holds: a session's record, a job (one config's
training, shared by the requests that asked for it), a session's request (its view of the job and its
own cancel), and one job as the teacher's list shows it."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Hashable

from dashboard.training_process import TrainingWorker, WorkerSnapshot, WorkerStatus

if TYPE_CHECKING:
    from dashboard.worker import TrainingQueue


class _Session:
    """What the queue knows of one session (owner): its label and whether any of its pages (a
    browser's tabs share an owner) is still connected (since when none is)."""

    def __init__(self, owner: Hashable, label: str):
        self.owner = owner
        self.label = label
        # One callable per page that asked or came back to watch: is that page still connected?
        self.presences: set[Callable[[], bool]] = set()
        self.gone_since: float | None = None


class _Job:
    """One config's training, shared by every request that asked for it."""

    def __init__(self, key: Hashable, worker: TrainingWorker, job_id: int, seconds: float | None):
        self.key = key
        self.worker = worker
        self.id = job_id  # also its order of arrival
        self.created = time.time()  # its arrival on the wall clock (turns across processes)
        self.seconds = seconds  # the estimate it was admitted with (None: unknown)
        self.lane = False  # started in the short lane (beside the slots)
        self.slot: Any = None  # the machine's slot it holds while it trains (shared queues only)
        self.requests: dict[int, "TrainingRequest"] = {}  # the live requests sharing it


class TrainingRequest:
    """One session's request: what it sees of its job, and a cancel of its own.

    Same interface as TrainingWorker for the UI (snapshot, cancel, cancel_requested, label, join).
    """

    def __init__(self, queue: "TrainingQueue", job: _Job, request_id: int, joined: bool, owner: Hashable, who: str):
        self._queue = queue
        self._job = job
        self.id = request_id
        # Unguessable, but only a *lookup*: the token in a page's address lets a reloaded page find
        # this request again to show its progress. Cancelling needs the owner (dashboard/state.py).
        # Behind dashboard.serve it starts with its process's name ("s1-"), so the proxy sends a link's
        # browser to the process that has it.
        self.token = queue.token_prefix + secrets.token_urlsafe(12)
        self.owner = owner
        self.who = who  # the owner's short anonymous label
        self.joined = joined  # True when it joined a job that was already queued or training
        self.label = job.worker.label
        self.config = job.worker.config
        self._withdrawn: str | None = None  # why, once withdrawn

    @property
    def job_id(self) -> int:
        return self._job.id

    def snapshot(self) -> WorkerSnapshot:
        snapshot = self._job.worker.snapshot()
        if self._withdrawn:  # whatever the job does now (others may share it), this request is over
            return replace(
                snapshot,
                status=WorkerStatus.CANCELLED,
                error=self._withdrawn,
                position=None,
                finished=snapshot.finished or time.time(),
            )
        position, eta = self._queue.place(self._job)
        return replace(snapshot, position=position, eta=eta, sharers=max(1, len(self._job.requests)))

    def cancel(self) -> None:
        """Withdraw this request; the job stops only when no other request shares it."""
        self._queue._withdraw(self, "you cancelled this request")

    @property
    def cancel_requested(self) -> bool:
        return self._withdrawn is not None

    def join(self, timeout: float | None = None) -> WorkerSnapshot:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._job.worker.snapshot().status is WorkerStatus.QUEUED and not self._withdrawn:
            if deadline is not None and time.monotonic() >= deadline:
                return self.snapshot()
            time.sleep(0.01)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if self._job.worker.snapshot().status is not WorkerStatus.QUEUED:
            self._job.worker.join(remaining)
        return self.snapshot()


@dataclass(frozen=True)
class QueueEntry:
    """One job as the teacher's panel lists it."""

    job_id: int
    who: str  # the requesting sessions' labels
    label: str  # the config's label
    status: WorkerStatus
    place: int | None  # 1-based among waiting jobs
    eta: float | None  # seconds until it starts (waiting) or ends (running); None: unknown
    finished_epochs: int
    total_epochs: int
    process: int | None = None  # another server process's job (dashboard.serve); None: this process's

    @property
    def key(self) -> str:
        """Unique across the server processes (job ids are per process)."""
        return f"{self.job_id}" if self.process is None else f"{self.process}-{self.job_id}"
