"""Accuracy (or RMSE) against density over thresholds of the native statistic.

Work shared across thresholds:
- each layer's statistic is sorted once; densities come from binary search;
- for the deterministic modes (mpm-mean, prune with mean weights) the first
  layer's pre-activations are accumulated incrementally: thresholds are
  visited from the sparsest to the densest and only the weights that enter at
  each step are multiplied in (a sparse product), so the whole sweep costs one
  dense pass of the first layer plus one pass of the later layers per point;
  the accumulation is in float64 so every point equals a fresh evaluation;
- for the sampled modes the R weight draws are made once: a draw of the kept
  weights does not depend on the mask (the network multiplies it in), so
  every threshold reuses them.
The model is never rebuilt.

Thresholds are compared through a key that is kept when key > cut:
key = statistic, cut = threshold for statistics kept above the threshold,
key = -statistic, cut = -threshold for those kept below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from core.errors import PredictionError
from core.models.base import Keep
from core.models.network import BayesianMLP
from core.predict.engine import MEMORY_BUDGET_BYTES, as_inputs, check_samples, check_threshold, forward_draws, resolve_model
from core.predict.evaluate import jsonable
from core.predict.metrics import classification as cls_metrics
from core.predict.metrics import regression as reg_metrics
from core.predict.modes import PredictionMode, WeightChoice, parse_mode, parse_weight_choice
from core.predict.structure import is_disconnected

DEFAULT_POINTS = 51


@dataclass
class SweepResult:
    mode: str
    weights: str
    statistic: str
    keep: str
    thresholds: np.ndarray  # (T,)
    density: np.ndarray  # (T,)
    layer_density: np.ndarray  # (T, L)
    metric: str  # "accuracy" or "rmse" (original units)
    values: np.ndarray  # (T,)
    disconnected: np.ndarray  # (T,) bool
    samples: int
    seed: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "mode": self.mode, "weights": self.weights, "statistic": self.statistic, "keep": self.keep,
            "thresholds": self.thresholds, "density": self.density, "layer_density": self.layer_density,
            "metric": self.metric, "values": self.values, "disconnected": self.disconnected,
            "samples": self.samples, "seed": self.seed, **self.extra,
        })

    def to_rows(self) -> list[dict[str, Any]]:
        rows = []
        for i, threshold in enumerate(self.thresholds):
            row = {"threshold": float(threshold), "density": float(self.density[i]),
                   self.metric: float(self.values[i]), "disconnected": bool(self.disconnected[i])}
            row.update({f"density_layer_{l}": float(d) for l, d in enumerate(self.layer_density[i])})
            rows.append(row)
        return rows


class SortedStatistics:
    """Each layer's keep-key (see module docstring) sorted once."""

    def __init__(self, model: BayesianMLP):
        self.spec = model.spec
        self.sign = 1.0 if self.spec.keep is Keep.ABOVE else -1.0
        with torch.no_grad():
            self.keys = [(self.sign * stat).reshape(-1) for stat in model.native_statistics()]
        self.shapes = [layer.shape for layer in model.layers]
        self.descending = [torch.argsort(key, descending=True, stable=True) for key in self.keys]
        self.ascending_np = [np.sort(key.double().cpu().numpy()) for key in self.keys]

    def cut(self, threshold: float) -> float:
        return self.sign * threshold

    def kept_counts(self, threshold: float) -> list[int]:
        cut = self.cut(threshold)
        # Compare in the keys' own dtype, as keep_mask does.
        cut = float(np.float32(cut)) if self.keys[0].dtype == torch.float32 else cut
        return [len(a) - int(np.searchsorted(a, cut, side="right")) for a in self.ascending_np]

    def masks(self, threshold: float) -> list[Tensor]:
        cut = self.cut(threshold)
        return [(key > cut).reshape(shape) for key, shape in zip(self.keys, self.shapes)]


