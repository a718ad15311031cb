"""The dashboard's one door into core: runs, predictions, statistics as numpy.

No Streamlit here (the cached wrappers live in dashboard/cache.py), so the
worker thread and the tests can call these directly. Everything a user can
get wrong raises a core BNNError with a message; pages show it with st.error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from core.errors import ConfigError
from core.models.base import Keep

PREDICTION_MODES: tuple[str, ...] = ("bma", "mean", "mpm", "mpm-mean", "prune")
MODE_HELP = {
    "bma": "SIM-SIM: average over R sampled networks (structure and weights)",
    "mean": "ALL-MEA: one dense network with the posterior-mean weights",
    "mpm": "MED-SIM: structure cut at the threshold, R sampled weight sets",
    "mpm-mean": "MED-MEA: structure cut at the threshold, mean weights (no sampling)",
    "prune": "PRN: structure cut at the threshold, sampled or mean weights",
}
DEFAULT_DATASET = "mnist-small"
OOD_PARTNER = {"mnist-small": "fashion-mnist-small", "fashion-mnist-small": "mnist-small",
               "mnist": "fashion-mnist", "fashion-mnist": "mnist"}


# --- runs --------------------------------------------------------------------------------------

def list_runs() -> list[Any]:
    """RunInfo rows of the default store (newest last); corrupt runs are included with status."""
    from core.runs import list_runs as core_list_runs
    return list(core_list_runs())


def train_run(config: Any, progress: Callable[[dict], None] | None = None, cancel: Any = None) -> Any:
    from core.runs import train_run as core_train_run
    return core_train_run(config, progress=progress, cancel=cancel)


def dataset_table() -> list[dict[str, Any]]:
    """Every registered dataset as a dict (name, task, shapes, availability)."""
    from core.data import list_datasets
    return [info.to_dict() for info in list_datasets()]


def family_option_fields() -> dict[str, list[Any]]:
    """Each family's Options dataclass fields, by family name."""
    import dataclasses

    from core.models.registry import FAMILY_PATHS, family_class
    return {name: list(dataclasses.fields(family_class(name).Options)) for name in FAMILY_PATHS}


def default_learning_rates() -> dict[str, float]:
    from core.train import DEFAULT_LEARNING_RATES
    return dict(DEFAULT_LEARNING_RATES)


def config_from_fields(fields: dict[str, Any]) -> Any:
    """A RunConfig from its serialised fields (a stored or posted config)."""
    from core.runs.config import RunConfig
    return RunConfig.from_dict(fields)


def predictive_entropy(probs: np.ndarray) -> np.ndarray:
    from core.predict.metrics.ood import predictive_entropy as entropy
    return entropy(probs)


def entropy_auroc(in_domain: np.ndarray, out_of_domain: np.ndarray) -> float:
    """AUROC of telling out-of-domain inputs by their higher entropy."""
    from core.predict.metrics.ood import auroc
    return auroc(in_domain, out_of_domain)


def load_run(run_id: str) -> Any:
    from core.runs import load_run as core_load_run
    return core_load_run(run_id)


def delete_run(run_id: str) -> None:
    from core.runs import delete_run as core_delete_run
    core_delete_run(run_id)


def make_config(values: dict[str, Any]) -> Any:
    """A validated RunConfig from the Train form (ConfigError names the bad field)."""
    from core.runs.config import RunConfig
    return RunConfig.from_dict(values)


def total_epochs(config: Any) -> int:
    return config.train.total_epochs()


def default_settings(dataset: str, batch_size: int = 100) -> dict[str, Any]:
    """What a run on `dataset` gets when the form leaves hidden widths and epochs to core."""
    from core.runs.config import RunConfig
    from core.train import DEFAULT_KL_WEIGHT

    config = RunConfig(dataset=dataset, train={"batch_size": int(batch_size)})
    return {"hidden": config.hidden, "epochs": config.train.epochs, "kl_weight": DEFAULT_KL_WEIGHT}


def parse_hidden(text: str) -> tuple[int, ...]:
    """'400, 600' -> (400, 600); ConfigError on anything else."""
    parts = [p for p in str(text).replace(" ", "").split(",") if p]
    try:
        widths = tuple(int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"hidden: give comma-separated positive integers such as '400, 600', got {text!r}") from None
    if not widths or any(w < 1 for w in widths):
        raise ConfigError(f"hidden: give at least one positive width such as '400, 600', got {text!r}")
    return widths


def parse_options(text: str) -> dict[str, Any]:
    """'prior_inclusion=0.1, slab=student-t' -> {'prior_inclusion': 0.1, 'slab': 'student-t'}."""
    options: dict[str, Any] = {}
    for item in (p.strip() for p in str(text).split(",")):
        if not item:
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"family options: write name=value pairs separated by commas, got {item!r}")
        options[key.strip()] = parse_scalar(raw.strip())
    return options


