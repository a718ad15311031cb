"""A noise-scale head on a frozen homoscedastic mean (TrainConfig.scale_head).

A heteroscedastic run trained in two stages: first the homoscedastic run of the same settings (a Gaussian
likelihood with the table's noise options), then only the scale row of the output layer, every parameter of
the mean path frozen. The output layer's mean row is the first stage's own, so (for SCALE_HEAD_FAMILIES) the
run's mean predictions are the first stage's bit for bit, draws included. Jointly trained, a scale head can
absorb residuals the mean should fit (protein, concrete-dropout+het split 2: RMSE 11.6 against 4.2).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import torch

from core import validate
from core.cpu_settings import enable_flush_denormals
from core.errors import ConfigError
from core.models.likelihoods import GaussianOptions
from core.models.network import BayesianMLP

if TYPE_CHECKING:
    from core.train import TrainResult

SCALE_HEAD_KEYS = ("epochs", "likelihood_options")
# The families whose output layer draws no noise (fnn) or a dropout mask over its inputs (concrete dropout):
# a second output row changes neither the draws nor the mean row's products, so the mean predictions stay
# bit-identical to the homoscedastic run's (tests/test_scale_head.py). The mean-field families draw both
# output rows from one stream of the layer's shape: their sampled means would differ in every draw.
SCALE_HEAD_FAMILIES = ("concrete-dropout", "fnn")
SCALE_HEAD_PHASE = "scale-head"


def check_scale_head(value: Any) -> dict[str, Any]:
    """The scale_head table, validated and in one canonical form (the noise options' non-defaults), so that
    equal tables give one run id; ConfigError (one line, naming the key) otherwise."""
    if not isinstance(value, dict):
        raise ConfigError(
            f"scale_head: must be a table {{epochs = N, likelihood_options = {{...}}}} or unset, got "
            f"{validate.shown(value)}"
        )
    unknown = sorted(set(map(str, value)) - set(SCALE_HEAD_KEYS))
    if unknown:
        raise ConfigError(f"scale_head: unknown key(s) {', '.join(unknown)}; known: {', '.join(SCALE_HEAD_KEYS)}")
    if "epochs" not in value:
        raise ConfigError("scale_head.epochs: missing; give the scale head's epochs, a whole number of at least 1")
    epochs = value["epochs"]
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(
            f"scale_head.epochs: the scale head's epochs, a whole number of at least 1, got {validate.shown(epochs)}"
        )
    options = value.get("likelihood_options", {})
    if not isinstance(options, dict):
        raise ConfigError(
            f"scale_head.likelihood_options: the homoscedastic stage's noise options, a table, got "
            f"{validate.shown(options)}"
        )
    try:
        parsed = GaussianOptions.from_dict(options)
    except ConfigError as exc:
        raise ConfigError(f"scale_head.{exc}") from None
    return {"epochs": int(epochs), "likelihood_options": parsed.non_defaults()}


def check_scale_head_model(family: str, likelihood: str | None) -> None:
    """Refuse a scale head where it cannot keep the mean: a likelihood other than heteroscedastic, or a
    family whose output draws depend on the number of outputs."""
    if likelihood != "heteroscedastic":
        raise ConfigError(
            f'train.scale_head: fits the noise scale of a heteroscedastic run (likelihood "heteroscedastic"), '
            f"not of a {likelihood} one"
        )
    if family not in SCALE_HEAD_FAMILIES:
        raise ConfigError(
            f"train.scale_head: keeps the mean predictions bit-identical only for {', '.join(SCALE_HEAD_FAMILIES)} "
            f"(their output draws do not depend on the number of outputs), not {family}"
        )


def mean_stage_model(model: BayesianMLP, scale_head: dict[str, Any], seed: int) -> BayesianMLP:
    """The first stage's homoscedastic model at the initial values its own run starts from
    (core.runs.training builds a run's model from a CPU generator seeded with its seed)."""
    from dataclasses import replace as replace_config

    from core.models.network import build_model

    config = replace_config(
        model.config, likelihood="gaussian", likelihood_options=dict(scale_head["likelihood_options"])
    )
    return build_model(config, "cpu", torch.Generator(device="cpu").manual_seed(int(seed))).to(model.device)


def install_frozen_mean(model: BayesianMLP, mean_model: BayesianMLP) -> None:
    """Copy the homoscedastic `mean_model` into the heteroscedastic `model`: every layer as it is, the output
    layer's single row into its mean row (0); the scale row (1) starts at the homoscedastic noise sd, weights
    0 and bias softplus^-1(sd - floor), so stage 2 starts from the homoscedastic fit's likelihood."""
    from core.models.base import inverse_softplus

    check_scale_head_model(model.family, getattr(model.likelihood, "name", None))
    if mean_model.family != model.family or getattr(mean_model.likelihood, "name", None) != "gaussian":
        raise ConfigError("train.scale_head: the first stage must be a Gaussian run of the same family")
    state, mean_state = model.state_dict(), mean_model.state_dict()
    output = f"layers.{len(model.layers) - 1}."
    for key, value in state.items():
        if key.startswith("likelihood."):
            continue  # the Gaussian's noise parameters: the heteroscedastic likelihood has none
        source = mean_state[key]
        if source.shape == value.shape:
            state[key] = source.clone()
        elif key.startswith(output) and value.shape[0] == 2 and source.shape == (1, *value.shape[1:]):
            state[key] = torch.cat([source, value[1:]])
        else:
            raise ConfigError(f"train.scale_head: the first stage's {key} has shape {tuple(source.shape)}")
    model.load_state_dict(state)
    noise_std = float(mean_model.likelihood.log_noise_std.detach().exp())
    floor = model.likelihood.std_floor
    with torch.no_grad():
        row = _scale_row_parameter(model)[1]
        row.zero_()
        row[-1] = inverse_softplus(max(noise_std - floor, floor))


def _scale_row_parameter(model: BayesianMLP) -> torch.nn.Parameter:
    # SCALE_HEAD_FAMILIES keep point weights in `weight` (out, in + 1): row 1 is the scale output's
    return model.layers[-1].weight


def freeze_mean_path(model: BayesianMLP) -> Callable[[], None]:
    """Freeze every parameter but the output layer's weights, whose mean row's gradient is masked to zero:
    only the scale row trains (Adam's step is exactly 0 where every gradient was 0). Returns the undo."""
    parameter = _scale_row_parameter(model)
    frozen = [p for p in model.parameters() if p.requires_grad and p is not parameter]
    for p in frozen:
        p.requires_grad_(False)
    parameter.requires_grad_(True)
    mask = torch.zeros_like(parameter)
    mask[1] = 1.0
    handle = parameter.register_hook(lambda grad: grad * mask)

    def undo() -> None:
        handle.remove()
        for p in frozen:
            p.requires_grad_(True)

    return undo


def train_scale_head(
    model, x_train, y_train, config, seed, progress, cancel, mean_model, mean_history
) -> "TrainResult":
    """Stage 1 (the homoscedastic run, unless given), then stage 2: only the scale row (TrainConfig.scale_head)."""
    from core.train import (
        TrainResult,
        _make_optimizer,
        _run_epoch,
        _steps,
        learning_rate_factor,
        run_generator,
        set_learning_rate,
        train,
    )

    check_scale_head_model(model.family, getattr(model.likelihood, "name", None))
    started = time.perf_counter()
    history: list[dict[str, Any]] = []

    def finish_epoch(record: dict[str, Any]) -> None:
        history.append(record)
        if progress is not None:
            progress(dict(record, elapsed=time.perf_counter() - started))

    if mean_model is None:
        mean_model = mean_stage_model(model, config.scale_head, seed)
        mean_history = train(
            mean_model, x_train, y_train, config.mean_stage(), seed, progress=progress, cancel=cancel, snapshots=False
        ).history
    history.extend(dict(record) for record in mean_history or [])
    install_frozen_mean(model, mean_model)
    mean_row = _scale_row_parameter(model)[0].detach().clone()
    undo = freeze_mean_path(model)
    try:
        enable_flush_denormals()
        epochs = config.scale_head["epochs"]
        generator = run_generator(model.device, seed)
        with model.noise_from(generator):
            batch_generator = torch.Generator(device="cpu").manual_seed(seed)
            optimizer = _make_optimizer(model, config.learning_rates, capturable=config.cuda_graphs)
            step = _steps(model, optimizer, x_train, y_train, config, generator)
            for epoch in range(epochs):
                factor = learning_rate_factor(config.lr_schedule, epoch, epochs)
                for group in optimizer.param_groups:
                    set_learning_rate(group, group["base_lr"] * factor)
                record = _run_epoch(
                    model, step, x_train, config, config.kl_weight, batch_generator, cancel, SCALE_HEAD_PHASE, epoch
                )
                record["learning_rate_factor"] = factor
                finish_epoch(record)
    finally:
        undo()
    if not torch.equal(_scale_row_parameter(model)[0], mean_row):  # the promise the option makes
        raise RuntimeError("internal: the scale head's training changed the mean row")
    return TrainResult(history=history, seconds=time.perf_counter() - started, snapshots=None)
