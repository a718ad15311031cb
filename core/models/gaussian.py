"""Mean-field Gaussian families: `bnn` (BNN-GP-MF), `bnn-mixture` (BNN-MGP-MF)
and `variational-dense` (Bleahu 2025's Graves-style layer with |mu|/sigma pruning).

q(w) = N(mu, sigma^2) per weight, sigma = softplus(rho). The native statistic
is the signal-to-noise ratio |mu| / sigma, keep above lambda.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.enums import Estimator
from core.models.base import (
    Keep,
    LayerOptions,
    SparseLayer,
    StatisticSpec,
    augmented_linear,
    inverse_softplus,
    local_reparameterisation,
)
from core.models.distributions import gaussian_kl, scaled_prior_variance
from core.models.fused import apply_fused
from core.models.gaussian_fused import GaussianLinear
from core.models.mixture_fused import MixtureLinear
from core.models.options import (
    ESTIMATOR,
    INIT_SIGMA,
    POSITIVE,
    PRIOR_SCALING,
    PRIOR_VARIANCE,
    PROBABILITY,
    OptionSpec,
    option,
)

ESTIMATORS = (Estimator.LOCAL_REPARAMETERISATION, Estimator.WEIGHT_SAMPLING)


@dataclass(frozen=True)
class GaussianOptions(LayerOptions):
    prior_variance: float = option(1.0, PRIOR_VARIANCE)
    estimator: Estimator = option(
        Estimator.LOCAL_REPARAMETERISATION, dataclasses.replace(ESTIMATOR, choices=tuple(e.value for e in ESTIMATORS))
    )
    init_sigma: float = option(0.01, INIT_SIGMA)
    # "fan-in": the prior variance of a layer is prior_variance / in_features, so the prior's
    # pre-activations keep the same scale in every layer whatever its width.
    prior_scaling: str = option("none", PRIOR_SCALING)


@dataclass(frozen=True)
class MixtureOptions(GaussianOptions):
    # Hubin & Storvik (2024)'s BNN-MGP-MF prior: 0.5 N(0, 1) + 0.5 N(0, 2.479e-3).
    mixture_weight: float = option(
        0.5, OptionSpec("Mixture weight", "weight of the wide component of the scale-mixture prior", **PROBABILITY)
    )
    prior_variance_2: float = option(
        2.479e-3, OptionSpec("Second prior variance", "variance of the narrow mixture component", **POSITIVE)
    )


class GaussianLayer(SparseLayer):
    family = "bnn"
    spec = StatisticSpec("signal_to_noise", Keep.ABOVE, 0.83, 0.0, math.inf)
    Options = GaussianOptions

    def __init__(
        self, in_features: int, out_features: int, options: GaussianOptions | None = None, is_output: bool = False
    ):
        super().__init__(in_features, out_features, options, is_output)
        self.weight_mu = self.initial_weights()
        self.weight_rho = nn.Parameter(torch.full(self.shape, inverse_softplus(self.options.init_sigma)))
        self.register_buffer(
            "prior_variance",
            torch.tensor(scaled_prior_variance(self.options.prior_variance, self.options.prior_scaling, in_features)),
        )

    # Whether kl() is the closed-form Gaussian KL that the fused layer differentiates.
    closed_form_kl = True

    @property
    def weight_sigma(self) -> Tensor:
        return F.softplus(self.weight_rho)

    def forward(self, x: Tensor) -> Tensor:
        mu, sigma = self.weight_mu * self.fixed_mask, self.weight_sigma * self.fixed_mask
        if self.options.estimator is Estimator.LOCAL_REPARAMETERISATION:
            return local_reparameterisation(x, mu, sigma * sigma, self.noise_generator)
        return augmented_linear(x, mu + sigma * self.normal_noise(mu.shape, mu))

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        if (
            x.dim() != 2
            or not self.closed_form_kl
            or self.is_structure_fixed
            or self.options.estimator is not Estimator.LOCAL_REPARAMETERISATION
        ):
            return self(x), self.kl()
        noise = self.normal_noise((x.shape[0], self.out_features), x)
        return apply_fused(
            self, GaussianLinear, x, self.weight_mu, self.weight_rho, noise, self.prior_variance.log(), kl_value
        )

    def mean_weights(self) -> Tensor:
        return self.weight_mu * self.fixed_mask

    def conditional_normal(self) -> tuple[Tensor, Tensor]:
        return self.weight_mu * self.fixed_mask, self.weight_sigma * self.fixed_mask

    def prior_hyperparameters(self) -> dict[str, float]:
        return {"prior_variance": float(self.prior_variance)}

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        mu = self.weight_mu
        eps = torch.randn((n, *self.shape), generator=generator, device=mu.device, dtype=mu.dtype)
        return (mu + self.weight_sigma * eps) * self.fixed_mask

    def kl(self) -> Tensor:
        sigma = self.weight_sigma
        return (gaussian_kl(self.weight_mu, sigma * sigma, self.prior_variance) * self.fixed_mask).sum()

    def native_statistic(self) -> Tensor:
        return self.weight_mu.abs() / self.weight_sigma

    def load_point_estimate(self, weight: Tensor) -> None:
        self.weight_mu.data.copy_(weight)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"weights": [self.weight_mu], "scales": [self.weight_rho]}


class VariationalDenseLayer(GaussianLayer):
    """Bleahu's (2025) variational dense layer: `bnn` under another name (the same q, prior and pruning
    rule, |mu|/sigma kept above 0.83); its runs have their own ids because their configs name it."""

    family = "variational-dense"


class MixtureGaussianLayer(GaussianLayer):
    """Bayes by backprop with a two-component scale-mixture prior.

    The mixture has no closed-form KL against a Gaussian: the Gaussian
    entropy is exact and the cross-entropy is a one-draw reparameterised
    estimate (Blundell et al. 2015 use the same Monte Carlo KL).
    """

    family = "bnn-mixture"
    Options = MixtureOptions
    closed_form_kl = False

    def __init__(
        self, in_features: int, out_features: int, options: MixtureOptions | None = None, is_output: bool = False
    ):
        super().__init__(in_features, out_features, options, is_output)
        self.register_buffer("mixture_weight", torch.tensor(float(self.options.mixture_weight)))
        self.register_buffer("prior_variance_2", torch.tensor(float(self.options.prior_variance_2)))

    def prior_hyperparameters(self) -> dict[str, float]:
        return {
            "prior_variance": float(self.prior_variance),
            "mixture_weight": float(self.mixture_weight),
            "prior_variance_2": float(self.prior_variance_2),
        }

    def prior_log_density(self, w: Tensor) -> Tensor:
        def log_normal(var: Tensor) -> Tensor:
            return -0.5 * (torch.log(2 * math.pi * var) + w * w / var)

        return torch.logaddexp(
            torch.log(self.mixture_weight) + log_normal(self.prior_variance),
            torch.log1p(-self.mixture_weight) + log_normal(self.prior_variance_2),
        )

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        if x.dim() != 2 or self.is_structure_fixed or self.options.estimator is not Estimator.LOCAL_REPARAMETERISATION:
            return self(x), self.kl()
        # the autograd path's order of draws: pre-activation noise, then the weights' (core/models/mixture_fused.py)
        noise = self.normal_noise((x.shape[0], self.out_features), x)
        eps = self.normal_noise(self.shape, self.weight_mu)
        return MixtureLinear.apply(
            x,
            self.weight_mu,
            self.weight_rho,
            noise,
            eps,
            self.mixture_weight,
            self.prior_variance,
            self.prior_variance_2,
            kl_value,
            self.prior_log_density,
        )

    def kl(self) -> Tensor:
        sigma = self.weight_sigma
        w = self.weight_mu + sigma * self.normal_noise(sigma.shape, sigma)
        neg_entropy = -0.5 * torch.log(2 * math.pi * math.e * sigma * sigma)
        return ((neg_entropy - self.prior_log_density(w)) * self.fixed_mask).sum()
