"""The dashboard's one door into core: runs, predictions, statistics as numpy.

No Streamlit here (the cached wrappers live in dashboard/cache.py), so the
worker thread and the tests can call these directly. Everything a user can
get wrong raises a core BNNError with a message; pages show it with st.error.
"""

from __future__ import annotations

import math
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from core.enums import InclusionPrior, LearningRateSchedule
from core.errors import ConfigError
from core.models.base import Keep, StatisticSpec
from core.predict.draw_cache import DrawCache
from core.predict.metrics.classification import DOUBT_LEVEL
from core.predict.modes import REGRESSION_PREDICTIVES, PredictionMode, WeightChoice  # noqa: F401
from core.runs import parsing
# The shared rules for outside values and the settings declarations, for the pages (the one door):
from core import limits, validate  # noqa: F401
from core.settings import Setting, register  # noqa: F401
from core.validate import plain  # noqa: F401

# The vocabulary and its help live on PredictionMode; these are the dashboard's views of it.
PREDICTION_MODES: tuple[str, ...] = tuple(mode.value for mode in PredictionMode)
MODE_HELP = {mode.value: mode.description for mode in PredictionMode}
WEIGHT_CHOICES = WeightChoice.choices()  # prune's weights, as the Pruning page offers them
LR_SCHEDULES = LearningRateSchedule.values()  # constant first: the default
BETA_PRIORS = InclusionPrior.beta_priors()  # the form offers empirical Bayes for these
DOUBT_LEVEL = DOUBT_LEVEL  # the doubt decision's level (figures and captions show it)
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


def run_handover(run: Any) -> dict[str, Any]:
    """A trained run as plain data for the process that asked for it (see core.runs.run_handover)."""
    from core.runs import run_handover as core_handover
    return core_handover(run)


def run_from_handover(payload: dict[str, Any]) -> Any:
    """The trained run a child process handed over, rebuilt without reading the store."""
    from core.runs import run_from_handover as core_from_handover
    return core_from_handover(payload)


def dataset_table() -> list[dict[str, Any]]:
    """Every registered dataset as a dict (name, task, shapes, availability)."""
    from core.data import list_datasets
    return [info.to_dict() for info in list_datasets()]


def family_option_fields() -> dict[str, list[Any]]:
    """Each family's Options dataclass fields, by family name."""
    import dataclasses

    from core.models.registry import FAMILY_PATHS, family_class
    return {name: list(dataclasses.fields(family_class(name).Options)) for name in FAMILY_PATHS}


def option_specs(method: str) -> dict[str, Any]:
    """Each option's declaration (core.models.options.OptionSpec) of family `method`, by name."""
    from core.models.registry import family_class
    return family_class(method).Options.option_specs()


def undeclared_option(name: str) -> Any:
    from core.models.options import undeclared
    return undeclared(name)


def family_option_defaults(method: str, dataset: str) -> dict[str, Any]:
    """A family's option defaults on a dataset (the small regression sets change some)."""
    from core.runs.config import family_option_defaults as defaults
    return defaults(method, dataset)


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


def headline_text(metrics: dict[str, Any]) -> str:
    """'<key>: <value>' of a run's first stored headline metric (as `python -m core runs` picks it), or ''."""
    from core.predict.metrics.headline import stored_headline
    headline = stored_headline(metrics)
    return "" if headline is None else f"{headline[0]}: {headline[1]:.4f}"


def headline_metric(task: str) -> str:
    """The metric a run of `task` is judged by first (core's HEADLINE_METRIC: accuracy or rmse)."""
    from core.predict.metrics.headline import headline_metric as core_headline_metric
    return core_headline_metric(task)


def total_epochs(config: Any) -> int:
    return config.train.total_epochs()


def default_settings(dataset: str, batch_size: int = 100) -> dict[str, Any]:
    """What a run on `dataset` gets when the form leaves hidden widths and epochs to core."""
    from core.runs.config import RunConfig
    from core.train import DEFAULT_KL_WEIGHT

    config = RunConfig(dataset=dataset, train={"batch_size": int(batch_size)})
    return {"hidden": config.hidden, "epochs": config.train.epochs, "kl_weight": DEFAULT_KL_WEIGHT}


def parse_hidden(text: str) -> tuple[int, ...]:
    """'400, 600' -> (400, 600); ConfigError on anything else (the CLI's --hidden rule)."""
    return parsing.parse_hidden(text)


