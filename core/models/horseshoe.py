"""`horseshoe` (BNN-HP-MF): the regularised horseshoe BNN of Ghosh, Yao & Doshi-Velez (2018),
with the factorised or the structured variational family.

Model of a hidden layer (non-centred), for unit k with augmented incoming
weights w_k (its bias included):
    w_k = s_k beta_k,  beta_k ~ N(0, I),  s_k = tau~_k v,
    tau_k ~ C+(0, b_0) per unit, v ~ C+(0, b_g) per layer,
    regularised: tau~_k^2 = c^2 tau_k^2 / (c^2 + tau_k^2 v^2), i.e.
                 s_k = 1 / sqrt(1 / (tau_k v)^2 + 1 / c^2), c^2 ~ IG(c_a, c_b) (one c per layer);
    plain horseshoe: s_k = tau_k v.
Half-Cauchy by inverse-gamma auxiliaries (Wand et al. 2011):
    a ~ C+(0, b)  <=>  a^2 | lam ~ IG(1/2, 1/lam), lam ~ IG(1/2, 1/b^2).
Output layer: no shrinkage, w = kappa beta with one half-Cauchy scale
kappa ~ C+(0, output_scale) per layer (the same auxiliary construction).

Variational family (factorised): q(beta) = N(mu, sigma^2) per weight,
log tau_k, log v, log c^2 Gaussian (so tau, v, c log-normal), and
q(lam) = IG(1, E_q[1/a^2] + 1/b^2), the optimum given the rest, set in
closed form by `update_auxiliaries()` after each gradient step (coordinate
ascent, as in the paper). Its rates are buffers and carry no gradient.

KL(q || p) is closed form (core/models/horseshoe_kl.py).

Pruning (node granularity): drop unit k when P_q(tau_k v < delta) > p0.
log(tau_k v) is normal under q, so this is a normal CDF. The statistic is
broadcast over the unit's incoming weights and bias; output units are never
pruned (statistic 0).

The structured family (option variational_family="structured"): core/models/horseshoe_structured.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.enums import VariationalFamily
from core.errors import ConfigError
from core.models.base import (
    Keep,
    LayerOptions,
    SparseLayer,
    StatisticSpec,
    init_generator,
    inverse_softplus,
    local_reparameterisation,
)
from core.models.distributions import gaussian_kl
from core.models.fused import apply_fused
from core.models.gaussian_fused import GaussianLinear
from core.models.horseshoe_fused import HorseshoeScales, unit_log_scales
from core.models.horseshoe_kl import (
    EULER_GAMMA,
    LGAMMA_HALF,
    half_cauchy_scale_kl,
    half_cauchy_scale_kl_gradient_part,
    inverse_gamma_kl,
    inverse_gamma_log_scale_kl,
    inverse_gamma_log_scale_kl_gradient_part,
)
from core.models.options import INIT_SIGMA, POSITIVE, OptionSpec, option

PRIORS = ("regularised-horseshoe", "horseshoe")
VARIATIONAL_FAMILIES = tuple(VariationalFamily)
QUADRATURE_NODES = 24  # Gauss-Hermite nodes per dimension for E_q[s_k] of the regularised scale


@dataclass(frozen=True)
class HorseshoeOptions(LayerOptions):
    prior: str = option(
        "regularised-horseshoe",
        OptionSpec(
            "Horseshoe prior", "regularised-horseshoe adds a slab that bounds the largest weights", choices=PRIORS
        ),
    )
    node_scale: float = option(
        1.0,
        OptionSpec(  # b_0 of tau_k ~ C+(0, b_0)
            "Node scale b_0", "scale of each unit's half-Cauchy tau_k", **POSITIVE
        ),
    )
    global_scale: float = option(
        1e-5,
        OptionSpec(  # b_g of v ~ C+(0, b_g)
            "Global scale b_g",
            "scale of the layer's half-Cauchy v; small values shrink every unit",
            log_scale=True,
            **POSITIVE,
        ),
    )
    slab_shape: float = option(
        2.0,
        OptionSpec(  # c_a of c^2 ~ IG(c_a, c_b)
            "Slab shape c_a", "c^2 ~ InvGamma(c_a, c_b)", when=("prior", ("regularised-horseshoe",)), **POSITIVE
        ),
    )
    slab_scale: float = option(
        6.0,
        OptionSpec(  # c_b
            "Slab scale c_b", "c^2 ~ InvGamma(c_a, c_b)", when=("prior", ("regularised-horseshoe",)), **POSITIVE
        ),
    )
    output_scale: float = option(
        1.0,
        OptionSpec(  # scale of the output layer's half-Cauchy kappa
            "Output scale", "half-Cauchy scale of the output layer", advanced=True, **POSITIVE
        ),
    )
    prune_delta: float = option(
        1e-3,
        OptionSpec(  # delta of the rule P(tau_k v < delta) > p0
            "Prune delta", "a unit is pruned when P(tau v < delta) is high", log_scale=True, **POSITIVE
        ),
    )
    init_sigma: float = option(0.01, INIT_SIGMA)  # initial std of q(beta)
    init_log_scale_std: float = option(
        0.05,
        OptionSpec(  # initial std of q(log tau), q(log v), q(log c^2)
            "Initial log-scale sd", "", advanced=True, **POSITIVE
        ),
    )
    # q over each hidden unit's [beta_k; log tau_k]: "factorised" (independent) or
    # "structured" (matrix normal with diagonal-plus-rank-one row covariance).
    variational_family: VariationalFamily = option(
        VariationalFamily.FACTORISED,
        OptionSpec("Variational family", "factorised, or structured over [beta; log tau]", advanced=True),
    )


def inverse_softplus_tensor(value: Tensor) -> Tensor:
    return value + torch.log(-torch.expm1(-value))


class HorseshoeLayer(SparseLayer):
    family = "horseshoe"
    spec = StatisticSpec("node_shrinkage_probability", Keep.BELOW, 0.9, 0.0, 1.0)
    Options = HorseshoeOptions
    structured = False  # True for StructuredHorseshoeLayer (core/models/horseshoe_structured.py)

    def __init__(
        self, in_features: int, out_features: int, options: HorseshoeOptions | None = None, is_output: bool = False
    ):
        super().__init__(in_features, out_features, options, is_output)
        opts: HorseshoeOptions = self.options
        if opts.variational_family == "structured" and not is_output and not self.structured:
            raise ConfigError(
                "variational_family: a structured hidden layer is a StructuredHorseshoeLayer; "
                "build layers with core.models.registry.layer_class"
            )
        self.regularised = opts.prior == "regularised-horseshoe" and not is_output
        scale_rho = inverse_softplus(opts.init_log_scale_std)
        self.weight_mu = nn.Parameter(torch.empty(self.shape).uniform_(-1.0, 1.0, generator=init_generator()))
        self._init_spread(opts)
        # Start at s_k ~ 1/sqrt(fan-in): w = s beta then matches the usual uniform initialisation.
        self.log_layer_scale_mu = nn.Parameter(torch.tensor(-0.5 * math.log(in_features)))
        self.log_layer_scale_rho = nn.Parameter(torch.tensor(scale_rho))
        layer_prior_scale = opts.output_scale if is_output else opts.global_scale
        self.register_buffer("layer_prior_scale", torch.tensor(float(layer_prior_scale)))
        self.register_buffer("layer_aux_rate", torch.tensor(1.0))
        if not is_output:
            self.log_node_scale_mu = nn.Parameter(torch.zeros(out_features))
            self.register_buffer("node_prior_scale", torch.tensor(float(opts.node_scale)))
            self.register_buffer("node_aux_rate", torch.ones(out_features))
            self.register_buffer("prune_delta", torch.tensor(float(opts.prune_delta)))
        if self.regularised:
            self.log_slab_mu = nn.Parameter(torch.tensor(math.log(opts.slab_scale / (opts.slab_shape + 1))))
            self.log_slab_rho = nn.Parameter(torch.tensor(scale_rho))
            self.register_buffer("slab_shape", torch.tensor(float(opts.slab_shape)))
            self.register_buffer("slab_scale", torch.tensor(float(opts.slab_scale)))
            nodes, weights = np.polynomial.hermite_e.hermegauss(QUADRATURE_NODES)
            self.register_buffer("quadrature_nodes", torch.tensor(nodes, dtype=torch.float32), persistent=False)
            self.register_buffer(
                "quadrature_weights",
                torch.tensor(weights / math.sqrt(2 * math.pi), dtype=torch.float32),
                persistent=False,
            )
        self.update_auxiliaries()

    def _init_spread(self, opts: HorseshoeOptions) -> None:
        """The spread of q over beta and log tau: one std per weight and one per unit."""
        self.weight_rho = nn.Parameter(torch.full(self.shape, inverse_softplus(opts.init_sigma)))
        if not self.is_output:
            self.log_node_scale_rho = nn.Parameter(
                torch.full((self.out_features,), inverse_softplus(opts.init_log_scale_std))
            )

    # --- q in natural form ----------------------------------------------------------------
    @property
    def weight_sigma(self) -> Tensor:
        return F.softplus(self.weight_rho)

    def log_node_scale_std(self) -> Tensor:
        """Std of the marginal q(log tau_k) per unit."""
        return F.softplus(self.log_node_scale_rho)

    def log_node_scale_moments(self) -> tuple[Tensor, Tensor]:
        """Mean and std of log(tau_k v) per unit under q (log v alone for the output layer)."""
        mean = self.log_layer_scale_mu.expand(self.out_features)
        var = F.softplus(self.log_layer_scale_rho).square().expand(self.out_features)
        if not self.is_output:
            mean = mean + self.log_node_scale_mu
            var = var + self.log_node_scale_std().square()
        return mean, var.sqrt()

    def _log_slab_moments(self) -> tuple[Tensor, Tensor]:
        return self.log_slab_mu, F.softplus(self.log_slab_rho)

    def _log_scale(self, eps_node: Tensor | None, eps_layer: Tensor, eps_slab: Tensor | None) -> Tensor:
        """log s_k from standard normal draws: eps_node (..., out), eps_layer and eps_slab (..., 1)."""
        nodes = (None, None) if self.is_output else (self.log_node_scale_mu, self.log_node_scale_std())
        slab = self._log_slab_moments() if self.regularised else (None, None)
        return unit_log_scales(
            self.log_layer_scale_mu,
            F.softplus(self.log_layer_scale_rho),
            eps_layer,
            nodes[0],
            nodes[1],
            eps_node,
            slab[0],
            slab[1],
            eps_slab,
        )[0]

    def node_scale_expectations(self) -> tuple[Tensor, Tensor]:
        """E_q[s_k] and E_q[s_k e_k] per unit, e_k = (log(tau_k v) - mean) / std the standardised log scale.

        Closed form for a product of log-normals (E[exp(m + s e) e] = s E[exp(m + s e)]),
        2-D Gauss-Hermite over (e_k, log c^2) when regularised.
        """
        mean, std = self.log_node_scale_moments()
        if not self.regularised:
            expected = torch.exp(mean + 0.5 * std * std)
            return expected, std * expected
        slab_mean, slab_std = self._log_slab_moments()
        nodes, weights = self.quadrature_nodes, self.quadrature_weights
        log_tv = mean[:, None, None] + std[:, None, None] * nodes[None, :, None]  # (out, Q, 1)
        log_c2 = (slab_mean + slab_std * nodes)[None, None, :]  # (1, 1, Q)
        scale = torch.exp(-0.5 * torch.logaddexp(-2 * log_tv, -log_c2))
        return (
            torch.einsum("kij,i,j->k", scale, weights, weights),
            torch.einsum("kij,i,j->k", scale, nodes * weights, weights),
        )

    def expected_node_scale(self) -> Tensor:
        """E_q[s_k] per unit."""
        return self.node_scale_expectations()[0]

    # --- estimators -----------------------------------------------------------------------
    def _scale_noise(
        self, n: int | None, generator: torch.Generator | None
    ) -> tuple[Tensor | None, Tensor, Tensor | None]:
        """(eps_node, eps_layer, eps_slab), standard normal, drawn in this order: node, slab, layer
        (the order runs are stored with; None where the layer has no such scale)."""
        ref = self.weight_mu
        size = () if n is None else (n,)

        def normal(*shape: int) -> Tensor:
            return torch.randn((*size, *shape), generator=generator, device=ref.device, dtype=ref.dtype)

        eps_node = None if self.is_output else normal(self.out_features)
        eps_slab = normal(1) if self.regularised else None
        return eps_node, normal(1), eps_slab

    def _draw_log_scale(self, n: int | None, generator: torch.Generator | None = None) -> Tensor:
        size = () if n is None else (n,)
        return self._log_scale(*self._scale_noise(n, generator)).expand(*size, self.out_features)

    def forward(self, x: Tensor) -> Tensor:
        # One draw of the scales per minibatch; given them, the pre-activation of
        # unit k is s_k x.beta_k, Gaussian: local reparameterisation over beta (Ghosh, Yao & Doshi-Velez 2018 eq. 9).
        scale = torch.exp(self._draw_log_scale(None, self.noise_generator))
        mu, sigma = self.weight_mu * self.fixed_mask, self.weight_sigma * self.fixed_mask
        return scale * local_reparameterisation(x, mu, sigma * sigma, self.noise_generator)

    def mean_weights(self) -> Tensor:
        return self.expected_node_scale()[:, None] * self.weight_mu * self.fixed_mask

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        scale = torch.exp(self._draw_log_scale(n, generator))  # (n, out)
        mu = self.weight_mu
        eps = torch.randn((n, *self.shape), generator=generator, device=mu.device, dtype=mu.dtype)
        return scale[:, :, None] * (mu + self.weight_sigma * eps) * self.fixed_mask

    # --- KL and the auxiliaries -----------------------------------------------------------
    def kl_terms(self) -> dict[str, Tensor]:
        """The KL by latent variable (each term a true KL, so each >= 0)."""
        return {"weights": self._weights_kl(), **self.kl_terms_of_scales()}

    def kl_terms_of_scales(self, exact: bool = True) -> dict[str, Tensor]:
        """The scales' KL terms; exact=False leaves out their parts without a gradient (constants,
        and q(lam)'s, a buffer set in closed form): the same gradient, another value."""
        terms = {}
        # q(log a) = N(m, s^2)  <=>  q(log a^2) = N(2m, 4 s^2).
        scales = [
            (
                "layer_scale",
                self.log_layer_scale_mu,
                F.softplus(self.log_layer_scale_rho),
                self.layer_aux_rate,
                self.layer_prior_scale,
            )
        ]
        if not self.is_output:
            scales.append(
                (
                    "node_scales",
                    self.log_node_scale_mu,
                    self.log_node_scale_std(),
                    self.node_aux_rate,
                    self.node_prior_scale,
                )
            )
        for name, log_mean, log_std, aux_rate, prior_scale in scales:
            terms[name] = (
                half_cauchy_scale_kl(2 * log_mean, 2 * log_std, aux_rate, prior_scale)
                if exact
                else half_cauchy_scale_kl_gradient_part(2 * log_mean, 2 * log_std, aux_rate)
            ).sum()
        if self.regularised:
            mean, std = self._log_slab_moments()
            terms["slab"] = (
                inverse_gamma_log_scale_kl(mean, std, self.slab_shape, self.slab_scale)
                if exact
                else inverse_gamma_log_scale_kl_gradient_part(mean, std, self.slab_shape, self.slab_scale)
            )
        return terms

    def _weights_kl(self) -> Tensor:
        sigma = self.weight_sigma
        one = torch.ones((), device=sigma.device, dtype=sigma.dtype)
        return (gaussian_kl(self.weight_mu, sigma * sigma, one) * self.fixed_mask).sum()

    def kl(self) -> Tensor:
        return sum(self.kl_terms().values())

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        """The training forward and the KL (its gradient surrogate with kl_value=False).

        Given the scale draw, s_k x.beta_k is a Gaussian layer's pre-activation with a N(0, I)
        prior on beta, so the factorised family reuses the fused Gaussian layer for the part
        over the weights (same draws in the same order as forward() and kl())."""
        if x.dim() != 2 or self.is_structure_fixed:
            return self(x), self._weights_kl() + self._scales_kl(exact=kl_value)
        if kl_value:
            scale_kl = self._scales_kl()
            scale = torch.exp(self._draw_log_scale(None, self.noise_generator))
        else:  # a step's hot path: the scales and their KL's gradient in one Function
            scale, scale_kl = self._fused_scales()
        noise = self.normal_noise((x.shape[0], self.out_features), x)
        standard_prior = self.weight_mu.new_zeros(())  # log of the N(0, I) prior's variance
        h, weights_kl = apply_fused(
            self, GaussianLinear, x, self.weight_mu, self.weight_rho, noise, standard_prior, kl_value
        )
        return scale * h, weights_kl + scale_kl

    def _fused_scales(self) -> tuple[Tensor, Tensor]:
        """The scales of forward() (the same draws) and a KL surrogate with the gradient of
        kl_terms_of_scales(exact=False), by core.models.horseshoe_fused."""
        eps_node, eps_layer, eps_slab = self._scale_noise(None, self.noise_generator)
        nodes = (
            (None, None, None)
            if self.is_output
            else (self.log_node_scale_mu, self.log_node_scale_rho, self.node_aux_rate)
        )
        slab = (
            (self.log_slab_mu, self.log_slab_rho, self.slab_shape, self.slab_scale)
            if self.regularised
            else (None, None, None, None)
        )
        return HorseshoeScales.apply(
            self.log_layer_scale_mu,
            self.log_layer_scale_rho,
            nodes[0],
            nodes[1],
            slab[0],
            slab[1],
            eps_layer,
            eps_node,
            eps_slab,
            self.layer_aux_rate,
            nodes[2],
            slab[2],
            slab[3],
            self.out_features,
        )

    def kl_gradient_surrogate(self) -> Tensor:
        """kl() less its terms without a gradient: a training step needs only the gradient, and
        the scales' KL terms are mostly constants and q(lam)'s (a buffer)."""
        return self._weights_kl() + self._scales_kl(exact=False)

    def _scales_kl(self, exact: bool = True) -> Tensor:
        return sum(self.kl_terms_of_scales(exact).values())

    @torch.no_grad()
    def update_auxiliaries(self) -> None:
        """q(lam) = IG(1, E_q[1/a^2] + 1/b^2), with E_q[1/a^2] = exp(-2m + 2s^2) for log a ~ N(m, s^2)."""

        def optimal_rate(mean: Tensor, std: Tensor, prior_scale: Tensor) -> Tensor:
            return torch.exp(-2 * mean + 2 * std * std) + 1.0 / (prior_scale * prior_scale)

        self.layer_aux_rate.copy_(
            optimal_rate(self.log_layer_scale_mu, F.softplus(self.log_layer_scale_rho), self.layer_prior_scale)
        )
        if not self.is_output:
            self.node_aux_rate.copy_(
                optimal_rate(self.log_node_scale_mu, self.log_node_scale_std(), self.node_prior_scale)
            )

    # --- sparsity -------------------------------------------------------------------------
    def node_scale_statistic(self) -> Tensor:
        """P_q(tau_k v < delta) per unit (zeros for the output layer, whose units are never pruned)."""
        if self.is_output:
            return self.weight_mu.new_zeros(self.out_features)
        mean, std = self.log_node_scale_moments()
        return torch.special.ndtr((torch.log(self.prune_delta) - mean) / std)

    def node_weight_norms(self) -> Tensor:
        """|E_q w_k|_2 per unit, over its incoming weights and bias."""
        return self.mean_weights().norm(dim=1)

    def native_statistic(self) -> Tensor:
        return self.node_scale_statistic()[:, None].expand(self.shape)

    def load_point_estimate(self, weight: Tensor) -> None:
        self.weight_mu.data.copy_(weight / self.expected_node_scale()[:, None])

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        scales = [self.weight_rho, self.log_layer_scale_mu, self.log_layer_scale_rho]
        if not self.is_output:
            scales += [self.log_node_scale_mu, self.log_node_scale_rho]
        if self.regularised:
            scales += [self.log_slab_mu, self.log_slab_rho]
        return {"weights": [self.weight_mu], "scales": scales}


# Re-exported: tests and callers import the KL terms from here (StructuredHorseshoeLayer: __getattr__).
__all__ = [
    "EULER_GAMMA",
    "LGAMMA_HALF",
    "PRIORS",
    "QUADRATURE_NODES",
    "VARIATIONAL_FAMILIES",
    "HorseshoeLayer",
    "HorseshoeOptions",
    "half_cauchy_scale_kl",
    "half_cauchy_scale_kl_gradient_part",
    "inverse_gamma_kl",
    "inverse_gamma_log_scale_kl",
    "inverse_gamma_log_scale_kl_gradient_part",
    "inverse_softplus_tensor",
]


def __getattr__(name: str):
    # The structured family's module imports this one; a lazy re-export (PEP 562) keeps the old
    # path (core.models.horseshoe:StructuredHorseshoeLayer, the registry's) working in either import order.
    if name == "StructuredHorseshoeLayer":
        from core.models.horseshoe_structured import StructuredHorseshoeLayer

        return StructuredHorseshoeLayer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