def default_thresholds(model: BayesianMLP, n_points: int = DEFAULT_POINTS) -> np.ndarray:
    """A grid over the statistic's range; quantiles of the pooled statistic where the range is unbounded."""
    spec = model.spec
    if np.isfinite(spec.low) and np.isfinite(spec.high):
        return np.linspace(spec.low, spec.high, n_points)
    with torch.no_grad():
        pooled = torch.cat([s.reshape(-1) for s in model.native_statistics()]).double().cpu().numpy()
    grid = np.quantile(pooled, np.linspace(0.0, 1.0, n_points))
    if spec.keep is Keep.ABOVE and np.isfinite(spec.low):
        grid[0] = spec.low  # density 1 at the first point
    if spec.keep is Keep.BELOW and np.isfinite(spec.high):
        grid[-1] = spec.high
    return np.clip(grid, spec.low, spec.high)


def parse_threshold_grid(spec: str) -> np.ndarray:
    """'start:stop:step' (stop included) or a comma-separated list."""
    text = str(spec).strip()
    try:
        if ":" in text:
            start, stop, step = (float(part) for part in text.split(":"))
            if not step > 0 or stop < start:
                raise ValueError
            count = int(np.floor((stop - start) / step + 1e-9)) + 1
            return start + step * np.arange(count)
        values = np.array([float(part) for part in text.split(",") if part.strip()])
        if len(values) == 0:
            raise ValueError
        return values
    except ValueError:
        raise PredictionError(f"thresholds: cannot parse {spec!r}; use start:stop:step with step > 0 "
                              "(e.g. 0:1:0.02) or a list like 0.1,0.5,0.9") from None


def _sweep_plan(model: BayesianMLP, mode: Any, weights: Any) -> WeightChoice:
    mode = parse_mode(mode)
    if not mode.uses_threshold:
        raise PredictionError(f"sweep: mode {mode.value!r} has no threshold; use mpm-mean, mpm or prune")
    if mode is PredictionMode.PRUNE:
        return parse_weight_choice(weights or "sample")
    implied = WeightChoice.MEAN if mode is PredictionMode.MPM_MEAN else WeightChoice.SAMPLE
    if weights is not None and parse_weight_choice(weights) is not implied:
        raise PredictionError(f"weights: mode {mode.value!r} uses {implied.value} weights; use mode 'prune'")
    return implied


