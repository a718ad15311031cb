"""The one interface every family implements.

A layer of any family is a fully connected layer whose parameters are held as
*augmented* matrices of shape (out_features, in_features + 1): the last column
is the bias (the paper's k = 0 "intercept" term, which has an inclusion
indicator like any other weight). Statistics, masks and weight draws all use
that shape, so code that prunes, samples or counts density never needs to know
which family it is looking at.

Conventions shared by all families
- `forward(x)` is the stochastic training-time pre-activation (the family's own
  estimator: local reparameterisation, weight sampling, dropout masks ...).
- `mean_weights()` is E_q[w], the posterior-mean network ("ALL-MEA").
- `conditional_mean_weights()` is E_q[w | kept]: the weights a pruned or median
  probability model uses ("MED-MEA", "PRN-MEA"). For families without
  inclusion indicators it equals `mean_weights()`.
- `sample_weights(n, generator)` draws n full networks from q, structure
  included ("SIM-SIM"); `sample_conditional_weights` draws the weights given
  that they are kept ("MED-SIM", "PRN-SIM").
- `native_statistic()` is the family's sparsity statistic per weight (node
  statistics are broadcast over the node's incoming weights and its bias).
  `spec` says its name, direction and default threshold; `keep_mask(t)` cuts it.
- `kl()` is KL(q || p) for the layer (closed form where one exists).
- `fixed_mask` (a buffer, all ones unless set) fixes the structure for
  post-training; every estimator multiplies by it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.enums import OptionEnum
from core.errors import ConfigError
from core.models.fused import LocalReparameterisation
from core.models.options import SPEC_KEY, OptionSpec, undeclared

# Bins of the per-epoch histograms training records (core/snapshots.py).
HISTOGRAM_BINS = 40


class Keep(str, Enum):
    """Which side of the threshold a weight must fall on to be kept."""

    ABOVE = "above"
    BELOW = "below"


@dataclass(frozen=True)
class StatisticSpec:
    """A family's sparsity statistic: its name, keep direction, default threshold and range.

    The one home of the keep rule: `keep_mask` (tensors or numpy arrays), and for code that
    cuts many thresholds at once (sweeps) the same rule as `keep_key(statistic) > cut(threshold)`.
    """

    name: str
    keep: Keep
    default_threshold: float
    low: float  # the statistic's range, used to validate thresholds and build sweeps
    high: float

    @property
    def keep_above(self) -> bool:
        return Keep(self.keep) is Keep.ABOVE

    @property
    def default(self) -> float:
        return self.default_threshold

    def check_threshold(self, threshold: float) -> float:
        threshold = float(threshold)
        if not (self.low <= threshold <= self.high) or math.isnan(threshold):
            raise ConfigError(f"threshold {threshold!r} is outside the range [{self.low}, {self.high}] of {self.name}")
        return threshold

    def clip(self, value: float) -> float:
        """value moved into [low, high]."""
        return float(min(self.high, max(self.low, value)))

    def keep_key(self, statistic):
        """A key that is kept where it exceeds `cut(threshold)`: the statistic, negated when kept below."""
        return statistic if self.keep_above else -statistic

    def cut(self, threshold: float) -> float:
        return threshold if self.keep_above else -threshold

    def keep_mask(self, statistic, threshold: float):
        """Where `statistic` (a tensor or an array) is kept at `threshold` (negation is exact: same rule)."""
        return self.keep_key(statistic) > self.cut(threshold)

    def histogram_edges(self, bins: int = HISTOGRAM_BINS) -> list[float]:
        """Fixed bin edges for histograms of this statistic that must agree across epochs and runs:
        `bins` equal bins over [low, high] where the range is finite; for a statistic unbounded above
        (magnitudes, signal-to-noise) a first bin [low, s/1000) and the rest log-spaced from s/1000 to
        1000 s, s the default threshold (1 where it is 0), since such statistics span decades.
        Values beyond either end count in the end bins."""
        bins = int(bins)
        if bins < 2:
            raise ConfigError(f"bins: must be >= 2, got {bins}")
        low, high = float(self.low), float(self.high)
        if math.isfinite(low) and math.isfinite(high):
            return [low + (high - low) * k / bins for k in range(bins + 1)]
        if not math.isfinite(low) or low < 0:
            raise ConfigError(f"{self.name}: no fixed histogram edges for the range [{low}, {high}]")
        scale = float(self.default_threshold) if self.default_threshold > 0 else 1.0
        first, last = math.log10(scale / 1000), math.log10(scale * 1000)
        top = [10 ** (first + (last - first) * k / (bins - 1)) for k in range(bins)]
        return [low] + top


@dataclass(frozen=True)
class LayerOptions:
    """Base class of a family's hyperparameters. Subclasses add fields and checks.

    A field annotated with an OptionEnum (core.enums) accepts the member or its string and holds
    the member (equal to, and serialised as, the string).

    `input_skip` (every family whose posterior is per layer): every layer after the first also
    reads the inputs (core.models.network). Stored configs leave it out when false (RunConfig), so
    runs made before it existed keep their ids.
    """

    input_skip: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.input_skip, bool):
            raise ConfigError(f"input_skip: must be true or false, got {self.input_skip!r}")
        for name, kind in _enum_fields(type(self)).items():
            object.__setattr__(self, name, kind.parse(getattr(self, name), name))

    def validate(self) -> None:  # pragma: no cover - overridden where there is something to check
        """The family's rules across options (each option's own range is its declaration's)."""
        return None

    @classmethod
    def option_specs(cls) -> dict[str, OptionSpec]:
        """Each option's declaration (core.models.options), completed with its name, kind and
        default; an option declared without one gets `undeclared(name)`."""
        return dict(_option_specs(cls))

    def check_options(self) -> None:
        """Raise ConfigError naming the first option whose value its declaration refuses."""
        for name, spec in _option_specs(type(self)).items():
            message = spec.problem(getattr(self, name))
            if message:
                raise ConfigError(message)

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "LayerOptions":
        values = dict(values or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"unknown option(s) {', '.join(unknown)} for {cls.__name__}; "
                f"known: {', '.join(sorted(known)) or 'none'}"
            )
        options = cls(**values)
        options.check_options()
        options.validate()
        return options


