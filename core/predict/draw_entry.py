"""One entry of core.predict.draw_cache.DrawCache: draws 0..N-1 of one sampling plan, their usage, the
plan's masks and the draw path they ran by (the cache's module docstring says how they are used)."""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
from torch import Tensor

from core.predict.draw_paths import chosen_path, remember_path, shape_key
from core.predict.engine import DrawUsage, new_usage
from core.predict.modes import PredictionMode


class Entry:
    """Draws 0..N-1 of one plan: their outputs, usage and the plan's masks."""

    def __init__(self, model: Any):
        self.condition = threading.Condition()
        self.model_ref = weakref.ref(model)
        self.masks: list[Tensor] | None = None
        self.usage: DrawUsage | None = None  # None until the entry's first draws
        self.outputs: list[Tensor] = []  # per draw (n, out)
        # Per draw, its classes' probabilities (classification), made when first asked for: a class's
        # refining cards ask for R = 10, 11, ..., 20 in turn, and a softmax of all k draws each time took
        # a tenth of a server's script CPU (py-spy on a 30-session class; torch's CPU softmax over 10
        # classes is ~2 ms a draw of 10,000 test images; benchmarks/results/classroom_kept_draws_lazy.md).
        self.probs: list[Tensor] = []
        self.writing = False  # a thread is computing this entry's next draws
        self.nbytes = 0
        # The draw path its draws ran by (core.predict.draw_paths), once known: every later draw runs by
        # it, and it is kept again as this process's choice whenever the entry is used (`agree_path`).
        self.path: Any = None

    @property
    def n_draws(self) -> int:
        return len(self.outputs)

    def next_draw(
        self, model: Any, plan: Any, inputs: Tensor, batch_size: int | None
    ) -> tuple[int, Any, Any, Any] | None:
        """(index, masks, usage, path) of the plan's next draw, read under the entry's lock (None when the
        entry holds its R); the plan's masks and usage are made before its first draw. `path`: the
        entry's draw path (`agree_path`), or None before its first draw while this process keeps no
        choice (the draw's probe chooses)."""
        with self.condition, torch.no_grad():
            self.agree_path(model, plan, tuple(inputs.shape), batch_size)
            if self.usage is None:
                self.masks = None if plan.mode is PredictionMode.BMA else model.keep_masks(plan.threshold)
                # With the mean's nonzeros for bma (new_usage for R > 1): the entry may grow past R = 1.
                self.usage = new_usage(model, self.masks, 2)
            if self.n_draws >= plan.samples:
                return None
            path = self.path
            if path is None:
                path = chosen_path(model, plan.threshold, inputs, self.masks, batch_size)
            return self.n_draws, self.masks, self.usage, path

    def agree_path(self, model: Any, plan: Any, shape: tuple, batch_size: int | None) -> None:
        """Keep the entry's path as this process's choice again (under the entry's lock), so that an
        uncached `predict` runs by it too and the R-draw numbers stay equal bit for bit. The choices are
        a bounded table (draw_paths.KEPT_CHOICES): once this one was dropped and another path chosen
        (by another entry at the same threshold, an uncached prediction, or `forget_paths`), the
        entry's draws would agree with `predict` only to 1e-6, so they are dropped and drawn again by
        the kept path. Only with no writer drawing: a writer calls this itself before each draw."""
        if self.path is None or self.masks is None and plan.mode is not PredictionMode.BMA:
            return
        kept = remember_path(shape_key(model, plan.threshold, shape, self.masks, batch_size), self.path)
        if kept is not self.path:
            self.reset()
            self.path = kept

    def ran_by(self, path: Any) -> None:
        """The path the entry's first draw ran by (under the entry's lock)."""
        if self.path is None and path is not None:
            self.path = path

    def probabilities(self, likelihood: Any, outputs: list[Tensor]) -> Tensor:
        """The stacked probabilities of `outputs` (draws 0, 1, ... as `outputs` holds them), each draw's
        computed once while it is this entry's (a reset entry's new draws get their own)."""
        with self.condition, torch.no_grad():
            per_draw = []
            for index, output in enumerate(outputs):
                ours = index < len(self.outputs) and self.outputs[index] is output
                if ours and index < len(self.probs):
                    per_draw.append(self.probs[index])
                    continue
                probs = likelihood.probabilities(output)
                if ours and index == len(self.probs):
                    self.probs.append(probs)
                per_draw.append(probs)
            return torch.stack(per_draw)

    def reset(self) -> None:
        self.masks = self.usage = None
        self.outputs = []
        self.probs = []

    def size(self) -> int:
        outputs = sum(o.numel() * o.element_size() for o in self.outputs + self.probs)
        masks = sum(m.numel() * m.element_size() for m in self.masks or [])
        return outputs + masks + (0 if self.usage is None else self.usage.nbytes)
