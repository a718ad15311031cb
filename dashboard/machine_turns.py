"""The training queue across the server processes of `python -m dashboard.serve`: a mixin of
dashboard.worker.TrainingQueue for a queue made with `shared` (a dashboard.shared_queue.SharedQueue).

A job starts only on a machine slot it holds, and only when it is the machine's next in turn: the
lowest rank (jobs its session has running or waiting ahead of it), then the longest a session's next
job, across this process's queue and the others' published ones. Places, waiting times and the
teacher's list merge every process's jobs the same way. A thread polls for a slot another process
freed, the teacher's cancels asked of this process, and republishes this process's queue.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from dashboard.queue_jobs import QueueEntry
from dashboard.training_process import WorkerStatus

log = logging.getLogger("dashboard.worker")


class MachineTurns:
    """TrainingQueue's methods for a shared queue (they use its lock, jobs, ranks and limits)."""

    SHARED_POLL_SECONDS = 0.5  # a shared queue's retries for a freed slot, and its publishing
    _shared: Any
    _lock: threading.RLock
    _closed: threading.Event

    def _turn(self, job: Any, ranks: dict[int, tuple[int, int]]) -> tuple[int, float, int, int]:
        """A waiting job's turn, comparable across processes: (rank, since when it has had it on the
        wall clock, process, job id); lower goes first."""
        rank, since = ranks[job.id]
        wall = self._tick_wall.get(since, job.created) if rank == 0 else job.created
        return rank, wall, self._shared.process, job.id

    def _others(self) -> list[Any]:
        return [] if self._shared is None else self._shared.others()

    def _others_waiting(self) -> list[tuple[tuple[int, float, int, int], Any]]:
        """The other processes' waiting jobs with their turns (a queue not rewritten for a while is
        of a process that hangs: it takes no turn from the others)."""
        return [
            ((*job.turn, job.process, job.job_id), job)
            for job in self._others()
            if job.turn is not None and not job.stale
        ]

    def _next_on_machine(self, order: list[Any], ranks: dict[int, tuple[int, int]]) -> Any:
        """`_next_to_start` across the server processes: a slot is taken only by the machine's next
        job in turn; the lane by the machine's first short job in turn, while every slot of the
        machine runs a long training."""
        shared = self._shared
        others = self._others_waiting()
        first = order[0]
        if all(self._turn(first, ranks) < turn for turn, _ in others):
            slot = shared.acquire(long=not self._is_short(first))
            if slot is not None:
                first.slot, first.lane = slot, False
                return first
        short = next((job for job in order if self._is_short(job)), None)
        if short is None or self.limits.short_seconds <= 0:
            return None
        if any(
            turn < self._turn(short, ranks)
            for turn, job in others
            if job.seconds is not None and job.seconds <= self.limits.short_seconds
        ):
            return None
        if not shared.every_slot_long():
            return None
        slot = shared.acquire(long=False, lane=True)
        if slot is None:
            return None
        short.slot, short.lane = slot, True
        return short

    def _machine_order(self, order: list[Any], ranks: dict[int, tuple[int, int]]) -> list[Any]:
        """Every process's waiting jobs in turn: this process's by job id, the others' as RemoteJob."""
        turns = [(self._turn(job, ranks), job.id, job.seconds) for job in order]
        turns += [(turn, job, job.seconds) for turn, job in self._others_waiting()]
        self._merged_seconds = {key: seconds for _, key, seconds in turns}
        return [key for _, key, _ in sorted(turns, key=lambda item: item[0])]

    def _machine_start_times(self, merged: list[Any]) -> dict[Any, float | None]:
        """`_start_times` over every process's running and waiting jobs."""
        others = self._others()
        running = [job for job in self._running if not job.lane]
        free: list[float | None] = [self._remaining(job) for job in running]
        free += [job.seconds for job in others if job.turn is None and not job.lane]
        free += [0.0] * (self.slots - len(free))
        lanes = [self._remaining(job) for job in self._running if job.lane]
        lanes += [job.seconds for job in others if job.turn is None and job.lane]
        items = [(key, self._merged_seconds.get(key)) for key in merged]
        return schedule(free, lanes[0] if lanes else 0.0, items, self.limits.short_seconds)

    def _machine_overview(self) -> list[QueueEntry]:
        with self._lock:
            self._sweep()
            ranks = self._ranks()
            order = self._order(ranks)
            merged = self._machine_order(order, ranks)
            starts = self._machine_start_times(merged)
            local = {job.id: job for job in order}
            entries = []
            for job in self._running:
                snapshot = job.worker.snapshot()
                entries.append(self._entry(job, snapshot.status, None, self._remaining(job)))
            for job in self._others():
                if job.turn is None:
                    entries.append(self._remote_entry(job, None, job.seconds))
            for place, key in enumerate(merged, start=1):
                if isinstance(key, int):
                    entries.append(self._entry(local[key], WorkerStatus.QUEUED, place, starts.get(key)))
                else:
                    entries.append(self._remote_entry(key, place, starts.get(key)))
            # a hung process's waiting jobs: listed (the teacher may cancel them), in no place
            entries += [
                self._remote_entry(job, None, None) for job in self._others() if job.turn is not None and job.stale
            ]
            return entries

    def _publish(self, ranks: dict[int, tuple[int, int]] | None) -> None:
        """This process's running and waiting jobs into the shared folder (for the others' turns,
        places, times and the teacher's list)."""
        ranks = self._ranks() if ranks is None else ranks
        jobs = []
        for job in self._running:
            entry = self._entry(job, WorkerStatus.RUNNING, None, None)
            jobs.append(published(entry, self._remaining(job), job.lane, None))
        for job in self._order(ranks):
            entry = self._entry(job, WorkerStatus.QUEUED, None, None)
            jobs.append(published(entry, job.seconds, False, list(self._turn(job, ranks)[:2])))
        try:
            self._shared.publish(jobs)
        except OSError as exc:  # the others then count this process's jobs a moment later
            log.warning("could not publish the training queue for the other server processes: %s", exc)

    def _poll_shared(self) -> None:
        """A shared queue's thread: the teacher's cancels asked of this process, a freed slot for the
        next job in turn, and this process's queue republished (its progress for the others)."""
        while not self._closed.wait(self.SHARED_POLL_SECONDS):
            try:
                for job_id in self._shared.cancels():
                    self.cancel_job(job_id)
                self._dispatch()
            except Exception:  # the next poll tries again; the pages keep working meanwhile
                log.exception("the shared training queue's poll failed")

    def _entry(self, job: Any, status: WorkerStatus, place: int | None, eta: float | None) -> QueueEntry:
        snapshot = job.worker.snapshot()
        who = sorted({self._label_of(r.owner) for r in job.requests.values()})
        return QueueEntry(
            job.id,
            ", ".join(who) or "nobody (every tab that asked has left)",
            job.worker.label,
            status,
            place,
            eta,
            snapshot.finished_epochs,
            snapshot.total_epochs,
        )

    def _remote_entry(self, job: Any, place: int | None, eta: float | None) -> QueueEntry:
        """Another process's job (a shared_queue.RemoteJob) as the teacher's list shows it."""
        return QueueEntry(
            job.job_id,
            job.who,
            job.label,
            WorkerStatus(job.status),
            place,
            eta,
            job.finished_epochs,
            job.total_epochs,
            process=job.process,
        )

    def close(self) -> None:
        """Stop a shared queue's poll and withdraw its published queue (tests; a server ends with it)."""
        self._closed.set()
        if self._shared is not None:
            self._shared.close()


