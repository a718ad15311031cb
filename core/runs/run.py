"""A run you can talk to: a trained model with its config, metrics and data, and the verbs that
question it (in the spirit of the R package LBBNN's predict / summary / coef).

    run = load_run("3f2a")                      # or train_run(config), or Run.of(model, dataset)
    run.predict(x, mode="mpm", samples=10)      # a core.predict.Prediction (regression in original units)
    run.summary()                               # per-layer density, mean statistic, prior values, headline metrics
    run.coef()                                  # the kept weights with their posterior intervals
    run.masks(threshold)                        # the keep masks at a threshold (default: the family's)
    run.active_paths(threshold)                 # those of the kept weights on an input-to-output path
    run.explain(x, threshold, samples)          # each feature's local contribution, median and 95 % interval
    run.sweep()                                 # the metric against density over thresholds
    run.evaluate(mode="bma", samples=10)        # test-set metrics of one mode (JSON-ready)
    run.export(threshold, "pruned/")            # the pruned mean network, safetensors + JSON
    run.snapshots()                             # per-epoch histograms and densities of the statistic, or None

Every verb leaves the model as it found it: no parameter, buffer, train/eval flag or global
random state changes (predictions draw from their own generators).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from scipy.stats import norm
from torch import Tensor

from core.errors import PredictionError, RunStoreError
from core.models.network import BayesianMLP
from core.predict import Prediction, SweepResult, evaluate, export_pruned, mean_statistic, predict, sweep
from core.predict.engine import check_samples, check_threshold
from core.predict.explain import DEFAULT_LEVEL, Explanation, explain
from core.predict.explain import DEFAULT_SAMPLES as DEFAULT_EXPLAIN_SAMPLES
from core.predict.metrics import headline_metric
from core.predict.metrics.classification import DOUBT_LEVEL
from core.predict.structure import network_active_masks, overall_density
from core.predict.sweep import DEFAULT_POINTS, SortedStatistics, active_density_at, disconnected_at
from core.runs.store import read_snapshot_arrays
from core.snapshots import TrainingSnapshots

# Credible level of the intervals `coef` reports by default: the level the doubt decision uses.
INTERVAL_LEVEL = DOUBT_LEVEL
COEF_SAMPLES = 1000  # draws for families whose q(w | kept) has no closed-form quantiles
# Written beside an export.
EXPORTED_METRICS = ("accuracy", "nll", "ece", "rmse", "log_likelihood", "density", "active_density")
# Stored final evaluations whose headline metric `summary` lists, in this order.
SUMMARY_MODES = ("SIM-SIM R=10", "MED-SIM R=10", "MED-MEA R=1", "ALL-MEA R=1")


@dataclass
class LayerCoefficients:
    """The kept weights of one layer: position, mean and central interval of q(w | kept).

    `column == in_features` is the bias. `lower`/`upper` bound the central `level` interval.
    """

    layer: int
    in_features: int
    row: np.ndarray  # (k,) output unit
    column: np.ndarray  # (k,) input (in_features = bias)
    mean: np.ndarray  # (k,) E_q[w | kept]
    lower: np.ndarray
    upper: np.ndarray
    statistic: np.ndarray  # (k,) the family's native statistic
    level: float
    method: str  # "closed-form" or "draws"

    def __len__(self) -> int:
        return len(self.row)

    def to_rows(self) -> list[dict[str, Any]]:
        bias = self.in_features
        return [
            {
                "layer": self.layer,
                "row": int(r),
                "input": "bias" if c == bias else int(c),
                "mean": float(m),
                "lower": float(lo),
                "upper": float(hi),
                "statistic": float(s),
            }
            for r, c, m, lo, hi, s in zip(self.row, self.column, self.mean, self.lower, self.upper, self.statistic)
        ]


@dataclass
class Run:
    """A trained run: what `train_run`, `load_run` and `Run.of` return. See the module docstring."""

    run_id: str | None
    config: Any  # RunConfig (None for a model that is not a stored run)
    model: BayesianMLP
    metrics: dict[str, Any]
    history: list[dict[str, Any]]
    summaries: dict[str, Any]
    path: Path | None
    from_cache: bool
    created: float
    info: dict[str, Any] = field(default_factory=dict)
    data_dir: str | Path | None = None
    _dataset: Any = field(default=None, repr=False)
    _snapshots: TrainingSnapshots | None = field(default=None, repr=False)
    _snapshots_read: bool = field(default=False, repr=False)

    @classmethod
    def of(cls, model: BayesianMLP, dataset: Any = None, metrics: dict[str, Any] | None = None) -> "Run":
        """A run around a model that is not in the store (a model trained by hand, a test's model)."""
        if not isinstance(model, BayesianMLP):
            raise PredictionError(f"expected a BayesianMLP, got {type(model).__name__}")
        return cls(
            run_id=None,
            config=None,
            model=model,
            metrics=dict(metrics or {}),
            history=[],
            summaries={},
            path=None,
            from_cache=False,
            created=0.0,
            _dataset=dataset,
        )

    def dataset(self):
        """The run's Dataset, loaded on first use and kept."""
        if self._dataset is None:
            if self.config is None:
                raise PredictionError("this run was made from a model without a dataset; pass one to Run.of")
            self._dataset = self.config.load_dataset(self.data_dir)
        return self._dataset

    def snapshots(self) -> TrainingSnapshots | None:
        """What training recorded after every epoch (core.snapshots.TrainingSnapshots: histograms of
        the statistic on fixed edges, per-layer densities at the default threshold, mean statistic,
        and for small networks the statistic itself), read from the store on first use. None for a
        run trained before snapshots were recorded, and for a run that is not in the store."""
        if self._snapshots is None and not self._snapshots_read and self.path is not None:
            self._snapshots_read = True
            arrays = read_snapshot_arrays(Path(self.path), self.run_id)
            if arrays is not None:
                try:
                    self._snapshots = TrainingSnapshots.from_arrays(arrays)
                except ValueError as exc:
                    raise RunStoreError(
                        f"run {self.run_id}: the stored snapshots do not fit together ({exc}); "
                        f"train the run again with --force"
                    ) from None
        return self._snapshots

    @property
    def seconds_per_epoch(self) -> float:
        return float(self.info.get("seconds_per_epoch", float("nan")))

    @property
    def task(self) -> str:
        return self.model.likelihood.task

    # --- predictions -----------------------------------------------------------------------------
    def predict(
        self,
        x: Any,
        mode: str = "bma",
        samples: int = 10,
        threshold: float | None = None,
        seed: int = 0,
        weights: str | None = None,
        original_units: bool = True,
    ) -> Prediction:
        """Predictions of one mode on inputs x (see core.predict.modes); regression predictions are
        in the targets' original units unless original_units=False (the units the model was trained in)."""
        prediction = predict(self.model, x, mode=mode, samples=samples, threshold=threshold, seed=seed, weights=weights)
        return self.in_original_units(prediction) if original_units else prediction

    def in_original_units(self, prediction: Prediction) -> Prediction:
        """A prediction of this run's model in the targets' original units (regression with a dataset;
        anything else as it is): the one rule Run.predict and core.predict.draw_cache share."""
        if prediction.task == "regression" and self._has_dataset():
            dataset = self.dataset()
            return prediction.unstandardised(dataset.target_mean, dataset.target_std)
        return prediction

    def _has_dataset(self) -> bool:
        return self._dataset is not None or self.config is not None

    def evaluate(
        self,
        mode: str = "bma",
        samples: int = 10,
        threshold: float | None = None,
        seed: int = 0,
        ood: str | Sequence[str] | None = None,
        weights: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Test-set metrics of one prediction mode (core.predict.evaluate), JSON-ready."""
        return evaluate(
            self.model,
            self.dataset(),
            mode=mode,
            samples=samples,
            threshold=threshold,
            seed=seed,
            ood=ood,
            weights=weights,
            data_dir=self.data_dir,
            **options,
        )

    def sweep(
        self,
        thresholds: Sequence[float] | str | None = None,
        mode: str = "mpm-mean",
        samples: int = 1,
        seed: int = 0,
        weights: str | None = None,
        n_points: int = DEFAULT_POINTS,
    ) -> SweepResult:
        """The headline metric (accuracy, or RMSE in original units) and density at each threshold."""
        return sweep(
            self.model,
            self.dataset(),
            thresholds=thresholds,
            mode=mode,
            samples=samples,
            seed=seed,
            weights=weights,
            n_points=n_points,
        )

    def default_sweep(self, n_points: int = DEFAULT_POINTS) -> SweepResult:
        """The mpm-mean sweep over the default thresholds: the copy stored with the run when it has
        one (computed once after training), else computed now."""
        stored = self.summaries or {}
        metric = headline_metric(self.task)
        if all(key in stored for key in ("sweep_thresholds", "sweep_density", f"sweep_{metric}")):
            grid = np.asarray(stored["sweep_thresholds"], dtype=np.float64)
            layer_density = stored.get("sweep_layer_density")
            if "sweep_disconnected" in stored:
                disconnected = np.asarray(stored["sweep_disconnected"], dtype=bool)
            else:  # runs stored before the flag was: the masks alone decide it
                disconnected = disconnected_at(SortedStatistics(self.model), grid)
            return SweepResult(
                mode="mpm-mean",
                weights="mean",
                statistic=self.model.spec.name,
                keep=self.model.spec.keep.value,
                thresholds=grid,
                density=np.asarray(stored["sweep_density"], dtype=np.float64),
                layer_density=(
                    np.asarray(layer_density, dtype=np.float64)
                    if layer_density is not None
                    else np.empty((len(grid), 0))
                ),
                metric=metric,
                values=np.asarray(stored[f"sweep_{metric}"], dtype=np.float64),
                disconnected=disconnected,
                samples=1,
                seed=0,
                active_density=active_density_at(SortedStatistics(self.model), grid),
            )
        return self.sweep(n_points=n_points)

    def export(self, threshold: float | None, folder: str | Path) -> tuple[Path, dict[str, Any]]:
        """Write the pruned mean network at `threshold` (prune, mean weights) to `folder`
        (safetensors + JSON, with its test metrics); returns the folder and those metrics."""
        metrics = self.evaluate(mode="prune", samples=1, threshold=threshold, weights="mean")
        keep = {k: metrics[k] for k in EXPORTED_METRICS if k in metrics}
        return export_pruned(self.model, threshold, folder, metrics=keep), metrics

    # --- structure -------------------------------------------------------------------------------
    def masks(self, threshold: float | None = None) -> list[Tensor]:
        """Per layer, the weights kept at `threshold` (default: the family's), shape (out, in + 1)."""
        if threshold is not None:
            threshold = check_threshold(self.model, threshold)
        with torch.no_grad():
            return [mask.detach() for mask in self.model.keep_masks(threshold)]

    def active_paths(self, threshold: float | None = None) -> list[Tensor]:
        """Per layer, (out, in + 1) bool: the weights kept at `threshold` (default: the family's) that
        lie on at least one input-to-output path of the pruned network (paths through input-skip
        weights count). Weights into units with no kept outgoing weight and out of units with no kept
        incoming one are dropped, to the fixed point; a unit's bias stays where the unit is on a path
        (see core.predict.structure.active_masks). The export writes exactly these weights."""
        with torch.no_grad():
            return network_active_masks(self.model, self.masks(threshold))

    def explain(
        self,
        x: Any,
        threshold: float | None = None,
        samples: int = DEFAULT_EXPLAIN_SAMPLES,
        seed: int = 0,
        output: int | None = None,
        level: float = DEFAULT_LEVEL,
    ) -> Explanation:
        """For one input x, each feature's contribution to output `output` (default: the predicted
        class's logit; regression: the mean, in the units the model was trained in) through the
        active paths of the network pruned at `threshold`: per posterior draw the Jacobian of the
        sampled network at x (the exact local linear coefficients for ReLU nets) times x, reported as
        median and central `level` interval over `samples` draws (core.predict.explain)."""
        return explain(self.model, x, threshold=threshold, samples=samples, seed=seed, output=output, level=level)

    def coef(
        self,
        threshold: float | None = None,
        level: float = INTERVAL_LEVEL,
        samples: int = COEF_SAMPLES,
        seed: int = 0,
        method: str = "auto",
    ) -> list[LayerCoefficients]:
        """The kept weights of each layer with the mean and central `level` interval of q(w | kept).

        Closed form where the family's q(w | kept) is Gaussian (method "auto" or "closed-form");
        otherwise (or with method="draws") empirical quantiles of `samples` draws made with `seed`.
        """
        if not 0.0 < float(level) < 1.0:
            raise PredictionError(f"level: must lie in (0, 1), got {level!r}")
        if method not in ("auto", "closed-form", "draws"):
            raise PredictionError(f"method: use auto, closed-form or draws, got {method!r}")
        samples = check_samples(samples)
        tail = (1.0 - float(level)) / 2.0
        masks = self.masks(threshold)
        result = []
        with torch.no_grad():
            statistics = self.model.native_statistics()
            for index, (layer, mask, stat) in enumerate(zip(self.model.layers, masks, statistics)):
                kept = mask.nonzero(as_tuple=False)
                rows, columns = kept[:, 0], kept[:, 1]
                normal = layer.conditional_normal() if method != "draws" else None
                if method == "closed-form" and normal is None:
                    raise PredictionError(
                        f"coef: q(w | kept) of {self.model.family} is not Gaussian; use method='draws'"
                    )
                mean = layer.conditional_mean_weights()[rows, columns].double().cpu().numpy()
                if normal is not None:
                    loc, scale = (t[rows, columns].double().cpu().numpy() for t in normal)
                    lower, upper = loc + norm.ppf(tail) * scale, loc + norm.ppf(1 - tail) * scale
                    how = "closed-form"
                else:
                    draws = self._kept_draws(index, rows, columns, samples, seed)
                    lower, upper = np.quantile(draws, [tail, 1 - tail], axis=0)
                    how = "draws"
                result.append(
                    LayerCoefficients(
                        layer=index,
                        in_features=layer.in_features,
                        row=rows.cpu().numpy(),
                        column=columns.cpu().numpy(),
                        mean=mean,
                        lower=lower,
                        upper=upper,
                        statistic=stat[rows, columns].double().cpu().numpy(),
                        level=float(level),
                        method=how,
                    )
                )
        return result

    def _kept_draws(
        self, index: int, rows: Tensor, columns: Tensor, samples: int, seed: int, chunk: int = 50
    ) -> np.ndarray:
        """(samples, k) draws of q(w | kept) of layer `index` at the kept positions, a chunk at a time."""
        layer = self.model.layers[index]
        out = np.empty((samples, len(rows)), dtype=np.float64)
        generator = torch.Generator(device=self.model.device).manual_seed(int(seed) * 101 + index)
        for start in range(0, samples, chunk):
            count = min(chunk, samples - start)
            draws = layer.sample_conditional_weights(count, generator)
            out[start : start + count] = draws[:, rows, columns].double().cpu().numpy()
        return out

    # --- summary ---------------------------------------------------------------------------------
    def summary(self, threshold: float | None = None) -> dict[str, Any]:
        """Per layer: shape, kept weights and density at `threshold` (default: the family's), the
        mean of the native statistic and the prior's hyperparameters as learned; the overall
        density; for regression the noise sd (original units); and the headline metric of the
        stored final evaluations."""
        spec = self.model.spec
        masks = self.masks(threshold)
        means = mean_statistic(self.model)
        layers = []
        for index, (layer, mask) in enumerate(zip(self.model.layers, masks)):
            kept, total = int(mask.sum()), mask.numel()
            layers.append(
                {
                    "layer": index,
                    "shape": [layer.out_features, layer.in_features + 1],
                    "kept": kept,
                    "weights": total,
                    "density": kept / total,
                    "mean_statistic": means[index],
                    "prior": layer.prior_hyperparameters(),
                }
            )
        kept = sum(layer["kept"] for layer in layers)
        total = sum(layer["weights"] for layer in layers)
        noise = {}
        if self.task == "regression":  # the learned (or fixed) noise sd, in the targets' units
            with torch.no_grad():
                std = float(self.model.likelihood.log_noise_std.exp())
            scale = float(self.dataset().target_std) if self._has_dataset() else 1.0
            noise = {"noise_std": std * scale}
        return {
            "run_id": self.run_id,
            "family": self.model.family,
            "task": self.task,
            "statistic": spec.name,
            "keep": spec.keep.value,
            "threshold": spec.default_threshold if threshold is None else float(threshold),
            "density": kept / total,
            "active_density": overall_density(network_active_masks(self.model, masks)),
            "layers": layers,
            **noise,
            "metrics": self.headline_metrics(),
        }

    def headline_metrics(self) -> dict[str, float]:
        """The headline metric of each stored final evaluation ("MED-MEA R=1 accuracy", ...) and the
        stored density: what run lists and summaries show first."""
        metric = headline_metric(self.task)
        found = {
            f"{mode} {metric}": float(self.metrics[f"{mode} {metric}"])
            for mode in SUMMARY_MODES
            if f"{mode} {metric}" in self.metrics
        }
        if "density" in self.metrics:
            found["density"] = float(self.metrics["density"])
        return found