def parse_options(text: str, what: str = "family options") -> dict[str, Any]:
    """'prior_inclusion=0.1, slab=student-t' -> {'prior_inclusion': 0.1, 'slab': 'student-t'} (the CLI's rule);
    a ConfigError names the box as `what`."""
    return parsing.parse_pair_list(text, what)


def check_dataset_params(dataset: str, params: dict[str, Any]) -> None:
    """DataError when the generator of `dataset` would refuse `params` (core.data.toy's own rules),
    found without generating anything. A set that is not generated takes none: the config says so."""
    from core.data import toy
    if dataset in toy.GENERATORS:
        toy.check_params(dataset, params)


def parse_scalar(raw: str) -> Any:
    """One option value, parsed as the CLI's --option values are."""
    return parsing.parse_value(raw)


def training_snapshots(run: Any) -> Any | None:
    """What training recorded after every epoch (core.snapshots.TrainingSnapshots: histograms of the
    statistic, per-layer densities, masks of small nets), or None for a run trained before snapshots
    were recorded."""
    return run.snapshots()


# --- the statistic and its threshold range ---------------------------------------------------------

# The slider's range is the family's StatisticSpec with finite ends (name, keep, default, low, high,
# keep_above, clip): one type for a statistic and its range.
ThresholdRange = StatisticSpec


def threshold_range(spec: Any, statistics: Sequence[np.ndarray]) -> ThresholdRange:
    """The spec with an infinite end replaced by (a little above) the largest observed statistic."""
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
    return StatisticSpec(str(spec.name), Keep(spec.keep), default, low, high)


def _round_up(value: float) -> float:
    if value <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    return math.ceil(value / scale * 10) / 10 * scale


def native_statistics(model: Any) -> list[np.ndarray]:
    with torch.no_grad():
        return [s.detach().cpu().numpy().astype(np.float64) for s in model.native_statistics()]


def masks_at(statistics: Sequence[np.ndarray], threshold: float, keep_above: bool) -> list[np.ndarray]:
    """Keep masks from precomputed statistics, by StatisticSpec.keep_mask."""
    rule = StatisticSpec("statistic", Keep.ABOVE if keep_above else Keep.BELOW, threshold, -math.inf, math.inf)
    return [np.asarray(rule.keep_mask(np.asarray(s), threshold)) for s in statistics]


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


# Per-draw outputs of sampled predictions, shared by every session of the server: moving the R
# slider up computes only the new draws, moving it down none (core.predict.draw_cache).
def draw_cache_bytes() -> int:
    """The draw cache's bound: $BNN_DRAW_CACHE_MB megabytes (default 256; 0 keeps nothing; a value
    that is not a number >= 0 is refused, never replaced: dashboard/settings.py)."""
    from dashboard.settings import draw_cache_bytes as bound
    return bound()


def predict_slots() -> int | None:
    """Computations run at once, the rest queued first come, first served
    (core.predict.draw_cache.FairTurns): $BNN_PREDICT_SLOTS; unset or 0: no limit.
    Measured with the 30-session classroom load test (benchmarks/results/classroom_load_slots.md,
    two runs each): the p95 slider move was 6.0-6.8 s at every setting (the class asks for more
    new draws than two cores compute); 2 slots answered the median move in 0.08 s against 0.4 s
    with no limit, but the slowest in 14 s against 8-9 s (a request arriving behind a long queue
    waits for all of it), so no limit is the default."""
    from dashboard.settings import predict_slots as slots
    return slots()


DRAW_CACHE = DrawCache(draw_cache_bytes(), compute_slots=predict_slots())


def predict(run: Any, x: np.ndarray, mode: str, samples: int, threshold: float | None, seed: int = 0,
            weights: str | None = None, inputs: Any = None) -> Any:
    """Run.predict with the threshold dropped for modes that take none; regression in original units.

    `inputs` names x for the draw cache ("test", ("ood", name, n, seed), ...): one name must always
    mean the same inputs of one run. With a name, a sampling mode keeps each draw's outputs
    (DRAW_CACHE), so R = 20 after R = 10 computes draws 10..19 only; the numbers are Run.predict's."""
    threshold, weights = effective_threshold(mode, threshold), weights if mode == "prune" else None
    if inputs is None:
        return run.predict(x, mode=mode, samples=int(samples), threshold=threshold, seed=int(seed), weights=weights)
    return DRAW_CACHE.predict(run, x, inputs, owner=getattr(run, "run_id", None), mode=mode, samples=int(samples),
                              threshold=threshold, seed=int(seed), weights=weights)


