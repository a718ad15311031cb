"""`predict`: one entry point for every prediction mode and every family.

Draws are made a chunk at a time as (R, out, in+1) weight tensors (chunked
over inputs too when the activations would exceed `MEMORY_BUDGET_BYTES`), and
each draw then runs its forward pass by itself. Draw r comes from the
network's `sample_weights`, which seeds it from (seed, r), and its products
have the same shapes whatever R is, so its outputs depend only on (seed, r)
and x, bit for bit: R=20 reuses the first 10 outputs of R=10, chunking changes
nothing, and `core.predict.draw_cache` can add draws 10..19 to a kept R=10.
A linearised posterior (`laplace`) draws its weights jointly over layers and runs each draw as
the network linearised about its mean, f(x; mean) + J(x)(w_r - mean) (core.models.laplace).

Forward passes run transposed, (features, n), through core.predict.compact:
a network with one known structure (mpm, mpm-mean, prune, mean) drops its
dead units and multiplies its sparse layers as sparse matrices. Sampled draws
run by the path core.predict.draw_paths says: as they are (plain), or each
compacted to its own active units (a bma draw's own sampled structure), sparse
below the crossover or all dense, whichever a cost probe on the first draw
found cheapest for this (model, threshold, inputs); the choice is kept, so
draw r's output stays a function of (seed, r) and x in this process. The
paths agree to 1e-6 (reassociated sums), not bit for bit.

Density reported (fraction of weights a prediction needs):
- `mpm`, `mpm-mean`, `prune`: kept weights / all weights;
- `mean`: nonzero posterior-mean weights (1.0 unless a structure is fixed);
- `bma`: for R = 1 the density of the one sampled network; for R > 1 the
  weights any draw may use (nonzero mean or used by some draw), 1.0 for a
  dense family, as Hubin & Storvik (2024) reports for full BMA. `draw_density` always holds
  the mean density of the sampled networks (Hubin & Storvik 2024's R=1 density).

Predicting never changes the model: everything runs under no_grad, draws use
their own generators (the global RNG is untouched) and no train()/eval()
toggle or parameter/buffer write happens.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from core.errors import PredictionError
from core.models.laplace import linearised_forward
from core.models.network import BayesianMLP
from core.predict.compact import CompactNetwork, dense_network, run_chunked
from core.predict.draw_paths import DrawPath, chosen_path, draw_networks, group_size, path_key, probe_path
from core.predict.draw_paths import masked_network as masked_weights_network
from core.predict.modes import PredictionMode, WeightChoice, parse_mode, parse_weight_choice
from core.predict.structure import is_disconnected, kept_counts, layer_densities, overall_density

# Activations of one chunk (draws x inputs x widest layer, two layers alive) stay below this.
MEMORY_BUDGET_BYTES = 256 * 2**20


def resolve_model(model_or_run: Any) -> BayesianMLP:
    """A BayesianMLP, or the `.model` of a run (core.runs.Run)."""
    model = model_or_run if isinstance(model_or_run, BayesianMLP) else getattr(model_or_run, "model", None)
    if not isinstance(model, BayesianMLP):
        raise PredictionError(f"expected a BayesianMLP or a run with a .model, got {type(model_or_run).__name__}")
    return model


def task_of(model: BayesianMLP) -> str:
    return model.likelihood.task


def as_inputs(model: BayesianMLP, x: Any) -> Tensor:
    """x as a float tensor (n, d) on the model's device; d must match the model."""
    tensor = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x)
    if tensor.dim() == 1:
        raise PredictionError(
            f"inputs: expected a 2-D array (n, {model.config.in_features}), got shape "
            f"{tuple(tensor.shape)}; use x[None] for a single example"
        )
    if tensor.dim() > 2:
        tensor = tensor.reshape(tensor.shape[0], -1)
    if tensor.shape[1] != model.config.in_features:
        raise PredictionError(
            f"inputs: the model takes {model.config.in_features} features, got "
            f"{tensor.shape[1]} (shape {tuple(tensor.shape)})"
        )
    dtype = model.layers[0].fixed_mask.dtype
    return tensor.to(device=model.device, dtype=dtype)


