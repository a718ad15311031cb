"""The dashboard's one door into core: runs, predictions, statistics as numpy.

A facade: each function hands a page's request to core (the logic lives there: core.predict.thresholds,
core.runs.labels, core.admission_estimates, core.models.prior_summary) and returns plain values. No Streamlit
here (the cached wrappers live in dashboard/cache.py), so the worker thread and the tests can call
these directly. Everything a user can get wrong raises a core BNNError with a message; pages show it
with st.error.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable

import numpy as np

# The shared rules for outside values and the settings declarations (the dashboard's own in
# core.dashboard_settings, read by dashboard/settings.py), for the pages (the one door):
from core import dashboard_settings, limits, runs, validate  # noqa: F401
from core.cost import remaining_seconds, size_text, time_text  # noqa: F401
from core.data.ood_sets import OOD_PARTNER, load_ood_inputs, ood_set_names  # noqa: F401
from core.device import device_message, device_problem  # noqa: F401  (the Train form's Device box)
from core.enums import InclusionPrior, LearningRateSchedule
from core.lessons import HIDEABLE_CONTROLS, lesson_names, load_lesson  # noqa: F401  (the lesson panel)
from core.models.options import undeclared as undeclared_option  # noqa: F401
from core.models.prior_summary import prior_of_statistic  # noqa: F401
from core.predict.bands import collapsed_bands  # noqa: F401  (regression bands in original units)
from core.predict.cards import accuracy_by_samples, test_metrics  # noqa: F401
from core.predict.draw_cache import DrawCache
from core.predict.export import kept_counts_at, load_exported  # noqa: F401

# The calibration and decision views and the gap lesson's side-by-side bands: their rules live in core.
from core.predict.metrics.calibration import (  # noqa: F401
    CALIBRATION_BINS,
    GAP_DRAWS,
    INTERVAL_LEVELS,
    classifier_calibration,
    doubt_point,
    entropy_split_means,
    gap_ratio,
    regression_calibration,
)
from core.predict.metrics.classification import DOUBT_LEVEL  # noqa: F401  (figures and captions show it)
from core.predict.metrics.headline import headline_metric  # noqa: F401
from core.predict.metrics.ood import auroc as entropy_auroc  # noqa: F401
from core.predict.metrics.ood import predictive_entropy  # noqa: F401
from core.predict.modes import (  # noqa: F401  (what a mode means on the pages: core's rules)
    COMPARE_MODES,
    DEFAULT_CUT_MODES,
    REGRESSION_PREDICTIVES,
    PredictionMode,
    WeightChoice,
    effective_threshold,
    mode_draws_samples,
    mode_threshold,
    mode_uses_slider,
    parse_mode,
    same_numbers_mode,
    uses_threshold,
)
from core.predict.onnx_export import export_zip  # noqa: F401  (the Pruning page's downloads, safetensors or onnx)
from core.predict.sweep import curve_csv  # noqa: F401  (the sweep's CSV download)

# Choosing a threshold and labelling runs are core's (pure numpy / plain data), passed through as they are:
from core.predict.thresholds import (  # noqa: F401
    SweepCurve,
    ThresholdRange,
    curve_point,
    expected_density,
    masks_at,
    sample_structure,
    samples_structure,
    suggested_threshold,
    threshold_range,
)
from core.reference.bands import reference_bands  # noqa: F401
from core.reference.trust import TRUST_ESS, TRUST_RHAT, architecture, reference_function_band, reference_warning  # noqa: F401
from core.runs import delete_run, load_run, parsing, run_from_handover, run_handover, user_data  # noqa: F401
from core.runs.bundled import install_bundled_runs  # noqa: F401  (the lessons' runs on first start)
from core.runs.folders import server_folders  # noqa: F401  (a page names them instead of showing paths)
from core.runs.labels import config_differences, run_labels, setting_key  # noqa: F401

# A model fitted in this process (the playground) and any model's statistics as numpy:
from core.runs.live import (  # noqa: F401
    build_model,
    conditional_mean_weights,
    native_statistics,
    predict_model,
    train_model,
    warm_up_optimiser,
)
from core.runs.partners import NON_FACTORISED_FAMILY, non_factorised_config, partner_run_id  # noqa: F401
from core.runs.sparsity_views import active_path_densities, explainable, explanation, input_columns  # noqa: F401
from core.settings import Setting, register  # noqa: F401
from core.validate import plain  # noqa: F401
from dashboard.server_secrets import secret

if TYPE_CHECKING:
    from core.cost import DataShape, Limits
    from core.models.network import BayesianMLP  # noqa: F401  (dashboard/playground_training.py's type)
    from core.predict.engine import Prediction
    from core.runs.config import RunConfig
    from core.runs.run import Run
    from core.runs.store import RunInfo
    from core.snapshots import TrainingSnapshots

# The vocabulary and its help live on PredictionMode; these are the dashboard's views of it.
PREDICTION_MODES: tuple[str, ...] = tuple(mode.value for mode in PredictionMode)
MODE_HELP = {mode.value: mode.description for mode in PredictionMode}
LR_SCHEDULES = LearningRateSchedule.values()  # constant first: the default
WEIGHT_CHOICES = WeightChoice.choices()  # prune's weights, as the Pruning page offers them
BETA_PRIORS = InclusionPrior.beta_priors()  # the form offers empirical Bayes for these
DEFAULT_DATASET = "mnist-small"


# --- runs and configs ----------------------------------------------------------------------------------


def list_runs() -> list[RunInfo]:
    """RunInfo rows of the default store (newest last); corrupt runs are included with status."""
    return list(runs.list_runs())


def train_run(config: RunConfig, progress: Callable[[dict], None] | None = None, cancel: Any = None) -> Run:
    return runs.train_run(config, progress=progress, cancel=cancel)


def run_store_folder() -> Path:
    """The folder of the run store ($BNN_CACHE_DIR/runs): its modification time changes when a run
    is added or deleted."""
    from core.runs.store import RunStore

    return Path(RunStore().root)


def dataset_table() -> list[dict[str, Any]]:
    """Every registered dataset as a dict (name, task, shapes, availability)."""
    from core.data import list_datasets

    return [info.to_dict() for info in list_datasets()]


def family_option_fields() -> dict[str, list[dataclasses.Field]]:
    """Each family's Options dataclass fields, by family name."""
    from core.models.registry import FAMILY_PATHS, family_class

    return {name: list(dataclasses.fields(family_class(name).Options)) for name in FAMILY_PATHS}