@functools.cache
def _option_specs(cls: type) -> dict[str, OptionSpec]:
    hints = typing.get_type_hints(cls)
    specs = {}
    for item in dataclasses.fields(cls):
        declared = item.metadata.get(SPEC_KEY) or undeclared(item.name)
        kind, choices = _kind_and_choices(hints.get(item.name))
        choices = declared.choices if declared.choices is not None else choices
        default = item.default if item.default is not dataclasses.MISSING else None
        specs[item.name] = dataclasses.replace(
            declared,
            name=item.name,
            kind="choice" if choices is not None else kind,
            choices=None if choices is None else tuple(str(getattr(c, "value", c)) for c in choices),
            default=default,
        )
    return specs


def _kind_and_choices(hint: Any) -> tuple[str, tuple | None]:
    if isinstance(hint, type) and issubclass(hint, Enum):
        return "choice", tuple(member.value for member in hint)
    if typing.get_origin(hint) is typing.Literal:
        return "choice", typing.get_args(hint)
    if hint is bool:
        return "flag", None
    if hint is int:
        return "whole", None
    if hint is float:
        return "real", None
    return "text", None


@functools.cache
def _enum_fields(cls: type) -> dict[str, type[OptionEnum]]:
    hints = typing.get_type_hints(cls)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(cls)
        if isinstance(hints.get(f.name), type) and issubclass(hints[f.name], OptionEnum)
    }


def require(condition: bool, field: str, message: str) -> None:
    """Raise ConfigError naming the field when a hyperparameter check fails."""
    if not condition:
        raise ConfigError(f"{field}: {message}")


def augmented_linear(x: Tensor, weight: Tensor) -> Tensor:
    """x @ W[:, :-1].T + W[:, -1] for an augmented (out, in+1) weight matrix.

    Works for one matrix (out, in+1) with x (B, in) and for a batch of R
    matrices (R, out, in+1) with x (R, B, in) or x (B, in) (broadcast).
    """
    if weight.dim() == 2:
        return F.linear(x, weight[:, :-1], weight[:, -1])
    if x.dim() == 2:
        x = x.unsqueeze(0).expand(weight.shape[0], -1, -1)
    return torch.baddbmm(weight[:, :, -1].unsqueeze(1), x, weight[:, :, :-1].transpose(1, 2))