def forget_draws(run_id: str) -> None:
    """Drop a deleted or retrained run's kept draws (and no other run's)."""
    DRAW_CACHE.forget(run_id)


def clear_draws() -> None:
    DRAW_CACHE.clear()


def test_metrics(arrays: dict[str, np.ndarray], dataset: Any, doubt_level: float = DOUBT_LEVEL) -> dict[str, Any]:
    """The metric cards of a test-set prediction (arrays of a Prediction in original units): core's one
    metrics function, flattened (doubt_accuracy, doubt_count, doubt_fraction, coverage_95)."""
    from core.predict.metrics import card_metrics, prediction_metrics
    y = dataset.y_test if dataset.task == "classification" else dataset.unstandardise(dataset.y_test)
    result: dict[str, Any] = {"density": float(arrays["density"]), "disconnected": bool(arrays["disconnected"])}
    result.update(card_metrics(prediction_metrics(arrays, y, dataset.task, doubt_level=doubt_level)))
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
    """Test metric (accuracy, or RMSE in original units) against density over thresholds:
    Run.default_sweep (the curve stored with the run, else computed over n_points thresholds)."""
    result = run.default_sweep(n_points=n_points)
    return SweepCurve(np.asarray(result.thresholds, dtype=np.float64), np.asarray(result.density, dtype=np.float64),
                      np.asarray(result.values, dtype=np.float64), str(result.metric))


def curve_point(curve: SweepCurve, threshold: float) -> tuple[float, float]:
    """(density, metric) of the curve at `threshold`, interpolated between its neighbouring points:
    the marker of the current threshold, read off the sweep instead of predicting the test set again."""
    order = np.argsort(curve.thresholds, kind="stable")
    grid = curve.thresholds[order]
    return (float(np.interp(threshold, grid, curve.density[order])),
            float(np.interp(threshold, grid, curve.values[order])))


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


# --- issue 13: what the pages add (labels, estimates, mode semantics, surfaces, priors, take-away) ----------

# Modes that cut at the family's default (the median probability model), whatever the slider says.
DEFAULT_CUT_MODES = tuple(mode.value for mode in PredictionMode.default_cut_modes())


def mode_threshold(mode: str, threshold: float | None, default: float) -> float | None:
    """The cut a mode predicts with on the pages: mpm / mpm-mean are the median probability model,
    the statistic cut at the family's default; prune cuts at the slider; bma / mean cut nothing."""
    if mode in DEFAULT_CUT_MODES:
        return effective_threshold(mode, default)
    return effective_threshold(mode, threshold)


def mode_uses_slider(mode: str) -> bool:
    return mode not in DEFAULT_CUT_MODES and uses_threshold(mode)


def mode_draws_samples(mode: str, weights: str | None = None) -> bool:
    return PredictionMode(mode).draws_samples(weights)


def same_numbers_mode(mode: str, weights: str | None = None) -> str:
    """The mode that predicts exactly what `mode` with `weights` does (core's rule,
    PredictionMode.same_numbers_as); aliases such as 'MED-MEA' by their names."""
    from core.predict.modes import parse_mode
    return parse_mode(mode).same_numbers_as(weights).value


def run_store_folder() -> Any:
    """The folder of the run store ($BNN_CACHE_DIR/runs): its modification time changes when a run
    is added or deleted."""
    from core.runs.store import RunStore
    return RunStore().root


def expected_density(statistics: Sequence[np.ndarray], statistic_name: str) -> float | None:
    """Expected fraction of weights in a sampled network, for families that sample the structure
    (the mean inclusion probability); None when every draw uses every weight."""
    if not samples_structure(statistic_name):
        return None
    values = np.concatenate([np.asarray(s, dtype=np.float64).ravel() for s in statistics])
    return float(values.mean()) if values.size else None


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out[prefix] = value


# Fields every label already names, or that say nothing to a reader.
_LABEL_SKIP = ("dataset", "method", "hidden")


