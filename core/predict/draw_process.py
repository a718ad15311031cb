"""Background draws in child processes, below the server in priority.

    processes = DrawProcesses(load_run, processes=2, niceness=10, max_bytes=2**30, timeout=120)
    cache.use_processes(processes)   # core.predict.draw_cache: `extend` (the Refiner's draws) runs here

Why. A dashboard server is one Python process: its script runs (every slider move's first update)
share one interpreter lock with everything else it does. The background completion of sampled
predictions (core.predict.progressive) drew its networks in the server's threads: a class's
30-40 s of draws held the lock between torch calls and took the cores at the server's priority, so
first updates queued behind them. Here each draw runs in a child process (`spawn`: a forked copy
of a process holding torch's threads can deadlock) that lowers its own priority (`os.nice`), so
the server's script runs take the cores first and never wait for the draws' Python work.

What a child computes. It loads the run by id through `loader` (core.runs.load_run: the store is
on disk, the run is loaded once and kept while the child's memory allows) and the inputs by name
(`SERVED_INPUTS`: "test", the run's test set, the inputs of the Pruning page's cards), and runs
draw r of a plan with `sampled_forward` exactly as the in-process path does: the same plan, seed,
masks, draw path (the server's kept choice is sent; with none kept, the child's probe chooses and
the server keeps that choice) and torch thread count. It returns the draw's outputs and the weights
it used (bit-packed), which the server adds to the draw cache's entry as if it had drawn them: the
numbers end bit for bit at the uncached R-draw prediction (tests/test_draw_process.py). A child
whose run is not the server's copy (its `fingerprint` differs: retrained, or not in the store)
answers `unavailable` and the server draws that plan itself.

Lifecycle. A child starts when the first draw is asked for (or before: `warm` starts the children,
`ready` also waits until each has answered, as dashboard.serve's warm-up page does), ends with the
server (daemon, and it checks each second that its parent is alive), and is started again when it
dies: a draw whose child died is retried once on a new child, then fails with a `DrawProcessError`
that says so (the session sees it once; the next ask starts a new child). A draw that uses more than `timeout` seconds
of CPU (or waits WALL_FACTOR times that) kills its child (never a hang); wall time alone does not: a
child below the server's priority on a busy machine is slow, not stuck. A child whose resident memory
passes `max_bytes` drops the runs it holds; still above it, it ends after its answer and the next draw
starts a new one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np
import torch
from torch import Tensor

from core.errors import PredictionError

log = logging.getLogger(__name__)

SERVED_INPUTS = ("test",)  # input sets a child can load by name for a run (others are drawn in the server)
PROCESS_NAME = "bnn-draws"  # a child's name in /proc/<pid>/comm
START_SECONDS = 120.0  # CPU seconds more for a child's first answer (importing torch and core, loading the run)
WALL_FACTOR = 20  # a draw waited for this many times its CPU limit in wall time is stuck (it used no CPU)


class DrawProcessError(PredictionError):
    """A background draw process failed (died twice, or took too long)."""


@dataclass(frozen=True)
class DrawRequest:
    """Draw `index` of a plan, as DrawCache.extend was asked for it."""

    owner: Hashable  # the run id
    inputs: Hashable
    mode: Any
    samples: int
    threshold: float | None
    weights: Any
    seed: int
    batch_size: int | None
    index: int
    path: str | None  # the server's kept draw path (None: the child's probe chooses)
    fingerprint: tuple  # core.predict.draw_paths.fingerprint of the server's model
    # The server's torch threads when it asked: a product split over another count may round otherwise
    # (measured: a 30-12-9-3 net's compacted and plain draws equal at 1 thread, 1.5e-8 apart at 2).
    threads: int | None = None


@dataclass(frozen=True)
class LoadRequest:
    """Load run `owner` and its test inputs now, before its first draw (`DrawProcesses.preload`)."""

    owner: Hashable
    fingerprint: tuple  # core.predict.draw_paths.fingerprint of the server's model
    inputs: Hashable = "test"


@dataclass(frozen=True)
class Ping:
    """Answer once started (torch and core imported): `DrawProcesses.ready`."""


@dataclass
class DrawReply:
    output: Tensor  # (n, out): the draw's raw network outputs
    used: list[Tensor]  # per layer (1, out, in + 1) bool: the weights the draw used
    path: str | None  # the path it ran by


class Unavailable(Exception):
    """The child cannot draw this plan (another copy of the run, inputs it cannot load): draw it in the server."""


# --- the server's side ------------------------------------------------------------------------------------
class _Child:
    def __init__(self) -> None:
        self.process: Any = None
        self.conn: Any = None
        self.answered = False  # has answered a draw (a first answer may wait for the imports)

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            self.conn.close()
        except OSError:
            pass
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.process = self.conn = None
        self.answered = False


class DrawProcesses:
    """At most `processes` child processes drawing sampled networks (see the module docstring)."""

    def __init__(
        self,
        loader: Callable[[str], Any],
        processes: int = 2,
        niceness: int = 10,
        max_bytes: int = 2**30,
        timeout: float = 120.0,
        threads: int | None = None,
    ):
        if int(processes) < 1:
            raise PredictionError(f"draw processes: processes must be >= 1, got {processes!r}")
        if not float(timeout) > 0:
            raise PredictionError(f"draw processes: timeout must be > 0 seconds, got {timeout!r}")
        self.loader = loader
        self.processes = int(processes)
        self.niceness = int(niceness)
        self.max_bytes = int(max_bytes)
        self.timeout = float(timeout)
        # The in-process path's thread count: a product split over another number of threads may
        # sum in another order, and the draws must equal the server's bit for bit.
        self.threads = int(threads or torch.get_num_threads())
        self._children = [_Child() for _ in range(self.processes)]
        self._idle = list(self._children)
        self._lock = threading.Condition()
        self._closed = False
        self.started = 0  # children started, ever
        self.restarts = 0  # draws retried on a new child after theirs died
        self._preloaded: set = set()  # runs every child was asked to load (`preload`)

    def serves(self, inputs: Hashable) -> bool:
        return inputs in SERVED_INPUTS

    def pids(self) -> list[int]:
        """The children alive now (benchmarks read their CPU time)."""
        with self._lock:
            return [c.process.pid for c in self._children if c.alive()]

    def draw(self, request: DrawRequest) -> DrawReply:
        """Draw one network in a child; Unavailable: draw it in the server; DrawProcessError: failed."""
        child = self._take()
        try:
            for attempt in (1, 2):
                try:
                    return self._ask(child, request)
                except (EOFError, OSError, BrokenPipeError) as error:
                    child.stop()
                    if attempt == 2:
                        raise DrawProcessError(
                            "the background process computing the sampled networks stopped twice "
                            f"({type(error).__name__}); the cards show the draws computed so far: move "
                            "the slider or reload the page to try again"
                        ) from None
                    with self._lock:
                        self.restarts += 1
                    log.warning("a draw process stopped (%s); starting a new one", type(error).__name__)
        finally:
            self._give(child)
        raise AssertionError("unreachable")

    def preload(self, owner: Hashable, fingerprint: tuple) -> None:
        """Have every child load run `owner` now, in a background thread, once per run: a class opens
        the Pruning page before it samples, and the first draws of a run then wait for no child's
        start or load (measured: 16 s for the first draw on a busy 2-core machine, imports and load at
        niceness 10). A child started later loads the run at its first draw, as before."""
        with self._lock:
            if self._closed or owner in self._preloaded:
                return
            self._preloaded.add(owner)
        request = LoadRequest(owner, fingerprint)
        threading.Thread(target=self._preload, args=(request,), name="bnn-draw-preload", daemon=True).start()

    def _preload(self, request: LoadRequest) -> None:
        # a child that fails: the first draw of the run loads it, or says why it cannot
        self._ask_each(request, f"a draw process did not load run {request.owner} ahead", logging.INFO)

    def _ask_each(self, request: LoadRequest | Ping, failure: str, level: int) -> int:
        """Ask every child in turn (each once it is idle; one not running is started); how many answered.
        A child that fails is logged (`failure`: what did not happen) and left for the next draw to start."""
        answered = 0
        for child in self._children:
            with self._lock:
                while child not in self._idle and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return answered
                self._idle.remove(child)
            try:
                self._ask(child, request)
                answered += 1
            except Exception as error:
                log.log(level, "%s: %s", failure, error)
            finally:
                self._give(child)
        return answered

    def warm(self) -> None:
        """Start every child now (each imports torch and core: seconds), so the first draws wait less."""
        with self._lock:
            idle = [child for child in self._idle if not child.alive()]
            self._idle = [child for child in self._idle if child not in idle]
        try:
            for child in idle:
                child.stop()
                self._start(child)
        finally:
            for child in idle:
                self._give(child)

    def ready(self) -> int:
        """Start every child that is not running and wait until each has answered (its imports done), one
        after the other; the number that answered. A server warmed before its class (dashboard.serve's
        warm-up page) pays the children's start there: started with the class's first Pruning page they
        took 13.5-14.7 s of CPU in its first 20 s on 2 cores, and the slider moves' first updates waited
        (benchmarks/results/classroom_kept_draws_lazy.md)."""
        # a child that fails: its first draw starts it again, or says why it cannot
        return self._ask_each(Ping(), "a draw process did not start", logging.WARNING)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for child in self._children:
                child.stop()
            self._lock.notify_all()

    # --- inside ---------------------------------------------------------------------------------------------
    def _take(self) -> _Child:
        with self._lock:
            while not self._idle:
                if self._closed:
                    raise DrawProcessError("the draw processes are closed")
                self._lock.wait()
            if self._closed:
                raise DrawProcessError("the draw processes are closed")
            return self._idle.pop()

    def _give(self, child: _Child) -> None:
        with self._lock:
            self._idle.append(child)
            self._lock.notify_all()

    def _start(self, child: _Child) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        mine, theirs = context.Pipe()
        settings = (self.loader, self.threads, self.niceness, self.max_bytes, os.getpid())
        process = context.Process(target=serve, args=(theirs, settings), name="bnn-draws", daemon=True)
        process.start()
        theirs.close()
        child.process, child.conn, child.answered = process, mine, False
        with self._lock:
            self.started += 1

    def _ask(self, child: _Child, request: DrawRequest | LoadRequest | Ping) -> DrawReply | None:
        if not child.alive():
            child.stop()
            self._start(child)
        child.conn.send(request)
        limit = self.timeout if child.answered else self.timeout + START_SECONDS
        if not self._answered_within(child, limit):
            child.stop()
            raise DrawProcessError(
                f"a sampled network took more than {limit:.0f} s of CPU in the background process "
                "(BNN_DRAW_SECONDS); it was stopped: move the slider or reload the page to try again"
            )
        status, *payload = child.conn.recv()
        child.answered = True
        if status == "unavailable":
            raise Unavailable(payload[0])
        if status == "error":
            raise PredictionError(payload[0])
        if isinstance(request, (LoadRequest, Ping)):
            return None
        output, packed, shapes, path = payload
        used = [
            torch.from_numpy(np.unpackbits(bits, count=int(np.prod(shape))).reshape(shape).astype(bool))
            for bits, shape in zip(packed, shapes)
        ]
        return DrawReply(torch.from_numpy(output), used, path)

    @staticmethod
    def _answered_within(child: _Child, limit: float) -> bool:
        """Wait for the child's answer: False once it has used `limit` seconds of CPU on it (a loop that
        never ends), or been waited for WALL_FACTOR x `limit` (a child that uses none: a deadlock). CPU,
        not wall time: a child below the server's priority on a busy machine is slow, not stuck."""
        started, spent = time.monotonic(), _cpu_seconds(child.process.pid)
        while not child.conn.poll(0.5):
            used = _cpu_seconds(child.process.pid) - spent
            if used > limit or time.monotonic() - started > WALL_FACTOR * limit or not child.alive():
                return child.conn.poll(0)  # it may have answered (or died: the caller's recv says so)
        return True


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc; 0 elsewhere: wall time bounds it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