def local_reparameterisation(
    x: Tensor, mean_weight: Tensor, var_weight: Tensor, generator: torch.Generator | None = None
) -> Tensor:
    """Sample pre-activations from their exact Gaussian marginal given x.

    For independent weights with means m and variances v, the pre-activation
    x.w has mean x.m and variance (x*x).v: sampling it directly is cheaper and
    has lower variance than sampling w (Kingma et al., 2015).
    """
    if x.dim() == 2 and mean_weight.dim() == 2:  # the training path: products with a hand-written backward
        noise = torch.randn((x.shape[0], mean_weight.shape[0]), generator=generator, device=x.device, dtype=x.dtype)
        return LocalReparameterisation.apply(x, mean_weight, var_weight, noise)
    mean = augmented_linear(x, mean_weight)
    var = augmented_linear(x * x, var_weight)
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    return mean + var.clamp_min(1e-16).sqrt() * noise


# Initial values are drawn from the generator of the model being built in this
# thread (BayesianMLP(config, generator=...)); None means torch's global one.
_initialising = threading.local()


@contextlib.contextmanager
def initial_draws_from(generator: torch.Generator | None):
    """Layers built inside draw their initial values from `generator` (this thread only)."""
    previous = getattr(_initialising, "generator", None)
    _initialising.generator = generator
    try:
        yield
    finally:
        _initialising.generator = previous


def init_generator() -> torch.Generator | None:
    """The generator for initial values of layers built now (see initial_draws_from)."""
    return getattr(_initialising, "generator", None)


def inverse_softplus(value: float) -> float:
    return value + math.log(-math.expm1(-value))


