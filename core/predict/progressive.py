"""Progressive predictions: answer at once with the draws already kept, compute the rest in the background.

    refiner = Refiner(draw_cache, workers=2)
    progress = refiner.ready(run, x_test, "test", owner=run.run_id, mode="prune", samples=20, threshold=0.4,
                             weights="sample")
    # progress.draws of progress.samples are kept now (maybe 0); the others are queued for the workers
    cache.predict(run, x_test, "test", run.run_id, "prune", progress.draws, 0.4, weights="sample")
    # == run.predict(x_test, "prune", progress.draws, 0.4, weights="sample"), bit for bit, and returns at once

`ready` never waits for a computation: it reads how many draws of the plan the draw cache holds
(core.predict.draw_cache publishes them one by one) and, when fewer than R, puts the plan in a queue
that at most `workers` background threads work through (`DrawCache.extend`, one compute turn per
draw, so they share the cache's compute slots with every other prediction). A deterministic plan (no
draws) is answered as complete: its one forward pass is the caller's.

A plan is wanted for `linger` seconds after the last `ready` that asked for it (a page polls while
its cards are incomplete); a plan nobody asks for any more is dropped before its next draw, the
draws computed so far staying in the cache. A `waiter` (a browser session) waits for one plan at a
time, its newest: when it asks for another plan (a student moved the slider again before the
numbers were complete), it stops waiting for the one before at once, and a plan no waiter waits
for any more stops before its next draw (not `linger` seconds later: in a class those draws
took the cores from the plans students were waiting for). A plan is drawn up to the largest R its
current waiters ask (a student who lowers R from 20 to 5 stops the draws 5..19 of her own plan).

Order: the plan with the fewest draws still missing first (ties: the one asked first), and a
worker whose plan lacks more draws than a waiting plan puts its plan back after the current draw
while every worker is busy (shortest remaining work first: a class's R = 1 or a nearly complete
plan is not held behind another session's 20 new draws; first come, first served kept every later
ask waiting for all earlier plans' draws). The draws computed, and so the numbers, are the same in
any order. Workers are started when there is work and end when the queue is empty, so no thread
outlives its work (`close` ends them at once). No worker touches a UI.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, NamedTuple

from core.errors import PredictionError
from core.predict.draw_cache import DrawCache, DrawKey
from core.predict.modes import PredictionMode

log = logging.getLogger(__name__)

DEFAULT_LINGER_SECONDS = 4.0


class Progress(NamedTuple):
    """How many of the R draws of a plan an answer can rest on now."""

    draws: int  # kept now, at most `samples` (0: none yet)
    samples: int  # R (1 for a plan that draws nothing)

    @property
    def complete(self) -> bool:
        return self.draws >= self.samples


@dataclass
class _Job:
    key: DrawKey
    run: Any
    x: Any
    inputs: Hashable
    mode: str | PredictionMode
    threshold: float | None
    seed: int
    weights: str | None
    batch_size: int | None
    samples: int  # R asked without a waiter (0: none): the largest while queued or running
    wanted_until: float  # by the asks without a waiter
    order: int = 0  # when first asked (ties in the order of work)
    running: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    waiters: dict = field(default_factory=dict)  # waiter -> (wanted until, R): those whose newest plan it is


class Refiner:
    """Background completion of sampled predictions through one DrawCache (see the module docstring)."""

    def __init__(
        self,
        cache: DrawCache,
        workers: int = 2,
        linger: float = DEFAULT_LINGER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        if int(workers) < 1:
            raise PredictionError(f"progressive predictions: workers must be >= 1, got {workers!r}")
        if not float(linger) > 0:
            raise PredictionError(f"progressive predictions: linger must be > 0 seconds, got {linger!r}")
        self.cache = cache
        self.workers = int(workers)
        self.linger = float(linger)
        self.clock = clock
        self._lock = threading.Condition()
        self._jobs: dict[DrawKey, _Job] = {}  # queued or running, in the order they were asked
        self._threads: set[threading.Thread] = set()
        self._errors: dict[DrawKey, BaseException] = {}
        self._closed = False
        self._asked = 0
        self._newest: dict[Hashable, DrawKey] = {}  # waiter -> the plan it waits for now
        self.yielded = 0  # times a worker put its plan back for one with fewer draws missing
        self.dropped = 0  # jobs dropped because nobody wanted them any more
        self.finished = 0  # jobs that reached their R
        self.superseded = 0  # times a waiter's newer ask left its plan before with no waiter

    # --- asking -----------------------------------------------------------------------------------------
    def ready(
        self,
        run: Any,
        x: Any,
        inputs: Hashable,
        owner: Hashable,
        mode: str | PredictionMode = "bma",
        samples: int = 10,
        threshold: float | None = None,
        seed: int = 0,
        weights: str | None = None,
        batch_size: int | None = None,
        waiter: Hashable | None = None,
    ) -> Progress:
        """The draws of this plan kept now (never waits for one); fewer than R: the rest are queued,
        wanted for `linger` seconds from now. With a `waiter` (a browser session), this plan becomes the
        one it waits for: the plan it waited for before no longer counts it (see the module docstring).
        A failed background computation of this plan is raised here, once."""
        _, plan, key = self.cache.plan_key(run, x, inputs, owner, mode, samples, threshold, seed, weights, batch_size)
        if key is None:
            return Progress(1, 1)
        with self._lock:
            error = self._errors.pop(key, None)
        if error is not None:
            raise error
        held = min(self.cache.draws_held(key), plan.samples)
        if held < plan.samples:
            until = self.clock() + self.linger
            job = _Job(
                key,
                run,
                x,
                inputs,
                mode,
                threshold,
                int(seed),
                weights,
                batch_size,
                plan.samples if waiter is None else 0,
                until if waiter is None else -float("inf"),
            )
            if waiter is not None:
                job.waiters[waiter] = (until, plan.samples)
            self._want(job, waiter)
        elif waiter is not None:
            with self._lock:  # complete: it waits for nothing now, and no longer for its plan before
                self._wait_for(waiter, None)
        return Progress(held, plan.samples)

    def leave(self, waiter: Hashable | None) -> None:
        """`waiter` waits for no plan now (it asked for one that draws nothing); None: nothing to do."""
        if waiter is not None:
            with self._lock:
                self._wait_for(waiter, None)

    def wait(self, timeout: float = 60.0) -> bool:
        """Wait until no job is queued or running (tests, benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._jobs:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.1))
        return True

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._jobs)

    @property
    def threads(self) -> int:
        """Worker threads alive now."""
        with self._lock:
            return sum(thread.is_alive() for thread in self._threads)

    def forget(self, owner: Hashable) -> None:
        """Drop the queued jobs of `owner` (a deleted or retrained run); a running one stops before its next draw."""
        with self._lock:
            for key, job in list(self._jobs.items()):
                if key.owner != owner:
                    continue
                self._abandon(job)
                if not job.running:
                    self._drop(job)
            for key in [k for k in self._errors if k.owner == owner]:
                del self._errors[key]
            self._lock.notify_all()

    def close(self, timeout: float = 30.0) -> None:
        """Drop every job and wait for the workers to end (their current draw finishes first)."""
        with self._lock:
            self._closed = True
            for job in self._jobs.values():
                self._abandon(job)
            self._lock.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    # --- who waits for what -----------------------------------------------------------------------------
    def _wait_for(self, waiter: Hashable, key: DrawKey | None) -> None:
        """`waiter` waits for plan `key` now (None: for nothing, its plan is complete), and no longer for
        the plan it waited for before: that one, left with nobody wanting it, is dropped now when queued,
        and stops before its next draw when running. Under the lock."""
        before = self._newest.pop(waiter, None)
        if key is not None and key in self._jobs:
            self._newest[waiter] = key
        if before is None or before == key:
            return
        job = self._jobs.get(before)
        if job is None or job.waiters.pop(waiter, None) is None:
            return
        if self._unwanted_locked(job):
            self.superseded += 1
            if not job.running:
                self._drop(job)
        self._lock.notify_all()

    def _target(self, job: _Job) -> int:
        """The largest R of the asks that still want the job (0: none). Under the lock."""
        now = self.clock()
        anonymous = job.samples if job.wanted_until >= now else 0
        return max([anonymous] + [samples for until, samples in job.waiters.values() if until >= now])

    def _abandon(self, job: _Job) -> None:
        job.wanted_until = -float("inf")
        for waiter in job.waiters:
            if self._newest.get(waiter) == job.key:
                del self._newest[waiter]
        job.waiters.clear()

    def _drop(self, job: _Job) -> None:
        """A queued job nobody wants: out of the queue (its draws so far stay in the cache)."""
        self._abandon(job)
        if self._jobs.get(job.key) is job:
            del self._jobs[job.key]
        self.dropped += 1
        job.done.set()
        self._lock.notify_all()

    # --- the workers ------------------------------------------------------------------------------------
    def _want(self, job: _Job, waiter: Hashable | None = None) -> None:
        with self._lock:
            if self._closed:
                raise PredictionError("progressive predictions: the refiner is closed")
            held = self._jobs.get(job.key)
            if held is not None:
                held.samples = max(held.samples, job.samples)
                held.wanted_until = max(held.wanted_until, job.wanted_until)
                held.waiters.update(job.waiters)  # a waiter's newest R, which may be lower than before
                held.run, held.x = job.run, job.x  # the newest copy of the run (a reload drops the old draws)
            else:
                self._asked += 1
                job.order = self._asked
                self._jobs[job.key] = job
            if waiter is not None:
                self._wait_for(waiter, job.key)
            self._threads = {thread for thread in self._threads if thread.is_alive()}
            idle = sum(not j.running for j in self._jobs.values())
            if idle and len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, name="bnn-refiner", daemon=True)
                self._threads.add(thread)
                thread.start()
            self._lock.notify_all()

    def _missing(self, job: _Job) -> int:
        return max(0, self._target(job) - self.cache.draws_held(job.key))

    def _next(self) -> _Job | None:
        """The wanted job with the fewest draws missing that is not running (dropping the unwanted
        ones); None: nothing to do."""
        with self._lock:
            for job in list(self._jobs.values()):
                if not job.running and self._unwanted_locked(job):
                    self._drop(job)
            waiting = [job for job in self._jobs.values() if not job.running]
            if waiting:
                job = min(waiting, key=lambda j: (self._missing(j), j.order))
                job.running = True
                return job
            self._threads.discard(threading.current_thread())  # leaving: no work left
            self._lock.notify_all()
            return None

    def _outranked(self, job: _Job) -> bool:
        """True when `job` should go back to the queue before its next draw: every worker is busy, a
        waiting wanted job lacks fewer draws, and of the running jobs this one lacks the most."""
        with self._lock:
            running = [j for j in self._jobs.values() if j.running]
            waiting = [j for j in self._jobs.values() if not j.running and not self._unwanted_locked(j)]
            if not waiting or len(running) < self.workers:
                return False
            mine = self._missing(job)
            if min(self._missing(j) for j in waiting) >= mine:
                return False
            return max(running, key=lambda j: (self._missing(j), j.order)) is job

    def _work(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            target = 0
            try:
                while True:  # again when a session raised R while these draws ran
                    with self._lock:
                        target, unwanted = self._target(job), self._unwanted_locked(job)
                    if unwanted:
                        break
                    held = self.cache.extend(
                        job.run,
                        job.x,
                        job.inputs,
                        job.key.owner,
                        job.mode,
                        target,
                        job.threshold,
                        job.seed,
                        job.weights,
                        job.batch_size,
                        stop=lambda j=job: self._unwanted(j) or self._lowered(j) or self._outranked(j),
                    )
                    if held < target:
                        break
                    with self._lock:
                        if self._target(job) <= target:
                            break
            except Exception as error:  # shown to the next session that asks for this plan
                log.exception("background draws of %s failed", job.key)
                with self._lock:
                    self._errors[job.key] = error
            finally:
                with self._lock:
                    job.running = False
                    unwanted = self._unwanted_locked(job)
                    if not unwanted and self.cache.draws_held(job.key) >= self._target(job):
                        self.finished += 1
                        self._end(job)
                    elif job.key in self._errors or unwanted:
                        self._drop(job)
                    else:  # outranked: back in the queue, for this worker or another
                        self.yielded += 1
                        self._lock.notify_all()

    def _end(self, job: _Job) -> None:
        self._abandon(job)
        self._jobs.pop(job.key, None)
        job.done.set()
        self._lock.notify_all()

    def _lowered(self, job: _Job) -> bool:
        """Its waiters lowered R to what is kept: stop before the next draw."""
        with self._lock:
            return self.cache.draws_held(job.key) >= self._target(job)

    def _unwanted(self, job: _Job) -> bool:
        with self._lock:
            return self._unwanted_locked(job)

    def _unwanted_locked(self, job: _Job) -> bool:
        if self._closed:
            return True
        now = self.clock()
        return job.wanted_until < now and not any(until >= now for until, _ in job.waiters.values())