def config_differences(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """For runs that share dataset, method and widths: the config fields whose values differ
    among them, as 'name=value, ...' per run id ('' for a run alone in its group)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        config = row.get("config") or {}
        key = (row.get("dataset"), row.get("method"), tuple(config.get("hidden") or row.get("hidden") or ()))
        groups.setdefault(key, []).append(row)
    result: dict[str, str] = {}
    for members in groups.values():
        flat = []
        for row in members:
            fields: dict[str, Any] = {}
            _flatten("", {k: v for k, v in (row.get("config") or {}).items() if k not in _LABEL_SKIP}, fields)
            flat.append(fields)
        keys = sorted(set().union(*flat)) if flat else []
        differing = [k for k in keys if len({repr(f.get(k)) for f in flat}) > 1]
        for row, fields in zip(members, flat):
            parts = [f"{k.split('.')[-1]}={_short(fields.get(k))}" for k in differing]
            result[row["run_id"]] = ", ".join(parts)
    return result


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "-".join(map(str, value))
    return str(value)


def run_labels(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """'lbbnn [100-100] on mnist-small, epochs=5, prior_inclusion=0.1 (ab12cd34)': what tells runs apart."""
    differences = config_differences(rows)
    labels = {}
    for row in rows:
        hidden = "-".join(str(h) for h in (row.get("hidden") or (row.get("config") or {}).get("hidden") or []))
        extra = differences.get(row["run_id"], "")
        labels[row["run_id"]] = (f"{row.get('method')} [{hidden}] on {row.get('dataset')}"
                                 f"{', ' + extra if extra else ''} ({row['run_id'][:8]})")
    return labels


# --- admission: every request that allocates is costed by core.cost before anything is built ----------

def admission_limits() -> Any:
    """What one request may cost on this server (core.cost.Limits): BNN_MEMORY_BUDGET_MB,
    BNN_MAX_WEIGHTS, BNN_PLAYGROUND_MAX_WEIGHTS, BNN_MAX_GENERATED_POINTS, BNN_MAX_PREDICTION_VALUES,
    BNN_MAX_PREDICTION_SECONDS and BNN_MAX_TRAINING_MINUTES (declared in core.cost), each from the
    environment, else its key in secrets.toml, else its default."""
    from core.cost import server_limits
    from dashboard.settings import _secret
    return server_limits(fallback=_secret)


def data_shape(dataset: str, params: dict[str, Any] | None = None) -> Any:
    """A dataset's sizes from its name and generator parameters, without loading it (core.cost.DataShape)."""
    from core.cost import dataset_shape
    return dataset_shape(dataset, params)


def training_estimate(config: Any) -> dict[str, Any]:
    """Weights, memory (bytes), CPU seconds on this server (its measured speed) and seconds now (times
    its current load) of a training of `config`; `refusal` is core.cost's message, or None."""
    from core import cost
    limits = admission_limits()
    shape = cost.dataset_shape(config.dataset, config.dataset_params)
    refusal = None
    try:
        cost.admit_dataset(config.dataset, config.dataset_params, limits)
        need = cost.admit_training(config, shape, limits)
    except cost.AdmissionError as exc:
        refusal = str(exc)
        need = cost.training_cost(config, shape)
    return {"weights": need.weights, "memory_bytes": need.bytes, "seconds": need.seconds,
            "wall_seconds": need.wall_seconds(), "epochs": need.epochs, "n_train": shape.n_train,
            "refusal": refusal}


def size_text(n_bytes: float) -> str:
    from core.cost import size_text as core_size_text
    return core_size_text(n_bytes)


def time_text(seconds: float) -> str:
    from core.cost import time_text as core_time_text
    return core_time_text(seconds)


def estimate_seconds(config: Any, loaded: bool = True) -> float:
    """Expected seconds of a training on this server (core.cost.estimate_seconds; times the current
    load when `loaded`): for the queue."""
    from core.cost import estimate_seconds as core_estimate
    return core_estimate(config, loaded=loaded)


def remaining_seconds(epoch_seconds: Sequence[float], total_epochs: int, estimated_seconds: float | None,
                      elapsed: float) -> float | None:
    """A running training's time left (core.cost.remaining_seconds): estimate, then measured epochs."""
    from core.cost import remaining_seconds as core_remaining
    return core_remaining(epoch_seconds, total_epochs, estimated_seconds, elapsed)


def samples_allowed(run: Any, n_inputs: int, samples: int) -> tuple[int, str | None]:
    """(R to compute, why R was lowered or None): the largest R <= samples whose prediction over
    n_inputs inputs fits this server's limits (0 when not even R = 1 fits)."""
    from core import cost
    limits = admission_limits()
    config = run.config
    shape = cost.dataset_shape(config.dataset, config.dataset_params)
    allowed = cost.largest_samples(config, shape, int(n_inputs), limits, int(samples))
    if allowed >= int(samples):
        return int(samples), None
    return allowed, cost.samples_message(int(n_inputs), int(samples), allowed, config, shape, limits)


def device_message(text: str) -> str:
    """core's device errors name the CLI flag; on the Train form the choice is the Device box."""
    return text.replace("use --device auto or cpu", "choose Device: auto or cpu")


# --- the decision surface of a 2-D classifier ---------------------------------------------------------

def input_grid_2d(x: np.ndarray, n: int = 60, margin: float = 0.15) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An n x n grid over the range of 2-D inputs x (plus a margin): (points (n*n, 2), xs, ys)."""
    x = np.asarray(x, dtype=np.float64)
    low, high = x.min(axis=0), x.max(axis=0)
    pad = (high - low) * margin
    xs = np.linspace(low[0] - pad[0], high[0] + pad[0], n)
    ys = np.linspace(low[1] - pad[1], high[1] + pad[1], n)
    gx, gy = np.meshgrid(xs, ys)
    return np.column_stack([gx.ravel(), gy.ravel()]).astype(np.float32), xs, ys


def surface_arrays(probs_per_draw: np.ndarray) -> dict[str, np.ndarray]:
    """Per grid point: the averaged class probabilities' argmax and max, the predictive entropy and
    the spread of the R draws (the sd of the winning class's probability over draws)."""
    per_draw = np.asarray(probs_per_draw, dtype=np.float64)
    mean = per_draw.mean(axis=0)
    winner = mean.argmax(axis=1)
    spread = per_draw[:, np.arange(mean.shape[0]), winner].std(axis=0)
    return {"predicted": winner, "confidence": mean.max(axis=1), "entropy": predictive_entropy(mean),
            "spread": spread}


# --- priors drawn beside the posterior ---------------------------------------------------------------

def prior_of_statistic(family: str, options: dict[str, Any], n_points: int = 200) -> dict[str, Any] | None:
    """What the family's prior says about its statistic, to draw beside the posterior histogram.

    lbbnn / lbbnn-lfmvn: the prior inclusion probability psi; a point for the Bernoulli prior,
    the Beta(a_psi, b_psi) density of psi for the beta priors. None for statistics no prior
    speaks of (signal-to-noise ratios, magnitudes, log alpha under the log-uniform prior)."""
    if family not in ("lbbnn", "lbbnn-lfmvn"):
        return None
    import dataclasses

    from core.models.registry import family_class
    defaults = family_class(family).Options()
    values = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults)}
    values.update({k: v for k, v in (options or {}).items() if k in values})
    kind = values["inclusion_prior"]
    if kind == "bernoulli":
        return {"kind": "point", "value": float(values["prior_inclusion"]),
                "label": f"prior inclusion probability psi = {float(values['prior_inclusion']):.3g}"}
    a, b = float(values["beta_a"]), float(values["beta_b"])
    grid = np.linspace(0.0, 1.0, n_points + 2)[1:-1]
    log_density = ((a - 1) * np.log(grid) + (b - 1) * np.log1p(-grid)
                   - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)))
    return {"kind": "density", "x": grid, "density": np.exp(log_density), "mean": a / (a + b),
            "label": f"Beta({a:.3g}, {b:.3g}) prior on psi ({kind}), mean {a / (a + b):.3g}"}