# --- the child's side ---------------------------------------------------------------------------------------
class _Used:
    """Stands in for a DrawUsage in sampled_forward: keeps the one draw's used weights."""

    def __init__(self, index: int):
        self.n_draws = index
        self.used: list[Tensor] = []

    def add(self, draws: Sequence[Tensor]) -> None:
        self.used = [w != 0 for w in draws]


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def serve(conn: Any, settings: tuple) -> None:
    """A child's loop: answer draw requests until the pipe closes or the parent is gone."""
    loader, threads, niceness, max_bytes, parent = settings
    try:  # its name in ps and /proc (benchmarks count its CPU by it); Linux only
        with open("/proc/self/comm", "w") as comm:
            comm.write(PROCESS_NAME)
    except OSError:
        pass
    if niceness and hasattr(os, "nice"):
        os.nice(niceness)
    torch.set_num_threads(int(threads))
    runs: OrderedDict = OrderedDict()  # owner -> (model, inputs by name, masks by (mode, threshold))
    while True:
        if os.getppid() != parent:
            return  # the server died: nothing to answer for
        try:
            if not conn.poll(1.0):
                continue
            request = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if isinstance(request, Ping):
                reply: tuple = ("ok",)
            elif isinstance(request, LoadRequest):
                _loaded(request, runs, loader)
                reply = ("ok",)
            else:
                reply = ("ok", *_answer(request, runs, loader))
        except Unavailable as why:
            reply = ("unavailable", str(why))
        except Exception as error:  # the server shows it; the child goes on
            reply = ("error", f"{type(error).__name__}: {error}")
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        if max_bytes and _rss_bytes() > max_bytes:
            runs.clear()
            import gc

            gc.collect()
            if _rss_bytes() > max_bytes:
                return  # still above the bound: end; the next draw starts a fresh child


