"""Accuracy (or RMSE) against density over thresholds of the native statistic.

Work shared across thresholds:
- each layer's statistic is sorted once; densities come from binary search,
  and the masks of every threshold come from one comparison per layer;
- for the deterministic modes (mpm-mean, prune with mean weights) the first
  layer's pre-activations are accumulated incrementally: thresholds are
  visited from the sparsest to the densest and only the weights that enter at
  each step are multiplied in (as a sparse product when few enter, a dense one
  otherwise), so the whole sweep costs about one pass of the first layer;
  the accumulation is in float64 so every point equals a fresh evaluation;
- the later layers run per point as a compact network (core.predict.compact):
  units with no path to an output dropped, layers below the crossover density
  multiplied as sparse matrices;
- for the sampled modes the R weight draws are made once: a draw of the kept
  weights does not depend on the mask (the network multiplies it in), so
  every threshold reuses them (and runs them through its compact network).
The model is never rebuilt.

Thresholds are compared through the keep rule's key (StatisticSpec.keep_key
and cut: kept where key > cut), so one sort serves every threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from core import limits, validate
from core.errors import InputError, PredictionError
from core.jsonable import jsonable
from core.models.network import BayesianMLP
from core.predict.compact import LayerFormat, activate_, choose_format, compact_network, sparse_csr
from core.predict.engine import (
    MEMORY_BUDGET_BYTES,
    as_inputs,
    check_samples,
    check_threshold,
    forward_masked,
    resolve_model,
)
from core.predict.metrics import classification as cls_metrics
from core.predict.metrics import regression as reg_metrics
from core.predict.metrics.headline import headline_metric
from core.predict.modes import PredictionMode, WeightChoice, parse_mode, parse_weight_choice
from core.predict.structure import is_disconnected, network_active_masks

DEFAULT_POINTS = 51
MASK_BLOCK = 64  # thresholds whose masks are built at once (memory: MASK_BLOCK bytes per weight)


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
    # (T,) the density of the kept weights on an input-to-output path (core.predict.structure.active_masks)
    active_density: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        active = {} if self.active_density is None else {"active_density": self.active_density}
        return jsonable(
            {
                "mode": self.mode,
                "weights": self.weights,
                "statistic": self.statistic,
                "keep": self.keep,
                "thresholds": self.thresholds,
                "density": self.density,
                "layer_density": self.layer_density,
                "metric": self.metric,
                "values": self.values,
                "disconnected": self.disconnected,
                "samples": self.samples,
                "seed": self.seed,
                **active,
                **self.extra,
            }
        )

    def to_rows(self) -> list[dict[str, Any]]:
        rows = []
        for i, threshold in enumerate(self.thresholds):
            row = {
                "threshold": float(threshold),
                "density": float(self.density[i]),
                self.metric: float(self.values[i]),
                "disconnected": bool(self.disconnected[i]),
            }
            if self.active_density is not None:
                row["active_density"] = float(self.active_density[i])
            row.update({f"density_layer_{k}": float(d) for k, d in enumerate(self.layer_density[i])})
            rows.append(row)
        return rows


class SortedStatistics:
    """Each layer's keep-key (see module docstring) sorted once."""

    def __init__(self, model: BayesianMLP):
        self.spec = model.spec
        with torch.no_grad():
            self.keys = [self.spec.keep_key(stat).reshape(-1) for stat in model.native_statistics()]
        self.shapes = [layer.shape for layer in model.layers]
        self.structure_masks, self.conv_active_masks = model.structure_masks, model.conv_active_masks  # conv nets
        self.descending = [torch.argsort(key, descending=True, stable=True) for key in self.keys]
        self.ascending_np = [np.sort(key.double().cpu().numpy()) for key in self.keys]

    def cut(self, threshold: float) -> float:
        return self.spec.cut(threshold)

    def kept_counts(self, threshold: float) -> list[int]:
        cut = self.cut(threshold)
        # Compare in the keys' own dtype, as keep_mask does.
        cut = float(np.float32(cut)) if self.keys[0].dtype == torch.float32 else cut
        return [len(a) - int(np.searchsorted(a, cut, side="right")) for a in self.ascending_np]

    def masks(self, threshold: float) -> list[Tensor]:
        cut = self.cut(threshold)
        return [(key > cut).reshape(shape) for key, shape in zip(self.keys, self.shapes)]

    def stacked_masks(self, thresholds: Sequence[float]) -> list[Tensor]:
        """Per layer the masks at every threshold, (T, out, in+1), in one comparison per layer."""
        result = []
        for key, shape in zip(self.keys, self.shapes):
            # Python-float cuts compare in the key's dtype (as keep_mask does): cast them the same way.
            cuts = torch.tensor([self.cut(t) for t in thresholds], dtype=key.dtype, device=key.device)
            result.append((key.unsqueeze(0) > cuts.unsqueeze(1)).reshape(len(thresholds), *shape))
        return result


