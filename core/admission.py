"""Admission: the limits a request is checked against (registered settings) and the refusals that
say what would fit. Costs come from the cost model (core.cost_model); `admit_*` raise
AdmissionError before anything is allocated."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from core.admission_shapes import FLOW_FAMILY
from core.cost_model import (
    COUNT_PARAMETERS,
    MB,
    Cost,
    DataShape,
    Speed,
    dataset_cost,
    dataset_shape,
    prediction_cost,
    server_speed,
    training_cost,
)
from core.errors import ConfigError
from core.settings import Setting, register

# --- limits -------------------------------------------------------------------------------------------

# A classroom server: 2 cores, 24 GB, 30 students. One request may add 1.5 GB to the server (or to its
# training process): with two trainings and a few requests at once the server stays within about
# 2 GB above idle per student action, and far from the machine's memory.
MEMORY_BUDGET = register(
    Setting(
        "BNN_MEMORY_BUDGET_MB",
        "whole",
        1536,
        "memory one request may add to the dashboard server or to its "
        "training process (a training, a playground fit, a generated dataset, a prediction), in MB",
        64,
        10**7,
        secret_key="memory_budget_mb",
    )
)
MAX_WEIGHTS = register(
    Setting(
        "BNN_MAX_WEIGHTS",
        "whole",
        3_000_000,
        "weights (biases included) of a network trained from the dashboard's "
        "Train page (784-1200-1200-10 has 2.4 million)",
        1,
        10**12,
        secret_key="max_weights",
    )
)
PLAYGROUND_MAX_WEIGHTS = register(
    Setting(
        "BNN_PLAYGROUND_MAX_WEIGHTS",
        "whole",
        5000,
        "weights of a playground network (it trains inside the server process, beside every session)",
        1,
        10**9,
        secret_key="playground_max_weights",
    )
)
MAX_GENERATED_POINTS = register(
    Setting(
        "BNN_MAX_GENERATED_POINTS",
        "whole",
        100_000,
        "points a generated toy set may have per count parameter "
        "(n, n_test, n_pool, n_grid); checked by the generators themselves, also on the command line",
        1,
        10**12,
        secret_key="max_generated_points",
    )
)
# The page cache keeps up to 64 test-set predictions for an hour: 10 million values (40 MB of float32,
# the full MNIST test set at R = 100) each.
MAX_PREDICTION_VALUES = register(
    Setting(
        "BNN_MAX_PREDICTION_VALUES",
        "whole",
        10_000_000,
        "inputs x R x outputs of one prediction the dashboard "
        "computes and keeps (10 million: 40 MB of float32, the full MNIST test set at R = 100)",
        1,
        10**12,
        secret_key="max_prediction_values",
    )
)
# Predictions run in the server process, on the page's request: a regression set's metrics cost about
# 3.6 microseconds of CPU per value (73 s for 200,000 inputs at R = 50), so R is also capped by time.
MAX_PREDICTION_SECONDS = register(
    Setting(
        "BNN_MAX_PREDICTION_SECONDS",
        "real",
        20.0,
        "estimated CPU seconds of one prediction a dashboard page computes (R is lowered to what fits)",
        0.1,
        10**6,
        secret_key="max_prediction_seconds",
    )
)
# One training from the dashboard holds a slot of the class's queue: 10 minutes lets the class's
# default trainings (about a minute each on mnist-small) through and turns away a week of epochs.
MAX_TRAINING_MINUTES = register(
    Setting(
        "BNN_MAX_TRAINING_MINUTES",
        "real",
        10.0,
        "estimated CPU minutes of one training started from the "
        "dashboard, on this server's measured speed; a longer one is refused, saying how many epochs fit",
        0.1,
        10**6,
        secret_key="max_training_minutes",
    )
)


@dataclass(frozen=True)
class Limits:
    """What one request may cost. None: no limit of that kind. `where` names the place in messages."""

    memory_bytes: int | None
    max_weights: int | None = None
    playground_weights: int | None = None
    generated_points: int | None = None
    prediction_values: int | None = None
    prediction_seconds: float | None = None
    training_seconds: float | None = None
    where: str = "this server"


def server_limits(fallback: Any = None) -> Limits:
    """The dashboard's limits: each setting from the environment, else `fallback(secret_key)`."""
    return Limits(
        memory_bytes=MEMORY_BUDGET.read(fallback=fallback) * MB,
        max_weights=MAX_WEIGHTS.read(fallback=fallback),
        playground_weights=PLAYGROUND_MAX_WEIGHTS.read(fallback=fallback),
        generated_points=MAX_GENERATED_POINTS.read(fallback=fallback),
        prediction_values=MAX_PREDICTION_VALUES.read(fallback=fallback),
        prediction_seconds=MAX_PREDICTION_SECONDS.read(fallback=fallback),
        training_seconds=MAX_TRAINING_MINUTES.read(fallback=fallback) * 60.0,
    )


