"""A Bayesian MLP made of layers of one family, plus a likelihood.

Nothing here branches on the family: every family answers the same calls
(see core.models.base).

With the `input_skip` option (any per-layer family; Hubin, Storvik et al.'s input-skip LBBNN)
every layer after the first also reads the inputs: layer l's augmented matrix is
(out, width_{l-1} + d + 1), the previous layer's units first, then the d inputs, then the bias.
The skip weights are ordinary entries of that matrix, so each has its own inclusion variable
(statistic, mask, draw) and counts in the density; a posterior that excludes every hidden unit's
path keeps a shallow (even linear) model through the skips.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.errors import ConfigError
from core.models.base import LayerOptions, StatisticSpec, augmented_linear, initial_draws_from, new_generator
from core.models.conv import conv_layer_class
from core.models.conv_network import POOL, ConvGeometry, ConvNetwork, channel_masks, conv_active_masks
from core.models.likelihoods import Likelihood, make_likelihood
from core.models.registry import canonical_family, family_class, layer_class

ACTIVATIONS = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "leaky-relu": nn.LeakyReLU,
}


@dataclass(frozen=True)
class ModelConfig:
    """Architecture and family of a network. Validated on construction."""

    in_features: int
    out_classes: int | None  # number of classes, None for regression
    hidden: tuple[int, ...] = (400, 600)
    family: str = "lbbnn"
    family_options: dict[str, Any] = field(default_factory=dict)
    activation: str = "relu"
    likelihood: str = "categorical"
    likelihood_options: dict[str, Any] = field(default_factory=dict)
    # Conv blocks (filters, kernel) before the `hidden` layers, each conv -> activation -> 2x2 max-pool
    # (core.models.conv_network), on inputs of image_shape (C, H, W); () is a fully connected network.
    conv: tuple[tuple[int, int], ...] = ()
    image_shape: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", canonical_family(self.family))
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if int(self.in_features) <= 0:
            raise ConfigError(f"in_features: must be positive, got {self.in_features}")
        for width in self.hidden:
            if width <= 0:
                raise ConfigError(f"hidden: every width must be positive, got {list(self.hidden)}")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation: unknown {self.activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        # Parsed once, here, so a bad option fails before any training; the model reads this copy.
        object.__setattr__(self, "_layer_options", family_class(self.family).Options.from_dict(self.family_options))
        check_input_skip(self.family, self._layer_options)
        object.__setattr__(self, "conv", tuple((int(c), int(k)) for c, k in self.conv))
        object.__setattr__(self, "_geometry", self._conv_geometry())
        make_likelihood(self.likelihood, self.likelihood_options).n_outputs(self.out_classes)

    def layer_options(self) -> LayerOptions:
        return self._layer_options

    def _conv_geometry(self) -> ConvGeometry | None:
        if not self.conv:
            return None
        if self.image_shape is None or math.prod(self.image_shape) != int(self.in_features):
            raise ConfigError(f"conv: needs image inputs; these have {self.in_features} features and no image shape")
        if getattr(self._layer_options, "input_skip", False):
            raise ConfigError("input_skip: a convolutional network has no input-skip form; leave conv unset")
        conv_layer_class(self.family)
        return ConvGeometry.of(self.image_shape, self.conv)

    def geometry(self) -> ConvGeometry | None:
        """The conv body's shapes; None for a fully connected network."""
        return self._geometry


def check_input_skip(family: str, options: LayerOptions) -> None:
    """Refuse `input_skip` where the posterior is over the whole network (laplace): its linearised
    forward runs the plain layer chain."""
    if getattr(options, "input_skip", False) and getattr(family_class(family), "network_posterior", None):
        raise ConfigError(
            f"input_skip: the {family!r} family's posterior spans the whole network and "
            f"has no input-skip form; use a per-layer family such as lbbnn, bnn, sparse-vd or fnn"
        )