def parse_scalar(raw: str) -> Any:
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(raw)
        except ValueError:
            continue
    return raw


# --- the statistic and its threshold range ---------------------------------------------------------

@dataclass(frozen=True)
class ThresholdRange:
    """Finite slider range for a family's statistic, its default and the keep direction."""

    name: str
    low: float
    high: float
    default: float
    keep_above: bool

    def clip(self, value: float) -> float:
        return float(min(self.high, max(self.low, value)))


def threshold_range(spec: Any, statistics: Sequence[np.ndarray]) -> ThresholdRange:
    """The spec's range, with an infinite end replaced by the largest observed statistic."""
    finite = [s[np.isfinite(s)] for s in (np.asarray(x, dtype=np.float64).ravel() for x in statistics)]
    values = np.concatenate(finite) if finite else np.empty(0)
    observed_high = float(values.max()) if values.size else 1.0
    observed_low = float(values.min()) if values.size else 0.0
    low = float(spec.low) if math.isfinite(spec.low) else observed_low
    high = float(spec.high) if math.isfinite(spec.high) else max(observed_high, low + 1e-6)
    # The family's default cut is always on the slider (bnn's 0.83 lies above a short training's
    # largest signal-to-noise ratio), and so is "keep nothing" (a little headroom).
    default = float(spec.default_threshold)
    if math.isfinite(default):
        low = min(low, default)
        if not math.isfinite(spec.high):
            high = max(high, default)
    if not math.isfinite(spec.high):
        high = _round_up(high * 1.05)
    default = float(min(high, max(low, default)))
    return ThresholdRange(str(spec.name), low, high, default, Keep(spec.keep) is Keep.ABOVE)


def _round_up(value: float) -> float:
    if value <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    return math.ceil(value / scale * 10) / 10 * scale


def native_statistics(model: Any) -> list[np.ndarray]:
    with torch.no_grad():
        return [s.detach().cpu().numpy().astype(np.float64) for s in model.native_statistics()]


def masks_at(statistics: Sequence[np.ndarray], threshold: float, keep_above: bool) -> list[np.ndarray]:
    """Keep masks from precomputed statistics (the same rule as StatisticSpec.keep_mask)."""
    return [(s > threshold) if keep_above else (s < threshold) for s in statistics]


def conditional_mean_weights(model: Any) -> list[np.ndarray]:
    with torch.no_grad():
        return [w.detach().cpu().numpy() for w in model.conditional_mean_weights()]


# --- predictions (core.predict) -----------------------------------------------------------------------

@dataclass(frozen=True)
class SweepCurve:
    thresholds: np.ndarray
    density: np.ndarray
    values: np.ndarray
    metric: str


def uses_threshold(mode: str) -> bool:
    from core.predict.modes import parse_mode
    return parse_mode(mode).uses_threshold


def effective_threshold(mode: str, threshold: float | None) -> float | None:
    """The threshold a mode reads (None for bma / mean, which refuse one)."""
    return float(threshold) if threshold is not None and uses_threshold(mode) else None


def predict(run: Any, x: np.ndarray, mode: str, samples: int, threshold: float | None, seed: int = 0,
            weights: str | None = None) -> Any:
    """core.predict.predict with the threshold dropped for modes that take none; regression in original units."""
    from core.predict import predict as core_predict
    prediction = core_predict(run, x, mode=mode, samples=int(samples), threshold=effective_threshold(mode, threshold),
                              seed=int(seed), weights=weights if mode == "prune" else None)
    dataset = run.dataset()
    if prediction.task == "regression":
        prediction = prediction.unstandardised(dataset.target_mean, dataset.target_std)
    return prediction


def test_metrics(arrays: dict[str, np.ndarray], dataset: Any, doubt_level: float = 0.95) -> dict[str, Any]:
    """Headline metrics of a test-set prediction (arrays from a Prediction), via core's metric functions."""
    from core.predict.metrics import classification, regression
    result: dict[str, Any] = {"density": float(arrays["density"]), "disconnected": bool(arrays["disconnected"])}
    if dataset.task == "classification":
        probs, per_draw, y = arrays["probs"], arrays["probs_per_draw"], dataset.y_test
        doubt = classification.doubt_decision(probs, y, doubt_level)
        result.update(accuracy=classification.accuracy(probs, y), nll=classification.nll(per_draw, y),
                      ece=classification.ece(probs, y), doubt_accuracy=doubt["accuracy"],
                      doubt_count=doubt["count"], doubt_fraction=doubt["fraction"])
    else:
        y = dataset.unstandardise(dataset.y_test)
        means, stds = arrays["mean_per_draw"], arrays["std_per_draw"]
        result.update(rmse=regression.rmse(arrays["mean"], y),
                      log_likelihood=regression.log_likelihood(means, stds, y),
                      coverage_95=regression.coverage(means, stds, y, levels=(0.95,))["0.95"])
    return result