def published(entry: Any, seconds: float | None, lane: bool, turn: list | None) -> dict[str, Any]:
    return {
        "job_id": entry.job_id,
        "who": entry.who,
        "label": entry.label,
        "status": entry.status.value,
        "seconds": seconds,
        "lane": lane,
        "turn": turn,
        "finished_epochs": entry.finished_epochs,
        "total_epochs": entry.total_epochs,
    }


def schedule(
    free: list[float | None], lane: float | None, items: list[tuple[Any, float | None]], short_seconds: float
) -> dict[Any, float | None]:
    """Estimated seconds until each waiting item (key, estimated seconds) starts, in order: on the slot
    that frees first, a short one in the short lane when that frees first (unknown from the first
    unknown on). `free`: when each slot frees; `lane`: when the lane does."""
    free = list(free)
    starts: dict[Any, float | None] = {}
    for key, seconds in items:
        if any(t is None for t in free):
            starts[key] = None
            continue
        slot = min(range(len(free)), key=lambda i: free[i])
        short = short_seconds > 0 and seconds is not None and seconds <= short_seconds
        if short and lane is not None and lane < free[slot]:
            starts[key] = lane
            lane = lane + seconds
            continue
        starts[key] = free[slot]
        free[slot] = None if seconds is None else free[slot] + seconds
    return starts