# --- tune and take away -----------------------------------------------------------------------------

def suggested_threshold(thresholds: np.ndarray, density: np.ndarray, values: np.ndarray, metric: str,
                        tolerance: float = 0.005) -> dict[str, float] | None:
    """The sparsest point of a sweep whose metric is within `tolerance` of the best: accuracy at
    least best - tolerance (0.005 = half a point), or RMSE at most best * (1 + tolerance)."""
    thresholds, density, values = (np.asarray(a, dtype=np.float64) for a in (thresholds, density, values))
    finite = np.isfinite(values) & np.isfinite(density)
    if not finite.any():
        return None
    if metric == "accuracy":
        best = float(values[finite].max())
        good = finite & (values >= best - tolerance)
    else:
        best = float(values[finite].min())
        good = finite & (values <= best * (1 + tolerance))
    candidates = np.flatnonzero(good)
    index = candidates[np.lexsort((-values[candidates] if metric == "accuracy" else values[candidates],
                                   density[candidates]))[0]]
    return {"threshold": float(thresholds[index]), "density": float(density[index]),
            "value": float(values[index]), "best": best}


def curve_csv(thresholds: np.ndarray, density: np.ndarray, values: np.ndarray, metric: str) -> str:
    """The sweep as CSV text: threshold, density, metric."""
    lines = [f"threshold,density,{metric}"]
    lines += [f"{t:.6g},{d:.6g},{v:.6g}" for t, d, v in zip(thresholds, density, values)]
    return "\n".join(lines) + "\n"