def check_samples(samples: Any) -> int:
    try:
        value = int(samples)
    except (TypeError, ValueError):
        raise PredictionError(f"samples: expected a positive integer, got {samples!r}") from None
    if value != samples or value < 1:
        raise PredictionError(f"samples: R must be an integer >= 1, got {samples!r}")
    return value


def check_threshold(model: BayesianMLP, threshold: Any) -> float:
    try:
        return model.spec.check_threshold(threshold)
    except (TypeError, ValueError) as exc:
        raise PredictionError(f"threshold: {exc}") from None


@dataclass(frozen=True)
class Plan:
    """What one prediction computes: the mode resolved into structure and weights."""

    mode: PredictionMode
    samples: int  # number of networks evaluated (1 for the deterministic modes)
    threshold: float | None
    weights: WeightChoice


def make_plan(model: BayesianMLP, mode: Any, samples: Any, threshold: Any, weights: Any) -> Plan:
    mode = parse_mode(mode)
    samples = check_samples(samples)
    choice = None if weights is None else parse_weight_choice(weights)
    if mode is PredictionMode.PRUNE:
        choice = mode.weight_choice(choice)
    else:
        implied = mode.weight_choice()
        if choice is not None and choice is not implied:
            raise PredictionError(
                f"weights={choice.value!r} only applies to mode 'prune'; mode {mode.value!r} "
                f"uses {implied.value} weights"
            )
        choice = implied
    if mode.uses_threshold:
        # A threshold with mpm / mpm-mean generalises the median probability model (0.5 for LBBNN).
        threshold = model.spec.default_threshold if threshold is None else check_threshold(model, threshold)
    elif threshold is not None:
        raise PredictionError(f"threshold: mode {mode.value!r} uses no threshold; use mpm, mpm-mean or prune")
    if choice is WeightChoice.MEAN:
        samples = 1
    return Plan(mode, samples, threshold, choice)


def forward_draws(
    model: BayesianMLP,
    x: Tensor,
    weights: Sequence[Tensor],
    batch_size: int | None = None,
    memory_budget: int = MEMORY_BUDGET_BYTES,
) -> Tensor:
    """Network outputs (R, n, out) for weights (R, out, in+1) per layer; R = 1 for (out, in+1) weights."""
    if batch_size is not None and int(batch_size) < 1:
        raise PredictionError(f"batch_size: must be >= 1, got {batch_size!r}")
    network = model.prediction_network(weights) or dense_network(weights, model.activation)
    return run_chunked(network, x, memory_budget, batch_size)


def masked_network(model: BayesianMLP, weights: Sequence[Tensor], masks: Sequence[Tensor]) -> CompactNetwork:
    """The compact network (dead units dropped, sparse layers sparse) of weights zero outside `masks`."""
    if model.geometry is not None:  # a conv network runs its masked weights as they are
        network = model.prediction_network(weights, masks)
        network.disconnected = bool(is_disconnected(model.structure_masks(masks)))
        return network
    return masked_weights_network(weights, masks, model.activation)


def forward_masked(
    model: BayesianMLP,
    x: Tensor,
    weights: Sequence[Tensor],
    masks: Sequence[Tensor],
    batch_size: int | None = None,
    memory_budget: int = MEMORY_BUDGET_BYTES,
) -> Tensor:
    """Like `forward_draws` for weights that are zero outside `masks` (shared by all draws):
    dead units dropped, sparse layers multiplied as sparse matrices (core.predict.compact)."""
    return run_network(masked_network(model, weights, masks), x, batch_size, memory_budget)


def run_network(
    network: CompactNetwork, x: Tensor, batch_size: int | None = None, memory_budget: int = MEMORY_BUDGET_BYTES
) -> Tensor:
    if batch_size is not None and int(batch_size) < 1:
        raise PredictionError(f"batch_size: must be >= 1, got {batch_size!r}")
    return run_chunked(network, x, memory_budget, batch_size)