def _loaded(request: DrawRequest | LoadRequest, runs: OrderedDict, loader: Callable[[str], Any]) -> tuple[Any, dict]:
    from core.predict.draw_paths import fingerprint
    from core.predict.engine import as_inputs, resolve_model

    held = runs.get(request.owner)
    if held is not None and fingerprint(held[0]) != request.fingerprint:
        held = None  # the server holds another copy: the stored one may be newer
    if held is None:
        try:
            run = loader(str(request.owner))
        except Exception as error:
            raise Unavailable(f"run {request.owner} could not be loaded here: {error}") from None
        model = resolve_model(run)
        if fingerprint(model) != request.fingerprint:
            raise Unavailable(f"run {request.owner}: the stored copy is not the server's")
        held = runs[request.owner] = (model, {"test": as_inputs(model, run.dataset().x_test)}, {})
    runs.move_to_end(request.owner)
    if request.inputs not in held[1]:
        raise Unavailable(f"inputs {request.inputs!r} are not loaded in a draw process")
    return held[0], held


def _answer(request: DrawRequest, runs: OrderedDict, loader: Callable[[str], Any]) -> tuple:
    from core.predict.draw_paths import chosen_path
    from core.predict.engine import MEMORY_BUDGET_BYTES, make_plan, sampled_forward
    from core.predict.modes import PredictionMode

    if request.threads and torch.get_num_threads() != request.threads:
        torch.set_num_threads(int(request.threads))
    model, (_, inputs_by_name, masks_by_plan) = _loaded(request, runs, loader)
    x = inputs_by_name[request.inputs]
    plan = make_plan(model, request.mode, request.samples, request.threshold, request.weights)
    with torch.no_grad():
        masks_key = (plan.mode, plan.threshold)
        if masks_key not in masks_by_plan:  # as DrawCache._draw_until makes the entry's masks
            masks_by_plan[masks_key] = None if plan.mode is PredictionMode.BMA else model.keep_masks(plan.threshold)
        masks = masks_by_plan[masks_key]
        used = _Used(request.index)
        outputs, _ = sampled_forward(
            model,
            plan,
            x,
            request.seed,
            masks,
            request.batch_size,
            MEMORY_BUDGET_BYTES,
            draws=range(request.index, request.index + 1),
            usage=used,
            path=request.path,
        )
    path = request.path
    if path is None:
        chosen = chosen_path(model, plan.threshold, x, masks, request.batch_size)
        path = None if chosen is None else chosen.value
    packed = [np.packbits(u.numpy().reshape(-1)) for u in used.used]
    shapes = [tuple(u.shape) for u in used.used]
    return outputs[0].numpy(), packed, shapes, path