def accuracy_by_samples(probs_per_draw: np.ndarray, y: np.ndarray, max_samples: int) -> dict[str, list]:
    """Accuracy of the average of the first r draws, r on a 1-2-5 ladder up to the draws available."""
    from core.predict.metrics import classification
    ladder = [r for r in (1, 2, 3, 5, 10, 20, 30, 50, 100, 200) if r <= min(max_samples, len(probs_per_draw))]
    if not ladder or ladder[-1] != min(max_samples, len(probs_per_draw)):
        ladder.append(min(max_samples, len(probs_per_draw)))
    return classification.accuracy_vs_samples(probs_per_draw, y, ladder)


SWEEP_MODE = "mpm-mean"  # the curve: cut at each threshold, mean weights of the kept connections


def sweep(run: Any, n_points: int = 30) -> SweepCurve:
    """Test metric (accuracy, or RMSE in original units) against density over thresholds.

    The run's stored summaries hold this curve (computed once after training);
    runs without them get it from core.predict.sweep.
    """
    summaries = getattr(run, "summaries", None) or {}
    metric = next((m for m in ("accuracy", "rmse") if f"sweep_{m}" in summaries), None)
    if metric is not None and "sweep_thresholds" in summaries and "sweep_density" in summaries:
        return SweepCurve(np.asarray(summaries["sweep_thresholds"], dtype=np.float64),
                          np.asarray(summaries["sweep_density"], dtype=np.float64),
                          np.asarray(summaries[f"sweep_{metric}"], dtype=np.float64), metric)
    from core.predict import sweep as core_sweep
    result = core_sweep(run, run.dataset(), mode=SWEEP_MODE, n_points=n_points)
    return SweepCurve(np.asarray(result.thresholds, dtype=np.float64), np.asarray(result.density, dtype=np.float64),
                      np.asarray(result.values, dtype=np.float64), str(result.metric))


def ood_set_names(dataset: Any) -> list[str]:
    """OOD sets offered for a dataset: the partner image set (when loadable) and the synthetic shifts."""
    from core.data import OOD_SYNTHETIC
    if dataset.task != "classification":
        return []
    is_image = len(dataset.input_shape) == 2
    names = [OOD_PARTNER[dataset.name]] if dataset.name in OOD_PARTNER else []
    names += [name for name in OOD_SYNTHETIC if is_image or name == "uniform-noise"]
    return names


def load_ood_inputs(dataset: Any, name: str, n: int | None = None, seed: int = 0) -> np.ndarray:
    from core.data import load_ood
    if n is not None:
        n = min(n, len(dataset.x_test))
    return load_ood(dataset, name, seed=seed, n=n)


# --- collapsed predictive and the NUTS reference (issue 15) -----------------------------------------

REGRESSION_PREDICTIVES = {
    "mode": "the prediction mode above (mean, epistemic and total 95% bands)",
    "collapsed": "collapsed: body sampled, last layer's Gaussian q integrated out exactly",
    "collapsed-box": "collapsed, box q on the widest last-layer terms and triangular noise (seed 003)",
}
BAND_LEVELS = (0.05, 0.95)


def collapsed_bands(run: Any, x: np.ndarray, variant: str, samples: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Mean and 5% / 95% quantiles of the collapsed predictive on x, original units."""
    from core.predict.collapsed import collapsed_predict
    dataset = run.dataset()
    predictive = collapsed_predict(run, x, samples=int(samples), seed=int(seed), variant=variant)
    predictive = predictive.unstandardised(dataset.target_mean, dataset.target_std)
    low, high = predictive.quantiles(BAND_LEVELS)
    return {"mean": np.asarray(predictive.mean), "low": low, "high": high,
            "ensemble_mean": predictive.ensemble_mean_per_draw.mean(axis=0)}


def reference_bands(run: Any, x: np.ndarray) -> dict[str, Any] | None:
    """The cached NUTS reference on the run's exact data (same widths preferred): its mean and 5% / 95%
    quantiles on x, id and diagnostics; None when no reference is cached for this dataset."""
    from core.reference import ReferenceStore
    store = ReferenceStore()
    dataset = run.dataset()
    ref_id = store.find_for_dataset(dataset.fingerprint, hidden=tuple(run.config.hidden))
    if ref_id is None:
        return None
    posterior = store.read(ref_id)
    bands = posterior.bands(x, BAND_LEVELS)
    return {"mean": bands["mean"], "low": bands[f"q{BAND_LEVELS[0]:g}"], "high": bands[f"q{BAND_LEVELS[1]:g}"],
            "reference_id": ref_id, "hidden": list(posterior.config.hidden), "draws": posterior.n_samples,
            "diagnostics": dict(posterior.diagnostics)}