def family_option_defaults(method: str, dataset: str) -> dict[str, Any]:
    """A family's option defaults on a dataset (the small regression sets change some)."""
    from core.runs.config import family_option_defaults as defaults

    return defaults(method, dataset)


def default_learning_rates() -> dict[str, float]:
    from core.train import DEFAULT_LEARNING_RATES

    return dict(DEFAULT_LEARNING_RATES)


def make_config(values: dict[str, Any]) -> RunConfig:
    """A validated RunConfig from the Train form or a stored config (ConfigError names the bad field)."""
    from core.runs.config import RunConfig

    return RunConfig.from_dict(values)


config_from_fields = make_config  # a stored or posted config's fields


def option_specs(method: str) -> dict[str, Any]:
    """Each option's declaration (core.models.options.OptionSpec) of family `method`, by name."""
    from core.models.registry import family_class

    return family_class(method).Options.option_specs()


def total_epochs(config: RunConfig) -> int:
    return config.train.total_epochs()


def default_settings(dataset: str, batch_size: int = 100) -> dict[str, Any]:
    """What a run on `dataset` gets when the form leaves hidden widths and epochs to core."""
    from core.train import DEFAULT_KL_WEIGHT

    config = make_config({"dataset": dataset, "train": {"batch_size": int(batch_size)}})
    return {"hidden": config.hidden, "epochs": config.train.epochs, "kl_weight": DEFAULT_KL_WEIGHT}


def headline_text(metrics: dict[str, Any]) -> str:
    """'<key>: <value>' of a run's first stored headline metric (as `python -m core runs` picks it), or ''."""
    from core.predict.metrics.headline import stored_headline

    headline = stored_headline(metrics)
    return "" if headline is None else f"{headline[0]}: {headline[1]:.4f}"


# The form's text boxes read as the CLI reads its flags (ConfigError naming the box):
parse_hidden = parsing.parse_hidden  # '400, 600' -> (400, 600)
parse_scalar = parsing.parse_value  # one option value


def parse_options(text: str, what: str = "family options") -> dict[str, Any]:
    """'prior_inclusion=0.1, slab=student-t' -> {'prior_inclusion': 0.1, 'slab': 'student-t'}."""
    return parsing.parse_pair_list(text, what)


def check_dataset_params(dataset: str, params: dict[str, Any]) -> None:
    """DataError when the generator of `dataset` would refuse `params`, found without generating."""
    from core.data import toy

    if dataset in toy.GENERATORS:
        toy.check_params(dataset, params)


def generator_noise(dataset: str) -> float:
    """The noise a toy generator adds by default."""
    from core.data.toy import GENERATOR_DEFAULTS

    return float(GENERATOR_DEFAULTS[dataset]["noise"])