def disconnected_at(stats: SortedStatistics, grid: np.ndarray) -> np.ndarray:
    """(T,) whether the network cut at each threshold has no path from an input to an output."""
    with torch.no_grad():
        return np.concatenate(
            [
                is_disconnected(stats.structure_masks(stats.stacked_masks(grid[i : i + MASK_BLOCK]))).cpu().numpy()
                for i in range(0, len(grid), MASK_BLOCK)
            ]
        )


def active_density_at(stats: SortedStatistics, grid: np.ndarray) -> np.ndarray:
    """(T,) the active-path density (core.predict.structure.active_masks) of the network cut at each threshold."""
    total = sum(float(np.prod(shape)) for shape in stats.shapes)
    with torch.no_grad():
        return np.concatenate(
            [
                sum(
                    mask.reshape(mask.shape[0], -1).sum(dim=1)
                    for mask in network_active_masks(stats, stats.stacked_masks(grid[i : i + MASK_BLOCK]))
                )
                .double()
                .cpu()
                .numpy()
                / total
                for i in range(0, len(grid), MASK_BLOCK)
            ]
        )


def default_thresholds(model: BayesianMLP, n_points: int = DEFAULT_POINTS) -> np.ndarray:
    """A grid over the statistic's range; quantiles of the pooled statistic where the range is unbounded."""
    spec = model.spec
    if np.isfinite(spec.low) and np.isfinite(spec.high):
        return np.linspace(spec.low, spec.high, n_points)
    with torch.no_grad():
        pooled = torch.cat([s.reshape(-1) for s in model.native_statistics()]).double().cpu().numpy()
    grid = np.quantile(pooled, np.linspace(0.0, 1.0, n_points))
    if spec.keep_above and np.isfinite(spec.low):
        grid[0] = spec.low  # density 1 at the first point
    if not spec.keep_above and np.isfinite(spec.high):
        grid[-1] = spec.high
    return np.clip(grid, spec.low, spec.high)


class ThresholdSpecError(InputError, PredictionError):
    """A thresholds spec that fails its rule: an outside value (InputError) asked of a prediction
    (PredictionError, what callers of sweep catch)."""


THRESHOLDS_HELP = "use start:stop:step with step > 0 (e.g. 0:1:0.02) or a list like 0.1,0.5,0.9"


def parse_threshold_grid(spec: str) -> np.ndarray:
    """'start:stop:step' (stop included) or a comma-separated list, of at most $BNN_MAX_THRESHOLDS
    finite values. The count of a range is worked out from its ends before any is built: 0:1:1e-9
    once built a billion thresholds (5.4 GB after 14 s)."""
    text = str(spec).strip()
    most = limits.limit(limits.MAX_THRESHOLDS)
    too_many = (
        f"thresholds: {validate.shown(spec)} gives more than {most} thresholds "
        f"(${limits.MAX_THRESHOLDS.variable}); use a larger step or fewer values"
    )
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 3:
                raise ValueError
            start, stop, step = (validate.real_number(part, "thresholds") for part in parts)
            if not step > 0 or stop < start:
                raise ValueError
            span = (stop - start) / step  # finite or inf; never builds anything
            if not span + 1 <= most:
                raise ThresholdSpecError(too_many)
            count = int(np.floor(span + 1e-9)) + 1
            return start + step * np.arange(count)
        parts = [part for part in text.split(",") if part.strip()]
        if len(parts) > most:
            raise ThresholdSpecError(too_many)
        if not parts:
            raise ValueError
        return np.array([validate.real_number(part, "thresholds") for part in parts])
    except ThresholdSpecError:
        raise
    except ValueError:  # InputError included: one message for every malformed spec
        raise ThresholdSpecError(f"thresholds: cannot parse {validate.shown(spec)}; {THRESHOLDS_HELP}") from None


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