def export_zip(run: Any, threshold: float) -> bytes:
    """What `python -m core export RUN --threshold T --out DIR` writes, as a zip of DIR's files
    (unzip it and `core.predict.export.load_exported(DIR)` reads it)."""
    import io
    import tempfile
    import zipfile

    from core.predict import evaluate
    from core.predict.export import export_pruned
    from core.predict.modes import PredictionMode

    metrics = evaluate(run.model, run.dataset(), mode=PredictionMode.PRUNE, threshold=float(threshold),
                       weights="mean")
    keep = ("accuracy", "nll", "ece", "rmse", "log_likelihood", "density")
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory() as folder:
        path = export_pruned(run.model, float(threshold), folder, metrics={k: metrics[k] for k in keep if k in metrics})
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in sorted(path.iterdir()):
                archive.write(file, arcname=file.name)
    return buffer.getvalue()


def load_exported(path: Any) -> Any:
    from core.predict.export import load_exported as core_load_exported
    return core_load_exported(path)


def device_problem(device: str) -> str | None:
    """Why the Train form's device cannot be used here (in the form's words), or None."""
    from core.device import resolve_device
    try:
        resolve_device(device)
    except ConfigError as exc:
        return device_message(str(exc))
    return None


def setting_key(config_fields: dict[str, Any]) -> str:
    """Runs that differ only by their training seed share this key (the Compare page's medians)."""
    import json
    fields = {k: v for k, v in (config_fields or {}).items() if k not in ("seed", "device")}
    return json.dumps(fields, sort_keys=True, default=str)


# The seed-000 table: (column, mode, R) for the Compare page.
COMPARE_MODES = tuple((column, mode.value, r) for column, mode, r in PredictionMode.paper_table())


def samples_structure(statistic_name: str) -> bool:
    """Whether the statistic is an inclusion probability, so that a structure can be drawn from it."""
    from core.models.registry import statistic_samples_structure
    return statistic_samples_structure(statistic_name)


def sample_structure(statistics: Sequence[np.ndarray], statistic_name: str, seed: int = 0) -> list[np.ndarray] | None:
    """One structure drawn from the posterior, gamma ~ Bernoulli(alpha) per weight (seed 002's
    'sampled structure'); None for families whose statistic is not an inclusion probability."""
    if not samples_structure(statistic_name):
        return None
    rng = np.random.default_rng(int(seed))
    return [rng.random(np.shape(s)) < np.asarray(s, dtype=np.float64) for s in statistics]


# --- the live playground: a tiny network trained in this process, drawn while it trains -------------------

PLAYGROUND_SETS = ("toy-sine-gaps", "toy-cubic", "toy-hetero", "two-moons", "two-spirals")


def playground_defaults(dataset: str) -> dict[str, Any]:
    """What the playground starts from: the generator's own noise, and core's default widths and
    number of epochs for the set (the small-regression defaults fit the 1-D curves; with fewer
    units or steps the fit is a line, docs/why-lbbnn-over-prunes.md)."""
    from core.data.toy import GENERATOR_DEFAULTS
    from core.runs.config import RunConfig

    config = RunConfig(dataset=dataset, train={"batch_size": 500})
    return {"noise": float(GENERATOR_DEFAULTS[dataset]["noise"]), "hidden": list(config.hidden),
            "epochs": int(config.train.epochs)}
