"""The process-wide training queue: which training runs when, for whom (the trainings themselves,
threads and child processes, are dashboard/training_process.py).

The worker never touches Streamlit: it calls a core training function with a
progress callback and a cancel Event, and records what happens in plain
attributes guarded by a lock. The Train page reads `snapshot()` from an
`st.fragment(run_every=...)`, so the page stays responsive while training.

`TrainingQueue` is shared by every session of one server (a class of 30 on
one machine): at most `slots` trainings run at once, the rest wait their turn.
A session holds a `TrainingRequest`: its place in the queue, its job's
progress, and a cancel that withdraws only its own request. A request for a
config that is already queued or training joins that job. A job nobody
cancelled runs to the end even when every session that asked has left, so
its run is stored for later; the teacher can cancel it (`cancel_job`).

Fairness. A tester's one student with three tabs held one running and two
queued trainings while a classmate waited at place 3 for an estimated 18
hours. So every request names its owner (a session identity, see
dashboard/state.py) and the queue enforces `QueueLimits`: trainings per
session (default 1 running + 1 waiting), estimated seconds per training and
per session (a refusal says why and what would fit). The next job to start
is chosen round-robin across sessions: a waiting job's *rank* for a session
is how many of that session's jobs are running or waiting ahead of it, and
the job with the lowest rank starts first (a session's second job waits
behind every other session's first), ties going to the job that has been a
session's next job the longest: first come, first served among the sessions'
next jobs, so a session whose training just ended, a new tab or a reload
queues behind the sessions already waiting. With one slot, whatever one
session submits, another session's next job waits for at most one of its
trainings (the one running or first in line when it asked), itself capped in
length; the other sessions' next jobs wait one turn each.

A closed tab's waiting requests are dropped after a grace period (a
reload or a dropped connection comes back within it); its running training
goes on and is stored.

Several server processes (`python -m dashboard.serve`). Each process has its own
queue (a browser stays on one process, so its requests and limits are all in
one), and with `shared` (dashboard/shared_queue.py) the processes share the
machine's `slots`: a job starts only on a slot lock it holds, and only when it
is the machine's next in turn (the lowest rank, then the longest a session's
next job, across every process's published queue); places, times and the
teacher's list count every process's jobs. A config asked for in two processes
trains twice (joining stays within a process).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from core.errors import BNNError
from dashboard.machine_turns import MachineTurns, schedule
from dashboard.queue_jobs import QueueEntry, TrainingRequest, _Job, _Session  # noqa: F401  (callers import them here)

# Process management (threads, child processes) is dashboard/training_process.py; re-exported here
# for the callers that know the queue (cache.training_queue, the pages, the tests).
from dashboard.training_process import (  # noqa: F401
    TRAINING_NICENESS,
    TrainFunction,
    TrainingWorker,
    WorkerSnapshot,
    WorkerStatus,
    default_slots,
    train_in_subprocess,
)

log = logging.getLogger(__name__)


class QueueRefused(BNNError):
    """A request the queue will not take; the message says why and what would fit."""


@dataclass(frozen=True)
class QueueLimits:
    """What one session may ask of the shared queue (dashboard/settings.py reads them)."""

    per_session: int = 2  # trainings running or waiting per session: 1 running + 1 waiting
    session_seconds: float = math.inf  # estimated seconds of a session's unfinished trainings
    training_seconds: float = math.inf  # estimated seconds of one training
    grace_seconds: float = 60.0  # a closed tab's waiting requests are dropped after this long
    # The short lane: while every slot runs a training estimated above `short_seconds`, one more
    # training estimated at most `short_seconds` may start beside them (0: no short lane). Without
    # it a student's default-size training waited behind another's long one, up to the whole
    # `training_seconds`; with it, it waits for at most one short training.
    short_seconds: float = 0.0


def duration_text(seconds: float) -> str:
    """'45 s', '12 min', '3.5 h': for messages about estimates (the cost model's one wording)."""
    from dashboard import backend

    return backend.time_text(seconds)


class TrainingQueue(MachineTurns):
    """At most `slots` trainings at once; the others wait their turn, round-robin across sessions,
    within `limits` per session."""

    KEEP_FINISHED = 64

    def __init__(
        self,
        train_fn: TrainFunction,
        slots: int = 1,
        limits: QueueLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        shared: Any = None,
        token_prefix: str = "",
    ):
        """`shared`: a dashboard.shared_queue.SharedQueue when several server processes share the
        machine's slots (its slot count is `slots`); `token_prefix`: the start of every request's token."""
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self._train_fn = train_fn
        self.slots = int(slots)
        self.limits = limits or QueueLimits()
        self._clock = clock
        self._shared = shared
        self.token_prefix = token_prefix
        self._tick_wall: dict[int, float] = {}  # tick -> wall clock: when a job became its session's next
        self._lock = threading.RLock()
        self._waiting: dict[Hashable, _Job] = {}
        self._running: list[_Job] = []
        self._ids = itertools.count(1)
        self._sessions: dict[Hashable, _Session] = {}
        # (job id, owner) -> the tick at which that job became its owner's next job (rank 0).
        self._next_since: dict[tuple[int, Hashable], int] = {}
        self._ticks = itertools.count()
        # Requests by their token, so that a reloaded page (a new session) finds its training again.
        self._requests: dict[str, TrainingRequest] = {}
        # (job id, its rank, the lowest rank left waiting) at each start: the fairness record tests read.
        self.starts: deque[tuple[int, int, int | None]] = deque(maxlen=1000)
        self.on_job_finished: Callable[[], None] | None = None  # e.g. refresh the cached run list
        self._closed = threading.Event()
        if shared is not None:
            # Another process's training may free a slot at any time: nothing here would notice.
            threading.Thread(target=self._poll_shared, name="bnn-shared-queue", daemon=True).start()

    # --- asking -----------------------------------------------------------------------------------
    def submit(
        self,
        key: Hashable,
        config: Any,
        total_epochs: int,
        label: str = "",
        *,
        owner: Hashable | None = None,
        who: str | None = None,
        seconds: float | None = None,
        presence: Callable[[], bool] | None = None,
    ) -> TrainingRequest:
        """Queue a training of `config` (identified by `key`) for `owner` (a session identity;
        None: a session of its own), or join the job already queued or training for the same key.
        `seconds`: its estimated duration (None: unknown, only the count limit applies);
        `presence`: tells whether the owner's browser is still connected. Raises QueueRefused."""
        with self._lock:
            request_id = next(self._ids)
            if owner is None:
                owner = ("anonymous", request_id)
            session = self._sessions.get(owner)
            if session is None:
                session = self._sessions[owner] = _Session(owner, who or f"session {request_id}")
            if presence is not None:
                session.presences.add(presence)
            session.gone_since = None  # it is asking: it is here
            job = self._joinable(key)
            if job is not None:  # asking twice for the same job is the same request
                mine = next((r for r in job.requests.values() if r.owner == owner), None)
                if mine is not None:
                    return mine
            try:
                self._admit(session, seconds if job is None else job.seconds, int(total_epochs))
            except QueueRefused as refused:
                log.info("refused a training of %s: %s", session.label, refused)
                if not self._active_requests(owner):
                    del self._sessions[owner]
                raise
            joined = job is not None
            if job is None:
                worker = TrainingWorker(self._train_fn, config, total_epochs, label, on_finish=self._finished)
                worker._status = WorkerStatus.QUEUED
                job = _Job(key, worker, request_id, seconds)
                self._waiting[key] = job
            request = TrainingRequest(self, job, request_id, joined, owner, session.label)
            job.requests[request.id] = request
            self._requests[request.token] = request
            self._dispatch()
            return request

    def refusal(self, key: Hashable, total_epochs: int, *, owner: Hashable, seconds: float | None = None) -> str | None:
        """Why `submit` would refuse this request now (None: it would take it); changes nothing."""
        with self._lock:
            job = self._joinable(key)
            if job is not None and any(r.owner == owner for r in job.requests.values()):
                return None
            try:
                self._admit(_Session(owner, ""), seconds if job is None else job.seconds, int(total_epochs))
            except QueueRefused as refused:
                return str(refused)
            return None

    def _joinable(self, key: Hashable) -> _Job | None:
        """The job queued or training for `key` that a new request would join (not one stopping)."""
        return self._waiting.get(key) or next(
            (j for j in self._running if j.key == key and not j.worker.cancel_requested), None
        )

    def _admit(self, session: _Session, seconds: float | None, total_epochs: int) -> None:
        """Raise QueueRefused when `session` may not add a training of `seconds` (estimated)."""
        limits = self.limits
        per_epoch = seconds / max(1, total_epochs) if seconds else None
        if seconds is not None and seconds > limits.training_seconds:
            raise QueueRefused(
                f"This training would take about {duration_text(seconds)} by the estimate, above the "
                f"{duration_text(limits.training_seconds)} one training may take on this server; "
                + _what_fits(limits.training_seconds, per_epoch)
            )
        mine = self._active_requests(session.owner)
        if len(mine) >= limits.per_session:
            raise QueueRefused(
                f"You already have {len(mine)} training(s) running or queued, the most one session may "
                f"have on this server ({limits.per_session}); cancel one or wait until one finishes."
            )
        if seconds is not None and math.isfinite(limits.session_seconds):
            held = sum(self._remaining(r._job) or 0.0 for r in mine)
            if held + seconds > limits.session_seconds:
                raise QueueRefused(
                    f"Your running and queued trainings hold about {duration_text(held)} of the "
                    f"{duration_text(limits.session_seconds)} one session may hold on this server, and this "
                    f"one needs about {duration_text(seconds)}; "
                    + _what_fits(limits.session_seconds - held, per_epoch, "now")
                    + ", or wait until one of yours finishes."
                )

    def find(self, token: str | None) -> "TrainingRequest | None":
        """The request with this token (from the page's address), if it is still known."""
        with self._lock:
            return self._requests.get(str(token)) if token else None

    def requests_of(self, owner: Hashable) -> list[TrainingRequest]:
        """The owner's requests still running or waiting, oldest first."""
        with self._lock:
            return self._active_requests(owner)

    def _active_requests(self, owner: Hashable) -> list[TrainingRequest]:
        return sorted(
            (r for job in (*self._running, *self._waiting.values()) for r in job.requests.values() if r.owner == owner),
            key=lambda r: r.id,
        )

    # --- where things stand -----------------------------------------------------------------------
    def position(self, job: _Job) -> int | None:
        """1-based place of a waiting job (1: next to start), None when it is not waiting."""
        return self.place(job)[0]

    def place(self, job: _Job) -> tuple[int | None, float | None]:
        """(1-based place, estimated seconds until it starts) of a waiting job; (None, None) else."""
        with self._lock:
            self._sweep()
            ranks = self._ranks()
            order = self._order(ranks)
            if job not in order:
                return None, None
            if self._shared is not None:
                merged = self._machine_order(order, ranks)
                return merged.index(job.id) + 1, self._machine_start_times(merged).get(job.id)
            return order.index(job) + 1, self._start_times(order).get(job.id)

    def counts(self) -> tuple[int, int]:
        """(running, waiting) jobs (of every server process, with a shared queue)."""
        with self._lock:
            running, waiting = len(self._running), len(self._waiting)
        for job in self._others():
            running, waiting = (running, waiting + 1) if job.turn is not None else (running + 1, waiting)
        return running, waiting

    def overview(self) -> list[QueueEntry]:
        """Every running and waiting job, running first, then in the order they will start (of every
        server process, with a shared queue)."""
        if self._shared is not None:
            return self._machine_overview()
        with self._lock:
            self._sweep()
            order = self._order()
            starts = self._start_times(order)
            entries = []
            for place, job in enumerate([*self._running, *order], start=1 - len(self._running)):
                snapshot = job.worker.snapshot()
                waiting = place > 0
                who = sorted({self._label_of(r.owner) for r in job.requests.values()})
                entries.append(
                    QueueEntry(
                        job.id,
                        ", ".join(who) or "nobody (every tab that asked has left)",
                        job.worker.label,
                        snapshot.status,
                        place if waiting else None,
                        starts.get(job.id) if waiting else self._remaining(job),
                        snapshot.finished_epochs,
                        snapshot.total_epochs,
                    )
                )
            return entries

    def _label_of(self, owner: Hashable) -> str:
        session = self._sessions.get(owner)
        if session is None:
            return "?"
        return session.label + (" (tab closed)" if session.gone_since is not None else "")

    # --- cancelling -------------------------------------------------------------------------------
    def cancel_job(
        self, job_id: int, reason: str = "the teacher cancelled this training", process: int | None = None
    ) -> bool:
        """Stop a job whoever asked for it (the teacher's panel); False when it is not running or waiting.
        `process`: another server process's job (QueueEntry.process), stopped by that process at its
        next poll (True: asked)."""
        if process is not None and self._shared is not None and process != self._shared.process:
            self._shared.ask_cancel(process, job_id)
            return True
        with self._lock:
            job = next((j for j in (*self._running, *self._waiting.values()) if j.id == job_id), None)
            if job is None:
                return False
            requests = list(job.requests.values())
            for request in requests:
                self._withdraw(request, reason)
            if not requests:  # nobody's left: stop it directly
                self._stop(job, reason)
            return True

    def _withdraw(self, request: TrainingRequest, reason: str) -> None:
        with self._lock:
            if request._withdrawn:
                return
            request._withdrawn = reason
            job = request._job
            job.requests.pop(request.id, None)
            if not job.requests:
                self._stop(job, reason)
            else:
                self._dispatch()  # the owner's next job moved up

    def _stop(self, job: _Job, reason: str) -> None:
        if self._waiting.get(job.key) is job:  # nobody wants it any more: never started
            del self._waiting[job.key]
            job.worker._cancel.set()
            job.worker._finish(WorkerStatus.CANCELLED, error=f"{reason} while it waited in the queue")
        else:
            job.worker.cancel()

    def touch(self, owner: Hashable, presence: Callable[[], bool]) -> None:
        """A page of `owner` is open (a reload that found its training): its queued requests stay
        while this page, or another of the owner's, is connected."""
        with self._lock:
            session = self._sessions.get(owner)
            if session is not None:
                session.presences.add(presence)
                session.gone_since = None

    def sweep(self) -> None:
        """Drop the waiting requests of sessions gone for longer than the grace period."""
        with self._lock:
            self._sweep()

    def _sweep(self) -> None:
        now = self._clock()
        for owner, session in list(self._sessions.items()):
            connected = {presence: _connected(presence) for presence in session.presences}
            if not connected or any(connected.values()):
                session.presences = {p for p, here in connected.items() if here} or session.presences
                session.gone_since = None
                continue
            if session.gone_since is None:
                session.gone_since = now
            if now - session.gone_since < self.limits.grace_seconds:
                continue
            for request in self._active_requests(owner):
                if self._waiting.get(request._job.key) is request._job:
                    log.info(
                        "dropping a waiting training of %s: its tab was closed %.0f s ago",
                        session.label,
                        now - session.gone_since,
                    )
                    self._withdraw(
                        request,
                        f"dropped from the queue: the tab that asked for it was closed or "
                        f"reloaded more than {self.limits.grace_seconds:.0f} s ago; ask again",
                    )
            if not self._active_requests(owner):
                self._sessions.pop(owner, None)  # nothing left to be fair about

    # --- the order of turns -----------------------------------------------------------------------
    def _ranks(self) -> dict[int, tuple[int, int]]:
        """Each waiting job's (rank, since when it has had that rank): its rank is the fewest jobs
        any of its requesting sessions has running or waiting ahead of it; a rank-0 job has been
        that session's next job since the tick recorded (the first pass that saw it so), others
        sort by arrival. One pass over the requests: every open page asks for its place each second."""
        running = {job.id for job in self._running}
        jobs_of: dict[Hashable, list[int]] = {}
        for job in (*self._running, *self._waiting.values()):
            for request in job.requests.values():
                jobs_of.setdefault(request.owner, []).append(job.id)
        ranks: dict[int, tuple[int, int]] = {}
        heads: dict[tuple[int, Hashable], int] = {}
        for job in sorted(self._waiting.values(), key=lambda j: j.id):
            best = (len(running) + len(self._waiting) + 1, 0)
            for request in job.requests.values():
                ahead = sum(
                    1 for other in jobs_of[request.owner] if other != job.id and (other in running or other < job.id)
                )
                since = job.id
                if ahead == 0:
                    pair = (job.id, request.owner)
                    since = heads[pair] = self._next_since.get(pair, -1)
                    if since < 0:
                        since = heads[pair] = next(self._ticks)
                        self._tick_wall[since] = time.time()
                best = min(best, (ahead, since))
            ranks[job.id] = best
        self._next_since = heads  # only the jobs that are next now
        if len(self._tick_wall) > len(heads):
            kept = set(heads.values())
            self._tick_wall = {tick: wall for tick, wall in self._tick_wall.items() if tick in kept}
        return ranks

    def _order(self, ranks: dict[int, tuple[int, int]] | None = None) -> list[_Job]:
        """The waiting jobs in the order they will start (if nothing changes meanwhile)."""
        ranks = self._ranks() if ranks is None else ranks
        return sorted(self._waiting.values(), key=lambda job: (*ranks[job.id], job.id))

    def _remaining(self, job: _Job) -> float | None:
        """Estimated seconds a job still needs (its whole estimate while it waits)."""
        snapshot = job.worker.snapshot()
        if snapshot.status is WorkerStatus.QUEUED:
            return job.seconds
        if not snapshot.is_active:
            return 0.0
        elapsed = time.time() - (snapshot.started or time.time())
        if snapshot.finished_epochs:  # measured beats estimated
            return elapsed / snapshot.finished_epochs * max(0, snapshot.total_epochs - snapshot.finished_epochs)
        return None if job.seconds is None else max(0.0, job.seconds - elapsed)

    def _start_times(self, order: list[_Job]) -> dict[int, float | None]:
        """Estimated seconds until each waiting job starts: the running jobs' remaining times, then
        each waiting job in turn on the slot that frees first, a short job in the short lane when
        that frees first (unknown from the first unknown on)."""
        free: list[float | None] = [self._remaining(job) for job in self._running if not job.lane]
        free += [0.0] * (self.slots - len(free))
        lane: float | None = next((self._remaining(job) for job in self._running if job.lane), 0.0)
        return schedule(free, lane, [(job.id, job.seconds) for job in order], self.limits.short_seconds)

    # --- the threads' side ------------------------------------------------------------------------
    def _finished(self, worker: TrainingWorker) -> None:
        with self._lock:
            for job in self._running:
                if job.worker is worker and job.slot is not None:
                    job.slot.release()  # the machine's slot is free for any process's next job
                    job.slot = None
            self._running = [job for job in self._running if job.worker is not worker]
            # Forget finished requests beyond the most recent few (their pages got the outcome).
            done = [t for t, r in self._requests.items() if not r._job.worker.snapshot().is_active]
            for token in done[: -self.KEEP_FINISHED]:
                del self._requests[token]
            idle = {owner for owner in self._sessions} - {
                r.owner for job in (*self._running, *self._waiting.values()) for r in job.requests.values()
            }
            for owner in idle:  # nothing left to be fair about
                del self._sessions[owner]
            self._dispatch()
        if self.on_job_finished is not None:
            try:
                self.on_job_finished()
            except Exception:  # a listener's failure must not lose the queue's bookkeeping
                log.exception("on_job_finished listener failed")

    def _is_short(self, job: _Job) -> bool:
        return self.limits.short_seconds > 0 and job.seconds is not None and job.seconds <= self.limits.short_seconds

    def _next_to_start(self, order: list[_Job], ranks: dict[int, tuple[int, int]]) -> _Job | None:
        """The waiting job to start now (None: none may): the first in turn while a slot is free;
        else, while the short lane is free and every slot runs a long training, the first short job
        in turn (it jumps only long jobs: among short jobs the turns stay round-robin)."""
        if self._shared is not None:
            return self._next_on_machine(order, ranks)
        slotted = [job for job in self._running if not job.lane]
        if len(slotted) < self.slots:
            return order[0]
        if any(job.lane for job in self._running) or any(self._is_short(job) for job in slotted):
            return None
        return next((job for job in order if self._is_short(job)), None)

    def _dispatch(self) -> None:
        with self._lock:
            self._sweep()
            self._ranks()  # notes the jobs that have just become their session's next
            while self._waiting:
                ranks = self._ranks()
                order = self._order(ranks)
                job = self._next_to_start(order, ranks)
                if job is None:
                    break
                if self._shared is None:  # a shared queue's lane is the slot it took
                    job.lane = len([j for j in self._running if not j.lane]) >= self.slots
                rank = ranks[job.id][0]
                rest = min((ranks[other.id][0] for other in order if other is not job), default=None)
                del self._waiting[job.key]
                self._running.append(job)
                if not job.lane:  # the fairness record: the short lane jumps long jobs on purpose
                    self.starts.append((job.id, rank, rest))
                job.worker.start()
            if self._shared is not None:
                self._publish(ranks=None)


def _connected(presence: Callable[[], bool]) -> bool:
    try:
        return bool(presence())
    except Exception:  # a runtime that cannot tell: assume the page is there
        return True


def _what_fits(seconds: float, per_epoch: float | None, when: str = "") -> str:
    """'about N epochs would fit' for `seconds` at `per_epoch` seconds an epoch."""
    when = f" {when}" if when else ""
    if not per_epoch:
        return f"a smaller training would fit{when}"
    epochs = int(max(0.0, seconds) // per_epoch)
    if epochs < 1:
        return f"not even one epoch of it fits{when}: choose smaller hidden widths or a smaller dataset"
    return f"about {epochs:,} epochs of it would fit{when}"