class SparseLayer(nn.Module, ABC):
    """A fully connected layer of one family. See the module docstring."""

    family: ClassVar[str]
    spec: ClassVar[StatisticSpec]
    Options: ClassVar[type[LayerOptions]] = LayerOptions
    # True where q has inclusion indicators that `sample_weights` draws.
    has_structure: ClassVar[bool] = False
    # A posterior over the whole network's weights (built by BayesianMLP as `posterior` from the layer
    # shapes and options) where q is not per layer (laplace); None: the layers' q is the posterior.
    network_posterior: ClassVar[type | None] = None

    def __init__(
        self, in_features: int, out_features: int, options: LayerOptions | None = None, is_output: bool = False
    ):
        super().__init__()
        require(int(in_features) > 0, "in_features", f"must be positive, got {in_features}")
        require(int(out_features) > 0, "out_features", f"must be positive, got {out_features}")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.is_output = bool(is_output)
        self.options = options if options is not None else self.Options()
        self.register_buffer("fixed_mask", torch.ones(self.out_features, self.in_features + 1))
        self.register_buffer("structure_fixed", torch.tensor(False))
        # Host-side copy of the flag so hot paths never sync with the device.
        self.is_structure_fixed = False
        self.compiled_kernels = False  # set by training (TrainConfig.compile); not part of the state
        # The training run's own generator for the estimators' noise, set by train() for
        # its duration (not part of the state); None draws from torch's global generator.
        self.noise_generator: torch.Generator | None = None
        self.register_load_state_dict_post_hook(_refresh_structure_flag)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.out_features, self.in_features + 1)

    def initial_weights(self) -> nn.Parameter:
        """nn.Linear's default initialisation, U(-1/sqrt(in), 1/sqrt(in)), for the augmented matrix."""
        bound = 1.0 / math.sqrt(self.in_features)
        return nn.Parameter(torch.empty(self.shape).uniform_(-bound, bound, generator=init_generator()))

    # --- the estimators' noise (from the training run's generator) ----------------------
    def masked(self, values: Tensor) -> Tensor:
        """values * fixed_mask; while no structure is fixed the mask is all ones and the product
        (a pass over the weights each way per step) is skipped."""
        return values * self.fixed_mask if self.is_structure_fixed else values

    def normal_noise(self, shape: tuple[int, ...] | torch.Size, like: Tensor) -> Tensor:
        """Standard normal noise of `shape` on like's device and dtype."""
        return torch.randn(shape, generator=self.noise_generator, device=like.device, dtype=like.dtype)

    def uniform_noise(self, shape: tuple[int, ...] | torch.Size, like: Tensor) -> Tensor:
        """U(0, 1) noise of `shape` on like's device and dtype."""
        return torch.rand(shape, generator=self.noise_generator, device=like.device, dtype=like.dtype)

    # --- the variational distribution -------------------------------------------------
    @abstractmethod
    def forward(self, x: Tensor) -> Tensor: ...

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        """A training forward and the KL together; families may fuse the two.

        kl_value=False allows a family to return a surrogate KL whose gradient
        is the KL's but whose value is not (training reads the value once per
        epoch, not every step); families without a cheaper path ignore it.
        """
        return self(x), self.kl()

    @abstractmethod
    def mean_weights(self) -> Tensor: ...

    def conditional_mean_weights(self) -> Tensor:
        return self.mean_weights()

    @abstractmethod
    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor: ...

    def sample_conditional_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        return self.sample_weights(n, generator)

    def conditional_normal(self) -> tuple[Tensor, Tensor] | None:
        """Mean and standard deviation of q(w | kept) per weight where that law is Gaussian (a point
        weight has std 0); None where it is not (then draws of `sample_conditional_weights` describe it)."""
        return None

    def prior_hyperparameters(self) -> dict[str, float]:
        """The prior's hyperparameters as they are now (learned ones included); none by default."""
        return {}

    @abstractmethod
    def kl(self) -> Tensor: ...

    # --- sparsity -----------------------------------------------------------------------
    @abstractmethod
    def native_statistic(self) -> Tensor: ...

    def keep_mask(self, threshold: float | None = None) -> Tensor:
        threshold = self.spec.default_threshold if threshold is None else self.spec.check_threshold(threshold)
        mask = self.spec.keep_mask(self.native_statistic(), threshold)
        # A fixed structure (post-training) is the network: a weight outside it is zero in every prediction
        # (masked()), so no threshold keeps it. On the mpm's own structure this changes nothing at the
        # default threshold; below it, densities no longer count weights whose means were zeroed.
        return mask & self.fixed_mask.bool() if self.is_structure_fixed else mask

    # --- training hooks -------------------------------------------------------------------
    def update_auxiliaries(self) -> None:
        """Closed-form updates run after each gradient step (horseshoe); none by default."""

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by optimiser group: weights, scales, inclusion, prior."""
        return {"weights": [p for p in self.parameters() if p.requires_grad]}

    def set_empirical_bayes(self, enabled: bool) -> None:
        """Let the prior hyperparameters be learned (pre-training) or freeze them."""
        groups = self.parameter_groups()
        for param in groups.get("prior", []) + groups.get("slab_prior", []):
            param.requires_grad_(enabled)

    def fix_structure(self, mask: Tensor | None) -> None:
        """Fix the structure to `mask` (post-training) or release it (mask None)."""
        if mask is None:
            self.fixed_mask.fill_(1.0)
        else:
            self.fixed_mask.copy_(mask.to(self.fixed_mask))
        self.structure_fixed.fill_(mask is not None)
        self.is_structure_fixed = mask is not None
        for param in self.parameter_groups().get("inclusion", []):
            param.requires_grad_(mask is None)

    def use_compiled_kernels(self, enabled: bool) -> None:
        """Let a family with a fused training layer use torch.compile'd kernels (others ignore it)."""
        self.compiled_kernels = enabled

    def load_point_estimate(self, weight: Tensor) -> None:
        """Warm start: set the variational means (or point weights) to a trained net's weights."""
        raise NotImplementedError(f"{type(self).__name__} does not support a warm start")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, family={self.family}"


def _refresh_structure_flag(module: "SparseLayer", incompatible_keys) -> None:
    module.is_structure_fixed = bool(module.structure_fixed)


def new_generator(device: torch.device | str, seed: int) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))
    return generator