@dataclass
class Prediction:
    """Predictions of one mode on n inputs. Regression values are in standardised units
    (see `unstandardised`)."""

    mode: PredictionMode
    task: str
    samples: int
    threshold: float | None
    weights: WeightChoice
    density: float
    layer_density: list[float]
    draw_density: float
    disconnected: bool
    warnings: list[str] = field(default_factory=list)
    # classification
    probs_per_draw: np.ndarray | None = None  # (R, n, K) float32
    probs: np.ndarray | None = None  # (n, K), mean over draws
    # regression
    mean_per_draw: np.ndarray | None = None  # (R, n)
    std_per_draw: np.ndarray | None = None  # (R, n), aleatoric std of each draw
    mean: np.ndarray | None = None  # (n,) predictive mean
    epistemic_variance: np.ndarray | None = None  # variance over draws of the per-draw means
    aleatoric_variance: np.ndarray | None = None  # mean over draws of the per-draw variances
    total_variance: np.ndarray | None = None  # their sum: the variance of the mixture over draws

    @property
    def predicted_class(self) -> np.ndarray:
        if self.probs is None:
            raise PredictionError("predicted_class: this is a regression prediction")
        return self.probs.argmax(axis=1)

    def unstandardised(self, target_mean: float, target_std: float) -> "Prediction":
        """The same regression prediction in original units: y = y_std * target_std + target_mean."""
        if self.task != "regression":
            return self
        scale, shift = float(target_std), float(target_mean)
        var_scale = scale * scale
        return replace(
            self,
            mean_per_draw=self.mean_per_draw * scale + shift,
            std_per_draw=self.std_per_draw * scale,
            mean=self.mean * scale + shift,
            epistemic_variance=self.epistemic_variance * var_scale,
            aleatoric_variance=self.aleatoric_variance * var_scale,
            total_variance=self.total_variance * var_scale,
        )


def nonzero_masks(weights: Sequence[Tensor]) -> list[Tensor]:
    return [w != 0 for w in weights]


class DrawUsage:
    """Which weights sampled networks use, added draw chunk by draw chunk in draw order.

    Totals over every draw added (`counts`, `union`, `first`, `all_disconnected`), and per draw
    what the first R draws' densities need (`draw_density`, `possible_density`, `disconnected`),
    so that a cache holding draws 0..N-1 answers any R <= N exactly as a prediction with R draws
    would.
    """

    def __init__(self, base: Sequence[Tensor] | None = None, structure: Any = list) -> None:
        self.structure = structure  # masks as core.predict.structure reads them (BayesianMLP.structure_masks)
        self.counts: list[int] | None = None  # nonzero weights per layer, summed over draws
        self.union: list[Tensor] | None = None  # used by some draw
        self.first: list[Tensor] | None = None  # used by draw 0
        self.all_disconnected = True
        self.draw_counts: list[int] = []  # per draw: its nonzero weights, all layers together
        self.draw_disconnected: list[bool] = []
        # bma: the weights a prediction with R > 1 draws may use are those some draw uses or whose
        # mean is nonzero (`base`); after each draw, the density of that set so far.
        self._possible = None if base is None else [mask.clone() for mask in base]
        self._possible_density: list[tuple[float, list[float]]] = []

    @property
    def n_draws(self) -> int:
        return len(self.draw_counts)

    @property
    def nbytes(self) -> int:
        masks = (self.union or []) + (self.first or []) + (self._possible or [])
        return sum(mask.numel() * mask.element_size() for mask in masks) + 64 * self.n_draws

    def add(self, draws: Sequence[Tensor]) -> None:
        used = nonzero_masks(draws)
        counts = kept_counts(used)
        union = [u.any(dim=0) for u in used]
        if self.counts is None:
            # A copy of draw 0's masks: a view would keep the whole chunk's masks alive.
            self.counts, self.union, self.first = counts, union, [u[0].clone() for u in used]
        else:
            self.counts = [a + b for a, b in zip(self.counts, counts)]
            self.union = [a | b for a, b in zip(self.union, union)]
        disconnected = torch.as_tensor(is_disconnected(self.structure(used))).reshape(-1)
        self.all_disconnected &= bool(disconnected.all())
        self.draw_disconnected.extend(bool(flag) for flag in disconnected)
        per_draw = [torch.count_nonzero(u.reshape(u.shape[0], -1), dim=1) for u in used]
        self.draw_counts.extend(int(value) for value in torch.stack(per_draw).sum(dim=0))
        if self._possible is not None:
            for index in range(used[0].shape[0]):
                for possible, u in zip(self._possible, used):
                    possible |= u[index]
                counts_now = kept_counts(self._possible)
                self._possible_density.append(
                    (overall_density(self._possible, counts_now), layer_densities(self._possible, counts_now))
                )

    def draw_density(self, samples: int, n_weights: int) -> float:
        """Mean density of the first `samples` draws (`n_weights`: the network's weights)."""
        return sum(self.draw_counts[:samples]) / (samples * n_weights)

    def disconnected(self, samples: int) -> bool:
        return all(self.draw_disconnected[:samples])

    def possible_density(self, samples: int) -> tuple[float, list[float]]:
        """bma with R = `samples` > 1 draws: the density of the weights some draw or the mean uses."""
        if self._possible is None:
            raise PredictionError("internal: this draw usage was gathered without the mean network's weights")
        return self._possible_density[samples - 1]


