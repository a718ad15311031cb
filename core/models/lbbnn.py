"""LBBNN-SSP-MF: latent binary BNN with a spike-and-slab prior, mean-field q.

Hubin & Storvik (2024), section 2.
q(w, gamma) = alpha N(w; mu, sigma^2) [gamma = 1] + (1 - alpha) delta_0(w) [gamma = 0]
with alpha = sigmoid(omega), sigma = softplus(rho).

Prior: gamma ~ Bernoulli(psi) (fixed psi) or the Beta-Binomial obtained by
integrating psi ~ Beta(a_psi, b_psi) out per layer; slab N(0, sigma_beta^2) or
Student-t_{2 a_beta}(0, b_beta / a_beta).

Two gradient estimators:
- "local-reparameterisation" (default): pre-activations are sampled from
  their Gaussian moment match, mean x.(alpha mu), variance
  x^2.(alpha (sigma^2 + mu^2) - alpha^2 mu^2). Fast, and the mean and variance
  are exact for the spike-and-slab weights.
- "relaxed-bernoulli": one weight draw per minibatch with
  gamma~ = sigmoid((logit alpha - logit u) / temperature), w = gamma~ (mu + sigma eps)
  as in the paper.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.enums import Estimator, InclusionPrior, Slab
from core.models.base import (
    Keep,
    LayerOptions,
    SparseLayer,
    StatisticSpec,
    augmented_linear,
    init_generator,
    inverse_softplus,
    local_reparameterisation,
    require,
)
from core.models.distributions import (  # noqa: F401 - re-exported: older code imports them from here
    PRIOR_SCALINGS,
    bernoulli_kl_from_logits,
    bernoulli_neg_entropy_from_logits,
    gaussian_kl,
    scaled_prior_variance,
    student_t_log_density,
)
from core.models.fused import apply_fused
from core.models.lbbnn_fused import LBBNNLinear
from core.models.options import (
    ESTIMATOR,
    INIT_SIGMA,
    POSITIVE,
    PRIOR_SCALING,
    PROBABILITY,
    TEMPERATURE,
    OptionSpec,
    option,
)

ESTIMATORS = (Estimator.LOCAL_REPARAMETERISATION, Estimator.RELAXED_BERNOULLI)
INCLUSION_PRIORS = tuple(InclusionPrior)
BIAS_PRIORS = ("spike-and-slab", "gaussian")


@dataclass(frozen=True)
class LBBNNOptions(LayerOptions):
    slab: Slab = option(
        Slab.GAUSSIAN, OptionSpec("Slab", "the prior of an included weight: Gaussian, or Student-t (heavier tails)")
    )
    slab_variance: float = option(
        1.0,
        OptionSpec(  # sigma_beta^2 of the Gaussian slab (Hubin & Storvik 2019)
            "Slab variance sigma^2",
            "variance of the Gaussian slab, in units of the weight squared (inputs are standardised)",
            when=("slab", ("gaussian",)),
            **POSITIVE,
        ),
    )
    slab_a: float = option(
        1.0,
        OptionSpec(  # a_beta: Student-t with 2 a_beta degrees of freedom
            "Student-t a", "Student-t slab with 2a degrees of freedom", when=("slab", ("student-t",)), **POSITIVE
        ),
    )
    slab_b: float = option(
        1.0,
        OptionSpec(  # b_beta: Student-t scale^2 = b_beta / a_beta
            "Student-t b",
            "Student-t slab with scale^2 = b / a (weight units squared)",
            when=("slab", ("student-t",)),
            **POSITIVE,
        ),
    )
    # "bernoulli": fixed psi. "beta-bernoulli": Hubin & Storvik (2024) equation (3), gamma ~ BetaBinomial(1, a_psi,
    # b_psi) per weight, i.e. Bernoulli(a_psi / (a_psi + b_psi)) with a_psi, b_psi learnable by empirical Bayes.
    # "beta-binomial": psi ~ Beta(a_psi, b_psi) shared by the layer and integrated out (count prior).
    # The prior's form (inclusion_prior) and its inclusion probability psi (prior_inclusion; under
    # beta-bernoulli psi = beta_a / (beta_a + beta_b) instead). Stored configs name both: kept as is.
    inclusion_prior: InclusionPrior = option(
        InclusionPrior.BERNOULLI,
        OptionSpec(
            "Inclusion prior",
            "bernoulli: every weight is kept a priori with probability psi; beta-bernoulli: "
            "psi ~ Beta(a, b) per weight (learnable by empirical Bayes); beta-binomial: one psi per layer, "
            "integrated out.",
        ),
    )
    prior_inclusion: float = option(
        math.exp(-2.0),
        OptionSpec(  # psi, Hubin & Storvik (2019)'s choice
            "Prior inclusion probability psi",
            "prior probability that a weight is in the network (unitless, "
            "between 0 and 1). Hubin & Storvik (2019) use exp(-2) = 0.135; smaller values prune more.",
            when=("inclusion_prior", ("bernoulli",)),
            **PROBABILITY,
        ),
    )
    beta_a: float = option(
        1.0,
        OptionSpec(  # a_psi
            "Beta a (a_psi)",
            "first shape of the Beta prior on psi: prior mean a / (a + b)",
            when=("inclusion_prior", InclusionPrior.beta_priors()),
            **POSITIVE,
        ),
    )
    beta_b: float = option(
        1.0,
        OptionSpec(  # b_psi
            "Beta b (b_psi)",
            "second shape of the Beta prior on psi: larger b, sparser prior",
            when=("inclusion_prior", InclusionPrior.beta_priors()),
            **POSITIVE,
        ),
    )
    estimator: Estimator = option(
        Estimator.LOCAL_REPARAMETERISATION, dataclasses.replace(ESTIMATOR, choices=tuple(e.value for e in ESTIMATORS))
    )
    # relaxed Bernoulli; Hubin & Storvik (2024)'s 1e-3 nearly stops gradients to omega
    temperature: float = option(0.5, TEMPERATURE)
    # initial alpha spread uniformly in logit space
    init_inclusion_low: float = option(
        0.1, OptionSpec("Initial inclusion low", "initial alpha spread in logit space", advanced=True, **PROBABILITY)
    )
    init_inclusion_high: float = option(
        0.9, OptionSpec("Initial inclusion high", "initial alpha spread in logit space", advanced=True, **PROBABILITY)
    )
    init_sigma: float = option(0.01, INIT_SIGMA)
    # "spike-and-slab": the bias has an inclusion indicator like any weight (Hubin & Storvik 2024's
    # intercept); "gaussian": a plain slab prior on the bias, always included, no indicator.
    bias_prior: Literal["spike-and-slab", "gaussian"] = option(
        "spike-and-slab",
        OptionSpec(
            "Bias prior",
            "spike-and-slab: biases have inclusion indicators too; gaussian: always-included biases",
            advanced=True,
            choices=BIAS_PRIORS,
        ),
    )
    # "fan-in": the Gaussian slab's variance is slab_variance / in_features in each layer.
    prior_scaling: Literal["none", "fan-in"] = option("none", PRIOR_SCALING)

    def validate(self) -> None:
        require(
            self.init_inclusion_low <= self.init_inclusion_high,
            "init_inclusion_low/high",
            "must satisfy 0 < low <= high < 1",
        )


class LBBNNLayer(SparseLayer):
    family = "lbbnn"
    spec = StatisticSpec("inclusion_probability", Keep.ABOVE, 0.5, 0.0, 1.0)
    Options = LBBNNOptions
    has_structure = True

    def __init__(
        self, in_features: int, out_features: int, options: LBBNNOptions | None = None, is_output: bool = False
    ):
        super().__init__(in_features, out_features, options, is_output)
        opts: LBBNNOptions = self.options
        self.weight_mu = self.initial_weights()
        self.weight_rho = nn.Parameter(torch.full(self.shape, inverse_softplus(opts.init_sigma)))
        low, high = (math.log(p / (1 - p)) for p in (opts.init_inclusion_low, opts.init_inclusion_high))
        self.inclusion_logit = nn.Parameter(torch.empty(self.shape).uniform_(low, high, generator=init_generator()))
        # Prior hyperparameters in unconstrained form: learnable only during
        # empirical-Bayes pre-training (requires_grad off otherwise).
        slab_variance = scaled_prior_variance(opts.slab_variance, opts.prior_scaling, in_features)
        self.log_slab_variance = nn.Parameter(torch.tensor(math.log(slab_variance)), requires_grad=False)
        self.log_slab_a = nn.Parameter(torch.tensor(math.log(opts.slab_a)), requires_grad=False)
        self.log_slab_b = nn.Parameter(torch.tensor(math.log(opts.slab_b)), requires_grad=False)
        self.prior_inclusion_logit = nn.Parameter(
            torch.tensor(math.log(opts.prior_inclusion / (1 - opts.prior_inclusion))), requires_grad=False
        )
        self.log_beta_a = nn.Parameter(torch.tensor(math.log(opts.beta_a)), requires_grad=False)
        self.log_beta_b = nn.Parameter(torch.tensor(math.log(opts.beta_b)), requires_grad=False)
        # 1 where a weight has an inclusion indicator; the bias column is 0 under bias_prior="gaussian".
        indicators = torch.ones(self.shape)
        if opts.bias_prior == "gaussian":
            indicators[:, -1] = 0.0
        self.register_buffer("has_indicator", indicators, persistent=False)  # derived from the options
        self.all_have_indicators = opts.bias_prior == "spike-and-slab"  # host-side copy for the hot path

    # --- parameters in natural form ---------------------------------------------------
    @property
    def inclusion_probability(self) -> Tensor:
        alpha = torch.sigmoid(self.inclusion_logit)
        if self.all_have_indicators:
            return alpha
        return self.has_indicator * alpha + (1 - self.has_indicator)

    @property
    def weight_sigma(self) -> Tensor:
        return F.softplus(self.weight_rho)

    def prior_hyperparameters(self) -> dict[str, float]:
        opts: LBBNNOptions = self.options
        values = {}
        if opts.slab is Slab.GAUSSIAN:
            values["slab_variance"] = self.log_slab_variance.exp().item()
        else:
            values["slab_a"] = self.log_slab_a.exp().item()
            values["slab_b"] = self.log_slab_b.exp().item()
        if opts.inclusion_prior == "bernoulli":
            values["prior_inclusion"] = torch.sigmoid(self.prior_inclusion_logit).item()
        elif opts.inclusion_prior == "beta-bernoulli":
            values["beta_a"] = self.log_beta_a.exp().item()
            values["beta_b"] = self.log_beta_b.exp().item()
            values["prior_inclusion"] = torch.sigmoid(self.log_beta_a - self.log_beta_b).item()
        else:
            values["beta_a"] = self.log_beta_a.exp().item()
            values["beta_b"] = self.log_beta_b.exp().item()
        return values

    # A fixed structure (post-training on the median probability model) replaces
    # alpha by the 0/1 mask. As a logit, +-30 is 0/1 to float32 precision and
    # keeps the KL finite (it then equals the constant -log psi or -log(1-psi)).
    FIXED_LOGIT = 30.0

    def _effective_logit(self) -> Tensor:
        if not self.is_structure_fixed:
            return self.inclusion_logit
        return (2 * self.fixed_mask - 1) * self.FIXED_LOGIT

    def _effective_inclusion(self) -> Tensor:
        return self.fixed_mask if self.is_structure_fixed else self.inclusion_probability

    # --- estimators -----------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        return self._estimate(x, self._effective_inclusion())

    def _estimate(self, x: Tensor, alpha: Tensor) -> Tensor:
        """The training estimator of the pre-activation given inclusion probabilities alpha."""
        mu, sigma = self.weight_mu, self.weight_sigma
        if self.options.estimator is Estimator.LOCAL_REPARAMETERISATION:
            mean = alpha * mu
            var = alpha * (sigma * sigma + mu * mu) - mean * mean
            return local_reparameterisation(x, mean, var, self.noise_generator)
        gamma = self._relaxed_inclusion(alpha) * self.fixed_mask
        weight = gamma * (mu + sigma * self.normal_noise(mu.shape, mu))
        return augmented_linear(x, weight)

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        if x.dim() != 2 or not self._fused_path_applies():
            return self(x), self.kl()
        noise = self.normal_noise((*x.shape[:-1], self.out_features), x)
        args = (
            x,
            self.weight_mu,
            self.weight_rho,
            self.inclusion_logit,
            noise,
            self.prior_inclusion_logit.detach(),
            self.log_slab_variance.detach(),
            kl_value,
            self.all_have_indicators,
        )
        return apply_fused(self, LBBNNLinear, *args)

    def _fused_path_applies(self) -> bool:
        opts: LBBNNOptions = self.options
        return (
            opts.estimator is Estimator.LOCAL_REPARAMETERISATION
            and opts.slab is Slab.GAUSSIAN
            and opts.inclusion_prior == "bernoulli"
            and not self.is_structure_fixed
            and not self.prior_inclusion_logit.requires_grad
            and not self.log_slab_variance.requires_grad
        )

    def _relaxed_inclusion(self, alpha: Tensor) -> Tensor:
        u = self.uniform_noise(alpha.shape, alpha).clamp(1e-6, 1 - 1e-6)
        logit_alpha = torch.logit(alpha.clamp(1e-6, 1 - 1e-6))
        return torch.sigmoid((logit_alpha - torch.logit(u)) / self.options.temperature)

    def mean_weights(self) -> Tensor:
        return self._effective_inclusion() * self.weight_mu

    def conditional_mean_weights(self) -> Tensor:
        return self.weight_mu * self.fixed_mask

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        # Weights first, then indicators: with alpha = 1 the draws then equal
        # those of the `bnn` family from the same generator state.
        weights = self.sample_conditional_weights(n, generator)
        alpha = self._effective_inclusion()
        u = torch.rand((n, *self.shape), generator=generator, device=alpha.device, dtype=alpha.dtype)
        return (u < alpha).to(alpha.dtype) * weights

    def conditional_normal(self) -> tuple[Tensor, Tensor]:
        return self.weight_mu * self.fixed_mask, self.weight_sigma * self.fixed_mask

    def sample_conditional_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        mu = self.weight_mu
        eps = torch.randn((n, *self.shape), generator=generator, device=mu.device, dtype=mu.dtype)
        return (mu + self.weight_sigma * eps) * self.fixed_mask

    # --- KL -------------------------------------------------------------------------------
    def slab_kl(self) -> Tensor:
        """Elementwise KL of q(w | gamma = 1) from the slab."""
        mu, sigma = self.weight_mu, self.weight_sigma
        var = sigma * sigma
        if self.options.slab == "gaussian":
            return gaussian_kl(mu, var, self.log_slab_variance.exp())
        # No closed form against a Student-t slab: exact Gaussian entropy plus a
        # one-draw reparameterised estimate of the cross-entropy.
        w = mu + sigma * self.normal_noise(mu.shape, mu)
        neg_entropy = -0.5 * torch.log(2 * math.pi * math.e * var)
        return neg_entropy - student_t_log_density(w, self.log_slab_a.exp(), self.log_slab_b.exp())

    def kl(self) -> Tensor:
        opts: LBBNNOptions = self.options
        alpha = self._effective_inclusion()
        kl = (alpha * self.slab_kl()).sum()
        logit = self._effective_logit()
        indicators = self.has_indicator  # weights without an indicator have no inclusion term
        if opts.inclusion_prior == "bernoulli":
            return kl + (indicators * bernoulli_kl_from_logits(logit, self.prior_inclusion_logit)).sum()
        if opts.inclusion_prior == "beta-bernoulli":  # BetaBinomial(1, a, b) is Bernoulli(a / (a + b))
            return kl + (indicators * bernoulli_kl_from_logits(logit, self.log_beta_a - self.log_beta_b)).sum()
        # Beta-Binomial: E_q log p(gamma) with the count k = sum gamma replaced by
        # its mean (delta method); k concentrates for layers of many weights.
        a, b = self.log_beta_a.exp(), self.log_beta_b.exp()
        total = indicators.sum()
        k = (indicators * alpha).sum()
        log_prior = (
            torch.lgamma(a + k)
            + torch.lgamma(b + total - k)
            - torch.lgamma(a + b + total)
            - (torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b))
        )
        neg_entropy = (indicators * bernoulli_neg_entropy_from_logits(logit)).sum()
        return kl + neg_entropy - log_prior

    # --- sparsity -------------------------------------------------------------------------
    def native_statistic(self) -> Tensor:
        return self.inclusion_probability

    def load_point_estimate(self, weight: Tensor) -> None:
        self.weight_mu.data.copy_(weight)
        # Start from the dense net: every weight included with high probability.
        high = self.options.init_inclusion_high
        self.inclusion_logit.data.fill_(math.log(high / (1 - high)))

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {
            "weights": [self.weight_mu],
            "scales": [self.weight_rho],
            "inclusion": [self.inclusion_logit],
            "prior": [self.prior_inclusion_logit, self.log_beta_a, self.log_beta_b],
            "slab_prior": [self.log_slab_variance, self.log_slab_a, self.log_slab_b],
        }

    def set_empirical_bayes(self, enabled: bool) -> None:
        opts: LBBNNOptions = self.options
        slab = [self.log_slab_variance] if opts.slab is Slab.GAUSSIAN else [self.log_slab_a, self.log_slab_b]
        inclusion = (
            [self.prior_inclusion_logit] if opts.inclusion_prior == "bernoulli" else [self.log_beta_a, self.log_beta_b]
        )
        for param in self.parameter_groups()["prior"] + self.parameter_groups()["slab_prior"]:
            param.requires_grad_(enabled and any(param is p for p in slab + inclusion))
