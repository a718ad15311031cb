"""A bounded cache of per-draw outputs: raising R computes only the new draws.

    cache = DrawCache(max_bytes=256 * 2**20)
    p10 = cache.predict(run, x_test, "test", owner=run.run_id, mode="prune", samples=10, threshold=0.4)
    p20 = cache.predict(run, x_test, "test", owner=run.run_id, mode="prune", samples=20, threshold=0.4)
    # draws 10..19 computed; p20 equals run.predict(x_test, "prune", 20, threshold=0.4) bit for bit
    p5 = cache.predict(..., samples=5, ...)  # draws 0..4 reused, nothing computed

Draw r of a sampling plan depends only on (seed, r) and the inputs (core.predict.engine runs each
draw's forward pass by itself), so the prediction with R draws is the prediction built from the
kept outputs of draws 0..R-1: the per-draw probabilities (or means and noise sds) averaged over
draws by the same code, on the same numbers, as an uncached `predict`. Densities come from the
draws' usage kept beside them (`DrawUsage`), so they match too. Bit for bit in one process: draws
run by the path core.predict.draw_paths chose for (run, threshold, inputs) and kept there; the
paths (a draw compacted to its active units, sparse or dense) agree with each other to 1e-6. An
entry holds the path its draws ran by and keeps it again as the process's choice whenever it is
used; where that table dropped it and chose another path meanwhile, the entry's draws are drawn
again by the new one (tests/test_draw_cache.py: a CI run failed on draws 1.2e-7 apart before).

One entry per (owner, input set, mode, threshold, weights, seed) holds the raw network outputs
(n, out) of draws 0..N-1 of that plan and their usage. `prune` with sampled weights and `mpm` at the
same threshold make the same draws (the kept weights sampled given the kept structure), so they
share one entry: the key names both `mpm`. Entries are dropped least recently used
first when their bytes exceed `max_bytes`; an entry larger than the bound alone is not kept.

Thread safety: one lock guards the table and its byte count (held briefly). Each entry has its
own condition: one thread at a time (the entry's writer) computes its new draws, in order, and
publishes each draw as soon as it is done, so a session that needs fewer draws than the writer
is computing returns as soon as its draws are there (a class asking R = 1 beside one asking
R = 20 at the same threshold does not wait for all 20). A session that needs more waits for the
writer to finish and then computes the rest itself. The cache never writes to a model or a run
(it keeps a weak reference to the model to tell a reloaded or retrained run from the one whose
draws it holds), so `Run.predict`'s rule holds: predicting does not mutate.

`extend` computes a plan's missing draws without building a prediction, one compute turn per draw:
the background completion of core.predict.progressive (`refiner()`), whose answers rest on the draws
already kept (`draws_held`) and so never wait for a computation.

Modes that draw nothing (mean, mpm-mean, prune with mean weights) pass through uncached: R
does not change them and the caller's own cache keys them.

`compute_slots`: at most this many computations run at once through one cache (a writer's new
draws of one entry, or one uncached prediction), the others waiting in a first-come first-served
queue (`FairTurns`). A slot is held only around computing, never while waiting for an entry's
writer, so it cannot deadlock. Taking turns draw by draw (a writer queueing again after each
draw) was tried and was slower at the tail: 20-draw requests all finish last. The dashboard's
setting and its measurements: dashboard.backend.predict_slots.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict, deque
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator

import numpy as np
import torch
from torch import Tensor

from core.errors import PredictionError
from core.predict.draw_entry import Entry as _Entry
from core.predict.draw_paths import DrawPath, chosen_path, fingerprint, path_key, remember_path
from core.predict.engine import (
    MEMORY_BUDGET_BYTES,
    DrawUsage,
    Prediction,
    as_inputs,
    make_plan,
    predict,
    prediction_from_draws,
    resolve_model,
    sampled_forward,
    task_of,
)
from core.predict.modes import PredictionMode, WeightChoice

DEFAULT_MAX_BYTES = 256 * 2**20


@dataclass(frozen=True)
class DrawKey:
    owner: Hashable  # whose draws (a run id)
    inputs: Hashable  # which inputs (the caller's name for them), with their shape below
    shape: tuple[int, ...]
    mode: PredictionMode
    threshold: float | None
    weights: WeightChoice
    seed: int
    batch_size: int | None  # input chunks: products over other chunks may sum in another order


class FairTurns:
    """At most `slots` holders at once; waiting threads get their turn in the order they asked."""

    def __init__(self, slots: int):
        if int(slots) < 1:
            raise PredictionError(f"draw cache: compute_slots must be >= 1 (or None: no limit), got {slots!r}")
        self.slots = int(slots)
        self._condition = threading.Condition()
        self._free = self.slots
        self._queue: deque[object] = deque()

    @property
    def waiting(self) -> int:
        with self._condition:
            return len(self._queue)

    @contextmanager
    def turn(self) -> Iterator[None]:
        ticket = object()
        with self._condition:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or self._free == 0:
                    self._condition.wait()
            except BaseException:  # interrupted while waiting: leave the queue, or it stops behind us
                self._queue.remove(ticket)
                self._condition.notify_all()
                raise
            self._queue.popleft()
            self._free -= 1
            self._condition.notify_all()  # the next in line may take another free slot
        try:
            yield
        finally:
            with self._condition:
                self._free += 1
                self._condition.notify_all()


class DrawCache:
    """Per-draw outputs of sampled predictions, at most `max_bytes` of them (see the module docstring)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, compute_slots: int | None = None):
        if int(max_bytes) < 0:
            raise PredictionError(f"draw cache: max_bytes must be >= 0, got {max_bytes!r}")
        self.max_bytes = int(max_bytes)
        self.turns = None if compute_slots is None else FairTurns(compute_slots)
        self.compute_slots = None if compute_slots is None else self.turns.slots
        self._lock = threading.Lock()
        self._entries: OrderedDict[DrawKey, _Entry] = OrderedDict()
        self._bytes = 0
        self.draws_computed = 0  # draws run through the network (all entries, ever)
        self._refiner: Any = None  # its core.predict.progressive.Refiner, made when first asked for
        self.draws_reused = 0  # draws answered from kept outputs
        self.processes: Any = None  # core.predict.draw_process.DrawProcesses: where `extend` draws (None: here)
        self.draws_elsewhere = 0  # draws `extend` had computed in a draw process
        # core.predict.shared_draws.SharedDraws: draws the other server processes computed, read before
        # asking a draw process (None: none shared); draws_shared counts those taken from it
        self.shared: Any = None
        self.draws_shared = 0
        # Called with (key, index, where, started) after each draw is kept, `where` one of "process" (a
        # draw process), "background" (extend in this process) or "request" (a predict that lacked it):
        # the classroom load test's log of every draw computed (dashboard/app.py, $BNN_RERUN_LOG).
        self.observer: Callable[[DrawKey, int, str, float], None] | None = None

    # --- what it holds ------------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def draws_held(self, key: DrawKey) -> int:
        with self._lock:
            entry = self._entries.get(key)
        return 0 if entry is None else entry.n_draws

    def keys(self) -> list[DrawKey]:
        with self._lock:
            return list(self._entries)

    def refiner(self) -> Any:
        """The one core.predict.progressive.Refiner completing this cache's plans in the background; as
        many workers as compute slots (no limit: one per core)."""
        with self._lock:
            if self._refiner is None:
                from core.predict.progressive import Refiner  # it imports this module

                workers = self.processes.processes if self.processes is not None else self.compute_slots
                self._refiner = Refiner(self, workers=workers or os.cpu_count() or 1)
            return self._refiner

    def use_processes(self, processes: Any, loader: Callable[[str], Any] | None = None, **options: Any) -> None:
        """Compute `extend`'s draws (the background completion) in child processes: a
        core.predict.draw_process.DrawProcesses, or how many to start (with the run `loader` and its
        options); None or 0: in this process, one compute turn per draw. The old ones are closed."""
        if isinstance(processes, int):
            from core.predict.draw_process import DrawProcesses

            processes = DrawProcesses(loader, processes, **options) if processes > 0 else None
            if processes is not None:
                processes.warm()
        with self._lock:
            old, self.processes = self.processes, processes
            if self._refiner is not None:
                self._refiner.workers = processes.processes if processes is not None else self._refiner.workers
        if old is not None and old is not processes:
            old.close()

    def share(self, folder: Any, max_bytes: int) -> None:
        """Read and keep `extend`'s draws in `folder`, shared with the other server processes
        (core.predict.shared_draws.share: a folder that cannot be made leaves this cache its own)."""
        from core.predict.shared_draws import share

        share(self, folder, max_bytes)

    def prepare(self, run: Any, owner: Hashable) -> None:
        """About to be sampled: the draw processes (if any) load `owner` now, in the background
        (core.predict.draw_process.DrawProcesses.preload), so that its first draws wait for no load."""
        processes = self.processes
        if processes is not None:
            processes.preload(owner, fingerprint(resolve_model(run)))

    def forget(self, owner: Hashable) -> None:
        """Drop every entry of `owner` (a deleted or retrained run), and its background work."""
        if self._refiner is not None:
            self._refiner.forget(owner)
        with self._lock:
            for key in [k for k in self._entries if k.owner == owner]:
                self._bytes -= self._entries.pop(key).nbytes
        if self.shared is not None:  # its kept draws on disk too
            self.shared.forget(owner)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @contextmanager
    def computing(self) -> Iterator[None]:
        """Hold one of the compute slots (if limited) for one forward computation."""
        if self.turns is None:
            yield
            return
        with self.turns.turn():
            yield

    # --- predicting -----------------------------------------------------------------------------------
    def predict(
        self,
        run: Any,
        x: Any,
        inputs: Hashable,
        owner: Hashable | None,
        mode: str | PredictionMode = "bma",
        samples: int = 10,
        threshold: float | None = None,
        seed: int = 0,
        weights: str | None = None,
        batch_size: int | None = None,
        original_units: bool = True,
    ) -> Prediction:
        """What `run.predict(x, mode, samples, threshold, seed, weights)` returns (for a bare model,
        `core.predict.predict`), computing only the draws not yet kept for this plan on these inputs.

        `inputs` names x for the cache (e.g. "test"): the caller promises that one name and shape
        always mean the same inputs for one owner. `owner` None: not cached.
        """
        model, plan, key = self.plan_key(run, x, inputs, owner, mode, samples, threshold, seed, weights, batch_size)
        if key is None:
            with self.computing():
                return self._uncached(run, x, mode, samples, threshold, seed, weights, batch_size, original_units)
        entry = self._entry(key, model)
        computed, outputs, masks, usage = self._fill(entry, key, model, plan, x, int(seed), batch_size)
        # Each draw's class probabilities kept with it, where they equal the stack's bit for bit (categorical).
        by_row = task_of(model) == "classification" and model.likelihood.probabilities_by_row
        probs = entry.probabilities(model.likelihood, outputs) if by_row else None
        with torch.no_grad():
            # New tensors: a prediction's arrays may be views of them, and callers may write to them.
            prediction = prediction_from_draws(model, plan, torch.stack(outputs), masks, usage, probs)
        self._account(key, entry, computed, plan.samples - computed)
        return self._in_units(run, prediction, original_units)

    def plan_key(
        self,
        run: Any,
        x: Any,
        inputs: Hashable,
        owner: Hashable | None,
        mode: str | PredictionMode,
        samples: int,
        threshold: float | None,
        seed: int,
        weights: str | None,
        batch_size: int | None = None,
    ) -> tuple[Any, Any, DrawKey | None]:
        """(model, plan, the entry's key): the key is None when the plan draws nothing or `owner` is None
        (not cached)."""
        model = resolve_model(run)
        plan = make_plan(model, mode, samples, threshold, weights)
        if owner is None or plan.weights is not WeightChoice.SAMPLE:
            return model, plan, None
        shape = tuple(x.shape) if hasattr(x, "shape") else tuple(np.shape(x))
        key = DrawKey(
            owner,
            inputs,
            shape,
            plan.mode.same_numbers_as(plan.weights),
            plan.threshold,
            plan.weights,
            int(seed),
            batch_size,
        )
        return model, plan, key

    def extend(
        self,
        run: Any,
        x: Any,
        inputs: Hashable,
        owner: Hashable,
        mode: str | PredictionMode,
        samples: int,
        threshold: float | None = None,
        seed: int = 0,
        weights: str | None = None,
        batch_size: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Compute the draws of this plan that are not yet kept, up to R, and build no prediction (a
        background refinement: core.predict.progressive). Each draw takes its own compute turn, so a
        request that can be answered at once (a deterministic mode, draws already kept) waits for one
        draw at most, never for all R. `stop()` is asked before each draw: True leaves the entry with the
        draws it has. Returns the draws the entry holds (at most R)."""
        model, plan, key = self.plan_key(run, x, inputs, owner, mode, samples, threshold, seed, weights, batch_size)
        if key is None:
            return plan.samples
        entry = self._entry(key, model)
        with entry.condition:
            while entry.n_draws < plan.samples and entry.writing:
                if stop is not None and stop():
                    return min(entry.n_draws, plan.samples)
                entry.condition.wait(timeout=0.2)  # a writer is drawing; look at `stop` now and then
            if entry.n_draws >= plan.samples:
                return plan.samples
            entry.writing = True
        computed = 0
        processes = self.processes
        try:
            if processes is not None and processes.serves(inputs):
                request = (processes, key, (mode, samples, threshold, weights))
                computed = self._draw_elsewhere(entry, model, plan, as_inputs(model, x), request, stop)
            else:
                computed = self._draw_until(
                    entry,
                    model,
                    plan,
                    as_inputs(model, x),
                    int(seed),
                    batch_size,
                    each_draw=self.computing,
                    stop=stop,
                    observe=self._observe(key, "background"),
                )
        finally:
            with entry.condition:
                entry.writing = False
                entry.condition.notify_all()
            self._account(key, entry, computed, 0)
        return min(entry.n_draws, plan.samples)

    def _account(self, key: DrawKey, entry: _Entry, computed: int, reused: int) -> None:
        """Count the draws and the entry's new size, then evict down to the bound."""
        with entry.condition:
            size = entry.size()
        with self._lock:
            self.draws_computed += computed
            self.draws_reused += reused
            if self._entries.get(key) is entry:
                self._bytes += size - entry.nbytes
                entry.nbytes = size
                self._evict(keep=key)

    def _fill(
        self, entry: _Entry, key: DrawKey, model: Any, plan: Any, x: Any, seed: int, batch_size: int | None
    ) -> tuple[int, list[Tensor], list[Tensor] | None, DrawUsage]:
        """Draws 0..R-1 of the entry, computing those it lacks: (how many this thread computed, their
        outputs, the masks, the usage), read together so that no reset comes between them."""
        with entry.condition:
            while entry.n_draws < plan.samples and entry.writing:
                entry.condition.wait()  # another thread is drawing: its draws arrive one by one
            if not entry.writing:  # the inputs' shape as as_inputs makes it: (n, features)
                entry.agree_path(model, plan, (len(x), model.config.in_features), batch_size)
            if entry.n_draws >= plan.samples:
                return 0, entry.outputs[: plan.samples], entry.masks, entry.usage
            entry.writing = True
        try:
            with self.computing():  # one turn for all of this thread's draws (see the module docstring)
                computed = self._draw_until(
                    entry, model, plan, as_inputs(model, x), seed, batch_size, observe=self._observe(key, "request")
                )
            with entry.condition:
                return computed, entry.outputs[: plan.samples], entry.masks, entry.usage
        finally:
            with entry.condition:
                entry.writing = False
                entry.condition.notify_all()

    @staticmethod
    def _draw_until(
        entry: _Entry,
        model: Any,
        plan: Any,
        inputs: Tensor,
        seed: int,
        batch_size: int | None,
        each_draw: Callable[[], Any] = nullcontext,
        stop: Callable[[], bool] | None = None,
        observe: Callable[[int, float], None] | None = None,
    ) -> int:
        """Compute the entry's next draws, publishing each as it is done, until it holds R (or `stop()`
        says so before a draw); each draw runs inside `each_draw()`, and `observe(index, started)` is
        told of it once kept. Returns how many were computed."""
        computed = 0
        while True:
            if stop is not None and stop():
                return computed
            following = entry.next_draw(model, plan, inputs, batch_size)
            if following is None:
                return computed
            index, masks, usage, path = following
            started = time.time()
            try:
                with each_draw(), torch.no_grad():
                    outputs, _ = sampled_forward(
                        model,
                        plan,
                        inputs,
                        seed,
                        masks,
                        batch_size,
                        MEMORY_BUDGET_BYTES,
                        draws=range(index, index + 1),
                        usage=usage,
                        path=path,
                    )
            except BaseException:
                with entry.condition:
                    if usage.n_draws != entry.n_draws:  # the usage took a draw the outputs did not
                        entry.reset()
                raise
            with entry.condition:
                entry.outputs.append(outputs[0])
                # the path the draw ran by: given, or the one its probe kept
                entry.ran_by(path or chosen_path(model, plan.threshold, inputs, masks, batch_size))
                entry.condition.notify_all()
            computed += 1
            if observe is not None:
                observe(index, started)

    def _draw_elsewhere(
        self,
        entry: _Entry,
        model: Any,
        plan: Any,
        inputs: Tensor,
        request: tuple,
        stop: Callable[[], bool] | None,
    ) -> int:
        """As `_draw_until`, each draw computed in a draw process (core.predict.draw_process) and added
        here as if drawn here: its outputs, and its used weights to the entry's usage. The draw path is
        this process's kept choice; with none kept, the child's probe chooses and this process keeps
        it (a choice made here meanwhile wins: that draw is asked again by it). A plan a child cannot
        draw (another copy of the run) is drawn here."""
        from core.predict.draw_process import DrawReply, DrawRequest, Unavailable

        processes, key, (mode, samples, threshold, weights) = request
        computed = 0
        while True:
            if stop is not None and stop():
                return computed
            following = entry.next_draw(model, plan, inputs, key.batch_size)
            if following is None:
                return computed
            index, masks, usage, path = following
            started = time.time()
            asked = DrawRequest(
                key.owner,
                key.inputs,
                mode,
                samples,
                threshold,
                weights,
                key.seed,
                key.batch_size,
                index,
                None if path is None else path.value,
                fingerprint(model),
                torch.get_num_threads(),
            )
            reply, shared = None, self.shared
            if shared is not None:  # another server process may have drawn it (core.predict.shared_draws)
                shared_name = shared.name(key, index, asked.threads, asked.fingerprint)
                held = shared.get(shared_name)
                if held is not None and (path is None or held[2] == path.value):
                    reply = DrawReply(*held)
            from_shared = reply is not None
            if reply is None:
                try:
                    reply = processes.draw(asked)
                except Unavailable:
                    with self.computing():
                        return computed + self._draw_until(
                            entry,
                            model,
                            plan,
                            inputs,
                            key.seed,
                            key.batch_size,
                            stop=stop,
                            observe=self._observe(key, "background"),
                        )
                if shared is not None:
                    shared.put(shared_name, reply.output, reply.used, reply.path)
            if path is None and reply.path is not None:
                kept_key = path_key(model, plan.threshold, inputs, masks, key.batch_size)
                kept = remember_path(kept_key, DrawPath(reply.path))
                if kept is not DrawPath(reply.path):
                    continue  # this process chose another path meanwhile: the draw again, by that path
            with entry.condition:
                if entry.usage is not usage or entry.n_draws != index:  # reset meanwhile: draw again
                    continue
                usage.add(reply.used)
                entry.outputs.append(reply.output)
                entry.ran_by(path if path is not None else DrawPath(reply.path) if reply.path else None)
                entry.condition.notify_all()
            if from_shared:
                with self._lock:
                    self.draws_shared += 1
                observe = self._observe(key, "kept")  # read, not computed (the load test counts them apart)
                if observe is not None:
                    observe(index, started)
                continue
            computed += 1
            with self._lock:
                self.draws_elsewhere += 1
            observe = self._observe(key, "process")
            if observe is not None:
                observe(index, started)

    def _observe(self, key: DrawKey, where: str) -> Callable[[int, float], None] | None:
        """`observer` bound to one entry and place (None: nobody observes)."""
        observer = self.observer
        if observer is None:
            return None
        return lambda index, started: observer(key, index, where, started)

    def _entry(self, key: DrawKey, model: Any) -> _Entry:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.model_ref() is not model:  # the run was reloaded or retrained
                self._bytes -= self._entries.pop(key).nbytes
                entry = None
            if entry is None:
                entry = self._entries[key] = _Entry(model)
            self._entries.move_to_end(key)
            return entry

    def _evict(self, keep: DrawKey) -> None:
        """Drop least recently used entries until the bytes fit; `keep` (just used) goes last, and
        goes too when it alone is over the bound."""
        while self._bytes > self.max_bytes and self._entries:
            key = next(iter(self._entries))
            if key == keep and len(self._entries) > 1:
                self._entries.move_to_end(key)
                continue
            self._bytes -= self._entries.pop(key).nbytes

    @staticmethod
    def _uncached(
        run: Any,
        x: Any,
        mode: Any,
        samples: int,
        threshold: float | None,
        seed: int,
        weights: str | None,
        batch_size: int | None,
        original_units: bool,
    ) -> Prediction:
        prediction = predict(
            run, x, mode=mode, samples=samples, threshold=threshold, seed=seed, weights=weights, batch_size=batch_size
        )
        return DrawCache._in_units(run, prediction, original_units)

    @staticmethod
    def _in_units(run: Any, prediction: Prediction, original_units: bool) -> Prediction:
        convert = getattr(run, "in_original_units", None)  # a core.runs.Run; a bare model has no units
        return convert(prediction) if original_units and convert is not None else prediction