def _add_band(accumulated: Tensor, weight: Tensor, band: Tensor, inputs_t: Tensor) -> None:
    """accumulated += W_band @ inputs_t for the entries `band` (flat indices) of `weight` (float64)."""
    width, fan_in = weight.shape
    if choose_format(len(band), weight.numel()) is LayerFormat.SPARSE:
        band = band.sort().values  # row-major order: the CSR layout
        rows = torch.bincount(band // fan_in, minlength=width)
        crow = torch.cat([rows.new_zeros(1), rows.cumsum(0)])
        entering = sparse_csr(crow, band % fan_in, weight.reshape(-1)[band], (width, fan_in))
        accumulated.addmm_(entering, inputs_t)
    else:
        entering = torch.zeros(width * fan_in, dtype=weight.dtype, device=weight.device)
        entering[band] = weight.reshape(-1)[band]
        accumulated.addmm_(entering.view(width, fan_in), inputs_t)


def _incremental_mean_outputs(model: BayesianMLP, x: Tensor, stats: SortedStatistics, thresholds: np.ndarray) -> Tensor:
    """Outputs (T, n, out) of the conditional-mean network at each threshold.

    The first layer's pre-activations, transposed (width, n), are accumulated in
    float64 from the sparsest threshold to the densest; the later layers run as
    a compact network (dead units dropped, sparse layers sparse) per threshold.
    """
    weights = model.conditional_mean_weights()
    if model.input_skip or model.geometry is not None:  # skips, or a conv body: each point runs by itself
        return torch.stack([forward_masked(model, x, weights, stats.masks(t))[0] for t in thresholds])
    n = x.shape[0]
    first = weights[0].double()
    width, fan_in = first.shape
    visit = np.argsort([-stats.cut(t) for t in thresholds], kind="stable")  # sparsest first
    order = stats.descending[0]
    counts = [stats.kept_counts(t)[0] for t in thresholds]
    per_input = 8 * (fan_in + width) + 4 * 3 * max(w.shape[0] for w in weights)
    chunk = max(1, min(n, MEMORY_BUDGET_BYTES // per_input))
    outputs = torch.empty((len(thresholds), n, weights[-1].shape[0]), dtype=x.dtype, device=x.device)
    for start in range(0, n, chunk):
        part = x[start : start + chunk]
        inputs_t = torch.cat([part, torch.ones_like(part[:, :1])], dim=1).T.double().contiguous()
        accumulated = torch.zeros(width, part.shape[0], dtype=torch.float64, device=x.device)
        done = 0
        for index in visit:
            if counts[index] > done:
                _add_band(accumulated, first, order[done : counts[index]], inputs_t)
                done = counts[index]
            if len(weights) == 1:
                outputs[index, start : start + chunk] = accumulated.T.to(x.dtype)
                continue
            # Built per point (and per input chunk, usually one): keeping T of them would cost T networks.
            rest = compact_network(
                weights[1:], stats.masks(thresholds[index])[1:], model.activation, fold_constants=False
            )
            rows = accumulated if rest.input_index is None else accumulated.index_select(0, rest.input_index)
            # A copy even where the dtypes match: the activation runs in place.
            hidden = activate_(model.activation, rows.to(x.dtype, copy=rows is accumulated))
            outputs[index, start : start + chunk] = rest.forward_transposed(hidden).T
    return outputs


def _task_metric(model: BayesianMLP, outputs: Tensor, y: np.ndarray, target_std: float) -> float:
    """Accuracy or RMSE of outputs (R, n, out) averaged over draws."""
    if model.likelihood.task == "classification":
        probs = model.likelihood.probabilities(outputs).mean(dim=0)
        return cls_metrics.accuracy(probs.cpu().numpy(), y)
    mean, _ = model.likelihood.mean_and_std(outputs)
    return reg_metrics.rmse(mean.mean(dim=0).double().cpu().numpy(), y, target_std)


def _single_network_metrics(model: BayesianMLP, outputs: Tensor, y: np.ndarray, target_std: float) -> list[float]:
    """`_task_metric` of each of T single networks, outputs (T, n, out), with one likelihood call for all."""
    if model.likelihood.task == "classification":
        probs = model.likelihood.probabilities(outputs).cpu().numpy()
        return [cls_metrics.accuracy(p, y) for p in probs]
    mean, _ = model.likelihood.mean_and_std(outputs)
    return [reg_metrics.rmse(m, y, target_std) for m in mean.double().cpu().numpy()]


def sweep(
    model_or_run: Any,
    dataset,
    thresholds: Sequence[float] | str | None = None,
    mode: str = "mpm-mean",
    samples: int = 1,
    seed: int = 0,
    weights: str | None = None,
    n_points: int = DEFAULT_POINTS,
) -> SweepResult:
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
        disconnected = disconnected_at(stats, grid)
        if choice is WeightChoice.MEAN:
            outputs = _incremental_mean_outputs(model, x, stats, grid)
            values = _single_network_metrics(model, outputs, dataset.y_test, dataset.target_std)
        else:
            ones = [torch.ones(shape, dtype=torch.bool, device=model.device) for shape in stats.shapes]
            draws = model.sample_weights(samples, int(seed), masks=ones)
            values = []
            for t in grid:
                # The compact network reads only the kept entries of the unmasked draws.
                values.append(
                    _task_metric(
                        model, forward_masked(model, x, draws, stats.masks(t)), dataset.y_test, dataset.target_std
                    )
                )
    metric = headline_metric(model.likelihood.task)
    return SweepResult(
        mode=parse_mode(mode).value,
        weights=choice.value,
        statistic=model.spec.name,
        keep=model.spec.keep.value,
        thresholds=grid,
        density=counts.sum(1) / sizes.sum(),
        layer_density=counts / sizes,
        metric=metric,
        values=np.array(values),
        disconnected=disconnected,
        samples=samples,
        seed=int(seed),
        active_density=active_density_at(stats, grid),
    )


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
        result.append(float(np.clip(spec.cut(cut), spec.low, spec.high)))  # cut() is its own inverse
    return np.array(result)


def sweep_at_densities(
    model_or_run: Any,
    dataset,
    densities: Sequence[float],
    mode: str = "mpm-mean",
    samples: int = 1,
    seed: int = 0,
    weights: str | None = None,
) -> SweepResult:
    """Sweep at thresholds chosen so the density matches `densities` (e.g. another run's sweep),
    so that the FNN pruned by magnitude and a BNN give comparable curves (Hubin & Storvik 2024 appendix B)."""
    model = resolve_model(model_or_run)
    result = sweep(
        model,
        dataset,
        thresholds_for_densities(model, densities),
        mode=mode,
        samples=samples,
        seed=seed,
        weights=weights,
    )
    result.extra["target_density"] = [float(d) for d in densities]
    return result


def curve_csv(thresholds: np.ndarray, density: np.ndarray, values: np.ndarray, metric: str) -> str:
    """A sweep as CSV text: threshold, density, metric (the Pruning page's download)."""
    rows = zip(thresholds, density, values)
    lines = [f"threshold,density,{metric}"] + [f"{t:.6g},{d:.6g},{v:.6g}" for t, d, v in rows]
    return "\n".join(lines) + "\n"