def _incremental_mean_outputs(model: BayesianMLP, x: Tensor, stats: SortedStatistics,
                              thresholds: np.ndarray) -> Tensor:
    """Outputs (T, n, out) of the conditional-mean network at each threshold."""
    weights = model.conditional_mean_weights()
    n = x.shape[0]
    first = weights[0]
    width, fan_in = first.shape
    visit = np.argsort([-stats.cut(t) for t in thresholds], kind="stable")  # sparsest first
    order = stats.descending[0]
    flat = first.reshape(-1).double()
    counts = [stats.kept_counts(t)[0] for t in thresholds]
    per_input = 8 * (fan_in + width) + 4 * 3 * max(w.shape[0] for w in weights)
    chunk = max(1, min(n, MEMORY_BUDGET_BYTES // per_input))
    outputs = None
    masks_later = [stats.masks(t)[1:] for t in thresholds]
    for start in range(0, n, chunk):
        part = x[start:start + chunk]
        augmented_t = torch.cat([part, torch.ones_like(part[:, :1])], dim=1).double().T.contiguous()
        accumulated = torch.zeros(width, part.shape[0], dtype=torch.float64, device=x.device)
        done = 0
        for index in visit:
            if counts[index] > done:
                band = order[done:counts[index]]
                entering = torch.sparse_coo_tensor(torch.stack([band // fan_in, band % fan_in]), flat[band],
                                                   (width, fan_in), check_invariants=False)
                accumulated += torch.sparse.mm(entering, augmented_t)
                done = counts[index]
            hidden = accumulated.T.to(part.dtype)
            if len(weights) > 1:
                later = [w * m for w, m in zip(weights[1:], masks_later[index])]
                out = model.forward_with_weights(model.activation(hidden), later)
            else:
                out = hidden
            if outputs is None:
                outputs = torch.empty((len(thresholds), n, out.shape[-1]), dtype=out.dtype, device=x.device)
            outputs[index, start:start + chunk] = out
    return outputs


def _task_metric(model: BayesianMLP, outputs: Tensor, y: np.ndarray, target_std: float) -> float:
    """Accuracy or RMSE of outputs (R, n, out) averaged over draws."""
    if model.likelihood.task == "classification":
        probs = model.likelihood.probabilities(outputs).mean(dim=0)
        return cls_metrics.accuracy(probs.cpu().numpy(), y)
    mean, _ = model.likelihood.mean_and_std(outputs)
    return reg_metrics.rmse(mean.mean(dim=0).double().cpu().numpy(), y, target_std)


def sweep(model_or_run: Any, dataset, thresholds: Sequence[float] | str | None = None, mode: str = "mpm-mean",
          samples: int = 1, seed: int = 0, weights: str | None = None,
          n_points: int = DEFAULT_POINTS) -> SweepResult:
    """Density and the task metric (accuracy, or RMSE in original units) at each threshold."""
    model = resolve_model(model_or_run)
    choice = _sweep_plan(model, mode, weights)
    samples = 1 if choice is WeightChoice.MEAN else check_samples(samples)
    if isinstance(thresholds, str):
        thresholds = parse_threshold_grid(thresholds)
    grid = default_thresholds(model, n_points) if thresholds is None else np.asarray(thresholds, dtype=np.float64)
    if grid.ndim != 1 or len(grid) == 0:
        raise PredictionError("thresholds: need a non-empty 1-D list of thresholds")
    grid = np.array([check_threshold(model, t) for t in grid])
    stats = SortedStatistics(model)
    sizes = np.array([float(np.prod(shape)) for shape in stats.shapes])
    counts = np.array([stats.kept_counts(t) for t in grid], dtype=np.float64)  # (T, L)
    with torch.no_grad():
        x = as_inputs(model, dataset.x_test)
        disconnected = np.array([bool(is_disconnected(stats.masks(t))) for t in grid])
        if choice is WeightChoice.MEAN:
            outputs = _incremental_mean_outputs(model, x, stats, grid)
            values = [_task_metric(model, outputs[i:i + 1], dataset.y_test, dataset.target_std)
                      for i in range(len(grid))]
        else:
            ones = [torch.ones(shape, dtype=torch.bool, device=model.device) for shape in stats.shapes]
            draws = model.sample_weights(samples, int(seed), masks=ones)
            values = []
            for t in grid:
                masked = [d * m for d, m in zip(draws, stats.masks(t))]
                values.append(_task_metric(model, forward_draws(model, x, masked), dataset.y_test,
                                           dataset.target_std))
    metric = "accuracy" if model.likelihood.task == "classification" else "rmse"
    return SweepResult(mode=parse_mode(mode).value, weights=choice.value, statistic=model.spec.name,
                       keep=model.spec.keep.value, thresholds=grid, density=counts.sum(1) / sizes.sum(),
                       layer_density=counts / sizes, metric=metric, values=np.array(values),
                       disconnected=disconnected, samples=samples, seed=int(seed))


def thresholds_for_densities(model: BayesianMLP, densities: Sequence[float]) -> np.ndarray:
    """Per-model thresholds whose overall density is the target (to the nearest weight)."""
    stats = SortedStatistics(model)
    pooled = np.sort(np.concatenate(stats.ascending_np))[::-1]  # keys, descending
    total = len(pooled)
    spec = model.spec
    result = []
    for density in densities:
        if not 0.0 <= float(density) <= 1.0:
            raise PredictionError(f"densities: each must lie in [0, 1], got {density}")
        k = int(round(float(density) * total))
        if k == 0:
            cut = pooled[0]
        elif k == total:
            cut = pooled[-1] - max(1e-6, abs(pooled[-1]) * 1e-6)
        else:
            cut = 0.5 * (pooled[k - 1] + pooled[k])
        result.append(float(np.clip(stats.sign * cut, spec.low, spec.high)))
    return np.array(result)


def sweep_at_densities(model_or_run: Any, dataset, densities: Sequence[float], mode: str = "mpm-mean",
                       samples: int = 1, seed: int = 0, weights: str | None = None) -> SweepResult:
    """Sweep at thresholds chosen so the density matches `densities` (e.g. another run's sweep),
    so that the FNN pruned by magnitude and a BNN give comparable curves (seed 000 appendix B)."""
    model = resolve_model(model_or_run)
    result = sweep(model, dataset, thresholds_for_densities(model, densities), mode=mode, samples=samples,
                   seed=seed, weights=weights)
    result.extra["target_density"] = [float(d) for d in densities]
    return result