def new_usage(model: BayesianMLP, masks: Sequence[Tensor] | None, samples: int) -> DrawUsage:
    """The DrawUsage a prediction with `samples` draws needs (bma with R > 1 also the mean's nonzeros)."""
    return DrawUsage(
        nonzero_masks(model.mean_weights()) if masks is None and samples > 1 else None, model.structure_masks
    )


def draws_per_chunk(model: BayesianMLP, plan: Plan, n_inputs: int, memory_budget: int) -> int:
    """Draws made at once: their weights and activations fit the budget (at least one)."""
    widest = max([model.config.in_features] + [layer.out_features for layer in model.layers])
    per_draw = 2 * widest * 4 * max(1, n_inputs)
    return max(1, min(plan.samples, memory_budget // per_draw))


def sampled_forward(
    model: BayesianMLP,
    plan: Plan,
    x: Tensor,
    seed: int,
    masks: Sequence[Tensor] | None,
    batch_size: int | None,
    memory_budget: int = MEMORY_BUDGET_BYTES,
    draws: range | None = None,
    usage: DrawUsage | None = None,
    path: DrawPath | str | None = None,
) -> tuple[Tensor, DrawUsage]:
    """Outputs (len(draws), n, out) of sampled networks `draws` (default: 0 .. R-1), whose usage is
    added to `usage` (a new one by default; draws must come in order).

    `path` (default: `chosen_path`'s kept choice, else `probe_path`'s on the first draw made) says how the draws
    run (core.predict.draw_paths): each alone (plain, active, active-dense) or, asked by name, in
    groups aligned at multiples of GROUP (batched; a group reaching outside `draws` is computed
    whole and the extra draws dropped). Batched products of draws
    that do not always share one product may sum in another order (MKL splits a small product
    over threads, a batch over its members), so draw r's output would depend on which draws shared
    its chunk; run alone or in its aligned group, it depends only on (seed, r), x and the path:
    R=20 reuses R=10's first ten outputs bit for bit, and a cache may add draws 10..19 later.
    """
    draws = range(plan.samples) if draws is None else draws
    usage = new_usage(model, masks, plan.samples) if usage is None else usage
    if usage.n_draws != draws.start:
        raise PredictionError(f"internal: draws {draws.start}.. added after {usage.n_draws} draws")
    # A linearised posterior (laplace) predicts f(x; centre) + J(x)(w - centre), not f(x; w).
    centre = model.linearisation_point(masks)
    if centre is None and model.geometry is not None:
        path = DrawPath.PLAIN  # conv networks: their weights run as they are (see below)
    elif centre is None:
        path = chosen_path(model, plan.threshold, x, masks, batch_size) if path is None else DrawPath(path)
    group = 1 if centre is not None or path is None else group_size(path)
    first = draws.start - draws.start % group  # whole groups, aligned at multiples of `group`
    last = -(-draws.stop // group) * group
    chunk = max(
        1,
        min(
            last - first, draws_per_chunk(model, replace(plan, samples=max(1, last - first)), x.shape[0], memory_budget)
        ),
    )
    chunk = -(-chunk // group) * group
    outputs = None
    for start in range(first, last, chunk):
        count = min(chunk, last - start)
        weights = model.sample_weights(count, int(seed), masks=masks, start=start)
        if centre is None and model.geometry is not None:  # conv: each draw's weights as they are, no compaction
            network = model.prediction_network(weights, masks)
            out = torch.cat([run_network(network.draw(index), x, batch_size, memory_budget) for index in range(count)])
        elif centre is None:

            def run(network: CompactNetwork) -> Tensor:
                return run_network(network, x, batch_size, memory_budget)

            done = []  # the first draw's outputs where the probe made them
            if path is None:  # no choice kept yet: every path runs this chunk's first draw, the cheapest is kept
                key = path_key(model, plan.threshold, x, masks, batch_size)
                path, first_out = probe_path(key, [w[:1].clone() for w in weights], masks, model.activation, run)
                done = [first_out]
            rest = [w[len(done) :] for w in weights]
            if len(rest[0]):  # the chunk's draws the probe did not run
                done += [run(network) for network in draw_networks(path, rest, masks, model.activation)]
            out = torch.cat(done)
        else:
            out = torch.stack(
                [
                    linearised_forward(x, centre, [w[index] - c for w, c in zip(weights, centre)], model.activation)
                    for index in range(count)
                ]
            )
        if outputs is None:
            outputs = torch.empty((len(draws), *out.shape[1:]), dtype=out.dtype, device=out.device)
        low, high = max(start, draws.start), min(start + count, draws.stop)  # the asked draws in this chunk
        outputs[low - draws.start : high - draws.start] = out[low - start : high - start]
        usage.add([w[low - start : high - start] for w in weights])
    if outputs is None:
        raise PredictionError("internal: no draws to run")
    return outputs, usage


def _densities(
    model: BayesianMLP,
    plan: Plan,
    masks: Sequence[Tensor] | None,
    weights: Sequence[Tensor] | None,
    usage: DrawUsage | None,
    disconnected: bool | None,
) -> tuple[float, list[float], float, bool]:
    """(density, per-layer density, mean density of the evaluated networks, disconnected).

    `weights`: the one evaluated network (deterministic plans); `usage`: what the first R =
    plan.samples draws of it used; `disconnected`, where already known for `masks`, saves
    working it out again.
    """
    n_weights = sum(layer.out_features * (layer.in_features + 1) for layer in model.layers)
    if masks is not None:
        if disconnected is None:
            disconnected = bool(is_disconnected(model.structure_masks(masks)))
        counts = kept_counts(masks)
        density, per_layer = overall_density(masks, counts), layer_densities(masks, counts)
        if usage is not None:
            return density, per_layer, usage.draw_density(plan.samples, n_weights), disconnected
        return density, per_layer, density, disconnected
    if usage is None:  # the posterior-mean network
        used = nonzero_masks(weights)
        counts = kept_counts(used)
        density = overall_density(used, counts)
        if disconnected is None:
            disconnected = bool(is_disconnected(model.structure_masks(used)))
        return density, layer_densities(used, counts), density, disconnected
    draw_density = usage.draw_density(plan.samples, n_weights)
    if plan.samples == 1:
        return overall_density(usage.first), layer_densities(usage.first), draw_density, usage.disconnected(1)
    density, per_layer = usage.possible_density(plan.samples)
    return density, per_layer, draw_density, usage.disconnected(plan.samples)


def predict(
    model_or_run: Any,
    x: Any,
    mode: str | PredictionMode = "bma",
    samples: int = 10,
    threshold: float | None = None,
    seed: int = 0,
    weights: str | None = None,
    batch_size: int | None = None,
) -> Prediction:
    """Predict with one of the modes of `PredictionMode` (see the module docstring).

    `threshold` applies to mpm / mpm-mean (default: the family's default cut)
    and prune; `weights` ("sample" or "mean") applies to prune only.
    """
    model = resolve_model(model_or_run)
    plan = make_plan(model, mode, samples, threshold, weights)
    if batch_size is not None and int(batch_size) < 1:
        raise PredictionError(f"batch_size: must be >= 1, got {batch_size!r}")
    with torch.no_grad():
        inputs = as_inputs(model, x)
        masks = None if plan.mode in (PredictionMode.BMA, PredictionMode.MEAN) else model.keep_masks(plan.threshold)
        single, usage, disconnected = None, None, None
        if plan.weights is WeightChoice.SAMPLE:
            outputs, usage = sampled_forward(model, plan, inputs, seed, masks, batch_size)
            return prediction_from_draws(model, plan, outputs, masks, usage)
        else:  # one network: its masks, or the zeros of the posterior-mean network
            # The compact network reads only the kept entries: no need to multiply the masks in first.
            single = model.mean_weights() if masks is None else model.conditional_mean_weights()
            network = masked_network(model, single, nonzero_masks(single) if masks is None else masks)
            outputs = run_network(network, inputs, batch_size)
            disconnected = network.disconnected
        density, per_layer, draw_density, disconnected = _densities(model, plan, masks, single, usage, disconnected)
        return build_prediction(model, plan, outputs, density, per_layer, draw_density, disconnected)


def prediction_from_draws(
    model: BayesianMLP,
    plan: Plan,
    outputs: Tensor,
    masks: Sequence[Tensor] | None,
    usage: DrawUsage,
    probs_per_draw: Tensor | None = None,
) -> Prediction:
    """The prediction of a sampling plan from the outputs (at least R, n, out) of draws 0, 1, ... of it and
    their usage: what `predict` returns for R = plan.samples, from draws a cache may have kept.
    `probs_per_draw`: the classes' probabilities of those draws, if a cache kept them too (each row's
    softmax is its own: computed draw by draw they equal the stack's bit for bit)."""
    if outputs.shape[0] < plan.samples or usage.n_draws < plan.samples:
        raise PredictionError(f"internal: {min(outputs.shape[0], usage.n_draws)} draws for R = {plan.samples}")
    density, per_layer, draw_density, disconnected = _densities(model, plan, masks, None, usage, None)
    probs = None if probs_per_draw is None else probs_per_draw[: plan.samples]
    return build_prediction(model, plan, outputs[: plan.samples], density, per_layer, draw_density, disconnected, probs)


def disconnected_warning(plan: Plan) -> str:
    where = f" at threshold {plan.threshold:g}" if plan.threshold is not None else ""
    return (
        f"the {plan.mode.value} network{where} has no path from any input to any output: "
        "every prediction is the same constant; lower the threshold"
    )


def structure_fixed(model: BayesianMLP) -> bool:
    """True after post-training on a fixed structure (the median probability model)."""
    return any(layer.is_structure_fixed for layer in model.layers)


def fixed_structure_warning(plan: Plan) -> str:
    # Hubin & Storvik (2024) Table A8 labels post-trained results by what they are: bma and mean no longer exist.
    same = "MED-SIM (mpm)" if plan.mode is PredictionMode.BMA else "MED-MEA (mpm-mean)"
    return (
        f"this model was post-trained with its structure fixed to the median probability model, so "
        f"{plan.mode.value} ({plan.mode.paper_name}) no longer exists: these are the predictions of {same}"
    )


def build_prediction(
    model: BayesianMLP,
    plan: Plan,
    outputs: Tensor,
    density: float,
    per_layer: list[float],
    draw_density: float,
    disconnected: bool,
    probs_per_draw: Tensor | None = None,
) -> Prediction:
    warnings = [disconnected_warning(plan)] if disconnected else []
    if plan.mode in (PredictionMode.BMA, PredictionMode.MEAN) and structure_fixed(model):
        warnings.append(fixed_structure_warning(plan))
    common = dict(
        mode=plan.mode,
        task=task_of(model),
        samples=plan.samples,
        threshold=plan.threshold,
        weights=plan.weights,
        density=density,
        layer_density=per_layer,
        draw_density=draw_density,
        disconnected=disconnected,
        warnings=warnings,
    )
    if task_of(model) == "classification":
        if probs_per_draw is None:
            probs_per_draw = model.likelihood.probabilities(outputs)
        probs = probs_per_draw.float().cpu().numpy()
        return Prediction(**common, probs_per_draw=probs, probs=probs.mean(axis=0))
    mean_t, std_t = model.likelihood.mean_and_std(outputs)
    mean_per_draw = mean_t.float().cpu().numpy()
    std_per_draw = std_t.float().cpu().numpy()
    mean = mean_per_draw.mean(axis=0)
    epistemic = mean_per_draw.var(axis=0)
    aleatoric = (std_per_draw.astype(np.float64) ** 2).mean(axis=0).astype(np.float32)
    return Prediction(
        **common,
        mean_per_draw=mean_per_draw,
        std_per_draw=std_per_draw,
        mean=mean,
        epistemic_variance=epistemic,
        aleatoric_variance=aleatoric,
        total_variance=epistemic + aleatoric,
    )
