"""What the dashboard asks of core.cost before it builds anything: a training's estimate (with
the refusal, if any), the largest R a prediction may draw, a playground fit's admission. Each takes
the server's limits (core.cost.server_limits) from the caller."""

from __future__ import annotations

from typing import Any

from core import cost
from core.runs.config import RunConfig
from core.runs.training import first_stage_stored


def training_estimate(config: RunConfig, limits: cost.Limits) -> dict[str, Any]:
    """Weights, memory (bytes), CPU seconds on this server (its measured speed) and seconds now (times
    its current load) of a training of `config` (a scale head's first stage whole unless it is stored);
    `refusal` is core.cost's message, or None."""
    shape = cost.dataset_shape(config.dataset, config.dataset_params)
    stored = first_stage_stored(config)  # a scale head's first stage, in the default store the dashboard trains into
    refusal = None
    try:
        cost.admit_dataset(config.dataset, config.dataset_params, limits)
        need = cost.admit_training(config, shape, limits, first_stage_stored=stored)
    except cost.AdmissionError as exc:
        refusal = str(exc)
        need = cost.training_cost(config, shape, first_stage_stored=stored)
    return {
        "weights": need.weights,
        "memory_bytes": need.bytes,
        "seconds": need.seconds,
        "wall_seconds": need.wall_seconds(),
        "epochs": need.epochs,
        "n_train": shape.n_train,
        "refusal": refusal,
    }


def samples_allowed(config: RunConfig, n_inputs: int, samples: int, limits: cost.Limits) -> tuple[int, str | None]:
    """(R to compute, why R was lowered or None): the largest R <= samples whose prediction over
    n_inputs inputs fits the limits (0 when not even R = 1 fits)."""
    shape = cost.dataset_shape(config.dataset, config.dataset_params)
    allowed = cost.largest_samples(config, shape, int(n_inputs), limits, int(samples))
    if allowed >= int(samples):
        return int(samples), None
    return allowed, cost.samples_message(int(n_inputs), int(samples), allowed, config, shape, limits)


def admit_fit(config: RunConfig, limits: cost.Limits) -> RunConfig:
    """A live (playground) fit of `config` admitted from its sizes alone (nothing is built): the config,
    or AdmissionError saying why not and what widths fit."""
    shape = cost.admit_dataset(config.dataset, config.dataset_params, limits)
    cost.admit_playground(config, shape, limits)
    return config