def training_snapshots(run: Run) -> TrainingSnapshots | None:
    """What training recorded after every epoch, or None for a run trained before snapshots were."""
    return run.snapshots()


# --- predictions (core.predict) -------------------------------------------------------------------------


# Per-draw outputs of sampled predictions, shared by every session of the server: moving the R
# slider up computes only the new draws, moving it down none (core.predict.draw_cache). Its bound
# ($BNN_DRAW_CACHE_MB) and the computations run at once ($BNN_PREDICT_SLOTS; unset: no limit, as
# measured with the classroom load test: benchmarks/results/classroom_load_slots.md) are
# core/dashboard_settings.py's, with secrets.toml as the fallback.
def draw_cache_bytes() -> int:
    return dashboard_settings.draw_cache_bytes(secret)


def predict_slots() -> int | None:
    return dashboard_settings.predict_slots(secret)


DRAW_CACHE = DrawCache(draw_cache_bytes(), compute_slots=predict_slots())


def predict(
    run: Run,
    x: np.ndarray,
    mode: str,
    samples: int,
    threshold: float | None,
    seed: int = 0,
    weights: str | None = None,
    inputs: Hashable | None = None,
) -> Prediction:
    """Run.predict with the threshold dropped for modes that take none; regression in original units.

    `inputs` names x for the draw cache ("test", ("ood", name, n, seed), ...): one name must always
    mean the same inputs of one run. With a name, a sampling mode keeps each draw's outputs
    (DRAW_CACHE), so R = 20 after R = 10 computes draws 10..19 only; the numbers are Run.predict's."""
    threshold, weights = effective_threshold(mode, threshold), weights if mode == "prune" else None
    if inputs is None:
        return run.predict(x, mode=mode, samples=int(samples), threshold=threshold, seed=int(seed), weights=weights)
    return DRAW_CACHE.predict(
        run,
        x,
        inputs,
        owner=getattr(run, "run_id", None),
        mode=mode,
        samples=int(samples),
        threshold=threshold,
        seed=int(seed),
        weights=weights,
    )


def forget_draws(run_id: str) -> None:
    """Drop a deleted or retrained run's kept draws (and no other run's)."""
    DRAW_CACHE.forget(run_id)


def clear_draws() -> None:
    DRAW_CACHE.clear()


SWEEP_MODE = "mpm-mean"  # the curve: cut at each threshold, mean weights of the kept connections


def sweep(run: Run, n_points: int = 30) -> SweepCurve:
    """Test metric (accuracy, or RMSE in original units) against density over thresholds:
    Run.default_sweep (the curve stored with the run, else computed over n_points thresholds)."""
    result = run.default_sweep(n_points=n_points)
    return SweepCurve(
        np.asarray(result.thresholds, dtype=np.float64),
        np.asarray(result.density, dtype=np.float64),
        np.asarray(result.values, dtype=np.float64),
        str(result.metric),
    )


# --- admission: every request that allocates is costed by core.cost before anything is built ----------


def admission_limits() -> Limits:
    """What one request may cost on this server (core.cost.Limits), each limit from the environment,
    else its key in secrets.toml, else its default."""
    from core.cost import server_limits

    return server_limits(fallback=secret)


def data_shape(dataset: str, params: dict[str, Any] | None = None) -> DataShape:
    """A dataset's sizes from its name and generator parameters, without loading it."""
    from core.cost import dataset_shape

    return dataset_shape(dataset, params)


def training_estimate(config: RunConfig) -> dict[str, Any]:
    """core.admission_estimates.training_estimate under this server's limits."""
    from core.admission_estimates import training_estimate as estimate

    return estimate(config, admission_limits())


def estimate_seconds(config: RunConfig, loaded: bool = True) -> float:
    """Expected seconds of a training on this server (times the current load when `loaded`; a scale head's
    first stage whole unless it is in the run store the dashboard trains into, the default one)."""
    from core.cost import estimate_seconds as core_estimate
    from core.runs.training import first_stage_stored

    return core_estimate(config, loaded=loaded, first_stage_stored=first_stage_stored(config))


def samples_allowed(run: Run, n_inputs: int, samples: int) -> tuple[int, str | None]:
    """core.admission_estimates.samples_allowed for the run's config under this server's limits."""
    from core.admission_estimates import samples_allowed as allowed

    return allowed(run.config, n_inputs, samples, admission_limits())


def admit_fit(config: RunConfig) -> RunConfig:
    """core.admission_estimates.admit_fit under this server's limits (AdmissionError when refused)."""
    from core.admission_estimates import admit_fit as admit

    return admit(config, admission_limits())