def physical_memory_bytes() -> int | None:
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def command_line_limits() -> Limits:
    """The command line trains on the user's own machine: only memory is limited, to half of it
    (or $BNN_MEMORY_BUDGET_MB when set), and generated sets by BNN_MAX_GENERATED_POINTS."""
    physical = physical_memory_bytes()
    memory = MEMORY_BUDGET.read() * MB if MEMORY_BUDGET.is_set() else None if physical is None else physical // 2
    return Limits(memory_bytes=memory, generated_points=MAX_GENERATED_POINTS.read(), where="this machine")


def max_generated_points() -> int:
    """The generators' own bound on each count parameter ($BNN_MAX_GENERATED_POINTS)."""
    return MAX_GENERATED_POINTS.read()


# --- admission ----------------------------------------------------------------------------------------


class AdmissionError(ConfigError):
    """A request refused before anything was allocated; the message says why and what would fit."""


def size_text(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GB" if n_bytes >= 2**30 else f"{n_bytes / MB:,.0f} MB"


def time_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds / 3600:,.1f} h"


def _widths_text(widths: Sequence[int]) -> str:
    return ",".join(str(int(w)) for w in widths)


def _fits_in_size(config: Any, shape: DataShape, limits: Limits, speed: Speed, weight_limit: int | None) -> bool:
    """Memory and weights within the limits (what widths decide; time also depends on epochs)."""
    need = training_cost(config, shape, speed)
    return (limits.memory_bytes is None or need.bytes <= limits.memory_bytes) and (
        weight_limit is None or need.weights <= weight_limit
    )


def widths_that_fit(config: Any, shape: DataShape, fits) -> tuple[int, ...] | None:
    """The largest hidden widths of the same proportions that `fits(config)` (all scaled by one factor,
    rounded down), or None when even width 1 does not fit."""
    hidden = [int(h) for h in config.hidden]
    if not hidden:
        return None

    def scaled(factor: float) -> tuple[int, ...]:
        return tuple(max(1, int(h * factor)) for h in hidden)

    if not fits(config.replace(hidden=scaled(0.0))):
        return None
    low, high = 0.0, 1.0
    for _ in range(40):
        middle = (low + high) / 2
        if fits(config.replace(hidden=scaled(middle))):
            low = middle
        else:
            high = middle
    return _round_widths(scaled(low))


def _round_widths(widths: tuple[int, ...]) -> tuple[int, ...]:
    """Down to two significant digits: 7142 -> 7100 (a width a student can type)."""

    def down(value: int) -> int:
        if value < 100:
            return value
        scale = 10 ** (len(str(value)) - 2)
        return value // scale * scale

    return tuple(down(w) for w in widths)


def _network_text(config: Any) -> str:
    """How a refusal names the network: its widths, after its conv blocks (filters x kernel) if any."""
    widths = f"widths {_widths_text(config.hidden)}"
    conv = getattr(config, "conv", ())
    return f"conv blocks {', '.join(f'{f}x{k}' for f, k in conv)} and {widths}" if conv else widths


def batch_that_fits(config: Any, fits) -> int | None:
    """The largest batch size below the config's own with which `fits(config)`, or None (not even 1)."""
    low, high = 0, int(config.train.batch_size)
    while high - low > 1:  # fits(low) or low == 0; not fits(high)
        middle = (low + high) // 2
        if fits(config.replace(train={"batch_size": middle})):
            low = middle
        else:
            high = middle
    return low or None


def _size_hint(config: Any, shape: DataShape, fits) -> str:
    """What fits instead: smaller widths, else (for conv blocks and flows, whose activations grow with
    the batch, not the widths) a smaller batch."""
    fit = widths_that_fit(config, shape, fits)
    if fit:
        return f"widths up to {_widths_text(fit)} fit"
    if getattr(config, "conv", ()) or str(config.family) == FLOW_FAMILY:
        batch = batch_that_fits(config, fits)
        if batch:
            return f"a batch size up to {batch} fits"
        return "fewer conv filters or flow units fit" if getattr(config, "conv", ()) else "shorter flows fit"
    return "no widths fit this dataset"