class BayesianMLP(nn.Module):
    def __init__(self, config: ModelConfig, generator: torch.Generator | None = None):
        """Initial values come from `generator` (a CPU generator), or torch's global one when None."""
        super().__init__()
        self.config = config
        self.likelihood: Likelihood = make_likelihood(config.likelihood, config.likelihood_options)
        options = config.layer_options()
        self.geometry = config.geometry()
        first = config.in_features if self.geometry is None else self.geometry.flat_features
        widths = [first, *config.hidden, self.likelihood.n_outputs(config.out_classes)]
        self.input_skip = bool(getattr(options, "input_skip", False))
        # Fan-ins: a skipping layer reads the previous layer's units and then the inputs.
        fan_ins = [w + (config.in_features if self.input_skip and i > 0 else 0) for i, w in enumerate(widths[:-1])]
        with initial_draws_from(generator):
            last = len(widths) - 2
            blocks = [] if self.geometry is None else self.geometry.blocks
            conv_class = None if self.geometry is None else conv_layer_class(config.family)
            self.layers = nn.ModuleList(
                [conv_class(c_in, c_out, kernel, options) for c_in, c_out, kernel, _, _ in blocks]
                + [
                    layer_class(config.family, options, i == last)(w_in, w_out, options, is_output=(i == last))
                    for i, (w_in, w_out) in enumerate(zip(fan_ins, widths[1:]))
                ]
            )
        self.n_conv = len(blocks)
        self.activation = ACTIVATIONS[config.activation]()
        # A posterior over all weights at once (the `laplace` family's), which the layers' own q cannot
        # express; None for every family whose q is per layer.
        posterior = getattr(family_class(config.family), "network_posterior", None)
        self.posterior = None if posterior is None else posterior([layer.shape for layer in self.layers], options)

    @property
    def family(self) -> str:
        return self.config.family

    @property
    def spec(self) -> StatisticSpec:
        return self.layers[0].spec

    @property
    def device(self) -> torch.device:
        return self.layers[0].fixed_mask.device

    # --- stochastic training forward ---------------------------------------------------
    def layer_input(self, index: int, h: Tensor, x: Tensor) -> Tensor:
        """What layer `index` reads: h, with the inputs x appended where the layer skips
        (x broadcast over any leading draw dimension of h)."""
        if index == 0 or not self.input_skip:
            return h
        return torch.cat([h, x.expand(h.shape[:-1] + x.shape[-1:])], dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        if self.geometry is not None:
            h = self.geometry.images(x)
            for i, layer in enumerate(self.layers):
                h = self.after_layer(i, layer(h))
            return h
        h = x
        for i, layer in enumerate(self.layers):
            h = layer(self.layer_input(i, h, x))
            if i < len(self.layers) - 1:
                h = self.activation(h)
        return h

    def after_layer(self, index: int, h: Tensor) -> Tensor:
        """The activation after layer `index` (none after the last), then a conv block's pooling (and
        the flattening after the last block)."""
        if index < len(self.layers) - 1:
            h = self.activation(h)
        if index < self.n_conv:
            h = F.max_pool2d(h, POOL)
            if index == self.n_conv - 1:
                h = h.flatten(1)
        return h

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        """A training forward plus KL(q || p), computed together where a family fuses them.

        With kl_value=False the KL may be a surrogate with the right gradient
        but not the right value (see SparseLayer.forward_with_kl).
        """
        kl = x.new_zeros(())
        h = x if self.geometry is None else self.geometry.images(x)
        for i, layer in enumerate(self.layers):
            h, layer_kl = layer.forward_with_kl(self.layer_input(i, h, x), kl_value)
            kl = kl + layer_kl
            h = self.after_layer(i, h)
        noise_kl = self.likelihood.kl()  # the noise model's own term (a Gamma prior on the precision)
        return h, kl if noise_kl is None else kl + noise_kl

    def kl(self) -> Tensor:
        noise_kl = self.likelihood.kl()
        layers = sum(layer.kl() for layer in self.layers)
        return layers if noise_kl is None else layers + noise_kl

    def update_auxiliaries(self) -> None:
        for layer in self.layers:
            layer.update_auxiliaries()

    @contextlib.contextmanager
    def noise_from(self, generator: torch.Generator | None):
        """Training forwards inside draw their noise from `generator` (on the model's device)."""
        previous = [layer.noise_generator for layer in self.layers]
        for layer in self.layers:
            layer.noise_generator = generator
        try:
            yield
        finally:
            for layer, before in zip(self.layers, previous):
                layer.noise_generator = before

    # --- forward with explicit weights (prediction) ---------------------------------------
    def forward_with_weights(self, x: Tensor, weights: Sequence[Tensor]) -> Tensor:
        """Outputs for given weights: each (out, in+1), or (R, out, in+1) for R networks at once."""
        if self.geometry is not None:
            return self.prediction_network(weights)(x)
        h = x
        for i, weight in enumerate(weights):
            h = augmented_linear(self.layer_input(i, h, x), weight)
            if i < len(weights) - 1:
                h = self.activation(h)
        return h

    def mean_weights(self) -> list[Tensor]:
        return [layer.mean_weights() for layer in self.layers]

    def conditional_mean_weights(self, masks: Sequence[Tensor] | None = None) -> list[Tensor]:
        weights = [layer.conditional_mean_weights() for layer in self.layers]
        return weights if masks is None else [w * m for w, m in zip(weights, masks)]

    def sample_weights(self, n: int, seed: int, masks: Sequence[Tensor] | None = None, start: int = 0) -> list[Tensor]:
        """Draws start .. start+n-1 of the network. Layer l of draw r depends only on
        (seed, r, l), so R=20 reuses R=10's draws, a caller may draw in chunks
        (start=0, 10, ...), and families that consume different amounts of
        randomness in one layer do not shift the draws of the next. A network-level posterior draws all
        layers together, draw r from the generator of (seed, r, 0)."""
        if self.posterior is not None:
            means = self.mean_weights() if masks is None else self.conditional_mean_weights(masks)
            noise = self.posterior.unflatten(
                self.posterior.noise(n, lambda draw: draw_seed(seed, draw, 0), start, self.device)
            )
            return [
                mean + change.to(mean.dtype) * (1.0 if masks is None else mask)
                for mean, change, mask in zip(means, noise, masks or [None] * len(means))
            ]
        per_layer = []
        for index, layer in enumerate(self.layers):
            draws = None
            for offset, draw in enumerate(range(start, start + n)):
                generator = new_generator(self.device, draw_seed(seed, draw, index))
                if masks is None:
                    value = layer.sample_weights(1, generator)[0]
                else:
                    value = layer.sample_conditional_weights(1, generator)[0] * masks[index]
                if draws is None:  # filled in place: no list of draws and no stacking copy
                    draws = torch.empty((n, *value.shape), dtype=value.dtype, device=value.device)
                draws[offset] = value
            per_layer.append(draws)
        return per_layer

    def fit_posterior(self, x: Tensor, y: Tensor) -> dict[str, float]:
        """Fit a network-level posterior at the trained weights (after training); {} where there is none."""
        if self.posterior is None:
            return {}
        report = self.posterior.fit(self.mean_weights(), self.activation, self.likelihood, x, y)
        with torch.no_grad():
            for layer, std in zip(self.layers, self.posterior.marginal_std()):
                layer.posterior_std.copy_(std.to(layer.posterior_std))
        return report

    def linearisation_point(self, masks: Sequence[Tensor] | None = None) -> list[Tensor] | None:
        """The weights a linearised posterior predicts about (its draws are f(x; these) + J(x)(w - these)),
        or None where draws run through the network itself (every family but `laplace`)."""
        if self.posterior is None:
            return None
        return self.mean_weights() if masks is None else self.conditional_mean_weights(masks)

    def prediction_network(
        self, weights: Sequence[Tensor], masks: Sequence[Tensor] | None = None
    ) -> ConvNetwork | None:
        """A conv network's runner for these weights (zero outside `masks` where given); None for a fully
        connected network (core.predict runs those as compact networks)."""
        if self.geometry is None:
            return None
        if masks is not None:
            weights = [w * m.to(w.dtype) for w, m in zip(weights, masks)]
        return ConvNetwork(list(weights), self.geometry, self.activation)

    def structure_masks(self, masks: Sequence[Tensor]) -> list[Tensor]:
        """Masks as core.predict.structure reads them: as they are, or a conv network's channel-level masks."""
        return list(masks) if self.geometry is None else channel_masks(masks, self.geometry)

    def conv_active_masks(self, masks: Sequence[Tensor]) -> list[Tensor] | None:
        """A conv network's active entries (core.models.conv_network); None for a fully connected network,
        whose active entries core.predict.structure.active_masks works out."""
        return None if self.geometry is None else conv_active_masks(masks, self.geometry)

    # --- sparsity -------------------------------------------------------------------------
    def native_statistics(self) -> list[Tensor]:
        return [layer.native_statistic() for layer in self.layers]

    def keep_masks(self, threshold: float | None = None) -> list[Tensor]:
        return [layer.keep_mask(threshold) for layer in self.layers]

    def keep_masks_at_density(self, density: float) -> list[Tensor]:
        """The median probability model's masks cut to at most `density` of all weights: the kept weights
        of largest statistic (in each layer's keep direction), ties broken by position; the mpm itself
        when it is already that sparse."""
        masks = self.keep_masks()
        total = sum(mask.numel() for mask in masks)
        budget = int(math.floor(density * total + 1e-9))
        if sum(int(mask.sum()) for mask in masks) <= budget:
            return masks
        keys = [
            torch.where(mask, layer.spec.keep_key(layer.native_statistic()).double(), -math.inf).flatten()
            for layer, mask in zip(self.layers, masks)
        ]
        chosen = torch.zeros(total, dtype=torch.bool, device=keys[0].device)
        if budget > 0:
            chosen[torch.topk(torch.cat(keys), budget, sorted=False).indices] = True
        cut, start = [], 0
        for mask in masks:
            cut.append(chosen[start : start + mask.numel()].view_as(mask) & mask)
            start += mask.numel()
        return cut

    @staticmethod
    def density(masks: Sequence[Tensor]) -> float:
        kept = sum(int(mask.sum()) for mask in masks)
        total = sum(mask.numel() for mask in masks)
        return kept / total

    def n_weights(self) -> int:
        return sum(layer.out_features * (layer.in_features + 1) for layer in self.layers)

    # --- optimiser groups -------------------------------------------------------------------
    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        groups: dict[str, list[nn.Parameter]] = {}
        for part in [*self.layers, self.likelihood]:
            for name, params in part.parameter_groups().items():
                groups.setdefault(name, []).extend(params)
        return groups


LAYER_STRIDE = 101  # the seeds of layers 0..100 of one draw sit between those of neighbouring draws


def draw_seed(seed: int, draw: int, layer: int) -> int:
    """The generator seed of layer `layer` of draw `draw`: (seed * 1_000_003 + draw) * 101 + layer.

    That formula repeats itself from layer 101 on (layer 101 of draw r is layer 0 of draw r + 1), so
    deeper layers take a hash of (seed, draw, layer) with the top bit of 64 set, which the formula
    reaches only for seeds above 2^36: every network of up to 101 layers keeps its draws.
    """
    if layer < LAYER_STRIDE:
        return (seed * 1_000_003 + draw) * LAYER_STRIDE + layer
    digest = hashlib.sha256(f"{seed}/{draw}/{layer}".encode()).digest()
    return (1 << 63) | (int.from_bytes(digest[:8], "little") >> 1)


def build_model(
    config: ModelConfig, device: torch.device | str = "cpu", generator: torch.Generator | None = None
) -> BayesianMLP:
    return BayesianMLP(config, generator).to(device)