def playground_max_weights() -> int | None:
    """A class's server trains playground networks in its own process: BNN_PLAYGROUND_MAX_WEIGHTS."""
    return admission_limits().playground_weights


def admit_playground(values: dict[str, Any]) -> Any:
    """core.cost's admission of a playground fit, from the form's values alone (nothing is built):
    the config, or AdmissionError saying why not and what widths fit."""
    from core import cost
    config = make_config(values)
    limits = admission_limits()
    shape = cost.admit_dataset(config.dataset, config.dataset_params, limits)
    cost.admit_playground(config, shape, limits)
    return config


def playground_refusal(values: dict[str, Any]) -> str | None:
    """Why the playground refuses these values (core.cost's message), or None."""
    from core.errors import BNNError
    try:
        admit_playground(values)
    except BNNError as exc:
        return str(exc)
    return None



class PlaygroundTraining:
    """Trains one small config in a thread of this process and keeps the latest picture.

    Every `every` epochs the training thread itself (between epochs, so nothing races the
    optimiser) predicts on the plotting grid with R posterior draws and reads the statistic: the
    page draws `snapshot()` while the training goes on. `cancel()` stops it within a minibatch.
    `start()` takes the untrained picture before it returns, so the page's first run draws it.
    `present()` (optional) tells whether the page's browser session is still there: a training
    whose session has been gone for ABANDONED_SECONDS stops (nothing keeps its result, and a
    class's closed tabs would otherwise go on taking the server's CPU).
    """

    ABANDONED_SECONDS = 2.0
    PRESENCE_CHECK_SECONDS = 0.5

    def __init__(self, values: dict[str, Any], every: int = 20, samples: int = 20, hold_seconds: float = 0.0,
                 present: Callable[[], bool] | None = None):
        import threading

        self.config = make_config(values)
        self._values = dict(values)
        self.every = max(1, int(every))
        self.samples = int(samples)
        # The training waits (at most this long) for first_picture_drawn(): the page's first
        # picture is built without a training thread competing for the interpreter.
        self.hold_seconds = max(0.0, float(hold_seconds))
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._sent = threading.Event()
        self._drawn = threading.Event()
        self._snapshot: dict[str, Any] | None = None
        self.error: str | None = None
        self.done = False
        self.abandoned = False
        self.started = None
        self._present = present
        self._presence_checked = 0.0
        self._absent_since: float | None = None
        self._thread = threading.Thread(target=self._run, name="bnn-playground", daemon=True)

    def start(self) -> "PlaygroundTraining":
        """Builds the data, the model and its untrained picture here (milliseconds for these sizes),
        so that the caller can draw at once; then trains in the thread."""
        import time
        self.started = time.time()
        if self._guarded(self._prepare):
            self._thread.start()
        else:
            self.done = True
        return self

    def first_picture_sent(self) -> None:
        """The page has built and sent the first picture: the thread may warm up (see _train)."""
        self._sent.set()

    def first_picture_drawn(self) -> None:
        """The page has drawn a picture: the training may take the CPU now."""
        self._sent.set()
        self._drawn.set()

    def cancel(self) -> None:
        self._cancel.set()
        self._sent.set()
        self._drawn.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread.ident is not None:  # never started when the preparation failed
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def snapshot(self) -> dict[str, Any] | None:
        with self._lock:
            return self._snapshot

    def _guarded(self, step: Callable[[], None]) -> bool:
        """Runs step; a BNNError or a bug becomes self.error (a message for the page). True when it ran."""
        from core.errors import BNNError, TrainingCancelled

        try:
            step()
            return True
        except TrainingCancelled:
            return False
        except BNNError as exc:
            self.error = str(exc)
        except Exception as exc:  # a bug: a message on the page, the traceback in the log
            import logging
            logging.getLogger(__name__).exception("playground training failed")
            self.error = f"unexpected error ({type(exc).__name__}): {exc}"
        return False

    def _prepare(self) -> None:
        from core.models.network import build_model

        # Costed from the sizes before anything is built: building 12000-12000 first took the server
        # from 1.2 to 3.3 GB before the old size check refused it.
        admit_playground(self._values)
        dataset = self.config.load_dataset()
        model = build_model(self.config.model_config(dataset), "cpu",
                            torch.Generator(device="cpu").manual_seed(self.config.seed))
        if dataset.in_features == 1:
            x_plot = dataset.x_grid
        else:
            x_plot = input_grid_2d(dataset.x_train, 40)[0]
        self._dataset, self._x_plot, self._model = dataset, x_plot, model
        self._total = self.config.train.total_epochs()
        self._take(model, 0)

    def _train(self) -> None:
        import time
        from core.train import train

        waited = time.monotonic()
        self._sent.wait(self.hold_seconds)
        # The first optimiser of a process imports much of torch (2-4 s on the class machine): done
        # while the browser draws the first picture, not after it.
        torch.optim.Adam([torch.zeros(1, requires_grad=True)])
        self._drawn.wait(max(0.0, self.hold_seconds - (time.monotonic() - waited)))
        if self._cancel.is_set():
            return
        model, dataset, total = self._model, self._dataset, self._total
        x = torch.from_numpy(np.ascontiguousarray(dataset.x_train))
        y = torch.from_numpy(np.ascontiguousarray(dataset.y_train))

        def progress(record: dict) -> None:
            self._check_presence()
            epoch = int(record.get("epoch", 0))
            if epoch % self.every == 0 or epoch >= total:
                self._take(model, epoch, record)

        # (no per-epoch snapshots: the page draws the picture itself, and its epochs are short)
        train(model, x, y, self.config.train, seed=self.config.seed, progress=progress, cancel=self._cancel,
              snapshots=False)

    def _check_presence(self) -> None:
        """Cancel once the page's session has been gone ABANDONED_SECONDS (checked at most every
        PRESENCE_CHECK_SECONDS; a reconnect within the grace keeps the training)."""
        import time
        if self._present is None:
            return
        now = time.monotonic()
        if now - self._presence_checked < self.PRESENCE_CHECK_SECONDS:
            return
        self._presence_checked = now
        if self._present():
            self._absent_since = None
        elif self._absent_since is None:
            self._absent_since = now
        elif now - self._absent_since >= self.ABANDONED_SECONDS:
            self.abandoned = True
            self._cancel.set()

    def _run(self) -> None:
        try:
            self._guarded(self._train)
        finally:
            self.done = True

    def _take(self, model: Any, epoch: int, record: dict | None = None) -> None:
        from core.predict import predict as core_predict

        dataset = self._dataset
        prediction = core_predict(model, self._x_plot, mode="bma", samples=self.samples, seed=0)
        statistics = native_statistics(model)
        spec = model.spec
        masks = masks_at(statistics, float(spec.default_threshold), Keep(spec.keep) is Keep.ABOVE)
        picture: dict[str, Any] = {"epoch": epoch, "total_epochs": self._total, "statistics": statistics,
                                   "statistic": str(spec.name), "default": float(spec.default_threshold),
                                   "masks": masks, "loss": None if record is None else record.get("loss"),
                                   "x_plot": self._x_plot}
        if dataset.task == "regression":
            prediction = prediction.unstandardised(dataset.target_mean, dataset.target_std)
            picture.update(mean=np.asarray(prediction.mean), mean_per_draw=np.asarray(prediction.mean_per_draw),
                           epistemic_std=np.sqrt(np.asarray(prediction.epistemic_variance)),
                           total_std=np.sqrt(np.asarray(prediction.total_variance)))
        else:
            picture.update(surface_arrays(np.asarray(prediction.probs_per_draw)))
        with self._lock:
            self._snapshot = picture


def server_folders() -> list[tuple[Path, str]]:
    """The server's own folders with the words a page shows instead of them (a page never shows an
    absolute server path): the download cache, the run store, the cache folder, $BNN_CACHE_DIR and
    $BNN_DATA_DIR when set."""
    from core.data.locations import CACHE_DIR_ENV, DATA_DIR_ENV, resolve_data_dir, user_cache_dir
    from core.runs.store import default_cache_dir
    from core.settings import CACHE_DIR
    folders = [(Path(user_cache_dir()), "the download cache"), (default_cache_dir() / "runs", "the run store"),
               (default_cache_dir(), "the cache folder")]
    if CACHE_DIR.is_set():
        folders.append((Path(CACHE_DIR.read()).expanduser(), f"${CACHE_DIR_ENV}"))
    data_dir = resolve_data_dir()
    if data_dir is not None:
        folders.append((Path(data_dir), f"${DATA_DIR_ENV}"))
    return folders