def admit_training(
    config: Any, shape: DataShape, limits: Limits, speed: Speed | None = None, *, first_stage_stored: bool = False
) -> Cost:
    """The training's cost when it fits `limits`; AdmissionError saying why not and what fits. A scale head's
    first stage counts whole unless `first_stage_stored` (core.runs.training.first_stage_stored looks it up)."""
    speed = speed or server_speed()
    cost = training_cost(config, shape, speed, first_stage_stored=first_stage_stored)
    widths = _network_text(config)
    problems = []
    if limits.max_weights is not None and cost.weights > limits.max_weights:
        problems.append(f"{cost.weights:,} weights (limit {limits.max_weights:,})")
    if limits.memory_bytes is not None and cost.bytes > limits.memory_bytes:
        problems.append(f"about {size_text(cost.bytes)} of memory (limit {size_text(limits.memory_bytes)})")
    slow = limits.training_seconds is not None and cost.seconds > limits.training_seconds
    if problems:
        hint = _size_hint(config, shape, lambda c: _fits_in_size(c, shape, limits, speed, limits.max_weights))
        raise AdmissionError(f"{widths} need {' and '.join(problems)} on {limits.where}; {hint}")
    if slow:
        epochs = max(1, cost.epochs)
        per_epoch = cost.seconds / epochs
        fit_epochs = int(limits.training_seconds // per_epoch) if per_epoch > 0 else epochs
        hint = f"up to {fit_epochs} epochs fit" if fit_epochs >= 1 else "smaller widths or fewer points fit"
        raise AdmissionError(
            f"{epochs} epochs of {widths} on {shape.name} take about {time_text(cost.seconds)} "
            f"of CPU on {limits.where} (limit {time_text(limits.training_seconds)}); {hint}"
        )
    return cost


def admit_playground(config: Any, shape: DataShape, limits: Limits, speed: Speed | None = None) -> Cost:
    """A playground fit trains in the server process: the playground's weight limit and the memory budget."""
    speed = speed or server_speed()
    cost = training_cost(config, shape, speed)
    problems = []
    if limits.playground_weights is not None and cost.weights > limits.playground_weights:
        problems.append(f"{cost.weights:,} weights (the playground allows {limits.playground_weights:,})")
    if limits.memory_bytes is not None and cost.bytes > limits.memory_bytes:
        problems.append(f"about {size_text(cost.bytes)} of memory (limit {size_text(limits.memory_bytes)})")
    if problems:

        def fits(candidate: Any) -> bool:
            return _fits_in_size(candidate, shape, limits, speed, limits.playground_weights)

        fit = widths_that_fit(config, shape, fits)
        hint = f"widths up to {_widths_text(fit)} fit" if fit else "no widths fit"
        raise AdmissionError(f"widths {_widths_text(config.hidden)} need {' and '.join(problems)}; {hint}")
    return cost


def admit_dataset(name: str, params: Mapping[str, Any] | None, limits: Limits, speed: Speed | None = None) -> DataShape:
    """Generator parameters within the point limit, and the set within the memory budget."""
    from core.data import toy

    shape = dataset_shape(name, params)
    if name not in toy.GENERATORS:
        return shape
    given = dict(params or {})
    if limits.generated_points is not None:
        for key in COUNT_PARAMETERS:
            if key in given:
                check_count(name, key, given[key], limits.generated_points, limits.where)
    cost = dataset_cost(name, params, shape, speed)
    if limits.memory_bytes is not None and cost.bytes > limits.memory_bytes:
        raise AdmissionError(
            f"{name}: {size_text(cost.bytes)} of generated data is above the "
            f"{size_text(limits.memory_bytes)} one request may use on {limits.where}; "
            "fewer points fit"
        )
    return shape


def check_count(name: str, key: str, value: Any, limit: int, where: str = "this server") -> None:
    """A count parameter at most `limit` (a non-number is left to the generator's own message)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return
    if math.isfinite(number) and number <= limit:
        return
    from core.validate import shown

    raise AdmissionError(
        f"{name}: {key}={shown(value)} is above the {limit:,} points a generated set may have "
        f"on {where} (BNN_MAX_GENERATED_POINTS); give {key} of at most {limit:,}"
    )


def largest_samples(
    config: Any, shape: DataShape, n_inputs: int, limits: Limits, wanted: int, speed: Speed | None = None
) -> int:
    """The largest R <= wanted whose prediction over `n_inputs` fits the limits (0: not even R = 1)."""
    speed = speed or server_speed()

    def fits(samples: int) -> bool:
        if limits.prediction_values is not None and samples * n_inputs * shape.outputs > limits.prediction_values:
            return False
        need = prediction_cost(config, shape, n_inputs, samples, speed)
        return (limits.memory_bytes is None or need.bytes <= limits.memory_bytes) and (
            limits.prediction_seconds is None or need.seconds <= limits.prediction_seconds
        )

    if fits(wanted):
        return int(wanted)
    low, high = 0, int(wanted)
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def samples_message(
    n_inputs: int, wanted: int, allowed: int, config: Any, shape: DataShape, limits: Limits, speed: Speed | None = None
) -> str:
    """Why R was capped (or refused), in a page's words."""
    need = prediction_cost(config, shape, n_inputs, wanted, speed)
    what = (
        f"R = {wanted} over {n_inputs:,} inputs needs about {size_text(need.bytes)} and "
        f"{time_text(need.seconds)} of CPU"
    )
    limits_text = (
        ([f"{size_text(limits.memory_bytes)}"] if limits.memory_bytes is not None else [])
        + ([f"{limits.prediction_values:,} values"] if limits.prediction_values is not None else [])
        + ([f"{time_text(limits.prediction_seconds)}"] if limits.prediction_seconds is not None else [])
    )
    limit = "limits " + ", ".join(limits_text) if limits_text else "no limits"
    if allowed >= 1:
        return f"{what} ({limit}); R up to {allowed} fits: showing R = {allowed}"
    return f"{what} ({limit}); not even R = 1 fits on {limits.where}"
